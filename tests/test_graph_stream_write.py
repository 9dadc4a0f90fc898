"""Graph.write streams the Rust graph's JSON into safe_write's temporary file: the bytes of to_json, typed errors."""

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlx_rules import Graph, examples, load_rules
from rlx_rules.errors import OutputError, WriteError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
posix_only = pytest.mark.skipif(os.name != "posix", reason="the binding borrows a descriptor on unix only")


@pytest.fixture(scope="module")
def big_graph():
    """A generated 1000-layer BERT graph, and the same graph after the seed rules (ids no longer in order)."""
    g = Graph.from_dict(examples.bert_encoder(1000))
    return g, load_rules("@seed").rewrite(g)


def graphs(big_graph):
    return [Graph.load(p) for p in sorted(EXAMPLES.glob("*.json"))] + list(big_graph)


@pytest.mark.parametrize("pretty", [False, True])
def test_write_is_byte_for_byte_to_json(tmp_path, big_graph, pretty):
    for k, g in enumerate(graphs(big_graph)):
        out = tmp_path / f"g{k}.json"
        g.write(out, pretty=pretty)
        assert out.read_bytes() == g.to_json(pretty).encode("utf-8")
    assert json.loads(out.read_bytes()) == big_graph[1].to_dict()


@posix_only
def test_write_to_fd_writes_at_the_offset_and_leaves_the_descriptor_open(tmp_path):
    g = Graph.from_dict(examples.bert_encoder(2))
    fd = os.open(tmp_path / "out.json", os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"head:")
        g._native.write_to_fd(fd, True)
        os.write(fd, b":tail")  # still open, and the offset moved past the graph
    finally:
        os.close(fd)
    assert (tmp_path / "out.json").read_bytes() == b"head:" + g.to_json(True).encode() + b":tail"


@posix_only
def test_a_bad_descriptor_is_a_typed_os_error(tmp_path):
    g = Graph.from_dict(examples.bert_encoder(1))
    fd = os.open(tmp_path / "x", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    for bad in (-1, fd):
        with pytest.raises(OutputError) as info:
            g._native.write_to_fd(bad)
        assert isinstance(info.value, OSError) and info.value.errno == errno.EBADF and info.value.kind == "io"
    read_only = os.open(tmp_path / "x", os.O_RDONLY)
    try:
        with pytest.raises(OutputError) as info:
            g._native.write_to_fd(read_only)
        assert info.value.errno == errno.EBADF
    finally:
        os.close(read_only)


@posix_only
def test_a_closed_pipe_is_epipe_and_the_write_runs_without_the_gil(big_graph):
    g = big_graph[0]
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(OutputError) as info:  # Python ignores SIGPIPE: the write answers EPIPE
        g._native.write_to_fd(w)
    os.close(w)
    assert info.value.errno == errno.EPIPE and "Broken pipe" in str(info.value)
    # A reader thread drains the pipe while the writer fills it: with the GIL held the writer would block on the
    # full pipe (64 KiB) while the reader waits for the GIL, and the join below would give up.
    r, w = os.pipe()
    chunks, errors = [], []

    def read_all():
        while data := os.read(r, 1 << 16):
            chunks.append(data)

    reader = threading.Thread(target=read_all)
    reader.start()
    try:
        g._native.write_to_fd(w, False)
    except OSError as e:
        errors.append(e)
    finally:
        os.close(w)
        reader.join(timeout=120)
        os.close(r)
    assert not errors and not reader.is_alive()
    assert b"".join(chunks) == g.to_json().encode()


FULL_DISK = """
import os, resource, sys
from rlx_rules import Graph, examples
from rlx_rules.errors import WriteError
g = Graph.from_dict(examples.bert_encoder(200))
assert len(g.to_json()) > 200_000
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # writes past 100 kB fail with EFBIG
try:
    g.write(sys.argv[1], pretty=True)
except WriteError as e:
    print(type(e).__name__, e)
    sys.exit(3)
"""


@posix_only
def test_a_full_file_system_leaves_the_old_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(target)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 3, run.stderr
    assert run.stdout.startswith(f"WriteError cannot write {target}: File too large")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]


def test_a_refused_target_is_refused_before_anything_is_written(tmp_path):
    g = Graph.from_dict(examples.bert_encoder(1))
    (tmp_path / "real.json").write_text("old")
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    with pytest.raises(WriteError, match="symbolic link"):
        g.write(tmp_path / "link.json")
    assert (tmp_path / "real.json").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]
