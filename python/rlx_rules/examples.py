"""Generated example graphs in RLX's op vocabulary (primitive ops, before any fusion), for docs, tests and benchmarks."""

from __future__ import annotations


class _Builder:
    def __init__(self, name: str):
        self.nodes: list[dict] = []
        self.name = name

    def add(self, op: str, inputs=(), attrs=None, shape=None, name=None, dtype="f32") -> int:
        node = {"id": len(self.nodes), "op": op}
        if name is not None:
            node["name"] = name
        if inputs:
            node["inputs"] = list(inputs)
        if attrs:
            node["attrs"] = attrs
        node["shape"] = list(shape)
        node["dtype"] = dtype
        self.nodes.append(node)
        return node["id"]

    def graph(self, outputs) -> dict:
        return {"format": "rlx-graph", "version": 1, "name": self.name, "nodes": self.nodes, "outputs": list(outputs)}


def bert_encoder(layers: int = 2, batch: int = 1, seq: int = 8, hidden: int = 768, heads: int = 12,
                 ffn: int | None = None, mask_kind: str = "Custom") -> dict:
    """A BERT-style encoder (embeddings excluded) as graph.json, built from MatMul, Add, Narrow, Attention,
    LayerNorm and Gelu: per layer a fused QKV projection, attention, output projection, residual + LayerNorm,
    and a Gelu FFN with residual + LayerNorm. `batch` or `seq` may be a string for a symbolic dim."""
    ffn = ffn or 4 * hidden
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    b = _Builder(f"bert_encoder_{layers}l")
    x = b.add("Input", shape=[batch, seq, hidden], name="hidden")
    mask = b.add("Input", shape=[batch, seq], name="mask")
    act = [batch, seq]
    for i in range(layers):
        p = f"layer{i}."
        qkv_w = b.add("Param", shape=[hidden, 3 * hidden], name=p + "qkv_w")
        qkv_b = b.add("Param", shape=[3 * hidden], name=p + "qkv_b")
        mm = b.add("MatMul", [x, qkv_w], shape=act + [3 * hidden])
        qkv = b.add("Add", [mm, qkv_b], shape=act + [3 * hidden], name=p + "qkv")
        q, k, v = (b.add("Narrow", [qkv], {"axis": 2, "start": j * hidden, "len": hidden}, act + [hidden],
                         name=p + "qkv"[j]) for j in range(3))
        attn_inputs = [q, k, v, mask] if mask_kind == "Custom" else [q, k, v]
        attn = b.add("Attention", attn_inputs, {"num_heads": heads, "head_dim": hidden // heads,
                                                 "mask_kind": mask_kind, "score_scale": None,
                                                 "attn_logit_softcap": None}, act + [hidden], name=p + "attn")
        out_w = b.add("Param", shape=[hidden, hidden], name=p + "out_w")
        out_b = b.add("Param", shape=[hidden], name=p + "out_b")
        out = b.add("Add", [b.add("MatMul", [attn, out_w], shape=act + [hidden]), out_b], shape=act + [hidden],
                    name=p + "attn_out")
        ln1_g = b.add("Param", shape=[hidden], name=p + "ln1_g")
        ln1_b = b.add("Param", shape=[hidden], name=p + "ln1_b")
        res1 = b.add("Add", [out, x], shape=act + [hidden])
        h1 = b.add("LayerNorm", [res1, ln1_g, ln1_b], {"axis": -1, "eps": 1e-12}, act + [hidden], name=p + "ln1")
        fc1_w = b.add("Param", shape=[hidden, ffn], name=p + "fc1_w")
        fc1_b = b.add("Param", shape=[ffn], name=p + "fc1_b")
        up = b.add("Add", [b.add("MatMul", [h1, fc1_w], shape=act + [ffn]), fc1_b], shape=act + [ffn])
        gelu = b.add("Gelu", [up], shape=act + [ffn])
        fc2_w = b.add("Param", shape=[ffn, hidden], name=p + "fc2_w")
        fc2_b = b.add("Param", shape=[hidden], name=p + "fc2_b")
        down = b.add("Add", [b.add("MatMul", [gelu, fc2_w], shape=act + [hidden]), fc2_b], shape=act + [hidden])
        ln2_g = b.add("Param", shape=[hidden], name=p + "ln2_g")
        ln2_b = b.add("Param", shape=[hidden], name=p + "ln2_b")
        res2 = b.add("Add", [down, h1], shape=act + [hidden])
        x = b.add("LayerNorm", [res2, ln2_g, ln2_b], {"axis": -1, "eps": 1e-12}, act + [hidden], name=p + "ln2")
    return b.graph([x])
