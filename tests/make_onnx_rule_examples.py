"""Write the example graphs that the ONNX lifting rules carry (rules/onnx/examples/*.graph.json).

    python tests/make_onnx_rule_examples.py          # rewrite the examples
    python tests/make_onnx_rule_examples.py --check  # only check that the files on disk are up to date

Each example is a small ONNX model built with onnx.helper (one GELU, one RMSNorm, one Gemm, one attention
block, ...), imported with rlx_rules.onnx.importer.convert (value facts annotated, weights dropped: verify draws
random values that keep the facts) and then brought to the state in which its rules' phase sees it: the lifting
phases before that phase are applied. `rlx-rules verify rules/onnx/default.rlxr` applies each rule alone on
the examples it names (`expect fires N on "examples/NAME.graph.json"`), compares the values before and after,
and derives near misses from the examples on which the rule fires once. This script checks, for every example,
that each rule meant for it fires as often as the rule files declare.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import rlx_rules
from rlx_rules.api import RuleSet
from rlx_rules.safe_write import atomic_write
from rlx_rules.onnx.importer import convert
from rlx_rules.tools.verify import single_rule_program

import onnx_models  # tests/: the ONNX model builders shared with the ONNX tests
from onnx_models import Weights, const, model

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "python" / "rlx_rules" / "rules" / "onnx" / "default.rlxr"
OUT = RULES.parent / "examples"

# batch, sequence, heads, head dim. S = 6 keeps the [1, 1, S, S] causal masks above the importer's inlining limit
# (16 elements): they stay Params carrying their fact, and verify draws values that keep it. D = 16 makes the score
# scale D^-0.5 = 0.25 exact in float32: the attention rules accept a scale constant within a few float32 ulps of
# D^-0.5 and rewrite to RLX's exact default, a difference (~1e-7 here with D = 8) that verify's float64 tolerance
# would report on every example.
B, S, H, D = 1, 6, 2, 16
HD = H * D
DIMS = onnx_models.Dims(B, S, H, D)


# ---- canonical forms: Gemm, no-op Casts --------------------------------------------------------------------------
def gemm_model(*, flattened: bool, trans_b: bool):
    """Gemm(x, w, b), 2-D; or flattened GPT-2 style: Reshape([B, S, K] -> [B·S, K]), Gemm, Reshape back."""
    k, n = HD, 24
    w = Weights()
    wname = w("w", (n, k) if trans_b else (k, n))
    bname = w("b", (n,))
    attrs = {"transB": 1} if trans_b else {}
    if not flattened:
        return model([helper.make_node("Gemm", ["x", wname, bname], ["y"], **attrs)], [("x", (B * S, k))],
                     inits=w.inits)
    nodes = [const("flat_shape", [B * S, k], np.int64), helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
             helper.make_node("Gemm", ["flat", wname, bname], ["g"], **attrs),
             const("out_shape", [B, S, n], np.int64), helper.make_node("Reshape", ["g", "out_shape"], ["y"])]
    return model(nodes, [("x", (B, S, k))], inits=w.inits)


def cast_model(kind: str):
    """A Cast to float of a value that already is float (a no-op) in front of MatMul (either operand) or Mul.

    That value is itself a half-precision input cast to float: the reference interpreter holds f32 tensors in
    float64 and rounds at a Cast to f32, so only a value that went through such a Cast is float32-exact there and
    the no-op Cast is an identity on it, as it is on real f32 tensors."""
    x, other = ("x", "w") if kind == "matmul_a" else ("w", "x")
    nodes = [helper.make_node("Cast", [f"{x}16"], [f"{x}32"], to=TensorProto.FLOAT),
             helper.make_node("Cast", [f"{x}32"], ["c"], to=TensorProto.FLOAT)]
    inputs = [(f"{x}16", (B, S, HD) if x == "x" else (HD, 8) if kind == "matmul_b" else (HD,), TensorProto.FLOAT16)]
    if kind == "matmul_a":
        nodes.append(helper.make_node("MatMul", ["c", "w"], ["y"]))
        inputs.append(("w", (HD, 8)))
    elif kind == "matmul_b":
        nodes.append(helper.make_node("MatMul", ["x", "c"], ["y"]))
        inputs.append(("x", (B, S, HD)))
    else:
        nodes.append(helper.make_node("Mul", ["x", "c"], ["y"]))
        inputs.append(("x", (B, S, HD)))
    return model(nodes, inputs)


# ---- activations ---------------------------------------------------------------------------------------------------
def gelu_model(form: str):
    """One GELU chain on x [2, 4, 16], in the operand order of the rule of the same name."""
    erf = form.startswith("gelu_erf")
    nodes = [const("one", 1.0), const("half", 0.5)]
    if erf:
        if "_div" in form:
            nodes += [const("s2", np.sqrt(2.0)), helper.make_node("Div", ["x", "s2"], ["d"])]
        else:
            nodes += [const("r2", np.sqrt(0.5)), helper.make_node("Mul", ["x", "r2"], ["d"])]
        nodes += [helper.make_node("Erf", ["d"], ["t"])]
    else:
        nodes += [const("three", 3.0), helper.make_node("Pow", ["x", "three"], ["cube"]),
                  const("k", 0.044715), helper.make_node("Mul", ["cube", "k"], ["kc"]),
                  helper.make_node("Add", ["x", "kc"], ["inner"]),
                  const("s", np.sqrt(2.0 / np.pi)), helper.make_node("Mul", ["inner", "s"], ["si"]),
                  helper.make_node("Tanh", ["si"], ["t"])]
    nodes.append(helper.make_node("Add", ["t", "one"], ["a"]))
    if form.endswith("half_first") or form == "gelu_tanh":  # (x * 0.5) * a
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    elif form.endswith("half_inner"):  # x * (0.5 * a)
        nodes += [helper.make_node("Mul", ["half", "a"], ["h"]), helper.make_node("Mul", ["x", "h"], ["y"])]
    else:  # (x * a) * 0.5
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    return model(nodes, [("x", (2, 4, HD))])


def silu_model():
    return model([helper.make_node("Sigmoid", ["x"], ["sg"]), helper.make_node("Mul", ["x", "sg"], ["y"])],
                 [("x", (2, 4, HD))])


# ---- RMSNorm --------------------------------------------------------------------------------------------------------
def rms_norm_model(inverse: str):
    """x * inverse(sqrt(mean(x^2, -1) + eps)) * gamma on x [2, 4, 16]; inverse is "div" (1 / .) or "reciprocal"."""
    w = Weights()
    gamma = w.init("gamma", np.linspace(0.5, 1.5, HD).astype(np.float32))
    nodes = [const("two", 2.0), helper.make_node("Pow", ["x", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p"], ["ms"], axes=[-1], keepdims=1),
             const("eps", 1e-6), helper.make_node("Add", ["ms", "eps"], ["ae"]), helper.make_node("Sqrt", ["ae"], ["sq"])]
    if inverse == "div":
        nodes += [const("one", 1.0), helper.make_node("Div", ["one", "sq"], ["inv"])]
    else:
        nodes += [helper.make_node("Reciprocal", ["sq"], ["inv"])]
    nodes += [helper.make_node("Mul", ["x", "inv"], ["n"]), helper.make_node("Mul", ["n", gamma], ["y"])]
    return model(nodes, [("x", (2, 4, HD))], inits=w.inits)


def rsqrt(graph: dict) -> dict:
    """Reciprocal(Sqrt(a)) -> Rsqrt(a): ONNX has no Rsqrt, but RLX graphs from other front ends do."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    rec = next(n for n in graph["nodes"] if n["op"] == "Reciprocal")
    sq = nodes[rec["inputs"][0]]
    rec.update(op="Rsqrt", inputs=list(sq["inputs"]))
    rec.pop("onnx_op", None)
    graph["nodes"] = [n for n in graph["nodes"] if n["id"] != sq["id"]]
    return graph


