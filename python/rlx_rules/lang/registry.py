"""The op registry as the rule checker sees it: ops.json (shared with the Rust loader) read into OpSpecs."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Mapping, Optional


@dataclass(frozen=True)
class AttrSpec:
    type: str  # int, float, bool, string, enum, int_list, dim_list, any
    nullable: bool = False
    optional: bool = False
    values: tuple[str, ...] = ()  # enum values

    def describe(self) -> str:
        base = f"enum {{{', '.join(self.values)}}}" if self.type == "enum" else self.type
        return f"{base} or null" if self.nullable else base


@dataclass(frozen=True)
class OpSpec:
    name: str
    min_inputs: int
    max_inputs: Optional[int]  # None: variadic
    commutative: bool
    attrs: Mapping[str, AttrSpec]

    def accepts_arity(self, n: int) -> bool:
        return n >= self.min_inputs and (self.max_inputs is None or n <= self.max_inputs)

    def describe_arity(self) -> str:
        if self.max_inputs is None:
            return f"at least {self.min_inputs}"
        if self.min_inputs == self.max_inputs:
            return str(self.min_inputs)
        return f"{self.min_inputs} to {self.max_inputs}"


class Registry:
    """Ops by name. `get` returns None for an op the registry does not know."""

    def __init__(self, ops: Mapping[str, OpSpec]):
        self.ops = dict(ops)

    def get(self, name: str) -> Optional[OpSpec]:
        return self.ops.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self.ops

    @classmethod
    def from_json(cls, text: str) -> "Registry":
        data = json.loads(text)
        ops = {}
        for name, spec in data["ops"].items():
            arity = spec.get("arity", 0)
            if arity == "variadic":
                lo, hi = int(spec.get("min_inputs", 0)), None
            elif isinstance(arity, dict):
                lo, hi = int(arity["min"]), (int(arity["max"]) if "max" in arity else None)
            else:
                lo = hi = int(arity)
            attrs = {
                attr: AttrSpec(a.get("type", "any"), bool(a.get("nullable", False)), bool(a.get("optional", False)),
                               tuple(a.get("values", ())))
                for attr, a in spec.get("attrs", {}).items()
            }
            ops[name] = OpSpec(name, lo, hi, bool(spec.get("commutative", False)), attrs)
        return cls(ops)


@functools.lru_cache(maxsize=1)
def builtin_registry() -> Registry:
    """The registry shipped in the package (rlx_rules/data/ops.json)."""
    text = resources.files("rlx_rules").joinpath("data/ops.json").read_text(encoding="utf-8")
    return Registry.from_json(text)
