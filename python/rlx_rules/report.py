"""The apply report: per rule and phase counts and times, node counts, parameters in force, why each phase
stopped; typed records (dataclasses) with text and JSON forms."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from .records import Record, list_of

if TYPE_CHECKING:  # loaded by the reports that hold near misses (explain), not by every apply's
    from .tools.explain import NearMiss


class StopReason(str, enum.Enum):
    """Why a phase (or the whole apply) stopped. Older cores said "cap" for ITERATION_CAP; it is accepted."""

    FIXPOINT = "fixpoint"
    ITERATION_CAP = "iteration_cap"
    REWRITE_LIMIT = "rewrite_limit"
    TIME_BUDGET = "time_budget"

    @classmethod
    def _missing_(cls, value: object) -> Optional["StopReason"]:
        return cls.ITERATION_CAP if value == "cap" else None

    def __str__(self) -> str:
        return self.value


@dataclass
class RuleStats(Record):
    """One rule's counts in one phase."""

    name: str = ""
    loc: Optional[str] = None
    tried: int = 0
    matched: int = 0
    fired: int = 0
    refused_unsafe: int = 0
    refused_eval: int = 0
    first_refusal: Optional[str] = None
    gated_off: int = 0
    time_ms: float = 0.0
    extra: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class PhaseReport(Record):
    """One phase: its iterations, why it stopped, the rules still firing at a limit, and each rule's counts."""

    name: str = ""
    iterations: int = 0
    max_iterations: Optional[int] = None
    stop: StopReason = StopReason.FIXPOINT
    still_firing: list[str] = field(default_factory=list)
    rules: list[RuleStats] = field(default_factory=list)
    time_ms: float = 0.0
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    NESTED = {"stop": StopReason, "rules": list_of(RuleStats)}


def _near_misses(items: list) -> list[NearMiss]:
    """The report's "near_misses" as records (tools.explain, imported only when a report has some)."""
    if not items:
        return []
    from .tools.explain import NearMiss

    return list_of(NearMiss)(items)


@dataclass
class Report(Record):
    """What an apply did, as typed records. `to_dict()` (and `data`) is the JSON form; `report["field"]` reads
    a field as the dict this class replaced did."""

    nodes_before: int = 0
    nodes_after: int = 0
    rewrites: int = 0
    time_ms: float = 0.0
    phases: list[PhaseReport] = field(default_factory=list)
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    gates: dict[str, bool] = field(default_factory=dict)
    params_in_force: dict[str, dict] = field(default_factory=dict)
    near_misses: list[NearMiss] = field(default_factory=list)
    stop: Optional[StopReason] = None  # as the core reports it; see stop_reason
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    NESTED = {"phases": list_of(PhaseReport), "near_misses": _near_misses, "stop": StopReason}

    @property
    def data(self) -> dict:
        """The JSON form (what this class held before its fields were typed)."""
        return self.to_dict()

    @property
    def stop_reason(self) -> StopReason:
        """Why the apply stopped: the core's own answer, else the first phase that did not reach a fixpoint."""
        if self.stop is not None:
            return self.stop
        return next((p.stop for p in self.phases if p.stop is not StopReason.FIXPOINT), StopReason.FIXPOINT)

    @property
    def rules(self) -> dict[str, RuleStats]:
        return {r.name: r for p in self.phases for r in p.rules}

    @property
    def params(self) -> dict[str, dict]:
        return self.params_in_force

    def fusion_summary(self) -> str:
        """RLX-style: node counts before and after, each fused op's count, and the rules that fired."""
        fused = {op: n for op, n in self.ops_after.items() if op.startswith("Fused") and n}
        fired = [f"{r.name} x{r.fired}" for p in self.phases for r in p.rules if r.fired]
        return (f"fusion: {self.nodes_before} -> {self.nodes_after} nodes; "
                + (", ".join(f"{op} x{n}" for op, n in sorted(fused.items())) or "no fused ops")
                + "; fired: " + (", ".join(fired) or "none"))

    def fired(self, rule: str) -> int:
        return self.rules[rule].fired

    def op_count(self, op: str, after: bool = True) -> int:
        return (self.ops_after if after else self.ops_before).get(op, 0)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = []
        if self.params:
            lines.append("params: " + ", ".join(f"{k} = {json.dumps(v['value'])} ({v['source']})"
                                                 for k, v in self.params.items()))
        if self.gates:
            lines.append("gates: " + ", ".join(f"{k} {'open' if v else 'closed'}" for k, v in self.gates.items()))
        for p in self.phases:
            stop = p.stop.value if p.stop is StopReason.FIXPOINT else _limit_text(p)
            lines.append(f"phase {p.name}: {p.iterations} iteration{'s' if p.iterations != 1 else ''}, "
                         f"{stop}, {p.time_ms:.2f} ms")
            lines.append(f"  {'rule':<34}{'tried':>8}{'matched':>9}{'fired':>7}{'refused':>9}{'ms':>9}")
            for r in p.rules:
                refused = r.refused_unsafe + r.refused_eval
                note = "  (gate closed)" if r.gated_off and not r.tried else ""
                lines.append(f"  {r.name:<34}{r.tried:>8}{r.matched:>9}{r.fired:>7}{refused:>9}{r.time_ms:>9.2f}{note}")
                if r.first_refusal:
                    lines.append(f"    first refusal: {r.first_refusal}")
        lines.append(f"nodes: {self.nodes_before} -> {self.nodes_after} "
                     f"({self.rewrites} rewrites, {self.time_ms:.1f} ms)")
        lines.append(self.fusion_summary())
        if self.near_misses:
            lines.append("near misses (rules that fired zero times):")
            from .tools.explain import format_miss

            lines.extend("  " + line for record in self.near_misses for line in format_miss(record).splitlines())
        before, after = self.ops_before, self.ops_after
        changed = sorted(op for op in set(before) | set(after) if before.get(op, 0) != after.get(op, 0))
        if changed:
            lines.append("ops: " + ", ".join(f"{op} {before.get(op, 0)}->{after.get(op, 0)}" for op in changed))
        return "\n".join(lines)


def _limit_text(phase: PhaseReport) -> str:
    firing = f" ({', '.join(phase.still_firing)} kept firing)" if phase.still_firing else ""
    if phase.stop is StopReason.ITERATION_CAP:
        return f"CAP REACHED{firing}"
    return f"STOPPED: {phase.stop.value.replace('_', ' ')}{firing}"
