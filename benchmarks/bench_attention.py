"""Benchmark of the fused attention block (prepared and one-shot) and of attention alone (causal, GQA, sliding window, soft-cap) against numpy, ONNX Runtime and PyTorch: same inputs, one process, alternating calls, medians, ratios and the roofline bound.

Run (from the repository root, after `pip install -e .` or `maturin develop --release`):

    python benchmarks/bench_attention.py                 # all shapes, 1 and 2 threads, then attention alone
    python benchmarks/bench_attention.py --quick         # fewer rounds
    python benchmarks/bench_attention.py --attention     # attention alone only (vs torch SDPA)
    python benchmarks/bench_attention.py --threshold     # where 2 threads start to beat 1

Contenders that are not installed (onnxruntime + onnx, torch, threadpoolctl for numpy's BLAS
threads) are skipped with a note. Timing never enters a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

# Let idle worker threads sleep instead of spinning over the next contender: OpenMP (PyTorch), and
# OpenBLAS (numpy), whose threads otherwise spin for 2^28 cycles (~70 ms) after every call.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

from rlx_rules import _native  # noqa: E402
from rlx_rules import kernels as K  # noqa: E402

SHAPES_BS = [(1, 8), (1, 16), (1, 64), (4, 16), (1, 128), (1, 512), (8, 128)]
MODELS = [(768, 12), (384, 6)]
# Extra rows for the "H=384 and smaller, at 8 to 16 tokens" target.
SMALL_MODELS = [(256, 4), (128, 2)]
SMALL_SHAPES_BS = [(1, 8), (1, 16)]


# ---------------------------------------------------------------- contenders


def numpy_block(x, qkv_w, qkv_b, out_w, out_b, mask, num_heads):
    """The block as a numpy user would write it, in float32."""
    b, s, h = x.shape
    d = h // num_heads
    qkv = x @ qkv_w + qkv_b
    q, k, v = (qkv[..., i * h : (i + 1) * h].reshape(b, s, num_heads, d).transpose(0, 2, 1, 3) for i in range(3))
    scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(d**-0.5)
    scores = np.where(mask[:, None, None, :] < 0.5, np.float32(-1e9), scores)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    return ctx @ out_w + out_b


def make_ort(h, num_heads, qkv_w, qkv_b, out_w, out_b, threads):
    """ONNX Runtime: com.microsoft Attention (QKV projection inside) + MatMul + Add."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Attention", ["hidden", "qkv_w", "qkv_b", "mask"], ["ctx"], domain="com.microsoft", num_heads=num_heads),
        helper.make_node("MatMul", ["ctx", "out_w"], ["proj"]),
        helper.make_node("Add", ["proj", "out_b"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fused_attention_block",
        [
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "S", h]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "S"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "S", h])],
        [numpy_helper.from_array(a, n) for a, n in [(qkv_w, "qkv_w"), (qkv_b, "qkv_b"), (out_w, "out_w"), (out_b, "out_b")]],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda x, mask_i32: sess.run(["out"], {"hidden": x, "mask": mask_i32})[0]


def make_torch_block(qkv_w, qkv_b, out_w, out_b, num_heads):
    """PyTorch: F.linear + scaled_dot_product_attention + F.linear."""
    import torch
    import torch.nn.functional as F

    wq, bq = torch.from_numpy(np.ascontiguousarray(qkv_w.T)), torch.from_numpy(qkv_b)
    wo, bo = torch.from_numpy(np.ascontiguousarray(out_w.T)), torch.from_numpy(out_b)

    def run(x_t, keep_t):
        b, s, h = x_t.shape
        d = h // num_heads
        with torch.inference_mode():
            qkv = F.linear(x_t, wq, bq)
            q, k, v = (t.view(b, s, num_heads, d).transpose(1, 2) for t in qkv.split(h, dim=-1))
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep_t)
            return F.linear(ctx.transpose(1, 2).reshape(b, s, h), wo, bo)

    return run


# ---------------------------------------------------------------- timing


