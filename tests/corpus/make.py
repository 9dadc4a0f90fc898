"""Builds tests/corpus/: tiny random-weight transformers models exported to ONNX by both torch exporters, with their inputs, ONNX Runtime's outputs and what the two peers fuse (run with /work/corpus-venv/bin/python)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
B, S, DEC_S = 4, 12, 8  # batch, sequence, decoder sequence (encoder-decoders)
VOCAB = 64
ATOL = 1e-4
ATTENTION_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
                 "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention")

# Sizes: hidden 16 with 2 heads of 8 (MLP 32; 1 KV head where the family groups them); LLaMA, Mistral, Qwen3 and Falcon
# hidden 32 with 4 query heads of 8 (2 KV heads, or 1 for multi-query), so that grouped KV heads are really grouped.
# 2 layers everywhere.
BERTLIKE = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                max_position_embeddings=32)
LLAMALIKE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, max_position_embeddings=32, use_cache=False)
SMALL_LLAMALIKE = dict(LLAMALIKE, hidden_size=16, num_attention_heads=2, num_key_value_heads=1)

# family -> (kind, model class, config class, config kwargs, attention layers, ORT optimizer model_type)
FAMILIES = {
    # encoders
    "bert": ("encoder", "BertModel", "BertConfig", BERTLIKE, 2, "bert"),
    "roberta": ("encoder", "RobertaModel", "RobertaConfig", dict(BERTLIKE, pad_token_id=1), 2, "bert"),
    "xlm_roberta": ("encoder", "XLMRobertaModel", "XLMRobertaConfig", dict(BERTLIKE, pad_token_id=1), 2, "bert"),
    "distilbert": ("encoder", "DistilBertModel", "DistilBertConfig",
                   dict(vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=32),
                   2, "bert"),
    "albert": ("encoder", "AlbertModel", "AlbertConfig", dict(BERTLIKE, embedding_size=8), 2, "bert"),
    "electra": ("encoder", "ElectraModel", "ElectraConfig", dict(BERTLIKE, embedding_size=8), 2, "bert"),
    "deberta_v2": ("encoder", "DebertaV2Model", "DebertaV2Config",
                   dict(BERTLIKE, relative_attention=True, position_buckets=8, max_relative_positions=16,
                        pos_att_type=["p2c", "c2p"]), 2, "bert"),
    "mpnet": ("encoder", "MPNetModel", "MPNetConfig", BERTLIKE, 2, "bert"),  # 32 buckets: HF hard-codes it
    # decoders
    "gpt2": ("decoder", "GPT2LMHeadModel", "GPT2Config",
             dict(vocab_size=VOCAB, n_embd=16, n_inner=32, n_layer=2, n_head=2, n_positions=32, use_cache=False),
             2, "gpt2"),
    "gpt_neo": ("decoder", "GPTNeoForCausalLM", "GPTNeoConfig",  # layer 0 global, layer 1 local (window 4); no scaling
                dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=2,
                     attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=32,
                     use_cache=False), 2, "gpt2"),
    "gptj": ("decoder", "GPTJForCausalLM", "GPTJConfig",  # interleaved rotary on 4 of 8, parallel attention + MLP
             dict(vocab_size=VOCAB, n_embd=16, n_inner=32, n_layer=2, n_head=2, rotary_dim=4, n_positions=32,
                  use_cache=False), 2, "gpt2"),
    "gpt_neox": ("decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig",  # fused QKV, rotary on half of the head
                 dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                      rotary_pct=0.5, max_position_embeddings=32, use_cache=False), 2, "gpt_neox"),
    "opt": ("decoder", "OPTForCausalLM", "OPTConfig",  # query scaled right after its projection
            dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, ffn_dim=32, num_attention_heads=2,
                 max_position_embeddings=32, word_embed_proj_dim=16, use_cache=False), 2, "gpt2"),
    "llama": ("decoder", "LlamaForCausalLM", "LlamaConfig", LLAMALIKE, 2, "gpt2"),
    "mistral": ("decoder", "MistralForCausalLM", "MistralConfig", dict(LLAMALIKE, sliding_window=4), 2, "gpt2"),
    "qwen2": ("decoder", "Qwen2ForCausalLM", "Qwen2Config", SMALL_LLAMALIKE, 2, "gpt2"),  # QKV biases
    "qwen3": ("decoder", "Qwen3ForCausalLM", "Qwen3Config", LLAMALIKE, 2, "qwen3"),  # RMSNorm on q and k
    "phi": ("decoder", "PhiForCausalLM", "PhiConfig",  # partial rotary, parallel attention + MLP
            dict(SMALL_LLAMALIKE, num_key_value_heads=2, partial_rotary_factor=0.5), 2, "phi"),
    "phi3": ("decoder", "Phi3ForCausalLM", "Phi3Config", dict(SMALL_LLAMALIKE, pad_token_id=0), 2, "gpt2"),  # fused QKV
    "falcon": ("decoder", "FalconForCausalLM", "FalconConfig",  # multi-query, fused QKV, parallel attention + MLP
               dict(vocab_size=VOCAB, hidden_size=32, ffn_hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    multi_query=True, new_decoder_architecture=False, parallel_attn=True, alibi=False, bias=False,
                    max_position_embeddings=32, use_cache=False), 2, "gpt2"),
    "gemma": ("decoder", "GemmaForCausalLM", "GemmaConfig", SMALL_LLAMALIKE, 2, "gpt2"),
    "bloom": ("decoder", "BloomForCausalLM", "BloomConfig",  # ALiBi bias, fused QKV
              dict(vocab_size=VOCAB, hidden_size=16, n_layer=2, n_head=2, use_cache=False), 2, "gpt2"),
    "gpt_bigcode": ("decoder", "GPTBigCodeForCausalLM", "GPTBigCodeConfig",  # multi-query, fused QKV
                    dict(vocab_size=VOCAB, n_embd=16, n_inner=32, n_layer=2, n_head=2, n_positions=32, multi_query=True,
                         use_cache=False), 2, "gpt2"),
    # encoder-decoders: attention layers = encoder self + decoder self + decoder cross
    "t5": ("encdec", "T5Model", "T5Config",  # relative position bias, no scaling, RMSNorm
           dict(vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
                relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
                use_cache=False), 6, "t5"),
    "bart": ("encdec", "BartModel", "BartConfig",
             dict(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
                  use_cache=False), 6, "bart"),
    # vision
    "vit": ("vision", "ViTModel", "ViTConfig",
            dict(image_size=16, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2,
                 num_attention_heads=2, intermediate_size=32), 2, "vit"),
}
IMPLEMENTATIONS = ("eager", "sdpa")
EXPORTERS = ("legacy", "dynamo")


# ---- inputs ------------------------------------------------------------------------------------------------------
def text_mask() -> torch.Tensor:
    """Row 0 full, row 1 right-padded (last 4), row 2 left-padded (first 3), row 3 fully masked."""
    mask = torch.ones(B, S, dtype=torch.int64)
    mask[1, -4:] = 0
    mask[2, :3] = 0
    mask[3, :] = 0
    return mask


def make_inputs(kind: str, config) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if kind == "vision":
        return {"pixel_values": torch.randn(B, 3, 16, 16, generator=g)}
    pad = config.pad_token_id if getattr(config, "pad_token_id", None) is not None else 0
    ids = torch.randint(3, VOCAB, (B, S), generator=g)
    mask = text_mask()
    ids[mask == 0] = pad
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "encdec":
        inputs["decoder_input_ids"] = torch.randint(3, VOCAB, (B, DEC_S), generator=g)
    return inputs


DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "decoder_input_ids": {0: "batch", 1: "dec_seq"}, "pixel_values": {0: "batch"}}


# ---- models ------------------------------------------------------------------------------------------------------
class Wrapper(torch.nn.Module):
    """One named output (last_hidden_state or logits), named inputs, no KV cache."""

    def __init__(self, model, kind: str, output: str):
        super().__init__()
        self.model, self.kind, self.output = model, kind, output

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, pixel_values=None):
        kwargs = {"pixel_values": pixel_values} if self.kind == "vision" else \
            {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.kind == "encdec":
            kwargs["decoder_input_ids"] = decoder_input_ids
        if self.kind in ("decoder", "encdec"):
            kwargs["use_cache"] = False
        return getattr(self.model(**kwargs, return_dict=True), self.output)


def reinit(model: torch.nn.Module) -> None:
    """Norm-like 1-D weights 1 + 0.1·N(0,1), everything else 0.05·N(0,1): no two tensors identical, no zero bias."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))


