"""Forwarding rewrites (`root => x`), list expressions (indexing, slices, compose, ...), and aliasing bindings."""

from __future__ import annotations

import json

import pytest

import rlx_rules
from rlx_rules.errors import RuleError
from rlx_rules.lang import exprtypes


def graph(nodes, outputs):
    return {"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": outputs}


def transposes(perm1, perm2, shape=(2, 3, 4)):
    """x -> Transpose(perm1) -> Transpose(perm2) -> Relu, the second Transpose also a graph output."""
    mid = [shape[i] for i in perm1]
    out = [mid[i] for i in perm2]
    return graph([
        {"id": 0, "op": "Input", "name": "x", "shape": list(shape)},
        {"id": 1, "op": "Transpose", "inputs": [0], "shape": mid, "attrs": {"perm": list(perm1)}},
        {"id": 2, "op": "Transpose", "inputs": [1], "shape": out, "attrs": {"perm": list(perm2)}},
        {"id": 3, "op": "Relu", "inputs": [2], "shape": out}], [3, 2])


CANCEL = """
rule cancel {
  match { t1 = Transpose(x)  t2 = Transpose(t1) }
  where is_identity(compose(t1.perm, t2.perm))
  rewrite t2 => x
}
"""


def test_forwarding_rewires_consumers_and_outputs_to_the_binding():
    out, report = rlx_rules.compile_text(CANCEL).apply(transposes([1, 0, 2], [1, 0, 2]))
    assert report.fired("cancel") == 1
    assert [(n.id, n.op, n.inputs) for n in out.nodes] == [(0, "Input", ()), (3, "Relu", (0,))]
    assert list(out.outputs) == [3, 0]  # the output that was the root is now x


def test_forwarding_is_not_taken_when_the_guard_fails():
    _, report = rlx_rules.compile_text(CANCEL).apply(transposes([1, 0, 2], [0, 2, 1]))
    assert report.fired("cancel") == 0


def test_the_engine_refuses_a_forward_that_changes_shape_or_dtype():
    rules = rlx_rules.compile_text("rule r { match { c = Reshape(x) } rewrite c => x }")
    g = graph([{"id": 0, "op": "Input", "name": "x", "shape": [2, 6]},
               {"id": 1, "op": "Reshape", "inputs": [0], "shape": [3, 4], "attrs": {"new_shape": [3, 4]}}], [1])
    out, report = rules.apply(g)
    stats = report.rules["r"]
    assert stats.fired == 0 and stats.refused_unsafe == 1
    assert "would change the shape or dtype" in stats.first_refusal and "[3, 4]" in stats.first_refusal
    assert [n.op for n in out.nodes] == ["Input", "Reshape"]
    rules = rlx_rules.compile_text("rule r { match { c = Cast(x) } rewrite c => x }")
    g = graph([{"id": 0, "op": "Input", "name": "x", "shape": [2], "dtype": "f32"},
               {"id": 1, "op": "Cast", "inputs": [0], "shape": [2], "dtype": "f16", "attrs": {"to": "f16"}}], [1])
    assert rules.apply(g)[1].rules["r"].refused_unsafe == 1


def test_a_conditional_forward_picks_the_first_binding_whose_condition_holds():
    rules = rlx_rules.compile_text("""
rule pick {
  match { m = Max(a, b) }
  where shape(a) == shape(b) and shape(m) == shape(a)
  rewrite m => if op(a) == "Relu" then a else if op(b) == "Relu" then b else a
}
""")
    g = graph([{"id": 0, "op": "Input", "name": "x", "shape": [2]},
               {"id": 1, "op": "Neg", "inputs": [0], "shape": [2]},
               {"id": 2, "op": "Relu", "inputs": [0], "shape": [2]},
               {"id": 3, "op": "Max", "inputs": [1, 2], "shape": [2]},
               {"id": 4, "op": "Sigmoid", "inputs": [3], "shape": [2]}], [4])
    out, report = rules.apply(g)
    assert report.fired("pick") == 1 and out.node(4).inputs == (2,)


@pytest.mark.parametrize("text, message", [
    ("rule r { match { a = Gelu(x) } rewrite a => y }", "rewrite forwards to 'y', which is not bound by the pattern"),
    ("rule r { match { a = Gelu(x) } rewrite a => a }", "rewrite forwards 'a' to itself"),
    ("rule r { match { a = Gelu(x) } rewrite a => if rank(x) then x else x }", "'if' needs a bool"),
    ("rule r { match { a = Gelu(x) } rewrite a => _ }", "a rewrite cannot forward to '_'"),
])
def test_forwarding_errors_point_at_the_target(text, message):
    with pytest.raises(RuleError) as err:
        rlx_rules.compile_text(text)
    assert message in str(err.value)
    assert "<rules>:1:" in str(err.value)


