"""Typed result records: dataclasses built from the core's JSON, readable by their JSON field names, with to_dict()."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar, Mapping


class Record:
    """Base of the result dataclasses. `record["field"]` and `record.get("field")` read a field as the JSON
    dicts these records replace did; keys the dataclass does not know are kept in `extra` and written back
    by `to_dict()`, so a newer core's fields survive a round trip."""

    NESTED: ClassVar[Mapping[str, Any]] = {}  # field -> callable converting its JSON value (a record class, ...)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]  # type: ignore[arg-type]
        values = {}
        for name in names:
            if name in data:
                convert = cls.NESTED.get(name)
                values[name] = convert(data[name]) if convert is not None and data[name] is not None else data[name]
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**values, extra=extra)  # type: ignore[call-arg]

    def to_dict(self) -> dict:
        """The JSON form: plain dicts, lists, numbers and strings (enums by value)."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name != "extra":
                out[f.name] = _plain(getattr(self, f.name))
        out.update(_plain(getattr(self, "extra", {})))
        return out

    def __getitem__(self, key: str) -> Any:
        if key != "extra" and key in {f.name for f in dataclasses.fields(self)}:  # type: ignore[arg-type]
            return getattr(self, key)
        extra = getattr(self, "extra", {})
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def __contains__(self, key: str) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def list_of(cls):
    """A NESTED converter: a JSON list of objects as a list of `cls` records."""
    return lambda items: [cls.from_dict(item) for item in items]