# ---- attention blocks (tests/onnx_models.py), at this script's sizes ----------------------------------------------
def bert_attention(**options):
    return onnx_models.bert_attention(DIMS, **options)


def llama_attention(**options):
    return onnx_models.llama_attention(DIMS, **options)


# ---- the examples -------------------------------------------------------------------------------------------------
# name -> (ONNX model, or (model, an edit of its graph.json dict); the phase whose state the example is). How often
# each rule fires on which example is declared in the rule files (`expect fires N on "examples/NAME.graph.json"`);
# main() checks those declarations here too.
GELU_FORMS = ["gelu_erf_div", "gelu_erf_div_half_first", "gelu_erf_mul", "gelu_erf_mul_half_first", "gelu_tanh",
              "gelu_tanh_half_last", "gelu_erf_div_half_inner", "gelu_erf_mul_half_inner", "gelu_tanh_half_inner"]


def examples():
    return {
        # onnx_canon
        "gemm": (gemm_model(flattened=False, trans_b=False), "onnx_canon"),
        "gemm_trans_b": (gemm_model(flattened=False, trans_b=True), "onnx_canon"),
        "gemm_flattened": (gemm_model(flattened=True, trans_b=False), "onnx_canon"),
        "gemm_flattened_trans_b": (gemm_model(flattened=True, trans_b=True), "onnx_canon"),
        "attention_div_flat": (bert_attention(mask=None, div=True, out_shape=(B * S, HD)), "onnx_canon"),
        "attention_sdpa_scale": (bert_attention(mask=None, sdpa=True), "onnx_canon"),
        # onnx_activations
        **{form: (gelu_model(form), "onnx_activations") for form in GELU_FORMS},
        "silu": (silu_model(), "onnx_activations"),
        # onnx_rms_norm
        "rms_norm_div": (rms_norm_model("div"), "onnx_rms_norm"),
        "rms_norm_reciprocal": (rms_norm_model("reciprocal"), "onnx_rms_norm"),
        "rms_norm_rsqrt": ((rms_norm_model("reciprocal"), rsqrt), "onnx_rms_norm"),
        # onnx_rotary
        "rotary_q": (llama_attention(), "onnx_rotary"),
        "rotary_uneven": (llama_attention(rope="uneven"), "onnx_rotary"),
        # onnx_attention
        "attention_custom": (bert_attention(), "onnx_attention"),
        "attention_custom_sdpa": (bert_attention(sdpa=True), "onnx_attention"),
        "attention_custom_sdpa_minus_inf": (bert_attention(sdpa=True, fill=-np.inf), "onnx_attention"),
        "attention_no_mask": (bert_attention(mask=None), "onnx_attention"),
        "attention_no_mask_sdpa": (bert_attention(mask=None, sdpa=True), "onnx_attention"),
        "attention_bias": (bert_attention(mask="bias"), "onnx_attention"),
        "attention_bias_unscaled": (bert_attention(mask="bias", scale_at="none"), "onnx_attention"),
        "attention_causal": (llama_attention(rope=None), "onnx_attention"),
        "attention_causal_sdpa": (llama_attention(rope=None, mask="causal_bias", fill=-np.inf, nan_guard=True),
                                  "onnx_attention"),
        "attention_causal_and_padding": (llama_attention(rope=None, mask="causal_and_padding"), "onnx_attention"),
        # onnx_attention_inputs
        "attention_inputs_masked": (bert_attention(), "onnx_attention_inputs"),
        "attention_inputs_unmasked": (bert_attention(mask=None), "onnx_attention_inputs"),
        "attention_scaled_masked": (bert_attention(), "onnx_attention_scale"),
        "attention_scaled_unmasked": (bert_attention(mask=None), "onnx_attention_scale"),
        "attention_inputs_gqa_masked": (bert_attention(gqa=True), "onnx_attention_inputs"),
        "attention_inputs_gqa_unmasked": (bert_attention(mask=None, gqa=True), "onnx_attention_inputs"),
        # onnx_qkv
        "qkv_masked": (bert_attention(), "onnx_qkv"),
        "qkv_unmasked": (bert_attention(mask=None), "onnx_qkv"),
    }


