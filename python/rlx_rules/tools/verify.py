"""Every rule proves itself by execution: examples must fire as declared and keep values; derived near misses must not fire.

For each rule, alone in its own program:

1. A graph is synthesized from the rule alone (synthesize.py): the pattern's skeleton, repaired
   until every guard holds. It and each example the rule carries (`expect fires N on "graph.json"`)
   are applied. The rule must fire
   exactly N times. Where it fires, the interpreter runs the graph before and after the rewrite, on
   random inputs and parameters, and the outputs must agree within a stated tolerance.
2. From each example that fires, verify derives mutants. Each one changes one thing: an attribute
   (to its neighbours and to the other values of its type), a dim (plus or minus one, times 8 or 9,
   or symbolic), an extra consumer, or a graph output. `explain` classifies each mutant at the
   example's root:
   - a near miss: the pattern matches and exactly one guard (or gate) fails. The rule must not fire
     there.
   - a variant: every guard holds. The rule must fire, and the values must still agree. Mutants
     that sit on a guard's boundary, such as batch * seq landing on the threshold, fall here.
   - anything else: ignored.
3. The report lists, per rule, what was tried, each failure, and the guards that no near miss
   covered.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np

from ..api import RuleSet, compile_rules, default_rules
from ..errors import RlxRulesError
from ..graph import Graph
from .synthesize import synthesize_or_reason
from .variants import consistent, dim_boundaries, set_literals, space_mutants

# The message of the engine's refusal of a forward that would change a value's type (rewrite.rs).
TYPE_CHANGING_FORWARD = "would change the shape or dtype"

RTOL, ATOL = 1e-6, 1e-8


@dataclass
class RuleVerdict:
    rule: str
    loc: str
    examples: int = 0
    variants: int = 0
    near_misses: int = 0
    guards_covered: set[str] = field(default_factory=set)
    guards: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    synthesized: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def uncovered(self) -> list[str]:
        return [g for g in self.guards if g not in self.guards_covered]

    def summary(self) -> str:
        status = "ok  " if self.ok else "FAIL"
        origin = "a synthesized graph and " if self.synthesized else ""
        line = (f"{status} {self.rule}: {origin}{self.examples - self.synthesized} examples, "
                f"{self.variants} variants fired and kept values, "
                f"{self.near_misses} near misses refused; guards covered {len(self.guards) - len(self.uncovered)}"
                f"/{len(self.guards)}")
        if self.uncovered:
            line += "\n       no near miss found for: " + "; ".join(self.uncovered)
        for note in self.notes:
            line += f"\n       note: {note}"
        for failure in self.failures:
            line += f"\n       {failure}"
        return line


@dataclass
class VerifyReport:
    rules: list[RuleVerdict]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rules)

    def __str__(self) -> str:
        lines = [r.summary() for r in self.rules]
        failed = sum(not r.ok for r in self.rules)
        lines.append(f"{len(self.rules) - failed} rules verified, {failed} failed")
        return "\n".join(lines)


def single_rule_program(program: dict, rule_name: str) -> dict:
    """The program with only `rule_name`, in its own phase (params and gates kept)."""
    rule = next(r for r in program["rules"] if r["name"] == rule_name)
    phase = next(p for p in program["phases"] if rule_name in p["rules"])
    return dict(program, rules=[rule], phases=[dict(phase, rules=[rule_name])])


def guard_texts(program: dict, rule: dict) -> list[str]:
    """Every check a near miss can break: the rule's guards and its gates."""
    texts = [i["text"] for i in rule["code"] if i["i"] == "guard"]
    if rule.get("group"):
        texts.append(f"group of {rule['group']['min']} to {rule['group']['max']} {'|'.join(rule['root_ops'])}")
    texts += [g["text"] for g in rule.get("group_guards", [])]
    gates = {g["name"]: g for g in program["gates"]}
    texts += [f"gate {name}: {gates[name]['text']}" for name in rule["gates"]]
    return list(dict.fromkeys(texts))


