"""The compiled-rule cache: a rule set's program and warnings on disk, keyed by every file it read, the compiler
and the op registry, so that a command does not parse, check and compile the same rules on every run.

An entry is found by a key over the rule files as named (with the working folder, since diagnostics name files
relative to it), the cache format, the package version, a hash of the front end's sources (lang/*.py, the
grammar, api.py, Lark's version), of the op registry (data/ops.json, data/builtins.json) and of the core's
resolved program layout (_native.program_layout()). The entry lists every file the compilation read (the named
files and everything they include) with its real path and a hash of the text that was compiled; a lookup
re-reads and re-hashes each one, so any change to any of them is a miss. Parameter values (--set, environment)
are not part of the program: they are resolved when the rules are applied.

An entry holds the program twice: its JSON text (what `RuleSet.program` reads, parsed only then) and the core's
compact form of the validated program (`_native.Program.to_bytes`), which a warm start loads in well under a
millisecond instead of parsing and validating the JSON again (about 10 ms for @onnx). The compact form is used
only when the whole entry matches its SHA-256 (a truncated or damaged entry is a miss, never decoded), its key
names this build's layout, and the cache folder is the user's own and writable by no one else (else the JSON,
validated, is used): the core trusts it as Python trusts its own __pycache__.

Entries are written atomically under unique temporary names (safe_write), so concurrent processes never see a
half-written one. A missing, unwritable or read-only folder, or a corrupt entry, falls back to compiling: the
cache never makes a command fail. Only successful compilations are stored. The folder is
$RLX_RULES_CACHE_DIR, else $XDG_CACHE_HOME/rlx-rules, else ~/.cache/rlx-rules; RLX_RULES_NO_CACHE=1 turns
the cache off. Deleting the folder at any time is safe.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from importlib import util as importlib_util
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from .._native import sha256_hex
from ..errors import Diagnostic

# Bump when the entry layout or anything stored in it changes meaning.
FORMAT = 3
# Entries kept at most; the oldest (by modification time) go first when a new one is written.
MAX_ENTRIES = 256


def cache_dir() -> Path:
    """$RLX_RULES_CACHE_DIR, else $XDG_CACHE_HOME/rlx-rules, else ~/.cache/rlx-rules."""
    explicit = os.environ.get("RLX_RULES_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlx-rules"


def enabled() -> bool:
    """False when RLX_RULES_NO_CACHE is set to anything but "" or "0"."""
    return os.environ.get("RLX_RULES_NO_CACHE", "") in ("", "0")


def _digest(*parts: bytes) -> str:
    """The SHA-256 of `parts`, each preceded by its length (in the core: hashlib would load OpenSSL)."""
    return sha256_hex([piece for part in parts for piece in (len(part).to_bytes(8, "little"), part)])


PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """fingerprint() of the installed package, computed once per process."""
    return fingerprint(PACKAGE)


def fingerprint(package: Path) -> str:
    """The cache format, the package version, the front end's sources (lang/*.py, the grammar, errors.py, and
    api.py, which puts the stages together), Lark's version and the op registry (data/ops.json,
    data/builtins.json) of `package`, as one hash."""
    from .._native import __version__, program_layout

    files = sorted(p for p in (package / "lang").iterdir() if p.suffix == ".py") + [package / name for name in (
        "lang/grammar.lark", "errors.py", "api.py", "data/ops.json", "data/builtins.json")]
    lark = importlib_util.find_spec("lark")  # its version, without importing it
    if lark is not None and lark.origin:
        files.append(Path(lark.origin))
    parts = [str(FORMAT).encode(), __version__.encode(), program_layout().encode()]
    for path in files:
        parts += [path.name.encode(), path.read_bytes()]
    return _digest(*parts)


def _key(paths: Sequence[str]) -> str:
    return _digest(compiler_fingerprint().encode(), os.getcwd().encode(), json.dumps(list(paths)).encode())


def _read_source(path: str, max_bytes: int) -> Optional[str]:
    """The text of a rule file as the parser reads it, or None when it cannot be read or is over the limit
    (the compiler then reports why)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as fh:
            data = fh.read(min(max_bytes, st.st_size) + 1)  # the file's size bounds what read() allocates
        if len(data) > max_bytes:
            return None
        return data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


