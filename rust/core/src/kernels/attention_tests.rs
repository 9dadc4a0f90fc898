//! Tests and a timing probe of the flash attention at long sequences: the float64 reference on every SIMD path, and GFLOP/s at the issue-17 shapes.

use super::*;

/// Deterministic values in [-1, 1) (a splitmix-style hash of the index and seed).
fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let mut x = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 31;
            x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^= x >> 29;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Single-thread attention alone at 12 heads × 64, B = 1 (not a test of speed, a probe):
/// `cargo test --release -p rlx-rules-core kernels_flash_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_flash_timing() {
    use std::time::Instant;
    println!("path, S, causal, threads, ms, GFLOP/s");
    let reps: usize = std::env::var("RLX_PROBE_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    for isa in Isa::available().into_iter().rev().take(2) {
        for (s, causal) in [(512usize, false), (2048, false), (2048, true)] {
            for threads in [1usize, 2] {
                let (heads, d) = (12usize, 64usize);
                let h = heads * d;
                let q = values(s * h, 1);
                let k = values(s * h, 2);
                let v = values(s * h, 3);
                let mut out = vec![0.0f32; s * h];
                let shape = AttentionShape { batch: 1, seq_q: s, seq_k: s, num_heads: heads, kv_heads: heads, head_dim: d };
                let opts = RunOptions { threads: Some(threads), isa: Some(isa) };
                let masking = Masking { causal, ..Masking::default() };
                let mut times: Vec<f64> = (0..reps)
                    .map(|_| {
                        let t = Instant::now();
                        attention(shape, &q, &k, &v, &masking, None, None, opts, &mut out).unwrap();
                        t.elapsed().as_secs_f64()
                    })
                    .skip(1)
                    .collect();
                times.sort_by(|a, b| a.total_cmp(b));
                let t = times[times.len() / 2];
                let flops = 4.0 * (s * s * h) as f64 * if causal { 0.5 } else { 1.0 };
                println!("{isa}, {s}, {causal}, {threads}, {:.1}, {:.1}", t * 1e3, flops / t / 1e9);
            }
        }
    }
}