LISTS = """
rule lists {
  match { t = Transpose(x) }
  where t.perm[0] == 2 and t.perm[-1] == 0 and len(t.perm) == 3
  where t.perm[1:] == [1, 0] and t.perm[:-1] == [2, 1] and t.perm[:] == reverse([0, 1, 2])
  where is_perm(t.perm) and not is_identity(t.perm) and is_identity(compose(t.perm, t.perm))
  where shape(x)[-1] == 4 and shape(x)[0:2] == [2, 3]
  rewrite t => Transpose(x) { perm: reverse(t.perm[1:] + [2]) }
}
"""


def test_list_expressions_evaluate_as_documented():
    rules = rlx_rules.compile_text(LISTS.replace("reverse(t.perm[1:] + [2])", "[t.perm[2], t.perm[1], t.perm[0]]"))
    out, report = rules.apply(transposes([2, 1, 0], [0, 1, 2]))
    assert report.fired("lists") == 1  # every guard above holds for perm [2, 1, 0] on a [2, 3, 4] input
    assert out.node(1).attrs["perm"] == [0, 1, 2]


def test_compose_is_transpose_p_then_transpose_q():
    """compose(p, q)[i] = p[q[i]]: the one Transpose that does what Transpose p then Transpose q do."""
    rules = rlx_rules.compile_text("""
rule merge {
  match { t1 = Transpose(x)  t2 = Transpose(t1) }
  where uses(t1) == 1
  rewrite t2 => Transpose(x) { perm: compose(t1.perm, t2.perm) }
}
""")
    import numpy as np
    from rlx_rules.interpret.core import run

    g = transposes([1, 2, 0], [1, 0, 2], shape=(2, 3, 4))
    g["outputs"] = [3]
    x = np.arange(24.0).reshape(2, 3, 4)
    expected = np.maximum(np.transpose(np.transpose(x, [1, 2, 0]), [1, 0, 2]), 0)
    out, report = rules.apply(g)
    assert report.fired("merge") == 1 and out.node(2).attrs["perm"] == [2, 1, 0]  # p[q[i]]; q[p[i]] would be [0, 2, 1]
    assert np.array_equal(run(out, {"x": x})[0], expected)


def test_list_out_of_range_fails_the_guard_instead_of_erroring():
    rules = rlx_rules.compile_text("rule r { match { t = Transpose(x) } where t.perm[5] == 0 rewrite t => Relu(x) }")
    assert rules.apply(transposes([1, 0, 2], [1, 0, 2]))[1].fired("r") == 0


@pytest.mark.parametrize("guard, message", [
    ("t.perm[\"a\"] == 0", "a list index p[i] needs an int here, not a str"),
    ("len(t) == 3", "len() needs a list here, not a node"),
    ("compose(t.perm, 1) == [0]", "compose() needs a list here, not a int"),
    ("rank(x)[0] == 1", "a list index p[i] needs a list here, not a int"),
    ("is_identity(t.perm) == 1", "cannot compare bool with int using '=='"),
])
def test_list_type_errors_are_located(guard, message):
    with pytest.raises(RuleError) as err:
        rlx_rules.compile_text(f"rule r {{ match {{ t = Transpose(x) }}\nwhere {guard}\nrewrite t => Relu(x) }}")
    assert message in str(err.value) and "<rules>:2:" in str(err.value), str(err.value)


# ---- aliasing ----

def test_a_non_linear_pattern_matches_one_node_twice():
    rules = rlx_rules.compile_text("rule square { match { m = Mul(x, x) } rewrite m => Abs(x) }")
    g = graph([{"id": 0, "op": "Input", "name": "a", "shape": [2]},
               {"id": 1, "op": "Input", "name": "b", "shape": [2]},
               {"id": 2, "op": "Mul", "inputs": [0, 0], "shape": [2]},
               {"id": 3, "op": "Mul", "inputs": [0, 1], "shape": [2]}], [2, 3])
    out, report = rules.apply(g)
    assert report.fired("square") == 1 and out.node(2).op == "Abs" and out.node(3).op == "Mul"


SHARED = """
rule scale_twice {
  match { c1 = Constant()  c2 = Constant()  m = Mul(x, c1)  a = Add(m, c2) }
  where uses(m) == 1
  rewrite a => FusedScaleShift(x, c1, c2)
}
"""


