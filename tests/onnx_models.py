"""Small ONNX models built with onnx.helper, shared by the ONNX tests and tests/make_onnx_rule_examples.py:
BERT-style and LLaMA-style attention blocks, in the forms exporters write them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FMIN = -3.4028235e38  # float32's lowest: the fill exporters use for masked scores


@dataclass(frozen=True)
class Dims:
    """Batch, sequence, heads and head dim of a model."""

    b: int
    s: int
    h: int
    d: int

    @property
    def hd(self) -> int:
        return self.h * self.d


def const(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=dtype), name))


def model(nodes, inputs, outputs=("y",), inits=(), name="g"):
    """An opset-17 model with shapes inferred; `inputs` are (name, shape) or (name, shape, elem_type)."""
    ins = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, list(i[1])) for i in inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    m = helper.make_model(helper.make_graph(nodes, name, ins, outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


class Weights:
    """Random initializers, `scale` × standard normal (no value facts hold on them by chance)."""

    def __init__(self, seed=0, scale=0.2):
        self.rng = np.random.default_rng(seed)
        self.scale = scale
        self.inits = []

    def __call__(self, name, shape):
        return self.init(name, (self.scale * self.rng.standard_normal(shape)).astype(np.float32))

    def init(self, name, value):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name


def _softmax_and_output(nodes, w: Weights, dims: Dims, scores: str, v: str, *, nan_guard: bool,
                        out_perm=(0, 2, 1, 3), out_shape=None, out_bias: bool):
    """Softmax over `scores` (with SDPA's IsNaN/Where guard when `nan_guard`), times `v`, heads merged back by
    Transpose `out_perm` and Reshape to `out_shape` ([B, S, H·D] by default), then the output projection "y"."""
    nodes.append(helper.make_node("Softmax", [scores], ["probs"], axis=-1))
    probs = "probs"
    if nan_guard:
        nodes += [helper.make_node("IsNaN", ["probs"], ["nan"]), const("gz", 0.0),
                  helper.make_node("Where", ["nan", "gz", "probs"], ["probs2"])]
        probs = "probs2"
    out_shape = list(out_shape or (dims.b, dims.s, dims.hd))
    nodes += [helper.make_node("MatMul", [probs, v], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=list(out_perm)),
              const("out_shape", out_shape, np.int64),
              helper.make_node("Reshape", ["ctx_t", "out_shape"], ["ctx_3"])]
    if out_bias:
        nodes += [helper.make_node("MatMul", ["ctx_3", w("Wo", (out_shape[-1], dims.hd))], ["o_mm"]),
                  helper.make_node("Add", ["o_mm", w("bo", (dims.hd,))], ["y"])]
    else:
        nodes.append(helper.make_node("MatMul", ["ctx_3", w("Wo", (out_shape[-1], dims.hd))], ["y"]))


# ---- a BERT-style attention block ------------------------------------------------------------------------------------
def bert_attention(dims: Dims, *, mask="where", fill=FMIN, scale: Optional[float] = None, sdpa=False, div=False,
                   out_perm=(0, 2, 1, 3), out_shape=None, gqa=False, seed=0, weight_scale=0.2, scale_at="scores"):
    """Q/K/V projections with bias, per-head Reshape/Transpose (Kᵀ by one Transpose {0, 2, 3, 1}), scores times
    `scale` (default D^-0.5), a mask, softmax, output projection with bias.

    mask: "where" (Where(keep, 0, fill) of an int64 `attention_mask` [B, S]: padding), "bias" (an additive float
    input `attention_bias` [B, 1, 1, S]) or None. `sdpa` scales Q and Kᵀ by √scale each and guards the softmax with
    IsNaN/Where; `div` divides by 1/scale; `gqa` gives K and V one head, repeated H times as HF's repeat_kv does
    (Unsqueeze, Expand, Reshape). `out_perm` / `out_shape` say how the heads are merged back. `scale_at`: "scores"
    (the default), "q" (q scaled right after its projection, before the head split, as OPT does) or "none"."""
    b, s, h, d, hd = dims.b, dims.s, dims.h, dims.d, dims.hd
    scale = d ** -0.5 if scale is None else scale
    w = Weights(seed, weight_scale)
    nodes = []
    for p in "qkv":
        heads = 1 if gqa and p != "q" else h
        nodes += [helper.make_node("MatMul", ["x", w(f"W{p}", (hd, heads * d))], [f"{p}_mm"]),
                  helper.make_node("Add", [f"{p}_mm", w(f"b{p}", (heads * d,))], [f"{p}_lin"]),
                  const(f"{p}_shape", [b, s, heads, d], np.int64),
                  helper.make_node("Reshape", [f"{p}_lin", f"{p}_shape"], [f"{p}_4"])]
    if scale_at == "q":
        nodes[2:2] = [const("cq", scale), helper.make_node("Mul", ["q_lin", "cq"], ["q_lin_s"])]
        nodes[5].input[0] = "q_lin_s"  # the head split reads the scaled q
    nodes.append(helper.make_node("Transpose", ["q_4"], ["q_h"], perm=[0, 2, 1, 3]))
    if gqa:
        for p in "kv":
            nodes += [helper.make_node("Transpose", [f"{p}_4"], [f"{p}_t1"], perm=[0, 2, 1, 3]),
                      const(f"{p}_ax", [2], np.int64), helper.make_node("Unsqueeze", [f"{p}_t1", f"{p}_ax"], [f"{p}_u"]),
                      const(f"{p}_exp", [b, 1, h, s, d], np.int64),
                      helper.make_node("Expand", [f"{p}_u", f"{p}_exp"], [f"{p}_e"]),
                      const(f"{p}_rs", [b, h, s, d], np.int64),
                      helper.make_node("Reshape", [f"{p}_e", f"{p}_rs"], [f"{p}_h"])]
        nodes.append(helper.make_node("Transpose", ["k_h"], ["kT"], perm=[0, 1, 3, 2]))
    else:
        nodes += [helper.make_node("Transpose", ["k_4"], ["kT"], perm=[0, 2, 3, 1]),
                  helper.make_node("Transpose", ["v_4"], ["v_h"], perm=[0, 2, 1, 3])]
    if sdpa:
        r = float(np.sqrt(np.float32(scale)))
        nodes += [const("c1", r), const("c2", r), helper.make_node("Mul", ["q_h", "c1"], ["q_s"]),
                  helper.make_node("Mul", ["kT", "c2"], ["k_s"]), helper.make_node("MatMul", ["q_s", "k_s"], ["scaled"])]
    elif scale_at != "scores":
        nodes.append(helper.make_node("MatMul", ["q_h", "kT"], ["scaled"]))
    else:
        nodes.append(helper.make_node("MatMul", ["q_h", "kT"], ["scores"]))
        if div:
            nodes += [const("c", 1.0 / scale), helper.make_node("Div", ["scores", "c"], ["scaled"])]
        else:
            nodes += [const("c", scale), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
    inputs = [("x", (b, s, hd))]
    sm_in = "scaled"
    if mask == "where":
        inputs.append(("attention_mask", (b, s), TensorProto.INT64))
        nodes += [helper.make_node("Cast", ["attention_mask"], ["am_b"], to=TensorProto.BOOL),
                  const("am_axes", [1, 2], np.int64),
                  helper.make_node("Unsqueeze", ["am_b", "am_axes"], ["keep"]),
                  const("zero", 0.0), const("fill", fill),
                  helper.make_node("Where", ["keep", "zero", "fill"], ["add_mask"]),
                  helper.make_node("Add", ["scaled", "add_mask"], ["masked"])]
        sm_in = "masked"
    elif mask == "bias":
        inputs.append(("attention_bias", (b, 1, 1, s)))
        nodes.append(helper.make_node("Add", ["scaled", "attention_bias"], ["masked"]))
        sm_in = "masked"
    _softmax_and_output(nodes, w, dims, sm_in, "v_h", nan_guard=sdpa, out_perm=out_perm, out_shape=out_shape,
                        out_bias=True)
    return model(nodes, inputs, inits=w.inits, name="bert_attention")


# ---- a LLaMA-style attention block: rotary embeddings, causal mask ----------------------------------------------------
def rotary_tables(dims: Dims, kind: str):
    """cos/sin tables [1, 1, S, D] of HF's cat(freqs, freqs) ("halves"); "uneven": the second half at other
    frequencies (not RLX's Rope); "per_batch": halves equal, but [B, 1, S, D]."""
    inv = 1.0 / (10000 ** (np.arange(0, dims.d, 2) / dims.d))
    freqs = np.outer(np.arange(dims.s), inv)                              # [S, D/2]
    second = 1.5 * freqs if kind == "uneven" else freqs
    emb = np.concatenate([freqs, second], axis=-1)[None, None]            # [1, 1, S, D]
    if kind == "per_batch":
        emb = np.broadcast_to(emb, (dims.b, 1, dims.s, dims.d))
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def llama_attention(dims: Dims, *, rope="halves", rope_on=("q",), rotate="hf", mask="causal_where", fill=FMIN,
                    nan_guard=False, seed=0, weight_scale=0.2):
    """Q/K/V projections without bias, HF's rotate-half rotary embedding (tables of `rotary_tables(rope)`, no
    rotary when `rope` is None) on the heads named in `rope_on`, a mask, softmax, output projection.

    rotate: "hf" (Concat(-x2, x1)) or "reversed" (Concat(x1, -x2): not rotate_half). mask: "causal_where"
    (Where(tril, 0, fill) of constants: the importer folds it into one mask carrying the causal_bias fact),
    "shifted" (the same with a triangle one key too wide), "causal_bias" (that mask as an initializer),
    "causal_and_padding" (tril AND a padding mask from an int64 `attention_mask` [B, S]), or None."""
    b, s, h, d, hd = dims.b, dims.s, dims.h, dims.d, dims.hd
    w = Weights(seed, weight_scale)
    nodes = []

    def rotary(t: str) -> str:
        nodes.extend([
            helper.make_node("Mul", [t, "cos"], [f"{t}_c"]),
            const(f"{t}_h", [d // 2], np.int64), const(f"{t}_e", [d], np.int64), const(f"{t}_z", [0], np.int64),
            const(f"{t}_ax", [3], np.int64),
            helper.make_node("Slice", [t, f"{t}_z", f"{t}_h", f"{t}_ax"], [f"{t}_x1"]),
            helper.make_node("Slice", [t, f"{t}_h", f"{t}_e", f"{t}_ax"], [f"{t}_x2"]),
            helper.make_node("Neg", [f"{t}_x2"], [f"{t}_n"]),
            helper.make_node("Concat", [f"{t}_n", f"{t}_x1"] if rotate == "hf" else [f"{t}_x1", f"{t}_n"],
                             [f"{t}_rot"], axis=-1),
            helper.make_node("Mul", [f"{t}_rot", "sin"], [f"{t}_s"]),
            helper.make_node("Add", [f"{t}_c", f"{t}_s"], [f"{t}_r"])])
        return f"{t}_r"

    if rope:
        cos, sin = rotary_tables(dims, rope)
        w.init("cos", cos)
        w.init("sin", sin)
    heads = {}
    for p in "qkv":
        nodes += [helper.make_node("MatMul", ["x", w(f"W{p}", (hd, hd))], [f"{p}_lin"]),
                  const(f"{p}_shape", [b, s, h, d], np.int64),
                  helper.make_node("Reshape", [f"{p}_lin", f"{p}_shape"], [f"{p}_4"]),
                  helper.make_node("Transpose", [f"{p}_4"], [f"{p}_h"], perm=[0, 2, 1, 3])]
        heads[p] = rotary(f"{p}_h") if rope and p in rope_on else f"{p}_h"
    nodes += [helper.make_node("Transpose", [heads["k"]], ["kT"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", [heads["q"], "kT"], ["scores"]),
              const("c", d ** -0.5), helper.make_node("Mul", ["scores", "c"], ["scaled"])]
    inputs = [("x", (b, s, hd))]
    tril = np.tril(np.ones((1, 1, s, s), dtype=bool))
    sm_in = "masked"
    if mask in ("causal_where", "shifted"):
        w.init("tril", tril if mask == "causal_where" else np.tril(np.ones((1, 1, s, s), dtype=bool), 1))
        nodes += [const("zero", 0.0), const("fill", fill), helper.make_node("Where", ["tril", "zero", "fill"], ["am"])]
    elif mask == "causal_bias":
        w.init("am", np.where(tril, 0.0, fill).astype(np.float32))
    elif mask == "causal_and_padding":
        w.init("tril", tril)
        inputs.append(("attention_mask", (b, s), TensorProto.INT64))
        nodes += [helper.make_node("Cast", ["attention_mask"], ["am_b"], to=TensorProto.BOOL),
                  const("am_axes", [1, 2], np.int64),
                  helper.make_node("Unsqueeze", ["am_b", "am_axes"], ["pad"]),
                  helper.make_node("And", ["tril", "pad"], ["keep"]),
                  const("zero", 0.0), const("fill", fill), helper.make_node("Where", ["keep", "zero", "fill"], ["am"])]
    else:
        sm_in = "scaled"
    if sm_in == "masked":
        nodes.append(helper.make_node("Add", ["scaled", "am"], ["masked"]))
    _softmax_and_output(nodes, w, dims, sm_in, heads["v"], nan_guard=nan_guard, out_bias=False)
    return model(nodes, inputs, inits=w.inits, name="llama_attention")
