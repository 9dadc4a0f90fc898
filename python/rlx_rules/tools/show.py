"""Graph summaries (size, op histogram, inputs, outputs) and Graphviz drawings, before and after rules (`rlx-rules show`).

    rlx-rules show model.graph.json                              # summary
    rlx-rules show model.graph.json -r                           # ... and after the bundled rules
    rlx-rules show model.graph.json --node 12 --radius 2 --dot around12.dot
    rlx-rules show model.graph.json -r my.rlxr --svg fused.svg   # needs Graphviz's `dot`

`--dot` writes DOT text (no dependency). `--svg` runs Graphviz's `dot` (an optional extra) and fails
with a clear message when it is missing. With `--rules`, the drawing holds the graph before and
after rewriting side by side; nodes the rules created are filled and drawn bold ("fused").
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import deque
from typing import Optional

from ..errors import GraphError
from ..graph import Graph, Node


# ---- summary ----

def _shape(node: Node) -> str:
    return "[" + ", ".join(str(d) for d in node.shape) + "]" if node.shape is not None else "?"


def summary(graph: Graph, title: Optional[str] = None) -> str:
    """A text summary: nodes and edges, op histogram, the graph's inputs and outputs."""
    nodes = graph.nodes
    edges = sum(len(n.inputs) for n in nodes)
    lines = [f"{title or 'graph'} {graph.name or ''}".rstrip() + f": {len(nodes)} nodes, {edges} edges"]
    lines.append("ops:")
    for op, count in sorted(graph.op_counts().items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {op:<28} {count}")
    inputs = [n for n in nodes if n.op == "Input"]
    params = [n for n in nodes if n.op in ("Param", "Constant")]
    lines.append(f"inputs ({len(inputs)}):")
    lines.extend(f"  %{n.id} {n.name or ''} {_shape(n)} {n.dtype or ''}".rstrip() for n in inputs)
    if params:
        lines.append(f"params and constants: {len(params)}")
    by_id = {n.id: n for n in nodes}
    lines.append(f"outputs ({len(graph.outputs)}):")
    for out in graph.outputs:
        n = by_id.get(out)
        lines.append(f"  %{out} {n.op if n else '?'} {(n.name or '') if n else ''} {_shape(n) if n else ''}".rstrip())
    return "\n".join(lines)


# ---- neighbourhood ----

def neighbourhood(graph: Graph, center: int, radius: int) -> set[int]:
    """Ids within `radius` edges of `center`, following inputs and consumers."""
    if center not in {n.id for n in graph.nodes}:
        raise GraphError(f"no node with id {center} in the graph")
    adjacent: dict[int, set[int]] = {n.id: set() for n in graph.nodes}
    for n in graph.nodes:
        for i in n.inputs:
            adjacent[n.id].add(i)
            adjacent.setdefault(i, set()).add(n.id)
    seen, queue = {center: 0}, deque([center])
    while queue:
        cur = queue.popleft()
        if seen[cur] >= radius:
            continue
        for nxt in adjacent.get(cur, ()):
            if nxt not in seen:
                seen[nxt] = seen[cur] + 1
                queue.append(nxt)
    return set(seen)


def _after_part(before: Graph, after: Graph, part: set[int]) -> set[int]:
    """The part of the rewritten graph that corresponds to `part` of the original: the ids still there,
    plus fused or new nodes that read from or feed them."""
    ids = {n.id for n in after.nodes}
    base = part & ids
    fused = fused_ids(before, after)
    consumers = {i for n in after.nodes if n.id in base for i in n.inputs}
    return base | {n.id for n in after.nodes if n.id in fused and (set(n.inputs) & base or n.id in consumers)}


def fused_ids(before: Graph, after: Graph) -> set[int]:
    """Nodes of `after` that the rules created or replaced (a new id, or an id whose op changed)."""
    old = {n.id: n.op for n in before.nodes}
    return {n.id for n in after.nodes if old.get(n.id) != n.op}


# ---- DOT ----

def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_nodes(graph: Graph, prefix: str, part: Optional[set[int]], fused: set[int], indent: str) -> list[str]:
    lines = []
    outputs = set(graph.outputs)
    members = [n for n in graph.nodes if part is None or n.id in part]
    present = {n.id for n in members}
    for n in members:
        label = f"%{n.id} {n.op}"
        if n.name:
            label += f"\n{n.name}"
        if n.shape is not None:
            label += f"\n{_shape(n)}"
        style = []
        if n.id in fused:
            style.append('style="filled,bold", fillcolor="#ffd27f", penwidth=2')
        elif n.op in ("Input", "Param", "Constant"):
            style.append('shape=box, style=filled, fillcolor="#eeeeee"')
        if n.id in outputs:
            style.append("peripheries=2")
        attrs = ", ".join([f"label={_q(label)}"] + style)
        lines.append(f"{indent}{prefix}{n.id} [{attrs}];")
    for n in members:
        for k, i in enumerate(n.inputs):
            if i in present:
                lines.append(f"{indent}{prefix}{i} -> {prefix}{n.id};")
            else:  # an input outside the drawn part: a small stub, so the edge is not lost silently
                lines.append(f'{indent}{prefix}cut{i} [label={_q(f"%{i}")}, shape=plaintext, fontcolor=gray];')
                lines.append(f"{indent}{prefix}cut{i} -> {prefix}{n.id} [style=dashed, color=gray];")
    return lines


def to_dot(before: Graph, after: Optional[Graph] = None, *, node: Optional[int] = None, radius: int = 2) -> str:
    """DOT text for `before` (and `after`, side by side, with fused nodes filled), or for the part within
    `radius` edges of `node`."""
    part = neighbourhood(before, node, radius) if node is not None else None
    lines = ["digraph rlx {", "  rankdir=TB;", '  node [shape=ellipse, fontname="Helvetica", fontsize=10];']
    if after is None:
        lines += _dot_nodes(before, "n", part, set(), "  ")
    else:
        fused = fused_ids(before, after)
        after_part = _after_part(before, after, part) if part is not None else None
        lines += ["  subgraph cluster_before {", f"    label={_q('before: ' + str(len(before)) + ' nodes')};"]
        lines += _dot_nodes(before, "b", part, set(), "    ")
        lines += ["  }", "  subgraph cluster_after {",
                  f"    label={_q('after: ' + str(len(after)) + ' nodes (fused filled)')};"]
        lines += _dot_nodes(after, "a", after_part, fused, "    ")
        lines += ["  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


class DotMissing(RuntimeError):
    """Graphviz's `dot` program is not installed."""


def render_svg(dot_text: str, dot_program: Optional[str] = None) -> bytes:
    """Run Graphviz's `dot -Tsvg`. Raises DotMissing when `dot` cannot be found."""
    exe = dot_program or shutil.which("dot")
    if not exe or not os.path.exists(exe):
        raise DotMissing("--svg needs Graphviz's `dot` program, which was not found on PATH "
                         "(install Graphviz: apt-get install graphviz, brew install graphviz, or conda install "
                         "graphviz); --dot FILE writes the DOT text without it")
    done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode("utf-8"), capture_output=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"dot failed ({done.returncode}): {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout
