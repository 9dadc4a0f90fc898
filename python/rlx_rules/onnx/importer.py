"""ONNX import: an ONNX model becomes a graph.json in RLX vocabulary plus a weights .npz beside it."""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from .. import facts
from ..errors import OutputRefused
from ..safe_write import check_target
from .common import MAX_ELEMENTS, OnnxImport, gc_paused
from .converter import Converter
from .model import load_model
from .weights import default_weights_path, save_weights


def convert(model_or_path, *, inline_max_elements: int = 16, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
            max_elements: int = MAX_ELEMENTS, canonical: bool = True) -> OnnxImport:
    """Convert in memory: graph.json as a dict (without the "weights" field) and the weights by Param name.
    `input_shapes` pins inputs to static shapes ({"input_ids": [1, 16]}); `max_elements` bounds every tensor the
    import computes (OnnxImportError past it). `canonical=False` leaves out the canonical forms
    (rlx_rules.onnx.canonical): the graph as exported, no-op Casts and Reshapes included."""
    model = load_model(model_or_path, input_shapes=input_shapes, max_elements=max_elements)
    c = Converter(model, inline_max_elements, canonical=canonical)
    graph = c.run()
    facts.annotate(graph, c.weights)  # what the weights guarantee (duplicated rotary halves, causal masks)
    return OnnxImport(graph, c.weights, c.warnings)


def import_onnx(model_or_path, output_path=None, *, weights_path=None, inline_max_elements: int = 16,
                input_shapes: Optional[Mapping[str, Sequence[int]]] = None, max_elements: int = MAX_ELEMENTS):
    """Import an ONNX model as a Graph. With `output_path`, write the graph there and the weights beside it
    (NAME.weights.npz, or `weights_path`), and point the graph's "weights" field at them. Neither file may be
    the model, nor the other one (rlx_rules.safe_write.OutputRefused). `input_shapes` and `max_elements`: as
    for convert."""
    with gc_paused():
        return _import_onnx(model_or_path, output_path, weights_path,
                            dict(inline_max_elements=inline_max_elements, input_shapes=input_shapes,
                                 max_elements=max_elements))


def _import_onnx(model_or_path, output_path, weights_path, options: dict):
    from ..graph import Graph

    model = os.fspath(model_or_path) if isinstance(model_or_path, (str, os.PathLike)) else None
    if output_path is not None:
        output_path = os.fspath(output_path)
        wpath = os.fspath(weights_path) if weights_path is not None else default_weights_path(output_path)
        if os.path.abspath(wpath) == os.path.abspath(output_path):
            raise OutputRefused(f"cannot write {output_path}: it is also the weights file")
        check_target(output_path, inputs=[model, wpath])  # refused before the weights are written
        check_target(wpath, inputs=[model, output_path])
    result = convert(model_or_path, **options)
    data = result.graph
    if output_path is not None:
        graph_dir = os.path.dirname(os.path.abspath(output_path))
        data["weights"] = os.path.relpath(os.path.abspath(wpath), graph_dir)
        graph = Graph.from_dict(data)
        save_weights(wpath, result.weights, inputs=[model, output_path])
        graph.write(output_path, pretty=True, inputs=[model, wpath])
        return graph
    if weights_path is not None:
        save_weights(os.fspath(weights_path), result.weights, inputs=[model])
        data["weights"] = os.path.abspath(os.fspath(weights_path))
    return Graph.from_dict(data)


def load_onnx_graph(model_or_path, **options):
    """An ONNX model imported in memory for `rlx-rules apply`: (Graph, weights by Param name). `options`: as for
    convert."""
    from ..graph import Graph

    with gc_paused():
        result = convert(model_or_path, **options)
    return Graph.from_dict(result.graph), result.weights


def write_graph_with_weights(graph, output_path, weights: dict, *, pretty: bool = False, inputs=()) -> None:
    """Write `graph` to `output_path` and `weights` beside it (NAME.weights.npz), the graph's "weights" field
    pointing at them; neither over one of `inputs` (rlx_rules.safe_write)."""
    from ..graph import Graph

    output_path = os.fspath(output_path)
    wpath = default_weights_path(output_path)
    data = graph.to_dict()
    data["weights"] = os.path.relpath(os.path.abspath(wpath), os.path.dirname(os.path.abspath(output_path)))
    check_target(output_path, inputs=[*inputs, wpath])
    save_weights(wpath, weights, inputs=[*inputs, output_path])
    Graph.from_dict(data).write(output_path, pretty=pretty, inputs=[*inputs, wpath])

