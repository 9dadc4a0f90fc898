"""Thread safety: 8 Python threads applying rules to different graphs at once match one thread, result for result."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import rlx_rules

# (layers, batch, seq, hidden, heads, mask_kind, params): sizes and parameters that make different rules fire
CASES = [
    (1, 1, 8, 64, 4, "Custom", {}),
    (2, 1, 8, 64, 4, "Custom", {"RLX_FUSE_ATTN_THRESHOLD": 4}),
    (3, 2, 16, 128, 8, "Causal", {}),
    (4, 1, 100, 64, 4, "Custom", {}),                                   # seq 100 > threshold 64: no attention fusion
    (4, 1, 100, 64, 4, "Custom", {"RLX_FUSE_ATTN_THRESHOLD": 128}),
    (6, "batch", 8, 64, 2, "Custom", {}),                               # a symbolic dim
    (8, 1, 32, 256, 8, "None", {}),
    (12, 2, 8, 64, 4, "Custom", {"RLX_FUSE_ATTN_THRESHOLD": 1}),
]


def run_case(rules, case):
    layers, batch, seq, hidden, heads, mask_kind, params = case
    graph = rlx_rules.Graph.from_dict(rlx_rules.examples.bert_encoder(layers=layers, batch=batch, seq=seq,
                                                                     hidden=hidden, heads=heads, mask_kind=mask_kind))
    fused, report = rules.apply(graph, params)
    near = rules.explain(graph, params)
    return fused.to_json(), report.data["ops_after"], [p["stop"] for p in report.phases], \
        [(m["rule"], m.get("root")) for m in near]


def test_eight_threads_match_sequential_results():
    rules = rlx_rules.load_rules()
    sequential = [run_case(rules, c) for c in CASES * 3]
    assert len({s[0] for s in sequential}) == len(CASES)  # the cases really differ
    barrier = threading.Barrier(8)

    def job(case):
        barrier.wait(timeout=60)
        return run_case(rules, case)

    with ThreadPoolExecutor(max_workers=8) as pool:
        first = list(pool.map(job, CASES))  # 8 cases on 8 threads, released together
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda c: run_case(rules, c), CASES * 3))
    assert first == sequential[:len(CASES)]
    assert parallel == sequential


def test_threads_with_their_own_rule_sets_and_loads():
    def job(k):
        rules = rlx_rules.load_rules(params={"RLX_FUSE_ATTN_THRESHOLD": 4 + k})
        graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1 + k % 3, seq=8 + k, hidden=64, heads=4))
        return rules.apply(graph)[0].to_json()

    expected = [job(k) for k in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(job, range(16))) == expected
