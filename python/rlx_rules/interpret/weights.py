"""Weights of a graph: the path of its "weights" .npz and loading it."""

from __future__ import annotations

import math
import os
import stat
import zipfile
from typing import Optional

import numpy as np

from ..errors import GraphError
from ..graph import Graph, load_graph
from .optable import MAX_ELEMENTS


def weights_path(graph: Graph) -> Optional[str]:
    """The path of the graph's ``"weights"`` file (relative to the graph file), or None when it names none."""
    ref = graph.field("weights")
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise GraphError(f'field "weights" must be a file name (a string), found {ref!r}')
    if os.path.isabs(ref):
        return ref
    source = getattr(graph, "source_path", None)
    if source is None:
        raise GraphError(f'the graph names weights "{ref}" relative to its file, but it was not loaded from a file; '
                         "load it with rlx_rules.load_graph(path) or pass params")
    return os.path.join(os.path.dirname(os.path.abspath(source)), ref)


def _check_headers(path: str, where: str, max_elements: int) -> None:
    """Refuse an array whose .npy header claims more than `max_elements` elements, before numpy allocates it."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            with archive.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape = read(f, max_header_size=100_000)[0]
            if math.prod(shape) > max_elements:
                raise GraphError(f"cannot read {where}: array {info.filename!r} has shape {list(shape)}, more than "
                                 f"{max_elements} elements (max_elements)")


def load_weights(graph, *, max_elements: int = MAX_ELEMENTS) -> dict[str, np.ndarray]:
    """The arrays of the graph's ``"weights"`` .npz, keyed by Param/Constant name ({} when it names none). The
    file must be a regular file, and no array may hold more than `max_elements` elements (checked first)."""
    graph = load_graph(graph)
    path = weights_path(graph)
    if path is None:
        return {}
    where = f'the weights file {path} (field "weights")'
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open below, /dev/zero never end
            raise GraphError(f"cannot read {where}: not a regular file")
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise GraphError(f"cannot read {where}: {e.strerror or e}") from e
    if head not in (b"PK\x03\x04", b"PK\x05\x06"):  # an entry or an empty archive; else np.load would try it as a pickle and say "contains pickled data"
        raise GraphError(f"cannot read {where}: it is not an .npz archive (it starts with {head!r})")
    try:
        _check_headers(path, where, max_elements)
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except GraphError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise GraphError(f"cannot read {where}: {e or type(e).__name__}") from e
