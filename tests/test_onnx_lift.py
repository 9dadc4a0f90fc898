"""ONNX lifting rules (rules/onnx/default.rlxr): corpus models fuse and still match ONNX Runtime; synthetic near misses stay unfused."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rlx_rules  # noqa: E402
from rlx_rules.interpret import load_weights  # noqa: E402
from rlx_rules.onnx.importer import import_onnx  # noqa: E402

from onnx_models import Dims, bert_attention, const  # noqa: E402 - tests/: the shared ONNX model builders

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RULES = ROOT / "python" / "rlx_rules" / "rules" / "onnx" / "default.rlxr"


@pytest.fixture(scope="module")
def rules():
    return rlx_rules.load_rules(RULES)


def ort_run(model_or_path, feed):
    data = model_or_path if isinstance(model_or_path, (str, Path)) else model_or_path.SerializeToString()
    sess = ort.InferenceSession(str(data) if isinstance(data, Path) else data, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()}), [i.name for i in sess.get_inputs()]


def lift(rules, model, tmp_path, name="m"):
    path = tmp_path / f"{name}.graph.json"
    graph = import_onnx(model, str(path))
    out, report = rules.apply(graph)
    return graph, out, report, load_weights(rlx_rules.load_graph(str(path)))


def ops(graph):
    return collections.Counter(n.op for n in graph.nodes)


# ---- the corpus -----------------------------------------------------------------------------------------------
# file -> (attention blocks as FusedAttentionBlock, as plain Attention, other fused ops that must appear)
EXPECTED = {
    "bert": (2, 0, {"FusedMatMulBiasAct": 5, "FusedResidualLN": 5}),
    "bert.dynamo": (2, 0, {"FusedMatMulBiasAct": 5, "FusedResidualLN": 5}),
    "gpt2": (2, 0, {"FusedMatMulBiasAct": 4, "GeluApprox": 2}),
    "gpt2.dynamo": (2, 0, {"FusedMatMulBiasAct": 4, "GeluApprox": 2}),
    "llama": (0, 2, {"RmsNorm": 4, "FusedResidualRmsNorm": 1, "FusedSwiGLU": 2, "Rope": 4}),  # no-op Casts dropped
    "llama.dynamo": (0, 2, {"RmsNorm": 4, "FusedResidualRmsNorm": 1, "FusedSwiGLU": 2, "Rope": 4}),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_corpus_lifts_and_matches_onnxruntime(rules, tmp_path, name):
    path = CORPUS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    feed = dict(np.load(CORPUS / f"{name.split('.')[0]}.inputs.npz"))
    ref, names = ort_run(path, feed)
    graph, out, report, weights = lift(rules, str(path), tmp_path, name)
    counts = ops(out)
    blocks, attn, others = EXPECTED[name]
    assert counts["FusedAttentionBlock"] == blocks, counts
    assert counts["Attention"] == attn, counts
    for op, n in others.items():
        assert counts[op] == n, (op, counts)
    # nothing of the decomposed attention is left
    assert counts["Softmax"] == 0 and counts["Erf"] == 0 and counts["Gemm"] == 0, counts
    assert counts["Neg"] == 0, counts  # no rotate-half chain either
    got = rlx_rules.run(out, {k: feed[k] for k in names}, weights)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(np.asarray(a), b, atol=1e-4, rtol=1e-4)


# ---- synthetic attention blocks --------------------------------------------------------------------------------
B, S, H, D = 1, 8, 2, 16
HD = H * D


DIMS = Dims(B, S, H, D)


def attention_model(**options):
    """A BERT-style attention block (tests/onnx_models.py) at this file's sizes; Q/K/V projections with bias,
    per-head Reshape/Transpose, scores, mask, softmax, output projection."""
    return bert_attention(DIMS, **options)


def feed_for(model, pad=2, seed=1):
    rng = np.random.default_rng(seed)
    feed = {"x": rng.standard_normal((B, S, HD)).astype(np.float32)}
    if any(i.name == "attention_mask" for i in model.graph.input):
        m = np.ones((B, S), dtype=np.int64)
        m[:, S - pad:] = 0
        feed["attention_mask"] = m
    return feed


def check(rules, tmp_path, model, *, blocks, attention, feed=None):
    feed = feed or feed_for(model)
    ref, names = ort_run(model, feed)
    _, out, report, weights = lift(rules, model, tmp_path)
    counts = ops(out)
    assert counts["FusedAttentionBlock"] == blocks, counts
    assert counts["Attention"] == attention, counts
    (got,) = rlx_rules.run(out, {k: feed[k] for k in names}, weights)
    np.testing.assert_allclose(got, ref[0], atol=1e-4, rtol=1e-4)
    return out, report


def test_synthetic_block_fuses(rules, tmp_path):
    out, _ = check(rules, tmp_path, attention_model(), blocks=1, attention=0)
    block = next(n for n in out.nodes if n.op == "FusedAttentionBlock")
    assert (block.attrs["num_heads"], block.attrs["head_dim"]) == (H, D)


def test_div_scale_and_no_mask(rules, tmp_path):
    check(rules, tmp_path, attention_model(div=True), blocks=1, attention=0)
    out, _ = check(rules, tmp_path, attention_model(mask=None), blocks=0, attention=1)
    assert next(n for n in out.nodes if n.op == "Attention").attrs["mask_kind"] == "None"


def test_fully_masked_row_keeps_values(rules, tmp_path):
    model = attention_model()
    feed = feed_for(model, pad=S)  # every key masked: the model and RLX both give a uniform row
    check(rules, tmp_path, model, blocks=1, attention=0, feed=feed)


def test_sdpa_split_scale_with_finite_fill_fuses(rules, tmp_path):
    check(rules, tmp_path, attention_model(sdpa=True), blocks=1, attention=0)


def test_sdpa_minus_inf_fill_lifts_with_zero_masked_rows(rules, tmp_path):
    model = attention_model(sdpa=True, fill=-np.inf)
    feed = feed_for(model, pad=S)  # whole rows masked: the IsNaN guard makes them 0, as masked_rows zero does
    out, _ = check(rules, tmp_path, model, blocks=0, attention=1, feed=feed)
    (attn,) = [n for n in out.nodes if n.op == "Attention"]
    assert attn.attrs["mask_kind"] == "Custom" and attn.attrs["masked_rows"] == "zero"


def test_minus_inf_fill_without_the_nan_guard_is_a_bias(rules, tmp_path):
    # no IsNaN guard: a fully masked row is NaN in the model; only the additive Bias mask keeps that (as NaN)
    out, _ = check(rules, tmp_path, attention_model(fill=-np.inf), blocks=0, attention=1)
    (attn,) = [n for n in out.nodes if n.op == "Attention"]
    assert attn.attrs["mask_kind"] == "Bias" and attn.attrs.get("masked_rows") is None


def test_other_scales_lift_with_their_score_scale(rules, tmp_path):
    out, _ = check(rules, tmp_path, attention_model(scale=0.2), blocks=0, attention=1)
    (attn,) = [n for n in out.nodes if n.op == "Attention"]
    assert attn.attrs["score_scale"] == pytest.approx(0.2)


@pytest.mark.parametrize("scale_at", ["q", "none"])
def test_query_scaled_after_projection_and_unscaled_scores_lift(rules, tmp_path, scale_at):
    # OPT scales q before the head split; T5 and GPT-Neo do not scale the scores at all
    out, _ = check(rules, tmp_path, attention_model(scale_at=scale_at), blocks=int(scale_at == "q"),
                   attention=int(scale_at == "none"))
    if scale_at == "none":
        (attn,) = [n for n in out.nodes if n.op == "Attention"]
        assert attn.attrs["score_scale"] == 1.0


def test_wrong_output_permutation_not_lifted(rules, tmp_path):
    # heads merged as [B, S, D, H] instead of [B, S, H, D]: a different tensor, so no Attention
    check(rules, tmp_path, attention_model(out_perm=(0, 2, 3, 1)), blocks=0, attention=0)


def test_heads_not_merged_back_not_lifted(rules, tmp_path):
    # the output reshape is not [B, S, H*D] (here [B, S*H, D]): Attention's output layout would differ
    check(rules, tmp_path, attention_model(out_shape=(B, S * H, D)), blocks=0, attention=0)


def test_gqa_repeat_becomes_attention_with_fewer_kv_heads(rules, tmp_path):
    out, report = check(rules, tmp_path, attention_model(gqa=True), blocks=0, attention=1)
    assert report.fired("attention_input_gqa4") == 1
    assert ops(out)["Expand"] == 0 and ops(out)["Unsqueeze"] == 1  # the repeats are gone (the mask's Unsqueeze stays)
    attn = next(n for n in out.nodes if n.op == "Attention")
    assert [out.node(i).shape[-1] for i in attn.inputs[:3]] == [HD, D, D]  # q: 2 heads; k, v: 1 head each


def test_a_repeat_that_is_not_repeat_kv_stays_explicit(rules, tmp_path):
    """Unsqueeze at axis 3 and Expand there repeats each position, not each head: not GQA, so the Expand stays."""
    model = attention_model(gqa=True)
    for node in model.graph.node:
        if node.output[0] in ("k_ax", "v_ax"):
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([3], dtype=np.int64), node.output[0]))
        if node.output[0] in ("k_exp", "v_exp"):
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([B, 1, S, H, D], dtype=np.int64),
                                                                 node.output[0]))
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model)
    out, report = check(rules, tmp_path, model, blocks=0, attention=1)
    assert report.fired("attention_input_gqa4") == 0 and ops(out)["Expand"] == 2


def test_rms_norm_and_gelu_near_misses(rules, tmp_path):
    """erf GELU with a wrong constant and RMSNorm over a non-last axis stay as they are."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])
    nodes = [const("s2", 1.5), helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             const("one", 1.0), helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             const("half", 0.5), helper.make_node("Mul", ["m", "half"], ["g"]),
             const("two", 2.0), helper.make_node("Pow", ["g", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["ms"], axes=[1], keepdims=1),
             const("eps", 1e-6), helper.make_node("Add", ["ms", "eps"], ["ae"]), helper.make_node("Sqrt", ["ae"], ["sq"]),
             helper.make_node("Reciprocal", ["sq"], ["inv"]), helper.make_node("Mul", ["g", "inv"], ["n"]),
             helper.make_node("Mul", ["n", "gamma"], ["y"])]
    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gamma")
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                                [gamma]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    _, out, _, weights = lift(rules, model, tmp_path)
    counts = ops(out)
    assert counts["Gelu"] == 0 and counts["RmsNorm"] == 0, counts
    feed = {"x": np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)}
    ref, _ = ort_run(model, feed)
    (got,) = rlx_rules.run(out, feed, weights)
    np.testing.assert_allclose(got, ref[0], atol=1e-5, rtol=1e-5)