/// f64 attention of every (batch, head, query): `s = softcap(scale·q·k) + bias`, hidden keys
/// (keep < 0.5, causal, outside the window) scored `masked`, a row of only −inf scores zero when
/// `zero_rows`; V and the output have heads of the variant's `v_head_dim`.
#[allow(clippy::too_many_arguments)]
fn reference(shape: AttentionShape, variant: &AttentionVariant, q: &[f32], k: &[f32], v: &[f32], keep: &[f32], bias: &[f32], causal: bool, zero_rows: bool, scale: f64) -> Vec<f64> {
    let AttentionShape { batch, seq_q, seq_k, num_heads, kv_heads, head_dim: d } = shape;
    let dv = variant.v_head_dim.unwrap_or(d);
    let (h, hkv, hv, hkv_v) = (num_heads * d, kv_heads * d, num_heads * dv, kv_heads * dv);
    let masked = if zero_rows { f64::NEG_INFINITY } else { -1e9 };
    let mut out = vec![0.0f64; batch * seq_q * hv];
    for b in 0..batch {
        for hd in 0..num_heads {
            let g = hd / (num_heads / kv_heads);
            for i in 0..seq_q {
                let qr = &q[(b * seq_q + i) * h + hd * d..][..d];
                let scores: Vec<f64> = (0..seq_k)
                    .map(|j| {
                        let at = (b * seq_q + i) * seq_k + j;
                        let kr = &k[(b * seq_k + j) * hkv + g * d..][..d];
                        let s = scale * qr.iter().zip(kr).map(|(&a, &c)| a as f64 * c as f64).sum::<f64>();
                        let s = variant.softcap.map_or(s, |c| c as f64 * (s / c as f64).tanh()) + bias[at] as f64;
                        let outside = variant.window.is_some_and(|w| j + seq_q + w < i + seq_k);
                        if keep[at] < 0.5 || (causal && j + seq_q > i + seq_k) || outside {
                            masked
                        } else {
                            s
                        }
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY && zero_rows {
                    continue;
                }
                let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..dv {
                    out[(b * seq_q + i) * hv + hd * dv + c] = (0..seq_k).map(|j| e[j] * v[(b * seq_k + j) * hkv_v + g * dv + c] as f64).sum::<f64>() / sum;
                }
            }
        }
    }
    out
}

/// Several query and key blocks (and partial ones), GQA, head dims off the vector width, a bias of
/// float32's lowest value on whole rows (Hugging Face's additive mask: such a row is the softmax of
/// `q·k` alone, not NaN), per-row keep masks, causal with `Sq < Sk`, both fully-masked-row modes:
/// every SIMD path on 1 and 2 threads against float64.
#[test]
fn kernels_flash_matches_reference_across_blocks() {
    for (n, &(seq_q, seq_k, heads, kv_heads, d, causal, zero_rows)) in
        [(150usize, 150usize, 4usize, 2usize, 64usize, false, false), (130, 200, 2, 1, 40, true, false), (67, 67, 2, 2, 80, true, true), (3, 129, 3, 1, 16, false, true)].iter().enumerate()
    {
        let batch = 2;
        let shape = AttentionShape { batch, seq_q, seq_k, num_heads: heads, kv_heads, head_dim: d };
        let q = values(batch * seq_q * heads * d, 10 + n as u64);
        let k = values(batch * seq_k * kv_heads * d, 20 + n as u64);
        let v = values(batch * seq_k * kv_heads * d, 30 + n as u64);
        let noise = values(batch * seq_q * seq_k, 40 + n as u64);
        // Batch 1, rows 0..2: bias f32::MIN on every key; rows 4k+1: some keys dropped.
        let bias: Vec<f32> = (0..batch * seq_q * seq_k).map(|at| if at / (seq_q * seq_k) == 1 && (at / seq_k) % seq_q < 2 { f32::MIN } else { noise[at] }).collect();
        let keep: Vec<f32> = (0..batch * seq_q * seq_k).map(|at| if (at / seq_k) % 4 == 1 && noise[at] < -0.3 { 0.0 } else { 1.0 }).collect();
        let tensor = |data| ScoreTensor { data, batch_stride: seq_q * seq_k, head_stride: 0, row_stride: seq_k };
        let masking = Masking { keep: Some(tensor(&keep)), bias: Some(tensor(&bias)), causal, masked_rows: if zero_rows { MaskedRows::Zero } else { MaskedRows::Uniform } };
        let want = reference(shape, &AttentionVariant::default(), &q, &k, &v, &keep, &bias, causal, zero_rows, 0.2);
        for isa in Isa::available() {
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; want.len()];
                attention(shape, &q, &k, &v, &masking, None, Some(0.2), RunOptions { threads: Some(threads), isa: Some(isa) }, &mut out).unwrap();
                for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                    assert!((g as f64 - w).abs() < 1e-4, "case {n} {isa} t{threads}: out[{i}] = {g}, want {w}");
                }
            }
        }
    }
}

