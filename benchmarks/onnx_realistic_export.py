"""Exports the realistic-size models of `bench_onnx.py run` (run with a torch environment, e.g. /work/corpus-venv):
BERT-base and a LLaMA of the same size (hidden 768, 12 layers, 12 heads), random weights, both torch exporters."""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import onnx
import torch
import transformers as tf

MODELS = {
    "bert_base": ("BertModel", "BertConfig", dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                                   num_attention_heads=12, intermediate_size=3072)),
    "llama_768": ("LlamaModel", "LlamaConfig", dict(vocab_size=32000, hidden_size=768, num_hidden_layers=12,
                                                     num_attention_heads=12, num_key_value_heads=12,
                                                     intermediate_size=2048, max_position_embeddings=512,
                                                     use_cache=False)),
}


class Wrapper(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def export(name: str, exporter: str, impl: str, out: Path, seq: int) -> None:
    model_cls, config_cls, kwargs = MODELS[name]
    config = getattr(tf, config_cls)(**kwargs)
    config._attn_implementation = impl
    torch.manual_seed(0)
    model = Wrapper(getattr(tf, model_cls)(config).eval())
    ids = torch.randint(0, 1000, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(model, (ids, mask), str(out), dynamo=False, opset_version=17,
                              input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                            "attention_mask": {0: "batch", 1: "seq"}})
        else:
            dim = torch.export.Dim.DYNAMIC
            prog = torch.onnx.export(model, (ids, mask), dynamo=True, optimize=True, external_data=False,
                                     dynamic_shapes={"input_ids": {0: dim, 1: dim}, "attention_mask": {0: dim, 1: dim}},
                                     verbose=False)
            prog.model.graph.outputs[0].name = "last_hidden_state"
            prog.save(str(out), external_data=False)
    m = onnx.load(str(out))
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(m, str(out))
    print(f"wrote {out}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("outdir")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--models", default="bert_base,llama_768")
    ap.add_argument("--exporters", default="legacy,dynamo")
    ap.add_argument("--impl", default="sdpa")
    args = ap.parse_args(argv)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            path = out / f"{name}.{args.impl}.{exporter}.onnx"
            if not path.exists():
                export(name, exporter, args.impl, path, args.seq)
    return 0


if __name__ == "__main__":
    sys.exit(main())