def shared_constant_graph():
    return graph([{"id": 0, "op": "Input", "name": "x", "shape": [2]},
                  {"id": 1, "op": "Constant", "name": "c", "shape": [2]},
                  {"id": 2, "op": "Mul", "inputs": [0, 1], "shape": [2]},
                  {"id": 3, "op": "Add", "inputs": [2, 1], "shape": [2]}], [3])


def test_two_bindings_may_denote_one_shared_constant_unless_distinct_says_otherwise():
    text = SHARED.replace("FusedScaleShift(x, c1, c2)", "Sub(x, c1)")
    out, report = rlx_rules.compile_text(text).apply(shared_constant_graph())
    assert report.fired("scale_twice") == 1
    assert [n.op for n in out.nodes] == ["Input", "Constant", "Sub"]  # the constant, bound twice, is kept once
    distinct = text.replace("where uses(m) == 1", "where uses(m) == 1 and distinct(c1, c2)")
    _, report = rlx_rules.compile_text(distinct).apply(shared_constant_graph())
    assert report.fired("scale_twice") == 0
    records = rlx_rules.compile_text(distinct).explain(shared_constant_graph(), rule="scale_twice")
    assert records[0].failed[0].check == "distinct(c1, c2)"


def test_a_node_bound_twice_is_removed_once_and_a_kept_alias_stays():
    # r absorbs a; b, bound to the same node, is a rewrite input: the node stays
    rules = rlx_rules.compile_text("""
rule keep_alias {
  match { a = Neg(_)  b = Neg(_)  r = Add(a, b) }
  rewrite r => Mul(b, b)
}
""")
    g = graph([{"id": 0, "op": "Input", "name": "x", "shape": [2]},
               {"id": 1, "op": "Neg", "inputs": [0], "shape": [2]},
               {"id": 2, "op": "Add", "inputs": [1, 1], "shape": [2]}], [2])
    out, report = rules.apply(g)
    assert report.fired("keep_alias") == 1
    assert [(n.id, n.op, n.inputs) for n in out.nodes] == [(0, "Input", ()), (1, "Neg", (0,)), (2, "Mul", (1, 1))]


# ---- the builtin table exists once ----

def test_the_checker_reads_the_builtin_table_from_the_data():
    from importlib import resources

    table = json.loads(resources.files("rlx_rules").joinpath("data/builtins.json").read_text())
    assert set(exprtypes.BUILTINS) == set(table["functions"])
    assert exprtypes.FACTS == tuple(table["facts"])
    assert exprtypes.AGGREGATES == {n for n, f in table["functions"].items() if f.get("aggregate")}
    for name, f in table["functions"].items():
        kinds, variadic, result = exprtypes.BUILTINS[name]
        assert (list(kinds), variadic, result.kind, result.nullable) == (
            f["args"], f.get("variadic", False), f["result"], f.get("nullable", False))


def test_a_builtin_added_to_the_data_is_enough_for_the_checker_and_the_loader(monkeypatch):
    """A function added to builtins.json: the checker types it, and the Rust loader (which takes arity from
    the same data) loads the program; until expr.rs implements it, its guard simply does not hold."""
    from rlx_rules.lang import check as check_module

    table = dict(exprtypes.BUILTINS, is_output=exprtypes.BUILTINS["is_output"])
    table["twice_uses"] = (("node",), False, exprtypes.INT)
    monkeypatch.setattr(exprtypes, "BUILTINS", table)
    monkeypatch.setattr(check_module, "BUILTINS", table, raising=False)
    from rlx_rules.lang.compile import compile_program
    from rlx_rules.lang.parse import parse_text
    from rlx_rules.lang.registry import builtin_registry

    def program(text):
        files = [parse_text(text, "<rules>")]
        checked = check_module.check(files, {"<rules>": text}, builtin_registry())
        return compile_program(checked, builtin_registry(), {"<rules>": text})

    text = "rule r { match { a = Gelu(x) } where twice_uses(a) == 2 rewrite a => Relu(x) }"
    guard = next(i for i in program(text)["rules"][0]["code"] if i["i"] == "guard")
    assert guard["expr"]["l"] == {"call": "twice_uses", "args": [{"slot": 0}]}
    with pytest.raises(RuleError, match="twice_uses\\(\\) takes 1 argument, got 2"):
        program(text.replace("twice_uses(a)", "twice_uses(a, a)"))
    # The Rust loader embeds the same file and takes arity from it (rust/core/tests/builtins_data.rs:
    # a_builtin_added_to_the_data_is_accepted_by_the_loader, and every_shipped_builtin_is_implemented).