/// The variants against float64 on every SIMD path, 1 and 2 threads: soft-cap (alone, with a bias
/// and with a window), sliding windows of 0, a few and more keys than a block (causal, with
/// `Sq < Sk`, with a keep mask that hides a row's whole window in both fully-masked-row modes:
/// uniform takes the mean over all keys, not just the visited blocks), V heads narrower and wider
/// than Q's, with GQA.
#[test]
fn kernels_attention_variants_match_reference() {
    struct Case {
        sq: usize,
        sk: usize,
        heads: usize,
        kv: usize,
        d: usize,
        variant: AttentionVariant,
        causal: bool,
        keep: bool,
        bias: bool,
        zero_rows: bool,
    }
    let var = |softcap: Option<f32>, window: Option<usize>, v_head_dim: Option<usize>| AttentionVariant { softcap, window, v_head_dim };
    let cases = [
        Case { sq: 70, sk: 70, heads: 2, kv: 2, d: 32, variant: var(Some(0.9), None, None), causal: false, keep: false, bias: false, zero_rows: false },
        Case { sq: 40, sk: 90, heads: 4, kv: 2, d: 24, variant: var(Some(2.0), None, None), causal: true, keep: false, bias: true, zero_rows: true },
        Case { sq: 200, sk: 200, heads: 2, kv: 1, d: 16, variant: var(None, Some(5), None), causal: true, keep: false, bias: false, zero_rows: false },
        Case { sq: 150, sk: 150, heads: 3, kv: 3, d: 40, variant: var(None, Some(0), None), causal: true, keep: false, bias: false, zero_rows: true },
        Case { sq: 100, sk: 170, heads: 2, kv: 2, d: 16, variant: var(Some(1.5), Some(40), None), causal: true, keep: true, bias: false, zero_rows: false },
        Case { sq: 100, sk: 170, heads: 2, kv: 2, d: 16, variant: var(None, Some(3), None), causal: true, keep: true, bias: false, zero_rows: true },
        Case { sq: 66, sk: 66, heads: 2, kv: 2, d: 16, variant: var(None, Some(70), None), causal: false, keep: false, bias: true, zero_rows: false },
        Case { sq: 90, sk: 90, heads: 4, kv: 2, d: 48, variant: var(None, None, Some(20)), causal: true, keep: true, bias: false, zero_rows: false },
        Case { sq: 33, sk: 77, heads: 2, kv: 1, d: 16, variant: var(Some(3.0), Some(9), Some(72)), causal: true, keep: false, bias: true, zero_rows: true },
    ];
    for (n, c) in cases.iter().enumerate() {
        let batch = 2;
        let dv = c.variant.v_head_dim.unwrap_or(c.d);
        let shape = AttentionShape { batch, seq_q: c.sq, seq_k: c.sk, num_heads: c.heads, kv_heads: c.kv, head_dim: c.d };
        let seed = 100 + 10 * n as u64;
        let (q, k) = (values(batch * c.sq * c.heads * c.d, seed), values(batch * c.sk * c.kv * c.d, seed + 1));
        let v = values(batch * c.sk * c.kv * dv, seed + 2);
        let noise = values(batch * c.sq * c.sk, seed + 3);
        // Scores of several units (the soft-caps bite); every 7th row of batch 0 loses every key.
        let q: Vec<f32> = q.iter().map(|x| 3.0 * x).collect();
        let keep: Vec<f32> = (0..noise.len()).map(|at| if !c.keep || (noise[at] > -0.6 && !(at < c.sq * c.sk && (at / c.sk) % 7 == 3)) { 1.0 } else { 0.0 }).collect();
        let bias: Vec<f32> = noise.iter().map(|x| if c.bias { 2.0 * x } else { 0.0 }).collect();
        let tensor = |data| ScoreTensor { data, batch_stride: c.sq * c.sk, head_stride: 0, row_stride: c.sk };
        let masking = Masking {
            keep: c.keep.then(|| tensor(&keep)),
            bias: c.bias.then(|| tensor(&bias)),
            causal: c.causal,
            masked_rows: if c.zero_rows { MaskedRows::Zero } else { MaskedRows::Uniform },
        };
        let want = reference(shape, &c.variant, &q, &k, &v, &keep, &bias, c.causal, c.zero_rows, 0.3);
        for isa in Isa::available() {
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; want.len()];
                attention_variant(shape, &c.variant, &q, &k, &v, &masking, None, Some(0.3), RunOptions { threads: Some(threads), isa: Some(isa) }, &mut out).unwrap();
                for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                    assert!((g as f64 - w).abs() < 2e-4, "case {n} {isa} t{threads}: out[{i}] = {g}, want {w}");
                }
            }
        }
    }
}

