"""Declared rule parameters: resolve each value from an override, its environment variable, or its default."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Optional

from ..errors import ParamError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class ParamValue:
    name: str
    type: str
    value: object
    source: str  # "default", "env NAME", or "set"


def value_fits(value: object, type_name: str) -> bool:
    """Whether a literal is a value of the type that Rust can hold (64-bit ints, finite floats). Here, not in
    exprtypes.py, so that applying rules does not import the checker's types."""
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if type_name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if type_name == "bool":
        return isinstance(value, bool)
    return isinstance(value, str)


def convert(text: object, type_name: str, what: str) -> object:
    """Convert a CLI or environment string (or a Python value) to the parameter's declared type; the one type
    check of parameter values (value_fits, which the checker also applies to defaults and `expect` values)."""
    if not isinstance(text, str):
        if type_name == "str" or not value_fits(text, type_name):
            raise ParamError(f"{what}: expected {type_name}, got {type(text).__name__} {text!r}")
        return float(text) if type_name == "float" else text
    raw = text.strip()
    try:
        if type_name in ("int", "float"):
            value = int(raw, 10) if type_name == "int" else float(raw)
            if not value_fits(value, type_name):
                raise ValueError(raw)
            return value
    except ValueError:
        raise ParamError(f"{what}: expected {type_name}, got {text!r}") from None
    if type_name == "bool":
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ParamError(f"{what}: expected a bool (true/false/1/0/yes/no/on/off), got {text!r}")
    return text


def resolve(declared: list[dict], overrides: Optional[Mapping[str, object]] = None,
            environ: Optional[Mapping[str, str]] = None) -> dict[str, ParamValue]:
    """Values in force: an override wins, then the declared environment variable, then the default.

    Only the environment variables that the declarations name are read.
    """
    environ = os.environ if environ is None else environ
    overrides = dict(overrides or {})
    known = {p["name"] for p in declared}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ParamError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"the rules declare: {', '.join(sorted(known)) or 'none'}")
    values = {}
    for p in declared:
        name, type_name = p["name"], p["type"]
        if name in overrides:
            value = convert(overrides[name], type_name, f"parameter {name}")
            values[name] = ParamValue(name, type_name, value, "set")
        elif p.get("env") and p["env"] in environ:
            var = p["env"]
            value = convert(environ[var], type_name, f"parameter {name} from environment variable {var}")
            values[name] = ParamValue(name, type_name, value, f"env {var}")
        else:
            values[name] = ParamValue(name, type_name, p["default"], "default")
    return values
