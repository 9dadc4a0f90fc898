"""Explain records (near misses: why a rule did not fire) rendered as text."""

from __future__ import annotations


def format_miss(record: dict) -> str:
    """One near-miss record as text: the rule, the candidate, what matched, and each failed check."""
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