/// The variants' argument checks: typed errors, never a panic.
#[test]
fn kernels_attention_variant_rejects_bad_arguments() {
    let shape = AttentionShape { batch: 1, seq_q: 2, seq_k: 3, num_heads: 2, kv_heads: 1, head_dim: 4 };
    let (q, k) = (vec![0.5f32; 16], vec![0.5f32; 12]);
    let wide = AttentionVariant { v_head_dim: Some(6), ..AttentionVariant::default() };
    let run = |variant: &AttentionVariant, v: &[f32], out: &mut [f32], rope| attention_variant(shape, variant, &q, &k, v, &Masking::default(), rope, None, RunOptions::default(), out);
    assert!(run(&wide, &[0.5; 18], &mut [0.0; 24], None).is_ok());
    assert!(run(&wide, &[0.5; 12], &mut [0.0; 24], None).unwrap_err().0.contains("v must have 18 elements"));
    assert!(run(&wide, &[0.5; 18], &mut [0.0; 16], None).unwrap_err().0.contains("out must have 24 elements"));
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let bad = AttentionVariant { softcap: Some(cap), ..AttentionVariant::default() };
        assert!(run(&bad, &[0.5; 12], &mut [0.0; 16], None).unwrap_err().0.contains("soft-cap"), "{cap}");
    }
    let (cos, sin) = ([1.0f32; 6], [0.0f32; 6]);
    assert!(run(&wide, &[0.5; 18], &mut [0.0; 24], Some(Rope::neox(&cos, &sin, 4))).unwrap_err().0.contains("rope"));
}

/// A vector function under test.
#[derive(Clone, Copy)]
enum VecFn {
    Tanh,
    Exp2Neg,
}

/// `f` of every element of `xs`, computed on SIMD path `isa` (a partial vector at the end).
fn on_path(isa: Isa, f: VecFn, xs: &[f32]) -> Vec<f32> {
    use super::attention_tile::exp2_neg;
    use super::simd::dispatch;
    let mut got = vec![0.0f32; xs.len()];
    let (xp, gp, n) = (xs.as_ptr(), got.as_mut_ptr(), xs.len());
    dispatch!(isa, |S| (xp: *const f32, gp: *mut f32, n: usize, f: VecFn) {
        let mut i = 0;
        while i < n {
            let m = S::LANES.min(n - i);
            let x = S::load_partial(xp.add(i), m);
            let y = match f {
                VecFn::Tanh => S::tanh(x),
                VecFn::Exp2Neg => exp2_neg::<S>(x),
            };
            S::store_partial(gp.add(i), y, m);
            i += m;
        }
    });
    got
}

/// `tanh` on every path: relative error below 1e-6 (absolute near 0), odd, ±1 far out, NaN kept.
#[test]
fn kernels_simd_tanh_is_accurate_on_every_path() {
    let xs: Vec<f32> = (0..24_000).map(|i| -12.0 + i as f32 * 0.001).chain([0.0, -0.0, 1e-30, -3e-8, 0.25, -0.25, 50.0, -1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]).collect();
    for isa in Isa::available() {
        let got = on_path(isa, VecFn::Tanh, &xs);
        for (&x, &g) in xs.iter().zip(&got) {
            if x.is_nan() {
                assert!(g.is_nan(), "{isa}: tanh(NaN) = {g}");
                continue;
            }
            let want = (x as f64).tanh();
            assert!((g as f64 - want).abs() <= 1e-6 * want.abs().max(1e-30), "{isa}: tanh({x}) = {g}, want {want}");
        }
    }
}

/// The softmax's base-2 `exp` on every path: relative error below 3e-7 from −126 to 12 (the lazy
/// running max lets `s − max` reach `8·log2 e`), exactly 1 at 0, exactly 0 below −127 and at −inf,
/// NaN kept.
#[test]
fn kernels_exp2_neg_is_accurate_on_every_path() {
    let xs: Vec<f32> = (0..28_400).map(|i| -130.0 + i as f32 * 0.005).chain([0.0, -0.0, -1e-7, -126.0, f32::NEG_INFINITY, f32::NAN]).collect();
    for isa in Isa::available() {
        let got = on_path(isa, VecFn::Exp2Neg, &xs);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = (x as f64).exp2();
            if x.is_nan() {
                assert!(g.is_nan(), "{isa}: 2^NaN = {g}");
            } else if x < -127.0 {
                assert_eq!(g, 0.0, "{isa}: 2^{x} flushes to 0");
            } else if x >= -126.0 {
                assert!(((g as f64 - want) / want).abs() < 3e-7, "{isa}: 2^{x} = {g}, want {want}");
            }
        }
        assert_eq!(got[xs.len() - 6], 1.0, "{isa}: 2^0 is exactly 1");
    }
}