# ---- applying phases -----------------------------------------------------------------------------------------------
def restricted(rules: RuleSet, phases: list[str]) -> RuleSet:
    """The rule set cut to `phases`, in their order (params and gates kept), as verify.single_rule_program cuts
    it to one rule."""
    program = rules.program
    keep = [p for p in program["phases"] if p["name"] in phases]
    names = {r for p in keep for r in p["rules"]}
    return RuleSet(dict(program, phases=keep, rules=[r for r in program["rules"] if r["name"] in names]))


def before_phase(rules: RuleSet, graph: dict, phase: str) -> dict:
    """The graph as `phase` sees it: every phase before it applied."""
    earlier = rules.phases[:rules.phases.index(phase)]
    if not earlier:
        return graph
    out, _ = restricted(rules, earlier).apply(rlx_rules.Graph.from_dict(graph))
    return out.to_dict()


# Examples of rules whose subject the importer's canonical forms already rewrite (SDPA's split scale): imported without them.
RAW = {"attention_sdpa_scale"}


def build(source, canonical: bool = True) -> dict:
    onnx_model, edit = source if isinstance(source, tuple) else (source, None)
    graph = convert(onnx_model, canonical=canonical).graph
    graph.pop("weights", None)  # verify draws random values (that keep the annotated facts)
    graph.pop("onnx", None)
    for node in graph["nodes"]:  # where each node came from in the ONNX model: not needed here
        node.pop("onnx_op", None)
        node.pop("onnx_output", None)
    if edit is not None:
        graph = edit(graph)
    return graph


