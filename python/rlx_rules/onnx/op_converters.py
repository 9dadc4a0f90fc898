"""ONNX ops with RLX equivalents, one converter method per op (a mixin of the converter)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import OnnxImportError
from .common import DTYPES, REDUCE, f32_json, norm_axis, tensor_array


def expand_target(src: Optional[list], shape: list[int]) -> Optional[list[int]]:
    """ONNX Expand's shape (broadcast both ways: a 1 keeps the input's dim, and it may be shorter than the input)
    as RLX Expand's target_shape (the output shape; -1 keeps an input dim whose size is not known); None when the
    input's rank is unknown."""
    if src is None:
        return None
    rank = max(len(src), len(shape))
    src = [1] * (rank - len(src)) + list(src)
    shape = [1] * (rank - len(shape)) + list(shape)
    out = []
    for d, t in zip(src, shape):
        if t != 1:
            out.append(t)
        else:
            out.append(d if isinstance(d, int) else -1)
    return out


class OpConverters:
    """Mixin of the converter: one method per ONNX op with an RLX equivalent (op_NAME, ms_NAME for com.microsoft)."""

    # ---- ops with RLX equivalents ---------------------------------------------------------------------------
    def op_Constant(self, node) -> None:
        if not node.attribute:
            raise OnnxImportError(f"Constant {node.name!r} has no value attribute")
        a = node.attribute[0]
        if a.name == "value":
            try:
                arr = tensor_array(a.t)
            except Exception as e:  # noqa: BLE001 - a malformed tensor: wrong data length, unknown type
                raise OnnxImportError(f"Constant {node.name!r}: its tensor is malformed: {e}") from e
        elif a.name in ("value_float", "value_int"):
            arr = np.array(a.f if a.name == "value_float" else a.i,
                           dtype=np.float32 if a.name == "value_float" else np.int64)
        elif a.name in ("value_floats", "value_ints"):
            arr = np.array(list(a.floats) if a.name == "value_floats" else list(a.ints),
                           dtype=np.float32 if a.name == "value_floats" else np.int64)
        else:
            raise OnnxImportError(f"Constant {node.name!r}: attribute {a.name!r} is not supported")
        self.consts[node.output[0]] = arr
        self.const_origin[node.output[0]] = node

    def op_Identity(self, node) -> None:
        self.alias(node, node.input[0])

    def op_Dropout(self, node) -> None:
        if len(node.input) > 2 and node.input[2]:
            mode = self.const(node.input[2])
            if mode is None or bool(mode.reshape(-1)[0]):
                raise OnnxImportError(f"Dropout {node.name!r} in training mode is not supported")
        self.alias(node, node.input[0])

    def op_MatMul(self, node) -> None:
        a, b = node.input[0], node.input[1]
        ra, rb = self.rank(a), self.rank(b)
        if ra != 1 and rb != 1:
            self.simple(node, "MatMul")
            return
        # ONNX (numpy) promotes a 1-D operand to a matrix and drops that axis afterwards.
        ia, ib = self.value(a), self.value(b)
        if ra == 1:
            ia = self.emit("Unsqueeze", [ia], {"axes": [0]}, name=self.label(node, 1), onnx_node=node,
                           shape=[1] + self.shape(a), dtype=self.vi[a][1])
        if rb == 1:
            ib = self.emit("Unsqueeze", [ib], {"axes": [1]}, name=self.label(node, 2), onnx_node=node,
                           shape=self.shape(b) + [1], dtype=self.vi[b][1])
        mm = self.emit("MatMul", [ia, ib], name=self.label(node, 3), onnx_node=node)
        axes = ([-2] if ra == 1 else []) + ([-1] if rb == 1 else [])
        self.emit("Squeeze", [mm], {"axes": axes}, out=node.output[0], name=self.label(node), onnx_node=node)

    def chain(self, node, op: str) -> None:
        names = [i for i in node.input if i]
        if len(names) == 1:
            self.alias(node, names[0])
            return
        acc = self.value(names[0])
        for k, n in enumerate(names[1:], 1):
            last = k == len(names) - 1
            acc = self.emit(op, [acc, self.value(n)], out=node.output[0] if last else None,
                            name=self.label(node, 0 if last else k), onnx_node=node)

    def op_Max(self, node) -> None:
        self.chain(node, "Max")

    def op_Min(self, node) -> None:
        self.chain(node, "Min")

    def op_Sum(self, node) -> None:
        self.chain(node, "Add")

    def op_Where(self, node) -> None:
        self.simple(node, "Where")

    def op_Cast(self, node) -> None:
        to = DTYPES.get(self.attrs_of(node)["to"])
        if to is None:
            raise OnnxImportError(f"Cast {node.name!r}: unsupported target type")
        self.simple(node, "Cast", {"to": to})

    def op_Gelu(self, node) -> None:
        approx = self.attrs_of(node).get("approximate", "none")
        self.simple(node, "GeluApprox" if approx == "tanh" else "Gelu")

    def ms_Gelu(self, node) -> None:
        self.simple(node, "Gelu")

    def ms_FastGelu(self, node) -> None:
        if len([i for i in node.input if i]) == 1:
            self.simple(node, "GeluApprox")
        else:
            self.generic(node)

    def op_Softmax(self, node) -> None:
        axis = self.attrs_of(node).get("axis", -1 if self.opset >= 13 else 1)
        rank = self.rank(node.input[0])
        last = axis == -1 or (rank is not None and norm_axis(axis, rank) == rank - 1)
        if self.opset < 13 and not last:
            raise OnnxImportError(f"Softmax {node.name!r}: opset {self.opset} softmax over the flattened axes "
                                  f"from {axis} on (not the last axis) has no RLX equivalent")
        self.simple(node, "Softmax", {"axis": -1 if last else norm_axis(axis, rank)})

    def op_LayerNormalization(self, node) -> None:
        at = self.attrs_of(node)
        axis = at.get("axis", -1)
        rank = self.rank(node.input[0])
        if not (axis == -1 or (rank is not None and norm_axis(axis, rank) == rank - 1)):
            self.generic(node)  # normalizes over several trailing axes: kept as ONNX's op
            return
        eps = at.get("epsilon", f32_json(1e-5))
        ins = [self.value(node.input[0]), self.value(node.input[1])]
        if len(node.input) > 2 and node.input[2]:
            ins.append(self.value(node.input[2]))
        else:
            ins.append(self.emit("Constant", [], {"value": 0.0}, name=self.label(node) + "/zero_bias",
                                 onnx_node=node, shape=[], dtype=self.vi.get(node.input[0], (None, None))[1]))
        self.emit("LayerNorm", ins, {"axis": -1, "eps": eps}, out=node.output[0], name=self.label(node),
                  onnx_node=node)

    def op_Transpose(self, node) -> None:
        perm = self.attrs_of(node).get("perm")
        if perm is None:
            rank = self.rank(node.input[0])
            if rank is None:
                raise OnnxImportError(f"Transpose {node.name!r}: no perm and the input rank is unknown")
            perm = list(range(rank))[::-1]
        self.simple(node, "Transpose", {"perm": perm})

    def op_Concat(self, node) -> None:
        axis = self.attrs_of(node)["axis"]
        self.simple(node, "Concat", {"axis": norm_axis(axis, self.rank(node.output[0]) or self.rank(node.input[0]))})

    def op_Gather(self, node) -> None:
        axis = self.attrs_of(node).get("axis", 0)
        self.simple(node, "Gather", {"axis": norm_axis(axis, self.rank(node.input[0]))})

    def static_out(self, name: str) -> Optional[list[int]]:
        shape = self.shape(name)
        if shape is not None and all(isinstance(d, int) for d in shape):
            return list(shape)
        return None

    def op_Reshape(self, node) -> None:
        at = self.attrs_of(node)
        shape_c = self.const(node.input[1]) if len(node.input) > 1 else None
        if self.opset < 5:
            shape_c = np.array(at.get("shape", []), dtype=np.int64)
        if shape_c is not None:
            new = [int(x) for x in shape_c.reshape(-1)]
            if 0 in new and not at.get("allowzero", 0):
                src = self.shape(node.input[0]) or []
                for k, d in enumerate(new):
                    if d == 0:
                        if k < len(src) and isinstance(src[k], int):
                            new[k] = src[k]
                        elif -1 not in new:
                            new[k] = -1
                        else:
                            new = None
                            break
            if new is not None:
                self.simple(node, "Reshape", {"new_shape": new}, inputs=[node.input[0]])
                return
        out = self.static_out(node.output[0])
        if out is not None:
            self.simple(node, "Reshape", {"new_shape": out}, inputs=[node.input[0]])
            return
        self.emit("OnnxReshape", [self.value(i) for i in node.input[:2]], {"allowzero": at.get("allowzero", 0)},
                  out=node.output[0], name=self.label(node), onnx_node=node)

    def op_Expand(self, node) -> None:
        shape_c = self.const(node.input[1])
        if shape_c is not None:
            target = expand_target(self.shape(node.input[0]), [int(x) for x in shape_c.reshape(-1)])
        else:
            target = self.static_out(node.output[0])
        if target is None:
            self.emit("OnnxExpand", [self.value(i) for i in node.input[:2]], out=node.output[0],
                      name=self.label(node), onnx_node=node)
        else:
            self.simple(node, "Expand", {"target_shape": target}, inputs=[node.input[0]])

    def op_Slice(self, node) -> None:
        data = node.input[0]
        if self.opset < 10:
            at = self.attrs_of(node)
            starts, ends = at["starts"], at["ends"]
            axes = at.get("axes", list(range(len(starts))))
            steps = [1] * len(starts)
        else:
            parts = [self.const(node.input[k]) if len(node.input) > k and node.input[k] else None
                     for k in range(1, 5)]
            present = [len(node.input) > k and bool(node.input[k]) for k in range(1, 5)]
            if any(p and v is None for p, v in zip(present, parts)):
                self.generic_slice(node)
                return
            starts = [int(x) for x in parts[0].reshape(-1)]
            ends = [int(x) for x in parts[1].reshape(-1)]
            axes = [int(x) for x in parts[2].reshape(-1)] if parts[2] is not None else list(range(len(starts)))
            steps = [int(x) for x in parts[3].reshape(-1)] if parts[3] is not None else [1] * len(starts)
        rank = self.rank(data)
        shape = self.shape(data)
        out_shape = self.shape(node.output[0])
        if any(s != 1 for s in steps) or rank is None:
            self.generic_slice(node)
            return
        narrows = []
        for ax, s, e in zip(axes, starts, ends):
            ax = norm_axis(ax, rank)
            dim = shape[ax]
            if isinstance(dim, int):
                s = max(0, min(dim, s + dim if s < 0 else s))
                e = max(0, min(dim, e + dim if e < 0 else e))
                length = max(0, e - s)
                if s == 0 and length == dim:
                    continue
            elif s >= 0 and out_shape is not None and isinstance(out_shape[ax], int):
                length = out_shape[ax]
            else:
                self.generic_slice(node)
                return
            narrows.append((ax, s, length))
        if not narrows:
            self.alias(node, data)
            return
        acc = self.value(data)
        cur = list(shape)
        for k, (ax, s, length) in enumerate(narrows):
            cur[ax] = length
            last = k == len(narrows) - 1
            acc = self.emit("Narrow", [acc], {"axis": ax, "start": s, "len": length},
                            out=node.output[0] if last else None, name=self.label(node, 0 if last else k + 1),
                            onnx_node=node, shape=None if last else list(cur),
                            dtype=None if last else self.vi.get(data, (None, None))[1])

    def generic_slice(self, node) -> None:
        self.generic(node)  # named OnnxSlice: "Slice" is RLX's strided single-axis slice

    def op_Split(self, node) -> None:
        at = self.attrs_of(node)
        data = node.input[0]
        rank = self.rank(data)
        axis = norm_axis(at.get("axis", 0), rank)
        if axis < 0:
            raise OnnxImportError(f"Split {node.name!r}: negative axis with unknown rank")
        sizes = at.get("split")
        if len(node.input) > 1 and node.input[1]:
            c = self.const(node.input[1])
            if c is None:
                raise OnnxImportError(f"Split {node.name!r}: the split sizes are not constant")
            sizes = [int(x) for x in c.reshape(-1)]
        if sizes is None:
            dim = (self.shape(data) or [None] * (axis + 1))[axis]
            if not isinstance(dim, int):
                raise OnnxImportError(f"Split {node.name!r}: even split of a dimension that is not static")
            n = at.get("num_outputs", len(node.output))
            chunk = -(-dim // n)
            sizes = [min(chunk, dim - k * chunk) for k in range(n)]
        start = 0
        for k, (out, size) in enumerate(zip(node.output, sizes)):
            if out:
                self.emit("Narrow", [self.value(data)], {"axis": axis, "start": start, "len": size}, out=out,
                          name=self.label(node, k), onnx_node=node)
            start += size

    def reduce(self, node) -> None:
        at = self.attrs_of(node)
        data = node.input[0]
        axes = at.get("axes")
        if len(node.input) > 1 and node.input[1]:
            c = self.const(node.input[1])
            if c is None:
                self.generic(node)
                return
            axes = [int(x) for x in c.reshape(-1)]
        rank = self.rank(data)
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                self.alias(node, data)
                return
            if rank is None:
                self.generic(node)
                return
            axes = list(range(rank))
        if rank is None and any(a < 0 for a in axes):
            self.generic(node)
            return
        axes = sorted(norm_axis(a, rank) for a in axes)
        self.simple(node, "Reduce", {"op": REDUCE[node.op_type], "axes": axes,
                                     "keep_dim": bool(at.get("keepdims", 1))}, inputs=[data])

    def op_CumSum(self, node) -> None:
        at = self.attrs_of(node)
        axis = self.const(node.input[1])
        if axis is None or at.get("reverse", 0):
            self.generic(node)
            return
        rank = self.rank(node.input[0])
        ax = int(axis.reshape(-1)[0])
        ax = -1 if (ax == -1 or (rank is not None and norm_axis(ax, rank) == rank - 1)) else norm_axis(ax, rank)
        self.simple(node, "Cumsum", {"axis": ax, "exclusive": bool(at.get("exclusive", 0))}, inputs=[node.input[0]])

    def arg(self, node, op: str) -> None:
        at = self.attrs_of(node)
        if at.get("select_last_index", 0):
            self.generic(node)
            return
        self.simple(node, op, {"axis": norm_axis(at.get("axis", 0), self.rank(node.input[0])),
                               "keep_dim": bool(at.get("keepdims", 1))})

    def op_ArgMax(self, node) -> None:
        self.arg(node, "ArgMax")

    def op_ArgMin(self, node) -> None:
        self.arg(node, "ArgMin")

    def op_Conv(self, node) -> None:
        """A 2-D Conv (NCHW, explicit or no padding) is RLX's Conv, its bias an Add over [1, C, 1, 1]; any other
        Conv (1-D, 3-D, auto_pad SAME) stays OnnxConv."""
        at = self.schema_defaults(node)
        at.update(self.attrs_of(node))
        w = self.shape(node.input[1])
        if (self.rank(node.input[0]) != 4 or w is None or len(w) != 4 or not all(isinstance(d, int) for d in w[2:])
                or at.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")):
            self.generic(node)
            return
        kernel = at.get("kernel_shape") or list(w[2:])
        pads = at.get("pads") or [0, 0, 0, 0]
        attrs = {"kernel_size": list(kernel), "stride": at.get("strides") or [1, 1], "padding": list(pads),
                 "dilation": at.get("dilations") or [1, 1], "groups": at.get("group", 1)}
        has_bias = len(node.input) > 2 and bool(node.input[2])
        conv = self.emit("Conv", [self.value(node.input[0]), self.value(node.input[1])], attrs,
                         out=None if has_bias else node.output[0], name=self.label(node, 1 if has_bias else 0),
                         onnx_node=node, shape=None if not has_bias else self.shape(node.output[0]),
                         dtype=None if not has_bias else self.vi.get(node.output[0], (None, None))[1])
        if has_bias:
            bias = self.value(node.input[2])
            b4 = self.emit("Reshape", [bias], {"new_shape": [1, -1, 1, 1]}, name=self.label(node, 2), onnx_node=node,
                           shape=[1, w[0], 1, 1], dtype=self.vi.get(node.input[2], (None, None))[1])
            self.emit("Add", [conv, b4], out=node.output[0], name=self.label(node), onnx_node=node)

