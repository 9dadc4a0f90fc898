"""The apply report: per rule and phase counts and times, node counts, parameters in force; text or JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from .tools.explain import format_miss


@dataclass
class Report:
    """What an apply did. `data` is the JSON form; the properties read it."""

    data: dict

    @property
    def nodes_before(self) -> int:
        return self.data["nodes_before"]

    @property
    def nodes_after(self) -> int:
        return self.data["nodes_after"]

    @property
    def rewrites(self) -> int:
        return self.data["rewrites"]

    @property
    def phases(self) -> list[dict]:
        return self.data["phases"]

    @property
    def rules(self) -> dict[str, dict]:
        return {r["name"]: r for p in self.phases for r in p["rules"]}

    @property
    def params(self) -> dict[str, dict]:
        return self.data.get("params_in_force", {})

    @property
    def near_misses(self) -> list[dict]:
        """With explain on: why rules did not fire (see RuleSet.explain)."""
        return self.data.get("near_misses", [])

    def fusion_summary(self) -> str:
        """RLX-style: node counts before and after, each fused op's count, and the rules that fired."""
        d = self.data
        fused = {op: n for op, n in d["ops_after"].items() if op.startswith("Fused") and n}
        fired = [f"{r['name']} x{r['fired']}" for p in self.phases for r in p["rules"] if r["fired"]]
        return (f"fusion: {d['nodes_before']} -> {d['nodes_after']} nodes; "
                + (", ".join(f"{op} x{n}" for op, n in sorted(fused.items())) or "no fused ops")
                + "; fired: " + (", ".join(fired) or "none"))

    def fired(self, rule: str) -> int:
        return self.rules[rule]["fired"]

    def op_count(self, op: str, after: bool = True) -> int:
        return self.data["ops_after" if after else "ops_before"].get(op, 0)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.data, indent=indent)

    def __str__(self) -> str:
        d = self.data
        lines = []
        if self.params:
            lines.append("params: " + ", ".join(f"{k} = {json.dumps(v['value'])} ({v['source']})"
                                                 for k, v in self.params.items()))
        if d.get("gates"):
            lines.append("gates: " + ", ".join(f"{k} {'open' if v else 'closed'}" for k, v in d["gates"].items()))
        for p in self.phases:
            stop = p["stop"] if p["stop"] == "fixpoint" else f"CAP REACHED ({', '.join(p['still_firing'])} kept firing)"
            lines.append(f"phase {p['name']}: {p['iterations']} iteration{'s' if p['iterations'] != 1 else ''}, "
                         f"{stop}, {p['time_ms']:.2f} ms")
            lines.append(f"  {'rule':<34}{'tried':>8}{'matched':>9}{'fired':>7}{'refused':>9}{'ms':>9}")
            for r in p["rules"]:
                refused = r["refused_unsafe"] + r["refused_eval"]
                note = "  (gate closed)" if r["gated_off"] and not r["tried"] else ""
                lines.append(f"  {r['name']:<34}{r['tried']:>8}{r['matched']:>9}{r['fired']:>7}{refused:>9}"
                             f"{r['time_ms']:>9.2f}{note}")
                if r.get("first_refusal"):
                    lines.append(f"    first refusal: {r['first_refusal']}")
        lines.append(f"nodes: {d['nodes_before']} -> {d['nodes_after']} ({d['rewrites']} rewrites, {d['time_ms']:.1f} ms)")
        lines.append(self.fusion_summary())
        if self.near_misses:
            lines.append("near misses (rules that fired zero times):")
            lines.extend("  " + line for record in self.near_misses for line in format_miss(record).splitlines())
        before, after = d["ops_before"], d["ops_after"]
        changed = sorted(op for op in set(before) | set(after) if before.get(op, 0) != after.get(op, 0))
        if changed:
            lines.append("ops: " + ", ".join(f"{op} {before.get(op, 0)}->{after.get(op, 0)}" for op in changed))
        return "\n".join(lines)
