"""ONNX export: a graph.json (fused or not) becomes an ONNX model for ONNX Runtime (standard and com.microsoft ops).

The op mapping is the table `EXPORTS` in `export_ops.py` (docs/export.md renders it); this module holds the
builder the mappings write into (names, initializers, shapes) and the writer (atomic, external data for
large models). An op without a faithful mapping raises `ExportError`, naming the node and the op.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import ExportError
from .export_builder import MS_DOMAIN, Builder, node_label, tensor_info
from .export_ops import EXPORTS
from . import export_skip

__all__ = ["EXPORTS", "ExportError", "export_onnx", "to_onnx", "write_onnx"]

MIN_OPSET = 17  # LayerNormalization; ReduceX take their axes as an input from 18, which the builder handles
EXTERNAL_THRESHOLD = 1 << 30  # initializer bytes above which the weights go to an external data file
EXTERNAL_MIN_TENSOR = 1024  # tensors smaller than this stay inside the model file


def source_opset(graph) -> int:
    extra = graph.to_dict().get("onnx") or {}
    opsets = extra.get("opsets") or {}
    return int(opsets.get("ai.onnx", opsets.get("", MIN_OPSET)) or MIN_OPSET)


def reachable(graph) -> set[int]:
    """The nodes the graph's outputs depend on (a rewrite can leave dead constants behind), and every Input
    (the model keeps its signature: a caller feeds what it fed the original)."""
    live, stack = set(), list(graph.outputs) + [n.id for n in graph.nodes if n.op == "Input"]
    while stack:
        nid = stack.pop()
        if nid not in live:
            live.add(nid)
            stack.extend(graph.node(nid).inputs)
    return live


def live_nodes(nodes: list, outputs: Sequence[str]) -> list:
    """The nodes the outputs read, in order (a mapping may read past a node it wrote, e.g. attention past a head
    transpose; only the initializers and value_info of what is left are written)."""
    need, keep = set(outputs), []
    for node in reversed(nodes):
        if any(o and o in need for o in node.output):
            keep.append(node)
            need.update(i for i in node.input if i)
    return keep[::-1]


def to_onnx(graph, weights: Optional[Mapping[str, np.ndarray]] = None, *, opset: Optional[int] = None,
            output_names: Optional[Sequence[str]] = None) -> onnx.ModelProto:
    """The graph as an ONNX model (in memory). `weights` defaults to the graph's weights file; `output_names`
    names the graph outputs (default: their nodes' names). Raises ExportError for an op without a mapping."""
    from ..graph import load_graph
    from ..interpret.weights import load_weights

    graph = load_graph(graph)
    if weights is None:
        weights = load_weights(graph)
    b = Builder(graph, weights, max(opset or source_opset(graph), MIN_OPSET))
    outputs = set(graph.outputs)
    live = reachable(graph)
    # residual Add -> the norm written with it; the nodes whose last bias a later kernel adds (export_skip.py)
    skips, biased, bias_later = export_skip.plan(graph, b, live)
    readers = {i: sum(m.id in live for m in b.readers(i)) for i in skips}
    for n in graph.nodes:
        if n.id not in live or n.id in b.names:  # a weight already read, a norm already written with its Add
            continue
        if n.op in ("Input", "Param", "Constant"):
            b.names[n.id] = b.leaf(n)
            continue
        entry = EXPORTS.get(n.op)
        if entry is None:
            raise ExportError(f"{node_label(n)}: op {n.op!r} has no ONNX mapping (docs/export.md lists the ops)")
        ins = [b.names[i] for i in n.inputs]
        if n.id in skips:
            norm, bias_of = graph.node(skips[n.id]), graph.node(biased[n.id]) if n.id in biased else None
            out, b.names[norm.id] = export_skip.emit(b, n, norm, ins, readers[n.id] > 1 or n.id in outputs, bias_of)
            if norm.id not in outputs:
                b.annotate(norm, b.names[norm.id])
        elif n.id in biased:  # RLX's residual norm
            out = export_skip.emit_residual(b, n, ins, graph.node(biased[n.id]))
        elif n.id in bias_later:
            out = export_skip.emit_unbiased(b, n, ins)
        else:
            out = entry.emit(b, n, ins)
        b.names[n.id] = out
        if n.id not in outputs and out:
            b.annotate(n, out)
    graph_outputs, seen = [], set()
    for k, nid in enumerate(graph.outputs):
        n = b.node(nid)
        want = output_names[k] if output_names is not None and k < len(output_names) else None
        name = b.names[nid]
        if want is None and name in seen:
            want = f"output_{k}"
        if want is not None and want != name:
            if want in b.used:
                want = b.fresh(want)
            else:
                b.used.add(want)
            b.nodes.append(helper.make_node("Identity", [name], [want], name=b.fresh(f"{want}/Identity#node")))
            name = want
        seen.add(name)
        graph_outputs.append(tensor_info(name, n.dtype, n.shape, n))
    nodes = live_nodes(b.nodes, [o.name for o in graph_outputs])
    read = {i for node in nodes for i in node.input} | {o.name for o in graph_outputs}
    written = {o for node in nodes for o in node.output}
    model = helper.make_model(
        helper.make_graph(nodes, graph.name or "rlx_rules", b.inputs, graph_outputs,
                          [t for t in b.initializers if t.name in read],
                          value_info=[v for v in b.value_info if v.name in written]),
        opset_imports=[helper.make_opsetid("", b.opset), helper.make_opsetid(MS_DOMAIN, 1)],
        producer_name="rlx-rules")
    model.ir_version = min(model.ir_version, 10)
    return model


def _external(model: onnx.ModelProto, location: str) -> list[tuple[str, Any]]:
    """Move the large initializers out of the model: their bytes, in order, for the data file `location`."""
    chunks, offset = [], 0
    for t in model.graph.initializer:
        if not t.HasField("raw_data") or len(t.raw_data) < EXTERNAL_MIN_TENSOR:
            continue
        data = t.raw_data
        pad = (-offset) % 64  # aligned, as onnx's own writer does (mmap-friendly)
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        del t.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        t.data_location = TensorProto.EXTERNAL
        chunks.append(data)
        t.ClearField("raw_data")
        offset += len(data)
    return chunks


def write_onnx(model: onnx.ModelProto, path: Union[str, "os.PathLike[str]"], *, inputs: Sequence = (),
               external_data: Optional[bool] = None) -> Optional[str]:
    """Write `model` atomically (rlx_rules.safe_write), never over one of `inputs`. With `external_data` (default:
    when the initializers pass 1 GiB) the large tensors go to PATH.data beside it; returns that path or None."""
    from ..safe_write import atomic_output, atomic_write

    path = os.fspath(path)
    if external_data is None:
        external_data = sum(len(t.raw_data) for t in model.graph.initializer) > EXTERNAL_THRESHOLD
    data_path = None
    if external_data:
        location = os.path.basename(path) + ".data"
        data_path = os.path.join(os.path.dirname(os.path.abspath(path)), location)
        chunks = _external(model, location)
        with atomic_output(data_path, inputs=[*inputs, path]) as (fd, _tmp):
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
    atomic_write(path, model.SerializeToString(), inputs=[*inputs, *([data_path] if data_path else [])])
    return data_path


def export_onnx(graph, output_path, *, weights: Optional[Mapping[str, np.ndarray]] = None,
                opset: Optional[int] = None, output_names: Optional[Sequence[str]] = None,
                external_data: Optional[bool] = None, inputs: Sequence = (), check: bool = True) -> onnx.ModelProto:
    """Export `graph` to ONNX at `output_path` (see to_onnx and write_onnx); the model is checked with
    onnx.checker first (`check`). Returns the model as written (large tensors external when they were)."""
    model = to_onnx(graph, weights, opset=opset, output_names=output_names)
    if check:
        try:
            onnx.checker.check_model(model) if model.ByteSize() < (1 << 31) - (1 << 20) else None
        except onnx.checker.ValidationError as e:
            raise ExportError(f"the exported model does not pass onnx.checker: {str(e).splitlines()[0]}") from e
    write_onnx(model, output_path, inputs=inputs, external_data=external_data)
    return model


def optimize_onnx(model_path, output_path, *, rules: Sequence = ("@onnx",), params: Optional[Mapping] = None,
                  input_shapes: Optional[Mapping[str, Sequence[int]]] = None, external_data: Optional[bool] = None,
                  max_rewrites: Optional[int] = None, time_budget_s: Optional[float] = None):
    """ONNX in, fused ONNX out: import (in memory), apply `rules` (the @onnx lifting rules, then the fusion
    library), export with the model's own input and output names. Returns (model as written, apply report)."""
    from ..api import load_rules
    from ..graph import Graph
    from .importer import convert

    model_path = os.fspath(model_path)
    ruleset = load_rules(*rules, params=params)
    imported = convert(model_path, input_shapes=input_shapes)
    fused, report = ruleset.apply(Graph.from_dict(imported.graph), max_rewrites=max_rewrites,
                                  time_budget_s=time_budget_s)
    source = onnx.load(model_path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(model_path))
    data_files = {os.path.join(folder, e.value) for t in source.graph.initializer for e in t.external_data
                  if e.key == "location"}  # inputs too: the output must never overwrite them
    model = export_onnx(fused, output_path, weights=imported.weights, output_names=[o.name for o in source.graph.output],
                        external_data=external_data, inputs=[model_path, *sorted(data_files)])
    return model, report