def _text_hash(text: str) -> str:
    return sha256_hex([text.encode("utf-8", "surrogatepass")])


def _entry_path(paths: Sequence[str]) -> Path:
    return cache_dir() / "programs" / f"{_key(paths)}.json"


class Hit(NamedTuple):
    """A cache hit: the program's JSON text, its compact form (None where the folder is not private: the JSON
    is then validated), what a RuleSet needs of it (api.outline_of), and the compilation's warnings."""

    text: str
    compact: Optional[bytes]
    outline: dict
    warnings: list[Diagnostic]


def load(paths: Sequence[str], max_bytes: int) -> Optional[Hit]:
    """The cached program of these rule files (see store), or None on a miss, a stale or a corrupt entry."""
    try:
        target = _entry_path(paths)
        raw = target.read_bytes()
        digest, _, body = raw.partition(b"\n")
        if digest.decode("ascii") != sha256_hex([body]):
            return None
        header, _, payload = body.partition(b"\n")
        entry = json.loads(header)
        for display, real, text_hash in entry["files"]:
            text = _read_source(display, max_bytes)
            if text is None or _text_hash(text) != text_hash or os.path.realpath(display) != real:
                return None
        size = entry["compact"]
        if not isinstance(size, int) or not 0 <= size <= len(payload):
            return None
        outline = {"phases": list(entry["outline"]["phases"]), "params": list(entry["outline"]["params"])}
        compact = payload[:size] if _private(target.parent) else None
        return Hit(payload[size:].decode("utf-8"), compact, outline, [_diagnostic(w) for w in entry["warnings"]])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _private(folder: Path) -> bool:
    """Whether `folder` (the entries' folder, made 0700 by store) is this user's and no one else can write to it."""
    if not hasattr(os, "getuid"):
        return False  # no owner to compare with: use the JSON form
    st = os.stat(folder)
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def store(paths: Sequence[str], sources: dict[str, str], program: str, outline: dict,
          warnings: Sequence[Diagnostic], compact: bytes) -> None:
    """Record a successful compilation of `paths`: `sources` is every file it read (display name -> the text
    compiled), `program` the program's JSON text, `outline` what a RuleSet needs of it without parsing it
    (api.outline_of), `compact` the validated program's `_native.Program.to_bytes()`. The entry is a SHA-256
    of the rest, a line of JSON (files, outline, warnings, the compact form's size), the compact form, and the
    program's JSON text. Any failure to write is ignored."""
    from ..safe_write import atomic_write
    from ..errors import RlxRulesError

    header = {
        "files": [[display, os.path.realpath(display), _text_hash(text)] for display, text in sources.items()],
        "outline": outline,
        "warnings": [_diagnostic_dict(w) for w in warnings],
        "compact": len(compact),
    }
    body = json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n" + compact + program.encode("utf-8")
    try:
        target = _entry_path(paths)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # per user: others cannot plant entries
        atomic_write(target, sha256_hex([body]).encode("ascii") + b"\n" + body)
        _prune(target.parent)
    except (OSError, RlxRulesError):
        pass


def _prune(folder: Path) -> None:
    entries = []
    for path in folder.glob("*.json"):
        try:
            entries.append((path.stat().st_mtime, path))
        except OSError:
            continue
    if len(entries) <= MAX_ENTRIES:
        return
    for _, path in sorted(entries)[: len(entries) - MAX_ENTRIES]:
        try:
            path.unlink()
        except OSError:
            pass


def _diagnostic_dict(d: Diagnostic) -> dict:
    loc = None if d.loc is None else [d.loc.file, d.loc.line, d.loc.col, d.loc.end_line, d.loc.end_col]
    return {"loc": loc, "message": d.message, "severity": d.severity, "source_line": d.source_line}


def _diagnostic(data: dict) -> Diagnostic:
    loc = None
    if data["loc"] is not None:
        from .ast import Loc

        file, line, col, end_line, end_col = data["loc"]
        loc = Loc(str(file), int(line), int(col), int(end_line), int(end_col))
    return Diagnostic(loc, str(data["message"]), str(data["severity"]), data["source_line"])
