"""rlx_rules.safe_write: atomic writes, and the targets every writer refuses (non-regular files, symlinks, inputs)."""

import json
import os
import threading

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main
from rlx_rules.errors import OutputRefused, WriteError
from rlx_rules.safe_write import atomic_write, check_target

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")


def listing(folder):
    return sorted(os.listdir(folder))


def test_writes_and_replaces_a_regular_file(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write(target, "first")
    atomic_write(target, b"second")
    assert target.read_text() == "second"
    assert listing(tmp_path) == ["out.txt"]


def test_refusals_are_graph_errors_with_the_usual_message(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(rlx_rules.GraphError, match=r"cannot write .*folder: it is a directory"):
        atomic_write(folder, "x")
    assert issubclass(OutputRefused, WriteError) and issubclass(WriteError, rlx_rules.GraphError)


@needs_fifo
def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for writing would block: the refusal must come first
    with pytest.raises(OutputRefused, match="a FIFO"):
        atomic_write(fifo, "x")
    assert listing(tmp_path) == ["pipe"]


def test_a_symlink_is_refused_unless_followed(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with pytest.raises(OutputRefused, match="symbolic link"):
        atomic_write(link, "new")
    assert real.read_text() == "old" and link.is_symlink()
    atomic_write(link, "new", follow_symlinks=True)  # writes the target; the link stays a link
    assert real.read_text() == "new" and link.is_symlink()


def test_a_symlink_to_a_folder_is_refused_even_when_followed(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "to_d").symlink_to(tmp_path / "d")
    with pytest.raises(OutputRefused, match="a directory"):
        atomic_write(tmp_path / "to_d", "x", follow_symlinks=True)


def test_an_input_is_refused_also_through_another_name(tmp_path):
    source = tmp_path / "model.json"
    source.write_text("input")
    (tmp_path / "alias.json").symlink_to(source)
    os.link(source, tmp_path / "hard.json")
    with pytest.raises(OutputRefused, match="is the input"):
        atomic_write(source, "x", inputs=[source])
    with pytest.raises(OutputRefused, match="is the input"):
        atomic_write(tmp_path / "hard.json", "x", inputs=[tmp_path / "alias.json"])
    assert source.read_text() == "input"
    assert check_target(tmp_path / "new.json", inputs=[source]) == str(tmp_path / "new.json")


def test_a_missing_folder_is_a_write_error_and_leaves_nothing(tmp_path):
    with pytest.raises(WriteError, match="cannot write .*No such file"):
        atomic_write(tmp_path / "no" / "out.txt", "x")
    assert listing(tmp_path) == []


def test_an_error_while_writing_removes_the_temporary_file(tmp_path):
    from rlx_rules.safe_write import atomic_output

    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as (fd, _tmp):
            os.write(fd, b"half")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "old" and listing(tmp_path) == ["out.txt"]


def test_eight_concurrent_writers_leave_one_whole_file(tmp_path):
    target = tmp_path / "shared.json"
    payloads = [json.dumps({"writer": k, "data": [k] * 20000}) for k in range(8)]
    errors = []
    start = threading.Barrier(8)

    def write(k):
        try:
            start.wait()
            for _ in range(5):
                atomic_write(target, payloads[k])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text() in payloads  # one writer's whole payload, never a mix
    assert listing(tmp_path) == ["shared.json"]


# ---- every command passes its inputs ----


@pytest.fixture
def graph_file(small_bert_file):
    return small_bert_file


def test_show_refuses_to_draw_over_its_input(graph_file, capsys):
    before = graph_file.read_text()
    assert main(["show", str(graph_file), "--dot", str(graph_file)]) == ExitCode.OUTPUT_ERROR
    assert "is the input" in capsys.readouterr().err and graph_file.read_text() == before


def test_export_refuses_to_write_over_its_input(graph_file, capsys):
    before = graph_file.read_text()
    assert main(["export", str(graph_file), "-o", str(graph_file), "--allow-non-rlx", "-q"]) == ExitCode.OUTPUT_ERROR
    assert "is the input" in capsys.readouterr().err and graph_file.read_text() == before


def test_apply_refuses_to_write_over_a_rule_file(graph_file, tmp_path, capsys):
    rules = tmp_path / "r.rlxr"
    rules.write_text("rule r {\n  match { a = Gelu(x) }\n  rewrite a => Relu(x)\n}\n")
    before = rules.read_text()
    assert main(["apply", str(graph_file), "-r", str(rules), "-o", str(rules), "-q"]) == ExitCode.OUTPUT_ERROR
    assert "is the input" in capsys.readouterr().err and rules.read_text() == before


def test_graph_write_refuses_a_fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("POSIX only")
    os.mkfifo(tmp_path / "g.json")
    graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1, hidden=64, heads=4))
    with pytest.raises(OutputRefused, match="a FIFO"):
        graph.write(tmp_path / "g.json")


onnx = pytest.importorskip("onnx")


@pytest.fixture
def model_file(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_import_refuses_to_overwrite_the_model(model_file, capsys):
    before = model_file.read_bytes()
    assert main(["import", str(model_file), "-o", str(model_file), "-q"]) == ExitCode.OUTPUT_ERROR
    assert "is the input" in capsys.readouterr().err and model_file.read_bytes() == before


def test_import_refuses_the_weights_file_as_output(model_file, tmp_path, capsys):
    out = tmp_path / "w.npz"
    assert main(["import", str(model_file), "-o", str(out), "--weights", str(out), "-q"]) == ExitCode.OUTPUT_ERROR
    assert "weights file" in capsys.readouterr().err and not out.exists()


def test_import_refuses_weights_over_the_model(model_file, tmp_path, capsys):
    before = model_file.read_bytes()
    out = tmp_path / "g.json"
    assert main(["import", str(model_file), "-o", str(out), "--weights", str(model_file), "-q"]) \
        == ExitCode.OUTPUT_ERROR
    assert "is the input" in capsys.readouterr().err and model_file.read_bytes() == before and not out.exists()
