"""Whole models through the whole library: a BERT encoder and a LLaMA decoder fuse layer by layer and keep their values."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_rules
from rlx_rules import examples
from rlx_rules.interpret import random_values, run


def same_outputs(before, after, seed=0):
    inputs, params = random_values(before, seed=seed, scale=0.3)
    for a, b in zip(run(before, inputs, params), run(after, inputs, params)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("layers", [1, 3])
def test_bert_encoder_every_layer_fuses_and_keeps_values(rules, layers):
    graph = rlx_rules.load_graph(examples.bert_encoder(layers=layers, batch=2, seq=4, hidden=32, heads=4, ffn=64))
    fused, report = rules.apply(graph)
    counts = fused.op_counts()
    assert counts["FusedAttentionBlock"] == layers
    assert counts["FusedResidualLN"] == 2 * layers
    assert counts["FusedMatMulBiasAct"] == 2 * layers  # the FFN: act, then none
    acts = sorted(str(n.attrs["activation"]) for n in fused.find("FusedMatMulBiasAct"))
    assert acts == ["Gelu"] * layers + ["None"] * layers
    assert set(counts) == {"Input", "Param", "FusedAttentionBlock", "FusedResidualLN", "FusedMatMulBiasAct"}
    same_outputs(graph, fused)
    summary = report.fusion_summary()
    assert f"FusedAttentionBlock x{layers}" in summary and "fuse_attention_block" in summary


def test_bert_encoder_with_transformer_layer_switched_on(rules, monkeypatch):
    graph = rlx_rules.load_graph(examples.bert_encoder(layers=3, batch=1, seq=8, hidden=32, heads=4, ffn=64))
    off = rules.apply(graph)[0]
    assert "FusedTransformerLayer" not in off.op_counts()
    monkeypatch.setenv("RLX_ENABLE_FUSE_TRANSFORMER_LAYER", "1")
    fused, report = rules.apply(graph)
    assert dict(fused.op_counts()) == {"Input": 2, "Param": 36, "FusedTransformerLayer": 3}
    layer = fused.find("FusedTransformerLayer")[0]
    assert [fused.node(i).name for i in layer.inputs] == [
        "hidden", "layer0.qkv_w", "layer0.qkv_b", "layer0.out_w", "layer0.out_b", "layer0.ln1_g", "layer0.ln1_b",
        "layer0.fc1_w", "layer0.fc1_b", "layer0.fc2_w", "layer0.fc2_b", "layer0.ln2_g", "layer0.ln2_b", "mask"]
    assert layer.attrs["intermediate_size"] == 64 and layer.attrs["activation"] == "Gelu"
    same_outputs(graph, fused)
    assert report.params["RLX_ENABLE_FUSE_TRANSFORMER_LAYER"]["source"] == "env RLX_ENABLE_FUSE_TRANSFORMER_LAYER"


def test_llama_decoder_fuses_qkv_and_swiglu_and_keeps_values(rules):
    graph = rlx_rules.load_graph(examples.llama_decoder(layers=2, batch=1, seq=6, hidden=32, heads=4, ffn=48))
    fused, report = rules.apply(graph)
    counts = fused.op_counts()
    assert report.fired("fuse_shared_input_matmul") == 2  # Q, K and V: one MatMul per layer
    assert report.fired("fuse_swiglu_dual_matmul") == 2
    assert counts["FusedSwiGLU"] == 2 and counts["Narrow"] == 6 and counts["Concat"] == 4
    assert counts["FusedResidualRmsNorm"] == 1  # the final norm; inside, each residual Add has two uses
    assert "Silu" not in counts
    same_outputs(graph, fused)


def test_fusion_is_linear_in_layers_node_for_node(rules):
    small = rules.apply(examples.bert_encoder(layers=2))[1]
    big = rules.apply(examples.bert_encoder(layers=20))[1]
    per_layer = (big.nodes_after - small.nodes_after) / 18
    assert per_layer == (small.nodes_after - 2) / 2  # every layer ends up the same
