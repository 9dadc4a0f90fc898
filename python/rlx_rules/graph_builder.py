"""GraphBuilder: adds nodes one by one and emits the graph.json dict (examples, synthesis and the ONNX importer)."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from .formats import GRAPH_FORMAT, GRAPH_VERSION


class GraphBuilder:
    """Nodes of a graph.json, in the order added. `add` returns the new node's id (the next free one, or `id`)."""

    def __init__(self, name: Optional[str] = None, *, default_dtype: Optional[str] = None):
        self.name = name
        self.default_dtype = default_dtype
        self.nodes: list[dict[str, Any]] = []

    def add(self, op: str, inputs: Iterable[int] = (), attrs: Optional[dict] = None,
            shape: Optional[Sequence] = None, *, name: Optional[str] = None, dtype: Optional[str] = None,
            id: Optional[int] = None, extra: Optional[dict] = None) -> int:
        """Add a node; fields left empty (no inputs, attrs, name, shape or dtype) are left out of the JSON."""
        nid = len(self.nodes) if id is None else id
        node: dict[str, Any] = {"id": nid, "op": op}
        if name:
            node["name"] = name
        inputs = list(inputs)
        if inputs:
            node["inputs"] = inputs
        if attrs:
            node["attrs"] = attrs
        if shape is not None:
            node["shape"] = list(shape)
        dtype = dtype if dtype is not None else self.default_dtype
        if dtype is not None:
            node["dtype"] = dtype
        if extra:
            node.update(extra)
        self.nodes.append(node)
        return nid

    def graph(self, outputs: Iterable[int], **fields: Any) -> dict:
        """The graph.json dict: format and version, name, nodes, outputs, then any other top-level `fields`."""
        return {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "name": self.name, "nodes": self.nodes,
                "outputs": list(outputs), **fields}
