"""Explain records (near misses: why a rule did not fire) as typed records, and their text rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..records import Record, list_of


@dataclass
class FailedCheck(Record):
    """One check of a near miss that failed: its .rlxr location, the check's text, and the values involved."""

    loc: Optional[str] = None
    check: str = ""
    detail: str = ""
    extra: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class NearMiss(Record):
    """Why a rule did not fire at a candidate: how much of the pattern matched, the bindings, the failed checks."""

    rule: str = ""
    phase: Optional[str] = None
    root: Optional[int] = None
    root_label: Optional[str] = None
    structure_matched: bool = False
    progress: int = 0
    total: int = 0
    bindings: dict[str, Any] = field(default_factory=dict)
    failed: list[FailedCheck] = field(default_factory=list)
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    NESTED = {"failed": list_of(FailedCheck)}

    def __str__(self) -> str:
        return format_miss(self)


def format_miss(record) -> str:
    """One near-miss record (a NearMiss, or its dict form) as text: the rule, the candidate, what matched, and
    each failed check."""
    where = f" at {record['root_label']}" if record.get("root_label") else ""
    head = f"{record['rule']}{where}: "
    if record["structure_matched"]:
        head += f"pattern matched; {len(record['failed'])} guard{'s' if len(record['failed']) != 1 else ''} failed"
    elif record.get("root") is None:
        head += "gate closed"
    else:
        head += f"pattern matched {record['progress']} of {record['total']} checks"
    lines = [head]
    for check in record["failed"]:
        loc = f"{check['loc']}: " if check["loc"] else ""
        lines.append(f"  {loc}{check['check']} failed: {check['detail']}")
    if record.get("bindings"):
        lines.append("  bindings: " + ", ".join(f"{k} = {v}" for k, v in record["bindings"].items()
                                                 if not k.startswith("$")))
    return "\n".join(lines)
