"""The reference interpreter: runs a graph with numpy, one op at a time, with RLX semantics, to prove rewrites keep values."""

from __future__ import annotations

from typing import Mapping, Optional, Union

import numpy as np

from .. import facts
from ..errors import GraphError, UnsupportedOpError
from ..graph import Graph, Node, load_graph
from .numerics import INT, check_dtype
from . import ops_basic, ops_conv, ops_fused, ops_shape  # noqa: F401 - register their ops
from .optable import MAX_ELEMENTS, OPS, check_elements
from .weights import load_weights


BACKENDS = ("numpy", "kernels")


_onnx_ops_loaded = False


def _load_onnx_ops() -> None:
    """The semantics of the ONNX-only ops (rlx_rules.onnx.ops), loaded when a graph first needs one."""
    global _onnx_ops_loaded
    _onnx_ops_loaded = True
    from ..onnx import ops  # noqa: F401 - registers its ops


def supported_ops() -> list[str]:
    """Every op the interpreter can run (Input, Param and Constant included)."""
    if not _onnx_ops_loaded:
        _load_onnx_ops()
    return sorted([*OPS, "Input", "Param", "Constant"])


def node_label(node: Node) -> str:
    return f"node {node.id} ({node.name!r}, {node.op})" if node.name else f"node {node.id} ({node.op})"


class Interpreter:
    """Runs one graph; ``values`` holds every node's value after :meth:`run`, ``kernel_nodes`` the ids of the
    nodes that ran through the Rust kernels (backend ``"kernels"``), ``kernel_fallbacks`` the attention nodes
    that ran in numpy instead, each with the reason (a soft-cap, a sliding window, ...)."""

    def __init__(self, graph, *, backend: str = "numpy", check_shapes: bool = True, max_elements: int = MAX_ELEMENTS):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.graph = load_graph(graph)
        self.backend = backend
        self.check_shapes = check_shapes
        self.max_elements = max_elements
        self.values: dict[int, np.ndarray] = {}
        self.kernel_nodes: list[int] = []
        self.kernel_fallbacks: dict[int, str] = {}
        self.dims: dict[str, int] = {}

    def run(self, inputs: Mapping[str, object], params: Optional[Mapping[str, object]] = None) -> list[np.ndarray]:
        if params is None:
            params = load_weights(self.graph)
        self.values, self.kernel_nodes, self.kernel_fallbacks, self.dims = {}, [], {}, {}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            for node in self.graph.nodes:
                self.values[node.id] = value = self._node(node, inputs, params)
                if node.facts:
                    self._check_facts(node, value)
        return [self.values[i] for i in self.graph.outputs]

    def _node(self, node: Node, inputs: Mapping, params: Mapping) -> np.ndarray:
        if node.op == "Input":
            return self._leaf(node, inputs, "inputs")
        if node.op == "Param":
            return self._leaf(node, params, "params")
        if node.op == "Constant":
            return self._constant(node, params)
        fn = OPS.get(node.op)
        if fn is None and not _onnx_ops_loaded:
            _load_onnx_ops()
            fn = OPS.get(node.op)
        if fn is None:
            raise UnsupportedOpError(f"{node_label(node)}: the reference interpreter has no semantics for op "
                                     f"{node.op!r}")
        args = [self.values[i] for i in node.inputs]
        declared = self._static_shape(node)
        if declared is not None:
            check_elements(self, node, declared)
        try:
            value = np.asarray(fn(self, node, args))
        except (GraphError, UnsupportedOpError):
            raise
        except KeyError as e:
            raise UnsupportedOpError(f"{node_label(node)}: no semantics for attribute value {e}") from e
        except (ValueError, TypeError, IndexError, np.linalg.LinAlgError) as e:
            shapes = ", ".join(str(list(np.shape(a))) for a in args)
            raise GraphError(f"{node_label(node)}: {e} (input shapes {shapes})") from e
        if value.dtype != np.float64:
            value = value.astype(np.float64)
        self._check_shape(node, value, "computed")
        return value

    def _check_facts(self, node: Node, value: np.ndarray) -> None:
        """A rewrite may have relied on the node's claimed facts (has_fact); values without them are an error."""
        try:
            facts.check(node_label(node), value.astype(bool) if node.dtype == "bool" else value, node.facts)
        except ValueError as e:
            raise GraphError(str(e)) from e

    def _leaf(self, node: Node, table: Mapping, what: str) -> np.ndarray:
        if node.name is None:
            raise GraphError(f"{node_label(node)}: an {node.op} needs a name to look its value up by")
        if node.name not in table:
            known = ", ".join(sorted(map(str, table))[:8]) or "none"
            raise GraphError(f"{node_label(node)}: no value for {node.name!r} in {what} (given: {known})")
        return self._accept(node, table[node.name], f"{what}[{node.name!r}]")

    def _constant(self, node: Node, params: Mapping) -> np.ndarray:
        if "value" in node.attrs and node.attrs["value"] is not None:
            value = np.asarray(node.attrs["value"], dtype=np.float64)
            shape = self._static_shape(node)
            if value.ndim == 0 and shape is not None:
                check_elements(self, node, shape)
                value = np.full(shape, float(value))
            return self._accept(node, value, 'attribute "value"')
        if node.name is not None and node.name in params:
            return self._accept(node, params[node.name], f"params[{node.name!r}]")
        raise GraphError(f"{node_label(node)}: a Constant needs an inline \"value\" attribute or an entry named "
                         f"{node.name!r} in params / the weights file")

    def _accept(self, node: Node, raw, where: str) -> np.ndarray:
        try:
            value = np.asarray(raw)
        except Exception as e:  # a ragged list, say
            raise GraphError(f"{node_label(node)}: {where} is not an array: {e}") from e
        problem = check_dtype(value, node.dtype)
        if problem:
            raise GraphError(f"{node_label(node)}: {where}: {problem}")
        value = value.astype(np.float64)
        self._check_shape(node, value, f"{where} has")
        return value

    def _static_shape(self, node: Node) -> Optional[list[int]]:
        if node.shape is None:
            return None
        out = []
        for d in node.shape:
            if isinstance(d, str):
                if d not in self.dims:
                    return None
                d = self.dims[d]
            out.append(d)
        return out

    def _check_shape(self, node: Node, value: np.ndarray, what: str) -> None:
        """Checks `value` against the node's declared shape, binding each symbolic dim at its first use."""
        if node.shape is None or not self.check_shapes:
            return
        declared = list(node.shape)
        ok = len(declared) == value.ndim
        if ok:
            bound = {}
            for d, n in zip(declared, value.shape):
                if isinstance(d, str):
                    have = self.dims.get(d, bound.get(d))
                    if have is None:
                        bound[d] = n
                    elif have != n:
                        ok = False
                elif d != n:
                    ok = False
            if ok:
                self.dims.update(bound)
        if not ok:
            hint = "" if all(isinstance(d, int) for d in declared) else \
                f" (symbolic dims bound so far: {self.dims})"
            raise GraphError(f"{node_label(node)}: {what} shape {list(value.shape)}, but the graph declares "
                             f"{declared}{hint}")


