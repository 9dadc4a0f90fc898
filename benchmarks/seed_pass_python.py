"""Benchmark baseline: FuseMatMulBiasAct + the seed FuseAttentionBlock pass in plain dict-based Python (json.load -> fuse -> json.dump).

Usage: python benchmarks/seed_pass_python.py IN OUT
Prints phase times (load / pass / write, ms) and node counts as one JSON line on stdout.

This is the strongest simple Python baseline: no framework, an id index and consumer lists, one forward
sweep per pass, nodes replaced in place (the fused node keeps the replaced root's id, name, shape and
dtype, as the rule engine does). Semantics follow python/rlx_rules/rules/fusion/{matmul_bias_act,
attention_block}.rlxr; unknown node fields are kept because the node dicts are kept.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _toposorted(nodes: list[dict]) -> list[dict]:
    """Nodes in topological order (unchanged if already ordered; else Kahn's, earliest first)."""
    pos = {n["id"]: i for i, n in enumerate(nodes)}
    if all(pos[j] < i for i, n in enumerate(nodes) for j in n.get("inputs", ())):
        return nodes
    import heapq
    indeg = [len(n.get("inputs", ())) for n in nodes]
    cons: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for j in n.get("inputs", ()):
            cons[pos[j]].append(i)
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in cons[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != len(nodes):
        raise ValueError("the graph has a cycle")
    return [nodes[i] for i in order]


def fuse(doc: dict, threshold: int = 64) -> int:
    """Run both passes on a graph.json dict in place; returns the number of rewrites."""
    nodes = _toposorted(doc["nodes"])
    by_id = {n["id"]: n for n in nodes}
    cons: dict[int, dict[int, int]] = {n["id"]: {} for n in nodes}  # consumer id -> times it uses the node
    for n in nodes:
        i = n["id"]
        for j in n.get("inputs", ()):
            c = cons[j]
            c[i] = c.get(i, 0) + 1
    outputs = set(doc["outputs"])
    dead: set[int] = set()

    def uses(i: int) -> int:
        return len(cons[i])

    def rank(i: int):
        shape = by_id[i].get("shape")
        return None if shape is None else len(shape)

    def unlink(i: int, j: int) -> None:
        c = cons[j]
        if c[i] == 1:
            del c[i]
        else:
            c[i] -= 1

    def kill(i: int) -> None:
        dead.add(i)
        for j in by_id[i].get("inputs", ()):
            unlink(i, j)

    def replace(root: int, op: str, inputs: list[int], attrs: dict) -> None:
        n = by_id[root]
        for j in n.get("inputs", ()):
            unlink(root, j)
        for j in inputs:
            c = cons[j]
            c[root] = c.get(root, 0) + 1
        n["op"] = op
        n["inputs"] = inputs
        n["attrs"] = attrs

    def matmul_add(add: int):
        n = by_id[add]
        ins = n.get("inputs", ())
        if n["op"] != "Add" or len(ins) != 2:
            return None
        for mm, bias in ((ins[0], ins[1]), (ins[1], ins[0])):
            m = by_id[mm]
            r = rank(bias)
            if (m["op"] == "MatMul" and len(m.get("inputs", ())) == 2 and r is not None and r <= 1
                    and uses(mm) == 1 and mm not in outputs and bias != mm):
                return mm, m["inputs"][0], m["inputs"][1], bias
        return None

    fired = 0
    # FuseMatMulBiasAct, activation first (priority 1), then the plain MatMul + Add.
    for n in nodes:
        act = n["id"]
        ins = n.get("inputs", ())
        if act in dead or n["op"] not in ("Gelu", "Silu") or len(ins) != 1:
            continue
        add = ins[0]
        if uses(add) != 1 or add in outputs:
            continue
        m = matmul_add(add)
        if m is None:
            continue
        mm, x, w, bias = m
        op = n["op"]
        kill(add)
        kill(mm)
        replace(act, "FusedMatMulBiasAct", [x, w, bias], {"activation": op})
        fired += 1
    for n in nodes:
        add = n["id"]
        if add in dead:
            continue
        m = matmul_add(add)
        if m is None:
            continue
        mm, x, w, bias = m
        kill(mm)
        replace(add, "FusedMatMulBiasAct", [x, w, bias], {"activation": None})
        fired += 1

    # FuseAttentionBlock, gated on some Input of rank >= 2 with static dim0 * dim1 <= threshold.
    def small(n: dict) -> bool:
        shape = n.get("shape") or ()
        return (n["op"] == "Input" and len(shape) >= 2 and all(type(d) is int for d in shape[:2])
                and shape[0] * shape[1] <= threshold)

    def plain_fused_mm(n: dict) -> bool:
        return (n["op"] == "FusedMatMulBiasAct" and len(n.get("inputs", ())) == 3
                and n.get("attrs", {}).get("activation") is None)

    if any(small(n) for n in nodes if n["id"] not in dead):
        for o in nodes:
            out = o["id"]
            if out in dead or not plain_fused_mm(o):
                continue
            attn = o["inputs"][0]
            a = by_id[attn]
            aa = a.get("attrs", {})
            ains = a.get("inputs", ())
            if (a["op"] != "Attention" or len(ains) != 4 or aa.get("mask_kind") != "Custom"
                    or aa.get("score_scale") is not None or aa.get("attn_logit_softcap") is not None
                    or uses(attn) != 1 or attn in outputs):
                continue
            heads, head_dim = aa.get("num_heads"), aa.get("head_dim")
            if type(heads) is not int or type(head_dim) is not int:
                continue
            h = heads * head_dim
            q, k, v, mask = ains
            qins = by_id[q].get("inputs", ())
            if not qins:
                continue
            qkv = qins[0]
            p = by_id[qkv]
            if not plain_fused_mm(p) or uses(qkv) != 3 or qkv in outputs or p.get("shape") is None:
                continue
            last = len(p["shape"]) - 1

            def narrow_ok(i: int, start: int) -> bool:
                nn = by_id[i]
                at = nn.get("attrs", {})
                ins = nn.get("inputs", ())
                return (nn["op"] == "Narrow" and len(ins) == 1 and ins[0] == qkv and at.get("axis") == last
                        and at.get("start") == start and at.get("len") == h and uses(i) == 1 and i not in outputs)

            if not (narrow_ok(q, 0) and narrow_ok(k, h) and narrow_ok(v, 2 * h)) or len({q, k, v}) != 3:
                continue
            hidden, qkv_w, qkv_b = p["inputs"]
            _, out_w, out_b = o["inputs"]
            for d in (attn, q, k, v, qkv):
                kill(d)
            replace(out, "FusedAttentionBlock", [hidden, qkv_w, out_w, mask, qkv_b, out_b],
                    {"num_heads": heads, "head_dim": head_dim, "has_bias": True, "has_rope": False})
            fired += 1

    doc["nodes"] = [n for n in nodes if n["id"] not in dead]
    return fired


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: seed_pass_python.py IN OUT", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    with open(argv[0], "rb") as f:
        doc = json.load(f)
    t1 = time.perf_counter()
    before = len(doc["nodes"])
    threshold = int(os.environ.get("RLX_FUSE_ATTN_THRESHOLD", "64"))
    rewrites = fuse(doc, threshold)
    t2 = time.perf_counter()
    with open(argv[1], "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
    t3 = time.perf_counter()
    print(json.dumps({"mode": "python", "nodes_before": before, "nodes_after": len(doc["nodes"]),
                      "rewrites": rewrites, "load_ms": (t1 - t0) * 1e3, "pass_ms": (t2 - t1) * 1e3,
                      "write_ms": (t3 - t2) * 1e3, "total_ms": (t3 - t0) * 1e3}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