def same_values(before: Graph, after: Graph, seed: int) -> Optional[str]:
    """None if the graphs compute the same outputs on random values, else what differed."""
    from ..interpret.core import random_values, run

    inputs, params = random_values(before, seed=seed, scale=0.5)
    # Values an f32 (or f16) leaf can hold, so that a Cast to its own dtype is the no-op it is in the graph.
    dtypes = {n.name: n.dtype for n in before.nodes if n.op in ("Input", "Param", "Constant")}
    for table in (inputs, params):
        for key, value in table.items():
            narrow = {"f32": np.float32, "f16": np.float16, None: np.float32}.get(dtypes.get(key), None)
            if narrow is not None:
                table[key] = np.asarray(value).astype(narrow).astype(np.float64)
    try:
        expected = run(before, inputs, params)
    except (RlxRulesError, ValueError, FloatingPointError):
        return None  # the original is not a runnable graph; there is nothing to compare
    try:
        got = run(after, inputs, params)
    except (RlxRulesError, ValueError) as err:
        return f"the rewritten graph does not run: {err}"
    for k, (a, b) in enumerate(zip(expected, got)):
        if a.shape != b.shape:
            return f"output {k}: shape {list(b.shape)} instead of {list(a.shape)}"
        if not np.allclose(b, a, rtol=RTOL, atol=ATOL, equal_nan=True):
            worst = float(np.max(np.abs(b - a)))
            return f"output {k} differs by up to {worst:.3g} (rtol {RTOL}, atol {ATOL})"
    return None


def runnable(graph: Graph, seed: int) -> bool:
    from ..interpret.core import random_values, run

    try:
        run(graph, *random_values(graph, seed=seed))
        return True
    except (RlxRulesError, ValueError, FloatingPointError):
        return False


def _attr_alternatives(value: object) -> list[object]:
    if value is None:
        return [1, 0.5, "Custom"]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return sorted({value + 1, value - 1, 0, -1, 2 * value + 1} - {value})
    if isinstance(value, float):
        return [None, value * 2, 0.0]
    if isinstance(value, str):
        return [None, value + "_other"]
    if isinstance(value, list) and value:
        last = value[-1]
        if isinstance(last, (int, float)) and not isinstance(last, bool):
            return [value[:-1], value[:-1] + [last + 1]]
        return [value[:-1]]  # a nested list (an inline tensor value): one element fewer
    return []


def mutants(data: dict, enum_values: dict) -> Iterator[tuple[str, dict]]:
    """Single changes to a graph: attributes, dims, value facts, extra consumers, outputs."""
    next_id = max(n["id"] for n in data["nodes"]) + 1
    for i, node in enumerate(data["nodes"]):
        label = f"%{node['id']}"
        for attr, value in node.get("attrs", {}).items():
            options = _attr_alternatives(value)
            options += [v for v in enum_values.get((node["op"], attr), ()) if v != value]
            for option in options:
                m = copy.deepcopy(data)
                m["nodes"][i]["attrs"][attr] = option
                yield f"{label}.{attr} = {json.dumps(option)}", m
        present = node.get("attrs") or {}
        for (op, attr), values in enum_values.items():  # an absent optional attribute, set to each value
            if op == node["op"] and attr not in present:
                for option in values:
                    m = copy.deepcopy(data)
                    m["nodes"][i].setdefault("attrs", {})[attr] = option
                    yield f"{label}.{attr} = {json.dumps(option)}", m
        for d, dim in enumerate(node.get("shape") or []):
            if not isinstance(dim, int):
                continue
            for option in sorted({dim + 1, max(dim - 1, 1), dim * 8, dim * 9} - {dim}) + ["sym"]:
                m = copy.deepcopy(data)
                m["nodes"][i]["shape"][d] = option
                yield f"{label}.shape[{d}] = {option}", m
        if node["op"] in ("Input", "Param", "Constant"):  # another dtype (dtype guards)
            m = copy.deepcopy(data)
            m["nodes"][i]["dtype"] = "f16" if node.get("dtype", "f32") == "f32" else "f32"
            yield f"{label}.dtype = {m['nodes'][i]['dtype']}", m
        for fact in node.get("facts", ()):  # a value fact that does not hold (has_fact)
            m = copy.deepcopy(data)
            m["nodes"][i]["facts"] = [f for f in node["facts"] if f != fact]
            yield f"{label} without fact {fact}", m
        shape = node.get("shape")
        if isinstance(shape, list):
            for option in ([1] + shape, shape[1:]) if shape else ([1],):
                m = copy.deepcopy(data)
                m["nodes"][i]["shape"] = option
                yield f"{label}.shape = {option}", m
        if node["op"] not in ("Input", "Param", "Constant"):
            m = copy.deepcopy(data)
            m["nodes"].append({"id": next_id, "op": "Relu", "inputs": [node["id"]], "shape": node.get("shape"),
                               "dtype": node.get("dtype")})
            m["outputs"].append(next_id)
            yield f"extra consumer of {label}", m
            if node["id"] not in data["outputs"]:
                m = copy.deepcopy(data)
                m["outputs"].append(node["id"])
                yield f"{label} is a graph output", m


