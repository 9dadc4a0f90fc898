"""Generated example graphs in RLX's op vocabulary (primitive ops, before any fusion), for docs, tests and benchmarks."""

from __future__ import annotations

from .graph_builder import GraphBuilder


def bert_encoder(layers: int = 2, batch: int = 1, seq: int = 8, hidden: int = 768, heads: int = 12,
                 ffn: int | None = None, mask_kind: str = "Custom") -> dict:
    """A BERT-style encoder (embeddings excluded) as graph.json, built from MatMul, Add, Narrow, Attention,
    LayerNorm and Gelu: per layer a fused QKV projection, attention, output projection, residual + LayerNorm,
    and a Gelu FFN with residual + LayerNorm. `batch` or `seq` may be a string for a symbolic dim."""
    ffn = ffn or 4 * hidden
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    b = GraphBuilder(f"bert_encoder_{layers}l", default_dtype="f32")
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


def llama_decoder(layers: int = 2, batch: int = 1, seq: int = 8, hidden: int = 64, heads: int = 4,
                  ffn: int | None = None) -> dict:
    """A LLaMA-style decoder (embeddings excluded) as graph.json from primitive ops: per layer a pre-norm
    RmsNorm, three Q/K/V MatMuls sharing the normed input, NeoX Rope on Q and K, causal Attention, an
    output MatMul and residual Add, then RmsNorm and a SwiGLU FFN (Silu(x W_gate) * (x W_up)) W_down with a
    residual Add; after the last layer a final RmsNorm flattened to [batch * seq, hidden] for the LM head."""
    ffn = ffn or 3 * hidden
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"hidden {hidden} / heads {heads} must give an even head_dim")
    head_dim = hidden // heads
    b = GraphBuilder(f"llama_decoder_{layers}l", default_dtype="f32")
    act = [batch, seq]
    x = b.add("Input", shape=act + [hidden], name="hidden")
    cos = b.add("Input", shape=[seq, head_dim // 2], name="rope_cos")
    sin = b.add("Input", shape=[seq, head_dim // 2], name="rope_sin")
    for i in range(layers):
        p = f"layer{i}."
        g1 = b.add("Param", shape=[hidden], name=p + "attn_norm_g")
        z1 = b.add("Param", shape=[hidden], name=p + "attn_norm_b")
        h = b.add("RmsNorm", [x, g1, z1], {"axis": -1, "eps": 1e-6}, act + [hidden], name=p + "attn_norm")
        q, k, v = (b.add("MatMul", [h, b.add("Param", shape=[hidden, hidden], name=p + f"w{n}")],
                         shape=act + [hidden], name=p + n) for n in "qkv")
        rq, rk = (b.add("Rope", [t, cos, sin], {"head_dim": head_dim, "n_rot": head_dim, "style": "NeoX"},
                        act + [hidden], name=p + f"rope_{n}") for t, n in ((q, "q"), (k, "k")))
        attn = b.add("Attention", [rq, rk, v], {"num_heads": heads, "head_dim": head_dim, "mask_kind": "Causal",
                                                "score_scale": None, "attn_logit_softcap": None},
                     act + [hidden], name=p + "attn")
        o = b.add("MatMul", [attn, b.add("Param", shape=[hidden, hidden], name=p + "wo")], shape=act + [hidden])
        x = b.add("Add", [x, o], shape=act + [hidden], name=p + "attn_residual")
        g2 = b.add("Param", shape=[hidden], name=p + "ffn_norm_g")
        z2 = b.add("Param", shape=[hidden], name=p + "ffn_norm_b")
        h2 = b.add("RmsNorm", [x, g2, z2], {"axis": -1, "eps": 1e-6}, act + [hidden], name=p + "ffn_norm")
        gate = b.add("MatMul", [h2, b.add("Param", shape=[hidden, ffn], name=p + "w_gate")], shape=act + [ffn])
        up = b.add("MatMul", [h2, b.add("Param", shape=[hidden, ffn], name=p + "w_up")], shape=act + [ffn])
        mul = b.add("Mul", [b.add("Silu", [gate], shape=act + [ffn]), up], shape=act + [ffn], name=p + "swiglu")
        down = b.add("MatMul", [mul, b.add("Param", shape=[ffn, hidden], name=p + "w_down")], shape=act + [hidden])
        x = b.add("Add", [x, down], shape=act + [hidden], name=p + "ffn_residual")
    g = b.add("Param", shape=[hidden], name="final_norm_g")
    z = b.add("Param", shape=[hidden], name="final_norm_b")
    n = b.add("RmsNorm", [x, g, z], {"axis": -1, "eps": 1e-6}, act + [hidden], name="final_norm")
    flat = [batch * seq, hidden] if isinstance(batch, int) and isinstance(seq, int) else [-1, hidden]
    out = b.add("Reshape", [n], {"new_shape": flat}, flat, name="flat")
    return b.graph([out])
