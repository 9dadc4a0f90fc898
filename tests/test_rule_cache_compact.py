"""The compiled-rule cache's compact program (Program.to_bytes/from_bytes): it round-trips and applies as the JSON
does, a warm hit loads it, and a damaged entry, another build's layout or a folder others can write to never
gets it decoded."""

from __future__ import annotations

import hashlib
import json

import pytest

import rlx_rules
from rlx_rules import _native
from rlx_rules.lang import cache as rule_cache
from test_rule_cache import cache_dir  # noqa: F401 - tests/: the autouse fixture (a cache folder of the test's own)

RULES = ("rule a { match { n = Gelu(x) } rewrite n => Relu(x) }\n"
         "rule b { match { n = Relu(x) } where rank(x) > 1 rewrite n => Tanh(x) }\n")


def rules_file(tmp_path):
    (tmp_path / "r.rlxr").write_text(RULES)
    return "r.rlxr"


def only_entry(folder):
    [entry] = (folder / "programs").glob("*.json")
    return entry


def compact_span(raw: bytes) -> tuple[int, int]:
    """Where the compact program lies in an entry (digest line, header line, compact, JSON)."""
    header_start = raw.index(b"\n") + 1
    compact_start = raw.index(b"\n", header_start) + 1
    size = json.loads(raw[header_start:compact_start - 1])["compact"]
    return compact_start, compact_start + size


@pytest.mark.parametrize("name", ["@seed", "@default", "@onnx"])
def test_the_compact_form_round_trips_and_applies_as_the_json_does(name):
    rules = rlx_rules.compile_rules(name)
    data = rules._native.to_bytes()
    again = _native.Program.from_bytes(data)
    assert again.to_bytes() == data and again.rule_names == rules.rule_names
    assert len(data) < len(json.dumps(rules.program))
    graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=2, hidden=64, heads=4))
    fused_json, report_json = rules._native.apply(graph._native)
    fused_compact, report_compact = again.apply(graph._native)
    assert fused_compact.to_json() == fused_json.to_json()
    strip = lambda text: {k: v for k, v in json.loads(text).items() if "time" not in k and k != "phases"}  # noqa: E731
    assert strip(report_compact) == strip(report_json)


def test_a_warm_hit_loads_the_compact_form(tmp_path, cache_dir):
    path = rules_file(tmp_path)
    first = rlx_rules.compile_rules(path, cache=True)
    hit = rule_cache.load([path], 1 << 20)
    assert hit is not None and hit.compact == first._native.to_bytes()
    second = rlx_rules.compile_rules(path, cache=True)
    assert second._compact == hit.compact and second.rule_names == ["a", "b"]
    assert second.program == first.program  # the JSON text is kept for .program
    assert second.with_params()._compact == hit.compact


@pytest.mark.parametrize("damage", ["truncated in the compact form", "one bit flipped in the compact form",
                                    "one bit flipped in the JSON", "compact form cut, digest made to match"])
def test_a_damaged_entry_is_never_decoded_and_is_rewritten(tmp_path, cache_dir, damage, monkeypatch):
    path = rules_file(tmp_path)
    expected = rlx_rules.compile_rules(path, cache=True)
    entry = only_entry(cache_dir)
    raw = entry.read_bytes()
    start, end = compact_span(raw)
    if damage == "truncated in the compact form":
        entry.write_bytes(raw[: (start + end) // 2])
    elif damage.startswith("one bit flipped"):
        at = (start + end) // 2 if "compact" in damage else (end + len(raw)) // 2
        entry.write_bytes(raw[:at] + bytes([raw[at] ^ 0x10]) + raw[at + 1:])
    else:  # a forged or miswritten entry whose digest holds: the core refuses the bytes, typed
        body = raw[raw.index(b"\n") + 1:]
        header, rest = body.split(b"\n", 1)
        fields = json.loads(header)
        size = fields["compact"]
        fields["compact"] = size // 2
        body = json.dumps(fields).encode() + b"\n" + rest[: size // 2] + rest[size:]
        entry.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        with pytest.raises(rlx_rules.ProgramError) as refused:
            _native.Program.from_bytes(rule_cache.load([path], 1 << 20).compact)
        assert refused.value.kind == "format"
    if damage != "compact form cut, digest made to match":
        assert rule_cache.load([path], 1 << 20) is None  # the digest catches it before anything is decoded
    again = rlx_rules.compile_rules(path, cache=True)
    assert again.program == expected.program and again.rule_names == expected.rule_names
    assert only_entry(cache_dir).read_bytes() == raw  # rewritten whole


def test_a_folder_others_can_write_to_gets_the_json_validated(tmp_path, cache_dir):
    path = rules_file(tmp_path)
    rlx_rules.compile_rules(path, cache=True)
    (cache_dir / "programs").chmod(0o777)
    hit = rule_cache.load([path], 1 << 20)
    assert hit is not None and hit.compact is None
    rules = rlx_rules.compile_rules(path, cache=True)
    assert rules._compact is None and rules.rule_names == ["a", "b"]


def test_another_builds_layout_is_a_miss(tmp_path, monkeypatch):
    path = rules_file(tmp_path)
    rlx_rules.compile_rules(path, cache=True)
    base = rule_cache.fingerprint(rule_cache.PACKAGE)
    monkeypatch.setattr(_native, "program_layout", lambda: "another build")
    assert rule_cache.fingerprint(rule_cache.PACKAGE) != base
    rule_cache.compiler_fingerprint.cache_clear()
    try:
        assert rule_cache.load([path], 1 << 20) is None
    finally:
        monkeypatch.undo()
        rule_cache.compiler_fingerprint.cache_clear()


def test_bytes_that_are_not_a_program_are_a_typed_error():
    for data in (b"", b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"not a program at all"):
        with pytest.raises(rlx_rules.ProgramError) as refused:
            _native.Program.from_bytes(data)
        assert refused.value.kind == "format"
