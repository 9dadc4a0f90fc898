"""Graphs in Python: a thin, notebook-friendly view over the Rust-held graph (load, inspect, write)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

from . import _native


@dataclass(frozen=True)
class Node:
    """One node, as read from the graph's JSON."""

    id: int
    op: str
    inputs: tuple[int, ...]
    attrs: dict
    shape: Optional[tuple]
    dtype: Optional[str]
    name: Optional[str]
    facts: tuple[str, ...] = ()  # what the node's values are known to satisfy (see rlx_rules.facts)

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        ins = f"({', '.join(f'%{i}' for i in self.inputs)})" if self.inputs else ""
        attrs = f" {self.attrs}" if self.attrs else ""
        shape = f" : {list(self.shape)}" if self.shape is not None else ""
        return f"%{self.id}{label} = {self.op}{ins}{attrs}{shape}"


class Graph:
    """A validated graph. Nodes are in topological order. Immutable: rewrites return a new Graph."""

    def __init__(self, native: "_native.Graph", source_path: Optional[str] = None):
        self._native = native
        self._nodes: Optional[list[Node]] = None
        self.source_path = source_path  # the file it was loaded from (relative "weights" resolve against it)

    @classmethod
    def from_json(cls, text: Union[str, bytes], *, max_nodes: Optional[int] = None) -> "Graph":
        """Parse and validate graph.json text. More than `max_nodes` nodes (default 10 million) is a GraphError."""
        if not isinstance(text, (str, bytes, bytearray)):
            from .errors import GraphError

            raise GraphError(f"graph.json text must be a str or bytes, not {type(text).__name__}")
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                from .errors import GraphError

                raise GraphError(f"invalid JSON: not UTF-8 text ({e.reason} at byte {e.start})") from None
        return cls(_native.Graph.from_json(text, count_argument("max_nodes", max_nodes)))

    @classmethod
    def from_dict(cls, data: dict, *, max_nodes: Optional[int] = None) -> "Graph":
        """A graph from its JSON as Python data. Data that JSON cannot hold (NaN, a set, nesting too deep to
        encode) is a GraphError."""
        from .errors import GraphError

        if not isinstance(data, dict):
            raise GraphError(f"a graph must be a dict (graph.json's object), not {type(data).__name__}")
        try:
            text = json.dumps(data, allow_nan=False)
        except RecursionError:
            raise GraphError("invalid JSON: the data nests too deeply to encode") from None
        except (TypeError, ValueError) as e:
            raise GraphError(f"invalid JSON: the data cannot be written as JSON: {e}") from None
        return cls.from_json(text, max_nodes=max_nodes)

    @classmethod
    def load(cls, path: Union[str, os.PathLike], *, max_nodes: Optional[int] = None,
             max_bytes: Optional[int] = None) -> "Graph":
        """Read a graph.json file: at most `max_bytes` bytes (default 1 GiB; a larger file is refused before it
        is read, and a FIFO or device stops at the limit) and `max_nodes` nodes (default 10 million)."""
        return cls(_native.Graph.load(_path_arg(path), count_argument("max_nodes", max_nodes),
                                      count_argument("max_bytes", max_bytes)), source_path=os.fspath(path))

    def to_json(self, pretty: bool = False) -> str:
        return self._native.to_json(pretty)

    def to_dict(self) -> dict:
        return json.loads(self.to_json())

    def write(self, path: Union[str, os.PathLike], pretty: bool = False, *, inputs: Sequence = (),
              follow_symlinks: bool = False) -> None:
        """Write atomically (rlx_rules.safe_write): a unique temporary file in the same folder, fsync, rename.
        Refuses a target that is not a regular file, a symlink (unless `follow_symlinks`), or one of `inputs`.
        The JSON (the bytes of `to_json`) streams from the Rust graph into the temporary file, without the GIL
        and without the whole text in memory (on Windows: `to_json`'s text, written at once)."""
        from .safe_write import atomic_output, atomic_write

        if not isinstance(path, (str, os.PathLike)):
            from .errors import ParamError

            raise ParamError(f"the output path must be a str or os.PathLike, not {type(path).__name__}")
        if os.name != "posix":  # the binding borrows a descriptor as a file on unix only
            atomic_write(path, self.to_json(pretty), inputs=inputs, follow_symlinks=follow_symlinks)
            return
        with atomic_output(path, inputs=inputs, follow_symlinks=follow_symlinks) as (fd, _tmp):
            self._native.write_to_fd(fd, pretty)

    def field(self, name: str) -> Any:
        """A top-level graph.json field that the graph itself does not use (`"weights"`, ...); None if absent."""
        text = self._native.field(name)
        return None if text is None else json.loads(text)

    @property
    def weights_file(self) -> Optional[str]:
        """The .npz its `"weights"` field names, resolved against the file the graph was loaded from; None when
        it names none. Commands count it among their inputs, which no output may replace."""
        ref = self.field("weights")
        if not isinstance(ref, str) or not ref:
            return None
        if os.path.isabs(ref) or self.source_path is None:
            return ref
        return os.path.join(os.path.dirname(os.path.abspath(self.source_path)), ref)

    @property
    def name(self) -> Optional[str]:
        return self._native.name

    @property
    def outputs(self) -> list[int]:
        return list(self._native.outputs)

    @property
    def warnings(self) -> list[str]:
        return list(self._native.warnings)

    @property
    def nodes(self) -> list[Node]:
        if self._nodes is None:
            self._nodes = [
                Node(n["id"], n["op"], tuple(n.get("inputs", ())), n.get("attrs", {}),
                     tuple(n["shape"]) if n.get("shape") is not None else None, n.get("dtype"), n.get("name"),
                     tuple(n.get("facts", ())))
                for n in self.to_dict()["nodes"]
            ]
        return self._nodes

    def node(self, id: int) -> Node:
        for n in self.nodes:
            if n.id == id:
                return n
        raise KeyError(f"no node with id {id}")

    def find(self, op: str) -> list[Node]:
        """Nodes with op `op`, in topological order."""
        return [n for n in self.nodes if n.op == op]

    def op_counts(self) -> Counter:
        return Counter(self._native.op_counts())

    def __len__(self) -> int:
        return len(self._native)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Graph) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        try:
            counts = self.op_counts()
        except _native.GraphError as e:  # taken by an apply(consume=True), the CLI's path
            return f"<Graph ({e.kind})>"
        ops = ", ".join(f"{op}×{n}" for op, n in counts.most_common(6))
        more = "" if len(counts) <= 6 else ", …"
        return f"<Graph {self.name!r}: {len(self)} nodes ({ops}{more}), outputs {self.outputs}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{op}</td><td>{n}</td></tr>" for op, n in self.op_counts().most_common())
        return (f"<b>Graph {self.name or ''}</b>: {len(self)} nodes, outputs {self.outputs}"
                f"<table><tr><th>op</th><th>count</th></tr>{rows}</table>")


def count_argument(name: str, value: Optional[int]) -> Optional[int]:
    """A count or limit argument as given: None or an int (not a bool), else a ParamError. Its range is checked
    where it is used (the core refuses a negative one)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        from .errors import ParamError

        raise ParamError(f"{name} must be an integer, not {type(value).__name__}")
    return value


def _path_arg(path: object) -> str:
    """`path` as a str path; anything else (a number, None, bytes) is a GraphError naming what it was."""
    if not isinstance(path, (str, os.PathLike)):
        from .errors import GraphError

        raise GraphError(f"expected a graph: a path, graph.json text, a dict or a Graph; got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        return _path_arg(os.fsdecode(text))
    return text


def load_graph(source: Union[str, os.PathLike, dict, Graph]) -> Graph:
    """A Graph from a path, a graph.json string, a dict, or a Graph (returned as is). Anything else is a
    GraphError."""
    if isinstance(source, Graph):
        return source
    if isinstance(source, dict):
        return Graph.from_dict(source)
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return Graph.from_json(source)
    return Graph.load(_path_arg(source))