def dumps(graph: dict) -> str:
    """Compact JSON, one node a line."""
    head = {k: v for k, v in graph.items() if k not in ("nodes", "outputs")}
    lines = [json.dumps(n, separators=(",", ":")) for n in graph["nodes"]]
    text = json.dumps(head, separators=(",", ":"))[:-1]
    return (text + ',"nodes":[\n' + ",\n".join(lines) + '\n],"outputs":' + json.dumps(graph["outputs"]) + "}\n")


def declared(rules: RuleSet) -> dict[str, list[tuple[dict, dict]]]:
    """Example file name -> [(rule, expect)] for every `expect` of the rule files that names rules/onnx/examples."""
    out: dict[str, list[tuple[dict, dict]]] = {}
    for rule in rules.program["rules"]:
        for ex in rule.get("examples", []):
            path = Path(ex["path"]).resolve()
            if path.parent == OUT.resolve():
                out.setdefault(path.name[: -len(".graph.json")], []).append((rule, ex))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the files on disk are up to date")
    args = parser.parse_args(argv)
    rules = rlx_rules.load_rules(RULES)
    expects = declared(rules)
    made = examples()
    OUT.mkdir(exist_ok=True)
    problems = [f"rules expect examples/{name}.graph.json, which this script does not make"
                for name in expects if name not in made]
    for name, (source, phase) in made.items():
        graph = before_phase(rules, build(source, canonical=name not in RAW), phase)
        text = dumps(graph)
        path = OUT / f"{name}.graph.json"
        if not expects.get(name):
            problems.append(f"{name}: no rule names this example")
        for rule, ex in expects.get(name, []):
            if rule["phase"] != phase:
                problems.append(f"{ex['loc']}: {rule['name']} runs in phase {rule['phase']}, but {name} is made "
                                f"for phase {phase}")
            single = RuleSet(single_rule_program(rules.program, rule["name"]))  # the rule alone, as verify runs it
            _, report = single.apply(rlx_rules.Graph.from_dict(graph), ex.get("params") or {})
            if report.fired(rule["name"]) != ex["fires"]:
                problems.append(f"{ex['loc']}: {rule['name']} fired {report.fired(rule['name'])} times on {name}, "
                                f"expected {ex['fires']}")
        if args.check:
            if not path.exists() or path.read_text() != text:
                problems.append(f"{path.relative_to(ROOT)} is out of date: run python {Path(__file__).relative_to(ROOT)}")
        else:
            atomic_write(path, text)
        print(f"{name:32} {len(graph['nodes']):3} nodes, before {phase}: "
              + ", ".join(f"{r['name']} {ex['fires']}" for r, ex in expects.get(name, [])))
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