def param_mutants(declared: list[dict], params: dict) -> Iterator[tuple[str, dict]]:
    """Parameter values around the example's: small ints and the default's neighbours, flipped bools."""
    for p in declared:
        current = params.get(p["name"], p["default"])
        if p["type"] == "int":
            options = {0, 1, 7, 8, current - 1, current + 1, current * 2} - {current}
        elif p["type"] == "bool":
            options = {not current}
        else:
            continue
        for option in sorted(options):
            yield f"{p['name']} = {json.dumps(option)}", dict(params, **{p["name"]: option})


def _enum_values() -> dict:
    from ..lang.registry import builtin_registry

    return {(op, attr): spec.values for op, ops in builtin_registry().ops.items()
            for attr, spec in ops.attrs.items() if spec.values}


def _signature(node) -> tuple:
    """What a rewrite changes about a node that keeps its id: its op, its inputs or its attributes."""
    return node.op, tuple(node.inputs), json.dumps(node.attrs, sort_keys=True, default=str)


def _changed_roots(before: Graph, after: Graph) -> list[int]:
    """The nodes that a rewrite replaced: same id, another op, other inputs or other attributes; for a
    forwarding rewrite, which keeps no node at the root's id, the last node removed."""
    old = {n.id: _signature(n) for n in before.nodes}
    changed = [n.id for n in after.nodes if n.id in old and old[n.id] != _signature(n)]
    if changed:
        return changed
    kept = {n.id for n in after.nodes}
    return [n.id for n in before.nodes if n.id not in kept][-1:]


def verify_rule(rules: RuleSet, rule: dict, *, seed: int = 0, max_mutants: Optional[int] = None) -> RuleVerdict:
    name = rule["name"]
    single = RuleSet(single_rule_program(rules.program, name))
    verdict = RuleVerdict(name, rule["loc"], guards=guard_texts(rules.program, rule))
    enums = _enum_values()
    # First a graph built from the rule alone (its pattern and guards), then the rule's own examples.
    firing = [ex for ex in rule.get("examples", []) if ex["fires"]]
    synth_params = dict(firing[0].get("params") or {}) if firing else {}
    synthesized, reason = synthesize_or_reason(rule, rules.program, single, synth_params)
    sources: list[tuple[dict, Optional[dict]]] = [(ex, None) for ex in rule.get("examples", [])]
    if synthesized is None:
        verdict.notes.append(f"no graph could be synthesized from the pattern and guards alone: {reason}")
        if not firing:
            verdict.failures.append(f"no graph could be synthesized ({reason}), and the rule carries no example "
                                    "that fires (add: expect fires N on \"graph.json\")")
    else:
        if not rule.get("examples"):
            verdict.notes.append("the rule carries no example; verified on the synthesized graph")
        verdict.synthesized = True
        sources.insert(0, ({"path": "<synthesized>", "fires": 1, "params": synth_params, "loc": rule["loc"]},
                           synthesized))
    for example, data in sources:
        verdict.examples += 1
        where = f"{os.path.basename(example['path'])}"
        try:
            graph = Graph.from_dict(data) if data is not None else Graph.load(example["path"])
        except RlxRulesError as err:
            verdict.failures.append(f"{example['loc']}: example {where} does not load: {err}")
            continue
        params = example.get("params") or {}
        fused, report = single.apply(graph, params)
        fired = report.fired(name)
        if fired != example["fires"]:
            verdict.failures.append(f"{example['loc']}: on {where} the rule fired {fired} times, expected {example['fires']}")
            continue
        if fired:
            problem = same_values(graph, fused, seed)
            if problem:
                verdict.failures.append(f"{example['loc']}: on {where}: {problem}")
            if not runnable(graph, seed):
                verdict.failures.append(f"{example['loc']}: example {where} does not run in the interpreter")
        roots = _changed_roots(graph, fused)
        if fired != 1 or not roots:
            continue
        root = roots[0]
        original = graph.to_dict()
        values = dict(enums)
        for attr, literals in set_literals(rule).items():  # every literal of a set a guard tests
            for op in {n["op"] for n in original["nodes"]}:
                values[(op, attr)] = list(dict.fromkeys([*values.get((op, attr), ()), *literals]))
        changes = [(change, data, params) for change, data in mutants(original, values)]
        changes += [(change, original, p) for change, p in param_mutants(rules.program["params"], params)]
        changes += [(change, data, params) for change, data in space_mutants(original, rule, seed) if data is not None]

        def fires_at_root(data: dict, params: dict = params) -> bool:
            mutant = Graph.from_dict(data)
            return _root_fired(mutant, single.apply(mutant, params)[0], root)

        changes += [(change, data, params) for change, data in dim_boundaries(original, fires_at_root, seed)]
        for change, data, mutant_params in changes[:max_mutants]:
            _check_mutant(single, name, verdict, data, change, root, mutant_params, seed, where)
    return verdict


