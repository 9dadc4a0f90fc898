"""The weights of an imported model: where they go, and writing them as an uncompressed .npz."""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np


def default_weights_path(graph_path: str) -> str:
    """NAME.graph.json or NAME.json -> NAME.weights.npz, in the same folder."""
    base = graph_path
    for suffix in (".graph.json", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base + ".weights.npz"


def save_weights(path: str, weights: dict[str, np.ndarray], *, inputs: Sequence = ()) -> None:
    """Write the weights as an uncompressed .npz (keys are Param names; what np.savez writes, without its
    keyword-name limits), atomically (rlx_rules.safe_write), never over one of `inputs`.

    The archive is written in Rust (rlx_rules_core::npz, with the zip crate), from the arrays' own buffers and
    without the GIL; Python only makes the .npy headers (numpy's own format code)."""
    from .. import _native
    from ..safe_write import atomic_output

    names, headers, data = [], [], []
    heads: dict = {}
    for name, arr in weights.items():
        head, body = _npy_parts(np.asanyarray(arr), heads)
        names.append(name)
        headers.append(head)
        data.append(body)
    with atomic_output(path, inputs=inputs) as (_fd, tmp):  # a refused or failed write: an OutputError
        _native.write_npz(tmp, names, headers, data)


_NO_DATA = np.zeros(0, dtype=np.uint8)


def _npy_parts(arr: np.ndarray, heads: dict) -> tuple[bytes, np.ndarray]:
    """The .npy file of `arr` as np.lib.format.write_array writes it, as (header, data as a flat uint8 array).
    A C-contiguous array of a plain dtype gives its own buffer (no copy); `heads` keeps the headers made so far
    by (dtype, shape), for numpy's built-in dtypes (whose descr is dtype.str): a stacked model repeats a few."""
    if type(arr) is np.ndarray and arr.flags.c_contiguous and not arr.dtype.hasobject:
        key = (arr.dtype.str, arr.shape) if arr.dtype.isbuiltin == 1 else None
        head = heads.get(key) if key is not None else None
        if head is None:
            buf = io.BytesIO()
            try:  # write_array's choice while the header fits version 1.0
                np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(arr))
            except ValueError:
                buf = None
            if buf is not None:
                head = buf.getvalue()
                if key is not None:
                    heads[key] = head
        if head is not None:
            return head, (arr.reshape(-1).view(np.uint8) if arr.nbytes else _NO_DATA)
    buf = io.BytesIO()  # anything else (Fortran order, strided, subclasses): numpy's own writer
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return b"", np.frombuffer(buf.getvalue(), dtype=np.uint8)