def build(family: str, impl: str):
    kind, model_cls, config_cls, kwargs, *_ = FAMILIES[family]
    config = getattr(tf, config_cls)(**kwargs)
    config._attn_implementation = impl
    torch.manual_seed(0)
    model = getattr(tf, model_cls)(config)
    got = model.config._attn_implementation
    if got != impl:
        raise ValueError(f"asked for attn_implementation={impl!r}, the model uses {got!r}")
    reinit(model)
    model.eval()
    output = "logits" if kind == "decoder" else "last_hidden_state"
    return Wrapper(model, kind, output), config, output


def supports(family: str, impl: str) -> str | None:
    """None when the family builds with this attention implementation, else the reason."""
    try:
        build(family, impl)
        return None
    except Exception as e:  # noqa: BLE001 - transformers raises ValueError/ImportError/NotImplementedError
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


# ---- export ------------------------------------------------------------------------------------------------------
def export(wrapper, inputs, output: str, exporter: str, path: Path) -> int:
    names = list(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(wrapper, (), str(path), kwargs=dict(inputs), dynamo=False, opset_version=17, input_names=names,
                              output_names=[output], dynamic_axes={n: DYNAMIC_AXES[n] for n in names})
        else:
            dim = torch.export.Dim.DYNAMIC
            shapes = {n: {axis: dim for axis in DYNAMIC_AXES[n]} for n in names}
            prog = torch.onnx.export(wrapper, (), kwargs=dict(inputs), dynamo=True, optimize=True,
                                     dynamic_shapes=shapes, external_data=False, verbose=False)
            prog.model.graph.outputs[0].name = output
            prog.save(str(path), external_data=False)
    model = onnx.load(str(path))
    for node in model.graph.node:  # the dynamo exporter's stack traces and scopes: half the file, no semantics
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(model, str(path))
    onnx.checker.check_model(model)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def describe(e: Exception) -> str:
    """The exception's type and its telling line (for torch.onnx's ConversionError, the underlying exception's)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if "## Exception summary" in lines:
        lines = lines[lines.index("## Exception summary") + 1:]
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def ort_run(path_or_bytes, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path_or_bytes, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})


def compare(got: np.ndarray, ref: np.ndarray) -> dict:
    """Per batch row: the largest difference (None where either side has NaN), and whether all rows match."""
    rows = []
    for a, b in zip(got, ref):
        if np.isnan(a).any() or np.isnan(b).any():
            rows.append(None)
        else:
            rows.append(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    return {"max_abs_diff_per_row": rows, "match": all(r is not None and r <= ATOL for r in rows)}


def dims_dynamic(model: onnx.ModelProto) -> bool:
    return any(d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim)


# ---- peers -------------------------------------------------------------------------------------------------------
def count_attention(model: onnx.ModelProto) -> int:
    return sum(n.op_type in ATTENTION_OPS for n in model.graph.node)


def peer_onnxscript(path: Path, feed, expected) -> dict:
    from onnxscript import ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort
    try:
        fused, counts = optimize_for_ort(ir.load(str(path)))
        proto = ir.serde.serialize_model(fused)
    except Exception as e:  # noqa: BLE001 - record the peer's failure, do not stop the corpus
        return {"error": describe(e)}
    out = {"attention_fused": count_attention(proto),
           "fusions": {k: v for k, v in counts.items() if v},
           "ops": sorted({n.op_type for n in proto.graph.node if n.op_type in ATTENTION_OPS})}
    out.update(run_fused(proto.SerializeToString(), feed, expected))
    return out


def peer_ort(path: Path, model_type: str, heads: int, hidden: int, feed, expected) -> dict:
    from onnxruntime.transformers.optimizer import optimize_model
    import logging
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt = optimize_model(str(path), model_type=model_type, num_heads=heads, hidden_size=hidden,
                                 opt_level=0)
        proto = opt.model
    except Exception as e:  # noqa: BLE001
        return {"model_type": model_type, "error": describe(e)}
    out = {"model_type": model_type, "attention_fused": count_attention(proto),
           "ops": sorted({n.op_type for n in proto.graph.node if n.op_type in ATTENTION_OPS})}
    out.update(run_fused(proto.SerializeToString(), feed, expected))
    return out


def run_fused(data: bytes, feed, expected) -> dict:
    try:
        (got,) = ort_run(data, feed)
    except Exception as e:  # noqa: BLE001
        return {"runs": False, "run_error": describe(e)}
    diff = compare(got, expected)
    return {"runs": True, "matches": diff["match"], "max_abs_diff_per_row": diff["max_abs_diff_per_row"]}


# ---- one file ----------------------------------------------------------------------------------------------------
def make_one(family: str, impl: str, exporter: str) -> dict:
    kind, model_cls, _, _, layers, model_type = FAMILIES[family]
    name = f"{family}.{impl}.{exporter}"
    entry = {"file": f"{name}.onnx", "family": family, "kind": kind, "model_class": model_cls,
             "attn_implementation": impl, "exporter": exporter, "attention_layers": layers}
    wrapper, config, output = build(family, impl)
    heads, hidden = config.num_attention_heads, config.hidden_size
    entry.update(heads=heads, hidden=hidden, head_dim=getattr(config, "head_dim", None) or hidden // heads)
    inputs = make_inputs(kind, config)
    feed = {k: v.numpy() for k, v in inputs.items()}
    with torch.no_grad():
        ref = wrapper(**inputs).numpy()
    path = HERE / f"{name}.onnx"
    t0 = time.time()
    try:
        entry["opset"] = export(wrapper, inputs, output, exporter, path)
    except Exception as e:  # noqa: BLE001 - a failed export is a corpus fact, not a crash
        path.unlink(missing_ok=True)
        entry.update(exported=False, error=describe(e))
        return entry
    model = onnx.load(str(path))
    entry.update(exported=True, export_seconds=round(time.time() - t0, 1), bytes=path.stat().st_size,
                 nodes=len(model.graph.node), dynamic=dims_dynamic(model),
                 inputs=[i.name for i in model.graph.input], outputs=[o.name for o in model.graph.output])
    np.savez(HERE / f"{name}.inputs.npz", **{k: feed[k] for k in entry["inputs"]})
    (got,) = ort_run(str(path), feed)
    np.savez(HERE / f"{name}.expected.npz", **{output: got})
    entry["torch_nan_rows"] = [i for i in range(B) if np.isnan(ref[i]).any()]
    entry["ort_nan_rows"] = [i for i in range(B) if np.isnan(got[i]).any()]
    entry["ort_vs_torch"] = compare(got, ref)
    entry["onnxscript"] = peer_onnxscript(path, feed, got)
    entry["ort_optimizer"] = peer_ort(path, model_type, heads, hidden, feed, got)
    return entry


def write_manifest(entries: list[dict]) -> None:
    fd, tmp = tempfile.mkstemp(dir=HERE, suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"torch": torch.__version__, "transformers": tf.__version__, "onnxruntime": ort.__version__,
                   "onnx": onnx.__version__, "onnxscript": __import__("onnxscript").__version__,
                   "batch": B, "seq": S, "mask_rows": ["full", "right padding 4", "left padding 3", "fully masked"],
                   "files": entries}, f, indent=1)
        f.write("\n")
    os.replace(tmp, MANIFEST)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("families", nargs="*", help="only these families (default: all)")
    ap.add_argument("--exporter", choices=EXPORTERS, action="append", help="only this exporter")
    ap.add_argument("--force", action="store_true", help="rebuild entries already in the manifest")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    old = json.loads(MANIFEST.read_text())["files"] if MANIFEST.exists() else []
    entries = {(e["family"], e["attn_implementation"], e["exporter"]): e for e in old}
    for family in args.families or FAMILIES:
        for impl in IMPLEMENTATIONS:
            reason = supports(family, impl)
            for exporter in args.exporter or EXPORTERS:
                key = (family, impl, exporter)
                if key in entries and not args.force:
                    continue
                if reason is not None:
                    entries[key] = {"file": None, "family": family, "kind": FAMILIES[family][0],
                                    "model_class": FAMILIES[family][1], "attn_implementation": impl,
                                    "exporter": exporter, "exported": False, "error": f"not supported: {reason}"}
                else:
                    t0 = time.time()
                    try:
                        entries[key] = make_one(family, impl, exporter)
                    except Exception:  # noqa: BLE001 - keep going; the traceback goes to stderr
                        traceback.print_exc()
                        entries[key] = {"file": None, "family": family, "attn_implementation": impl,
                                        "exporter": exporter, "exported": False,
                                        "error": "make.py: " + traceback.format_exc().strip().splitlines()[-1][:300]}
                    e = entries[key]
                    print(f"{family}.{impl}.{exporter}: exported={e['exported']} "
                          f"ort_vs_torch={e.get('ort_vs_torch', {}).get('match')} "
                          f"onnxscript={e.get('onnxscript', {}).get('attention_fused')} "
                          f"ort_opt={e.get('ort_optimizer', {}).get('attention_fused')} "
                          f"{e.get('error', '')[:120]} ({time.time() - t0:.0f}s)", flush=True)
                write_manifest(sorted(entries.values(), key=lambda e: (list(FAMILIES).index(e["family"]),
                                                                        e["attn_implementation"], e["exporter"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