def _root_fired(before: Graph, after: Graph, root: int) -> bool:
    """Whether a rewrite replaced `root` (another node at its id) or forwarded it (no node at its id)."""
    signature = _signature(before.node(root))
    return all(n.id != root or _signature(n) != signature for n in after.nodes)


def _check_mutant(single: RuleSet, name: str, verdict: RuleVerdict, data: dict, change: str, root: int,
                  params: dict, seed: int, where: str) -> None:
    try:
        mutant = Graph.from_dict(data)
    except RlxRulesError:
        return  # the change made an invalid graph (for example, an attribute of the wrong type)
    records = single.explain(mutant, params, rule=name, all=True)
    at_root = [r for r in records if r["root"] == root or r["root"] is None]
    fused, report = single.apply(mutant, params)
    root_fired = _root_fired(mutant, fused, root)
    refusal = report.rules[name].first_refusal or ""
    if not root_fired and TYPE_CHANGING_FORWARD in refusal and consistent(data, seed):
        verdict.failures.append(f"variant of {where} ({change}): the guards admit a forward that changes the value's "
                                f"type, which the engine refused: {refusal}")
        return
    if root_fired:
        # It fired: whatever explain says (it describes the graph after the phase, where a rewrite that keeps
        # the root's op leaves a node at the same id), the values must be kept.
        if not runnable(mutant, seed):
            return
        problem = same_values(mutant, fused, seed)
        verdict.variants += 1
        if problem:
            verdict.failures.append(f"variant of {where} ({change}): the rule fired and {problem}")
        return
    if not at_root:
        return  # matched but refused as unsafe, or the root is gone: not a classifiable mutant
    record = at_root[0]
    gate = record["root"] is None
    if (record["structure_matched"] or gate) and len(record["failed"]) == 1:
        check = record["failed"][0]["check"]
        verdict.near_misses += 1
        verdict.guards_covered.add(check)


def verify(paths: Optional[Sequence[str]] = None, *, rules: Optional[Sequence[str]] = None, seed: int = 0,
           max_mutants: Optional[int] = None) -> VerifyReport:
    """Verify every rule of the given rule files (default: the bundled library), or only `rules`."""
    ruleset = compile_rules(list(paths) if paths else [default_rules()])
    wanted = set(rules) if rules else None
    verdicts = [verify_rule(ruleset, r, seed=seed, max_mutants=max_mutants)
                for r in ruleset.program["rules"] if wanted is None or r["name"] in wanted]
    return VerifyReport(verdicts)