def run(graph, inputs: Mapping[str, object], params: Optional[Mapping[str, object]] = None, *,
        backend: str = "numpy", max_elements: int = MAX_ELEMENTS) -> list[np.ndarray]:
    """Executes `graph` (a Graph, a path, a JSON string or a dict) and returns its outputs as float64 arrays.

    Input nodes are looked up by name in `inputs`; Param and Constant nodes (without an inline ``value``) in
    `params`, or, when `params` is None, in the .npz that the graph's ``"weights"`` field names. ``backend=
    "kernels"`` runs FusedAttentionBlock, FusedTransformerLayer's attention and Attention nodes through the
    Rust kernels (float32) where a kernel computes what the op means (otherwise numpy runs the node and
    ``Interpreter.kernel_fallbacks`` says why); everything else runs in numpy float64. Raises GraphError naming the
    node for a missing value, a wrong shape or dtype, an op without semantics (UnsupportedOpError), or a value
    over `max_elements` elements (checked before allocating it)."""
    return Interpreter(graph, backend=backend, max_elements=max_elements).run(inputs, params)


def random_values(graph: Union[Graph, str, dict], seed: int = 0, scale: float = 0.1) -> tuple[dict, dict]:
    """Random inputs and params for every Input and Param (and Constant without a value) of a static-shaped
    graph: standard normal inputs; params ×`scale`; Inputs named like ``mask`` a 0/1 keep mask with a padded
    tail; integer inputs in [0, 2); bool inputs 0/1; a node with "facts" gets values that have them."""
    rng = np.random.default_rng(seed)
    inputs, params = {}, {}
    for node in load_graph(graph).nodes:
        if node.op not in ("Input", "Param", "Constant") or (node.op == "Constant" and "value" in node.attrs):
            continue
        if node.shape is None or not all(isinstance(d, int) for d in node.shape):
            raise GraphError(f"{node_label(node)}: random_values needs a static shape, found {node.shape}")
        shape = tuple(node.shape)
        if node.facts:  # values that keep the node's claimed facts (rlx_rules.facts)
            value = facts.sample(shape, node.facts, rng, 1.0 if node.op == "Input" else scale)
        elif node.dtype in INT or node.dtype == "bool":
            value = rng.integers(0, 2, size=shape).astype(np.float64)
        elif node.op == "Input" and node.name and "mask" in node.name:
            value = np.ones(shape)
            if shape:
                value[..., -max(1, shape[-1] // 4):] = 0.0  # a padded tail
        elif node.op == "Input":
            value = rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * scale
        (inputs if node.op == "Input" else params)[node.name] = value
    return inputs, params