@dataclass
class Result:
    name: str
    times: List[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def block_flops(b: int, s: int, h: int) -> float:
    """Floating-point operations of one fused block on [b, s, h] (projections plus attention)."""
    return 8.0 * b * s * h * h + 4.0 * b * s * s * h


def alternate(contenders: Dict[str, Callable[[], object]], rounds: int, budget_s: float, pause_s: float = 0.06) -> Dict[str, Result]:
    """Rounds of back-to-back bursts per contender, contenders in turn; medians of the timed calls.

    Before each burst the process sleeps `pause_s`, so that the previous contender's worker
    threads go idle instead of competing with this one for the two cores (measured here: ONNX
    Runtime's intra-op workers spin about 30 ms after a run; our pool 0.1 ms; OpenMP and
    OpenBLAS are told above not to spin). A burst then warms up (at least
    3 calls and 30 ms: after a pause the first calls of every contender run up to 2-3x slower, as
    the cores, caches and parked threads wake up, and on this VM two threads need some 10-30 ms
    to get back to full speed) and times 8 calls (2 for calls over
    5 ms). So the medians are steady-state times, as when a model calls layer after layer.
    """
    results = {name: Result(name) for name in contenders}
    for fn in contenders.values():
        fn()
        fn()
    start = time.perf_counter()
    for r in range(rounds):
        for name, fn in contenders.items():
            time.sleep(pause_s)
            warm_start, warm_calls = time.perf_counter(), 0
            while warm_calls < 3 or time.perf_counter() - warm_start < 0.03:
                t0 = time.perf_counter()
                fn()
                last = time.perf_counter() - t0
                warm_calls += 1
            for _ in range(8 if last < 0.005 else 2):
                t0 = time.perf_counter()
                fn()
                results[name].times.append(time.perf_counter() - t0)
        if r >= 3 and time.perf_counter() - start > budget_s:
            break
    return results


def fmt_us(t: float) -> str:
    return f"{t * 1e6:,.0f}"


class Threads:
    """Sets the thread count of numpy's BLAS (via threadpoolctl) and torch for a block of runs."""

    def __init__(self):
        try:
            import threadpoolctl

            self.ctl = threadpoolctl.ThreadpoolController()
        except ImportError:
            self.ctl = None

    def set(self, n: int):
        if self.ctl is not None:
            self.ctl.limit(limits=n, user_api="blas")
        try:
            import torch

            torch.set_num_threads(n)
        except ImportError:
            pass


def available(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------- main benchmark


def bench(args) -> None:
    have_ort = available("onnxruntime") and available("onnx")
    have_torch = available("torch")
    threads_ctl = Threads()
    print(f"# rlx-rules attention kernel benchmark: SIMD path {K.selected_simd()} (available {K.simd_paths()}), cores {os.cpu_count()}")
    print(f"# numpy {np.__version__}{'' if threads_ctl.ctl else ' (threadpoolctl missing: BLAS threads not set)'}", end="")
    if have_ort:
        import onnxruntime

        print(f", onnxruntime {onnxruntime.__version__}", end="")
    else:
        print(", onnxruntime: not installed (skipped)", end="")
    if have_torch:
        import torch

        print(f", torch {torch.__version__}")
    else:
        print(", torch: not installed (skipped)")
    print(f"# load average before: {os.getloadavg()}")
    rng = np.random.default_rng(0)
    roof = {}
    shapes = [tuple(int(v) for v in bs.split("x")) for bs in args.bs]
    models = [(h, nh, shapes) for h, nh in MODELS if h in args.hidden]
    models += [(h, nh, [bs for bs in SMALL_SHAPES_BS if bs in shapes]) for h, nh in SMALL_MODELS if h in args.hidden]
    for h, _, _ in models:
        wbytes = 4 * (4 * h * h + 4 * h)
        for t in args.threads:
            # Bandwidth and peak are maxima: keep the best of three probes, since a probe that
            # shares a core with other work on the machine measures less.
            probes = [_native.machine_roofline(wbytes, t) for _ in range(3)]
            roof[(h, t)] = bw, peak = max(p[0] for p in probes), max(p[1] for p in probes)
            print(f"# roofline H={h} threads={t}: read bandwidth {bw / 1e9:.1f} GB/s over {wbytes / 2**20:.1f} MiB of weights, peak {peak / 1e9:.1f} GFLOP/s")
            if (h, 1) in roof and t > 1 and peak < 0.75 * t * roof[(h, 1)][1]:
                print(f"# warning: the {t}-thread peak is under 75% of {t}x the 1-thread one: other work held a core, so the {t}-thread bounds of H={h} are off")
    rows = []
    for h, nh, model_shapes in models:
        qkv_w = (rng.standard_normal((h, 3 * h)) / np.sqrt(h)).astype(np.float32)
        out_w = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
        qkv_b = (rng.standard_normal(3 * h) * 0.1).astype(np.float32)
        out_b = (rng.standard_normal(h) * 0.1).astype(np.float32)
        prepared = K.FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=nh)
        torch_block = make_torch_block(qkv_w, qkv_b, out_w, out_b, nh) if have_torch else None
        for t in args.threads:
            threads_ctl.set(t)
            ort_run = make_ort(h, nh, qkv_w, qkv_b, out_w, out_b, t) if have_ort else None
            for b, s in model_shapes:
                x = rng.standard_normal((b, s, h), dtype=np.float32)
                mask = np.ones((b, s), np.float32)
                mask[0, s - s // 4 :] = 0.0  # a padded tail
                mask_i32 = mask.astype(np.int32)
                contenders = {
                    "rlx prepared": lambda: prepared(x, mask, threads=t),
                    "rlx one-shot": lambda: K.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, threads=t),
                    "numpy": lambda: numpy_block(x, qkv_w, qkv_b, out_w, out_b, mask, nh),
                }
                if ort_run is not None:
                    contenders["onnxruntime"] = lambda: ort_run(x, mask_i32)
                if torch_block is not None:
                    import torch

                    x_t, keep_t = torch.from_numpy(x), torch.from_numpy(mask >= 0.5)[:, None, None, :]
                    contenders["torch"] = lambda: torch_block(x_t, keep_t)
                # Same answer from everyone (a benchmark of wrong code is worthless).
                want = numpy_block(x.astype(np.float64), qkv_w, qkv_b, out_w, out_b, mask, nh)
                for name, fn in contenders.items():
                    got = np.asarray(fn())
                    err = float(np.max(np.abs(got - want)))
                    if err > 2e-3:
                        print(f"# WARNING {name} differs from the float64 reference by {err:.2e} at H={h} {b}x{s}")
                res = alternate(contenders, args.rounds, args.budget)
                bw, peak = roof[(h, t)]
                flops = block_flops(b, s, h)
                bound = max(4 * (4 * h * h + 4 * h) / bw, flops / peak)
                rows.append((h, nh, b, s, t, {n: r.median for n, r in res.items()}, bound, len(res["rlx prepared"].times)))
                print_row(rows[-1], header=len(rows) == 1)
                sys.stdout.flush()
    print_one_shot_summary(rows)
    print(f"# load average after: {os.getloadavg()}")


def print_one_shot_summary(rows) -> None:
    """The one-shot form against the prepared one, and 2 threads against 1, per shape."""
    by = {(h, b, s, t): med for h, _, b, s, t, med, _, _ in rows}
    keys = sorted({(h, b, s) for h, b, s, _ in by}, key=lambda k: (-k[0], k[1] * k[2]))
    print()
    print("| H | B×S | one-shot / prepared, 1 thread | one-shot / prepared, 2 threads | one-shot 2 threads / 1 | prepared 2 threads / 1 |")
    print("|---|---|---|---|---|---|")
    for h, b, s in keys:
        one, two = by.get((h, b, s, 1)), by.get((h, b, s, 2))
        cell = lambda m: f"{m['rlx one-shot'] / m['rlx prepared']:.2f}" if m else "–"  # noqa: E731
        scale = lambda c: f"{two[c] / one[c]:.2f}" if one and two else "–"  # noqa: E731
        print(f"| {h} | {b}×{s} | {cell(one)} | {cell(two)} | {scale('rlx one-shot')} | {scale('rlx prepared')} |")


COLS = ["rlx prepared", "rlx one-shot", "numpy", "onnxruntime", "torch"]


def print_row(row, header=False):
    h, nh, b, s, t, med, bound, n = row
    if header:
        print("| H/heads | B×S | thr | " + " | ".join(f"{c} µs" for c in COLS) + " | best other / ours | ours / bound | bound µs | calls |")
        print("|" + "---|" * (len(COLS) + 7))
    others = [med[c] for c in ("onnxruntime", "torch") if c in med]
    ours = med["rlx prepared"]
    speed = f"{min(others) / ours:.2f}×" if others else "n/a"
    cells = [fmt_us(med[c]) if c in med else "–" for c in COLS]
    print(f"| {h}/{nh} | {b}×{s} | {t} | " + " | ".join(cells) + f" | {speed} | {ours / bound:.2f} | {fmt_us(bound)} | {n} |")


# ---------------------------------------------------------------- attention alone

# (label, B, S, heads, kv_heads, head_dim, causal, options): BERT-base heads at 512 and 2048 tokens, causal
# 2048, grouped-query shapes (Llama-style 32 query heads over 8 K/V heads, and MQA), a sliding window (Mistral's
# kind, against SDPA with the window as an explicit mask) and a logit soft-cap (Gemma 2's, which SDPA has not:
# against torch's eager matmul, tanh, softmax, matmul).
ATTENTION_CASES = [
    ("MHA 12×64", 1, 512, 12, 12, 64, False, {}),
    ("MHA 12×64", 1, 2048, 12, 12, 64, False, {}),
    ("MHA 12×64 causal", 1, 2048, 12, 12, 64, True, {}),
    ("GQA 32/8×64 causal", 1, 512, 32, 8, 64, True, {}),
    ("GQA 32/8×64 causal", 1, 2048, 32, 8, 64, True, {}),
    ("MQA 16/1×64", 1, 512, 16, 1, 64, False, {}),
    ("MHA 12×64 causal, window 256", 1, 2048, 12, 12, 64, True, {"window": 256}),
    ("MHA 12×64 soft-cap 50 (torch eager)", 1, 512, 12, 12, 64, False, {"softcap": 50.0}),
]


def dropped_keys(s: int, causal: bool, window: Optional[int]) -> np.ndarray:
    """[S, S] True where query i may not see key j (Sq = Sk)."""
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    drop = (j > i) if causal else np.zeros((s, s), dtype=bool)
    return drop | (j < i - window) if window is not None else drop


def reference_attention(q, k, v, nh, kv, causal, window=None, softcap=None):
    """float64 numpy, one head at a time (the scores of one head only: 2048² doubles)."""
    b, s, h = q.shape
    d = h // nh
    out = np.zeros((b, s, h))
    drop = dropped_keys(s, causal, window)
    for bi in range(b):
        for hd in range(nh):
            g = hd // (nh // kv)
            qh = q[bi, :, hd * d:(hd + 1) * d].astype(np.float64)
            kh, vh = (t[bi, :, g * d:(g + 1) * d].astype(np.float64) for t in (k, v))
            sc = qh @ kh.T * d**-0.5
            if softcap is not None:
                sc = softcap * np.tanh(sc / softcap)
            sc = np.where(drop, -np.inf, sc)
            p = np.exp(sc - sc.max(axis=-1, keepdims=True))
            out[bi, :, hd * d:(hd + 1) * d] = (p / p.sum(axis=-1, keepdims=True)) @ vh
    return out


def make_torch_sdpa(q, k, v, nh, kv, causal, window=None, softcap=None):
    """torch.nn.functional.scaled_dot_product_attention on [B, heads, S, d] views (K/V repeated for GQA); a window
    as an explicit boolean mask; a soft-cap, which SDPA has not, as torch's eager matmul, tanh, softmax, matmul."""
    import torch
    import torch.nn.functional as F

    b, s, h = q.shape
    d = h // nh
    qt = torch.from_numpy(q).view(b, s, nh, d).transpose(1, 2)
    kt, vt = (torch.from_numpy(t).view(b, s, kv, d).transpose(1, 2) for t in (k, v))
    keep = None if window is None else torch.from_numpy(~dropped_keys(s, causal, window))

    def run():
        with torch.inference_mode():
            kk, vv = (t.repeat_interleave(nh // kv, dim=1) for t in (kt, vt)) if kv != nh else (kt, vt)
            if softcap is not None:
                sc = softcap * torch.tanh((qt @ kk.transpose(-1, -2)) * d**-0.5 / softcap)
                o = torch.softmax(sc, dim=-1) @ vv
            elif keep is not None:
                o = F.scaled_dot_product_attention(qt, kk, vv, attn_mask=keep)
            else:
                o = F.scaled_dot_product_attention(qt, kk, vv, is_causal=causal)
            return o.transpose(1, 2).reshape(b, s, h)

    return run


def bench_attention(args) -> None:
    have_torch = available("torch")
    threads_ctl = Threads()
    print(f"# attention alone: SIMD path {K.selected_simd()}, torch {'present' if have_torch else 'not installed (column skipped)'}")
    print("| case | B×S | thr | rlx µs | torch µs (SDPA unless said) | torch / rlx | GFLOP/s (rlx) | calls |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(2)
    for label, b, s, nh, kv, d, causal, options in ATTENTION_CASES:
        q = rng.standard_normal((b, s, nh * d), dtype=np.float32)
        k, v = (rng.standard_normal((b, s, kv * d), dtype=np.float32) for _ in range(2))
        kind = "causal" if causal else "none"
        want = reference_attention(q, k, v, nh, kv, causal, **options)
        for t in args.threads:
            threads_ctl.set(t)
            contenders = {"rlx": lambda: K.attention(q, k, v, num_heads=nh, mask_kind=kind, threads=t, **options)}
            if have_torch:
                contenders["torch"] = make_torch_sdpa(q, k, v, nh, kv, causal, **options)
            for name, fn in contenders.items():
                err = float(np.max(np.abs(np.asarray(fn()) - want)))
                if err > 2e-3:
                    print(f"# WARNING {name} differs from the float64 reference by {err:.2e} on {label} {b}x{s}")
            res = alternate(contenders, args.rounds, args.budget)
            ours = res["rlx"].median
            pairs = s * s * 0.5 if causal and "window" not in options else float((~dropped_keys(s, causal, options.get("window"))).sum())
            flops = 4.0 * b * pairs * nh * d
            other = f"{fmt_us(res['torch'].median)} | {res['torch'].median / ours:.2f}×" if "torch" in res else "– | –"
            print(f"| {label} | {b}×{s} | {t} | {fmt_us(ours)} | {other} | {flops / ours / 1e9:.1f} | {len(res['rlx'].times)} |")
            sys.stdout.flush()


# ---------------------------------------------------------------- threshold


def threshold(args) -> None:
    """Times 1 against 2 threads on small blocks: first with the work thresholds disabled, then with
    them in force, for calls back to back and 0.5 ms apart (the pool's worker parked)."""
    os.environ["RLX_RULES_PARALLEL_MIN_FLOPS"] = "0"
    rng = np.random.default_rng(1)
    print("| H/heads | B×S | MFLOP | 1 thread µs | 2 threads µs | 2 threads / 1 | one-shot 1 thread µs | one-shot 2 threads µs | 2 threads / 1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for h, nh in [(64, 2), (128, 2), (256, 4), (384, 6)]:
        qkv_w = rng.standard_normal((h, 3 * h), dtype=np.float32)
        out_w = rng.standard_normal((h, h), dtype=np.float32)
        block = K.FusedAttentionBlock(qkv_w, out_w, num_heads=nh)
        for b, s in [(1, 1), (1, 4), (1, 16), (1, 64)]:
            x = rng.standard_normal((b, s, h), dtype=np.float32)
            one_shot = lambda t: K.fused_attention_block(x, qkv_w, out_w, None, num_heads=nh, threads=t)  # noqa: E731
            res = alternate({"1": lambda: block(x, threads=1), "2": lambda: block(x, threads=2),
                             "o1": lambda: one_shot(1), "o2": lambda: one_shot(2)}, args.rounds * 4, args.budget)
            mflop = block_flops(b, s, h) / 1e6
            r1, r2, o1, o2 = (res[n].median for n in ("1", "2", "o1", "o2"))
            print(f"| {h}/{nh} | {b}×{s} | {mflop:.2f} | {r1 * 1e6:.1f} | {r2 * 1e6:.1f} | {r2 / r1:.2f} | {o1 * 1e6:.1f} | {o2 * 1e6:.1f} | {o2 / o1:.2f} |")
    print(f"# compiled-in threshold: {_native.PARALLEL_MIN_FLOPS / 1e6:.1f} MFLOP")
    # The compiled-in thresholds in force, against always staying on the calling thread: calls
    # back to back (the worker still spins from the previous call) and 0.5 ms apart with the
    # caller busy in between (the worker has parked, as between layers of a real model).
    del os.environ["RLX_RULES_PARALLEL_MIN_FLOPS"]
    print()
    print(f"# thresholds in force: {_native.PARALLEL_MIN_FLOPS / 1e6:.1f} MFLOP with a spinning worker, {_native.WAKE_MIN_FLOPS / 1e6:.1f} MFLOP to wake a parked one")
    print("| H/heads | B×S | MFLOP | back to back: 1 thread µs | threads=2 µs | 0.5 ms apart: 1 thread µs | threads=2 µs |")
    print("|---|---|---|---|---|---|---|")
    cases = [(384, 6, 1), (128, 2, 16), (256, 4, 4), (384, 6, 4), (384, 6, 8), (768, 12, 1), (256, 4, 16), (768, 12, 8)]
    blocks = {}
    for h, nh, s in cases:
        block = K.FusedAttentionBlock(rng.standard_normal((h, 3 * h), dtype=np.float32), rng.standard_normal((h, h), dtype=np.float32), num_heads=nh)
        blocks[(h, nh, s)] = (block, rng.standard_normal((1, s, h), dtype=np.float32))
    samples: Dict[tuple, List[float]] = {}
    for _ in range(6):
        for gap in (0.0, 0.0005):
            for threads in (1, 2):
                for key, (block, x) in blocks.items():
                    for i in range(25):
                        busy_until = time.perf_counter() + gap
                        while time.perf_counter() < busy_until:
                            pass
                        t0 = time.perf_counter()
                        block(x, threads=threads)
                        if i >= 5:
                            samples.setdefault((key, gap, threads), []).append(time.perf_counter() - t0)
    for (h, nh, s) in blocks:
        med = {(gap, t): statistics.median(samples[((h, nh, s), gap, t)]) * 1e6 for gap in (0.0, 0.0005) for t in (1, 2)}
        mflop = block_flops(1, s, h) / 1e6
        print(f"| {h}/{nh} | 1×{s} | {mflop:.2f} | {med[(0.0, 1)]:.1f} | {med[(0.0, 2)]:.1f} | {med[(0.0005, 1)]:.1f} | {med[(0.0005, 2)]:.1f} |")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=50, help="most rounds (of 2-8 timed calls per contender) per shape")
    parser.add_argument("--budget", type=float, default=4.0, help="seconds per shape before stopping early (at least 8 rounds)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[h for h, _ in MODELS + SMALL_MODELS], help="subset of hidden sizes (768, 384, 256, 128)")
    parser.add_argument("--bs", nargs="+", default=[f"{b}x{s}" for b, s in SHAPES_BS], help="subset of BxS shapes, e.g. 1x8 8x128")
    parser.add_argument("--quick", action="store_true", help="rounds=10, budget=1 s")
    parser.add_argument("--threshold", action="store_true", help="measure the small-work thresholds instead")
    parser.add_argument("--attention", action="store_true", help="attention alone only (1x512, 1x2048, causal 1x2048, GQA, window, soft-cap) against torch")
    parser.add_argument("--no-attention", action="store_true", help="the fused block only")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.budget = 10, 1.0
    if args.threshold:
        threshold(args)
        return
    if not args.attention:
        bench(args)
    if not args.no_attention:
        bench_attention(args)


if __name__ == "__main__":
    main()
