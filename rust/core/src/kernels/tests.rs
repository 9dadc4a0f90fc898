//! Unit tests of the kernels against a plain f64 reference, on every SIMD path this CPU has.

use super::*;

/// The ignored timing probes, which share this file's generator and references.
mod timing;

/// The one-shot projections on row-major weights at every alignment.
mod row_major;

/// A seeded generator of values uniform in [-1, 1).
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }
    fn next_f32(&mut self) -> f32 {
        self.0.f32() * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

fn rope_tables(seq: usize, half: usize) -> (Vec<f32>, Vec<f32>) {
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for s in 0..seq {
        for i in 0..half {
            let theta = s as f64 * 10000f64.powf(-(i as f64) / half as f64);
            cos.push(theta.cos() as f32);
            sin.push(theta.sin() as f32);
        }
    }
    (cos, sin)
}

/// Attention of one (batch, head) in f64: q rows `[sq][d]`, k/v `[sk][d]`.
fn ref_attention_head(q: &[Vec<f64>], k: &[Vec<f64>], v: &[Vec<f64>], keep: &dyn Fn(usize, usize) -> bool, scale: f64) -> Vec<Vec<f64>> {
    q.iter()
        .enumerate()
        .map(|(qi, qr)| {
            let scores: Vec<f64> = k
                .iter()
                .enumerate()
                .map(|(ki, kr)| if keep(qi, ki) { scale * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() } else { -1e9 })
                .collect();
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            (0..qr.len()).map(|c| e.iter().zip(v).map(|(p, vr)| p * vr[c]).sum::<f64>() / sum).collect()
        })
        .collect()
}

struct Case {
    b: usize,
    s: usize,
    h: usize,
    heads: usize,
    bias: bool,
    rope: bool,
    mask: &'static str,
}

fn make_mask(kind: &str, b: usize, s: usize, rng: &mut Rng) -> Option<Vec<f32>> {
    match kind {
        "none" => None,
        "ones" => Some(vec![1.0; b * s]),
        "padded" => Some((0..b * s).map(|i| if i % s < s.div_ceil(2) + (i / s) % 2 { 1.0 } else { 0.0 }).collect()),
        "row0_masked" => Some((0..b * s).map(|i| if i / s == 0 { 0.0 } else { 1.0 }).collect()),
        "random" => Some(
            (0..b * s)
                .map(|_| match rng.next_f32() {
                    u if u > 0.2 => 1.0,
                    u if u > 0.0 => 0.55,
                    u if u > -0.3 => 0.45,
                    _ => 0.0,
                })
                .collect(),
        ),
        _ => unreachable!(),
    }
}

/// f64 reference of the fused block.
fn ref_block(c: &Case, x: &[f32], w: &BlockWeights<'_>, mask: Option<&[f32]>, rope: Option<(&[f32], &[f32])>) -> Vec<f64> {
    let (b, s, h) = (c.b, c.s, c.h);
    let d = h / c.heads;
    let half = d / 2;
    let m = b * s;
    let mut qkv = vec![0.0f64; m * 3 * h];
    for r in 0..m {
        for j in 0..3 * h {
            let mut acc = w.qkv_b.map_or(0.0, |bb| bb[j] as f64);
            for kk in 0..h {
                acc += x[r * h + kk] as f64 * w.qkv_w[kk * 3 * h + j] as f64;
            }
            qkv[r * 3 * h + j] = acc;
        }
    }
    if let Some((cos, sin)) = rope {
        for r in 0..m {
            let pos = r % s;
            for off in [0, h] {
                for hd in 0..c.heads {
                    let base = r * 3 * h + off + hd * d;
                    for i in 0..half {
                        let (x1, x2) = (qkv[base + i], qkv[base + half + i]);
                        let (co, si) = (cos[pos * half + i] as f64, sin[pos * half + i] as f64);
                        qkv[base + i] = x1 * co - x2 * si;
                        qkv[base + half + i] = x2 * co + x1 * si;
                    }
                }
            }
        }
    }
    let mut ctx = vec![0.0f64; m * h];
    for bi in 0..b {
        for hd in 0..c.heads {
            let rows = |off: usize| -> Vec<Vec<f64>> { (0..s).map(|si| qkv[(bi * s + si) * 3 * h + off + hd * d..][..d].to_vec()).collect() };
            let keep = |_q: usize, k: usize| mask.is_none_or(|mm| mm[bi * s + k] >= 0.5);
            let o = ref_attention_head(&rows(0), &rows(h), &rows(2 * h), &keep, (d as f64).powf(-0.5));
            for si in 0..s {
                ctx[(bi * s + si) * h + hd * d..][..d].copy_from_slice(&o[si]);
            }
        }
    }
    let mut out = vec![0.0f64; m * h];
    for r in 0..m {
        for j in 0..h {
            let mut acc = w.out_b.map_or(0.0, |bb| bb[j] as f64);
            for kk in 0..h {
                acc += ctx[r * h + kk] * w.out_w[kk * h + j] as f64;
            }
            out[r * h + j] = acc;
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(err <= tol * (1.0 + w.abs()), "{what}: element {i}: got {g}, want {w}");
    }
}

fn run_case(c: &Case, seed: u64) {
    let mut rng = Rng::new(seed);
    let (b, s, h) = (c.b, c.s, c.h);
    let d = h / c.heads;
    let x = rng.vec(b * s * h, 1.0);
    let wscale = 1.0 / (h as f32).sqrt();
    let qkv_w = rng.vec(h * 3 * h, 2.0 * wscale);
    let out_w = rng.vec(h * h, wscale);
    let qkv_b = rng.vec(3 * h, 0.5);
    let out_b = rng.vec(h, 0.5);
    let w = BlockWeights {
        qkv_w: &qkv_w,
        qkv_b: c.bias.then_some(&qkv_b[..]),
        out_w: &out_w,
        out_b: c.bias.then_some(&out_b[..]),
    };
    let mask = make_mask(c.mask, b, s, &mut rng);
    let (cos, sin) = rope_tables(s, d / 2);
    let rope = c.rope.then(|| Rope::neox(&cos, &sin, d));
    let want = ref_block(c, &x, &w, mask.as_deref(), c.rope.then_some((&cos[..], &sin[..])));
    let shape = BlockShape { batch: b, seq: s, hidden: h, num_heads: c.heads };
    let prepared = PreparedAttentionBlock::new(h, c.heads, w).unwrap();
    let mut firsts = std::collections::HashMap::new();
    for isa in Isa::available() {
        for threads in [1, 2] {
            let opts = RunOptions { threads: Some(threads), isa: Some(isa) };
            let mut out = vec![f32::NAN; b * s * h];
            fused_attention_block(shape, &x, w, mask.as_deref(), MaskedRows::Uniform, rope, opts, &mut out).unwrap();
            let what = format!("block {isa} t{threads} b{b} s{s} h{h}/{} bias{} rope{} mask {}", c.heads, c.bias, c.rope, c.mask);
            assert_close(&out, &want, 2e-4, &what);
            let mut out2 = vec![f32::NAN; b * s * h];
            prepared.run(b, s, &x, mask.as_deref(), MaskedRows::Uniform, rope, opts, &mut out2).unwrap();
            assert_close(&out2, &want, 2e-4, &format!("prepared {what}"));
            // Each output element gets the same float operations whatever the thread count.
            let first = firsts.entry((isa, "prepared")).or_insert_with(|| out2.clone());
            assert!(first.iter().zip(&out2).all(|(a, b)| a.to_bits() == b.to_bits()), "prepared {what}: differs from 1 thread");
        }
    }
}

#[test]
fn kernels_block_matches_reference_on_every_path() {
    let cases = [
        Case { b: 1, s: 1, h: 16, heads: 1, bias: true, rope: false, mask: "none" },
        Case { b: 1, s: 3, h: 5, heads: 5, bias: false, rope: false, mask: "ones" },
        Case { b: 2, s: 7, h: 48, heads: 3, bias: true, rope: true, mask: "padded" },
        Case { b: 3, s: 5, h: 32, heads: 2, bias: true, rope: false, mask: "row0_masked" },
        Case { b: 2, s: 9, h: 80, heads: 1, bias: false, rope: true, mask: "random" },
        Case { b: 2, s: 20, h: 64, heads: 2, bias: true, rope: false, mask: "padded" },
        Case { b: 1, s: 70, h: 64, heads: 1, bias: true, rope: true, mask: "random" },
        Case { b: 2, s: 33, h: 70, heads: 5, bias: true, rope: true, mask: "padded" },
        Case { b: 1, s: 130, h: 36, heads: 2, bias: true, rope: false, mask: "padded" },
        // 9 and 11 rows: every row count of the AVX-512 tile (12) appears as a remainder above or here.
        Case { b: 3, s: 3, h: 40, heads: 2, bias: true, rope: false, mask: "random" },
        Case { b: 1, s: 11, h: 96, heads: 3, bias: false, rope: true, mask: "padded" },
        Case { b: 1, s: 8, h: 64, heads: 4, bias: true, rope: false, mask: "ones" },
        Case { b: 1, s: 12, h: 32, heads: 1, bias: true, rope: false, mask: "none" },
        // 200 rows: a projection on packed weights walks them in two row groups (192 + 8).
        Case { b: 2, s: 100, h: 64, heads: 4, bias: true, rope: false, mask: "padded" },
        // Heads of whole 32-column panels (prepared: one work item per (batch, head)), 200 rows
        // per batch, so the item's projection also walks two row groups.
        Case { b: 2, s: 200, h: 64, heads: 2, bias: true, rope: true, mask: "padded" },
        Case { b: 3, s: 5, h: 96, heads: 3, bias: false, rope: false, mask: "row0_masked" },
        // 96 rows, 17 MFLOP: one thread runs phase by phase, two per head (unless another test
        // holds the pool); the bit-for-bit check below compares the two schedules.
        Case { b: 1, s: 96, h: 128, heads: 2, bias: true, rope: true, mask: "random" },
    ];
    for (i, c) in cases.iter().enumerate() {
        run_case(c, 17 + i as u64);
    }
}

/// One attention variant for [`kernels_attention_matches_reference_with_every_variant`].
struct AttnCase {
    b: usize,
    sq: usize,
    sk: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    /// "none", "keys" ([B, Sk]), "rows" ([B, 1, Sq, Sk]) or "heads" ([B, H, Sq, Sk]).
    keep: &'static str,
    bias: bool,
    causal: bool,
    rotary: usize,
    zero_rows: bool,
}

/// Attention in f64 of an [`AttnCase`], with `s = scale·q·k + bias`, masked keys set to −1e9 or −inf,
/// and a row of only −inf scores giving zeros (zero mode) or NaN.
#[allow(clippy::too_many_arguments)]
fn ref_attention(c: &AttnCase, q: &[f32], k: &[f32], v: &[f32], keep: &[f32], bias: &[f32], rope: Option<(&[f32], &[f32])>, scale: f64) -> Vec<f64> {
    let (h, hkv) = (c.heads * c.d, c.kv_heads * c.d);
    let rot = |x: &mut Vec<f64>, pos: usize| {
        if let Some((cos, sin)) = rope {
            let half = c.rotary / 2;
            for i in 0..half {
                let (cs, sn) = (cos[pos * half + i] as f64, sin[pos * half + i] as f64);
                let (x1, x2) = (x[i], x[i + half]);
                x[i] = x1 * cs - x2 * sn;
                x[i + half] = x2 * cs + x1 * sn;
            }
        }
    };
    let mut out = vec![0.0f64; c.b * c.sq * h];
    for bi in 0..c.b {
        for hd in 0..c.heads {
            let g = hd / (c.heads / c.kv_heads);
            let krow = |t: &[f32], j: usize| -> Vec<f64> { t[(bi * c.sk + j) * hkv + g * c.d..][..c.d].iter().map(|&x| x as f64).collect() };
            for qi in 0..c.sq {
                let mut qr: Vec<f64> = q[(bi * c.sq + qi) * h + hd * c.d..][..c.d].iter().map(|&x| x as f64).collect();
                if rope.is_some() {
                    rot(&mut qr, qi + c.sk - c.sq); // RoPE needs Sq <= Sk (the binding refuses it otherwise)
                }
                let masked = if c.zero_rows { f64::NEG_INFINITY } else { -1e9 };
                let scores: Vec<f64> = (0..c.sk)
                    .map(|ki| {
                        let mut kr = krow(k, ki);
                        rot(&mut kr, ki);
                        let at = ((bi * c.heads + hd) * c.sq + qi) * c.sk + ki;
                        let mut sc = scale * qr.iter().zip(&kr).map(|(a, b)| a * b).sum::<f64>();
                        if c.bias {
                            sc += bias[at] as f64;
                        }
                        let hidden = (c.keep != "none" && keep[at] < 0.5) || (c.causal && ki + c.sq > qi + c.sk);
                        if hidden {
                            masked
                        } else {
                            sc
                        }
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY && c.zero_rows {
                    continue;
                }
                let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let sum: f64 = e.iter().sum();
                for col in 0..c.d {
                    out[(bi * c.sq + qi) * h + hd * c.d + col] = (0..c.sk).map(|ki| e[ki] * krow(v, ki)[col]).sum::<f64>() / sum;
                }
            }
        }
    }
    out
}

#[test]
fn kernels_attention_matches_reference_with_every_variant() {
    let base = AttnCase { b: 2, sq: 67, sk: 67, heads: 3, kv_heads: 3, d: 8, keep: "none", bias: false, causal: false, rotary: 0, zero_rows: false };
    let cases = [
        AttnCase { keep: "keys", ..base },
        AttnCase { causal: true, ..base },
        AttnCase { causal: true, keep: "keys", ..base },
        AttnCase { sk: 5, keep: "keys", ..base },
        AttnCase { sq: 5, sk: 70, causal: true, keep: "rows", ..base },
        AttnCase { sq: 70, sk: 9, causal: true, ..base },
        AttnCase { sq: 70, sk: 9, causal: true, zero_rows: true, ..base },
        AttnCase { keep: "heads", bias: true, d: 13, ..base },
        AttnCase { sq: 1, sk: 1, keep: "keys", zero_rows: true, ..base },
        AttnCase { keep: "rows", bias: true, zero_rows: true, heads: 4, kv_heads: 2, ..base },
        AttnCase { sq: 130, sk: 130, heads: 4, kv_heads: 1, causal: true, bias: true, ..base },
        AttnCase { heads: 6, kv_heads: 2, d: 12, rotary: 12, causal: true, ..base },
        AttnCase { sq: 3, sk: 20, d: 12, rotary: 4, keep: "keys", ..base },
    ];
    for (n, c) in cases.iter().enumerate() {
        let mut rng = Rng::new(99 + n as u64);
        let (h, hkv) = (c.heads * c.d, c.kv_heads * c.d);
        let q = rng.vec(c.b * c.sq * h, 1.0);
        let k = rng.vec(c.b * c.sk * hkv, 1.0);
        let v = rng.vec(c.b * c.sk * hkv, 1.0);
        let full = c.b * c.heads * c.sq * c.sk;
        // A [B, H, Sq, Sk] keep mask of the case's kind (constant over broadcast dims), with batch 1's
        // query row 0 fully masked; a bias with some −inf.
        let mut keep = vec![1.0f32; full];
        let per_key: Vec<f32> = (0..c.b * c.sk).map(|_| if rng.next_f32() > -0.4 { 1.0 } else { 0.0 }).collect();
        let per_row: Vec<f32> = (0..c.b * c.sq * c.sk).map(|i| if rng.next_f32() > -0.4 && !(i / (c.sq * c.sk) == 1 && i % (c.sq * c.sk) < c.sk) { 1.0 } else { 0.0 }).collect();
        for bi in 0..c.b {
            for hd in 0..c.heads {
                for qi in 0..c.sq {
                    for ki in 0..c.sk {
                        let at = ((bi * c.heads + hd) * c.sq + qi) * c.sk + ki;
                        keep[at] = match c.keep {
                            "keys" => per_key[bi * c.sk + ki],
                            "rows" => per_row[(bi * c.sq + qi) * c.sk + ki],
                            "heads" => if rng.next_f32() > -0.4 { 1.0 } else { 0.0 },
                            _ => 1.0,
                        };
                    }
                }
            }
        }
        let bias: Vec<f32> = (0..full).map(|_| match rng.next_f32() { u if u < -0.9 => f32::NEG_INFINITY, u => 2.0 * u }).collect();
        let rope_tabs = rope_tables(c.sk, c.rotary / 2);
        let rope = (c.rotary > 0).then(|| Rope { cos: &rope_tabs.0, sin: &rope_tabs.1, rotary_dim: c.rotary, interleaved: false });
        let want = ref_attention(c, &q, &k, &v, &keep, &bias, rope.map(|r| (r.cos, r.sin)), 0.3);
        let keep_t = match c.keep {
            "keys" => Some(ScoreTensor::per_key(&per_key, c.sk)),
            "rows" => Some(ScoreTensor { data: &per_row, batch_stride: c.sq * c.sk, head_stride: 0, row_stride: c.sk }),
            "heads" => Some(ScoreTensor { data: &keep, batch_stride: c.heads * c.sq * c.sk, head_stride: c.sq * c.sk, row_stride: c.sk }),
            _ => None,
        };
        let masking = Masking {
            keep: keep_t,
            bias: c.bias.then_some(ScoreTensor { data: &bias, batch_stride: c.heads * c.sq * c.sk, head_stride: c.sq * c.sk, row_stride: c.sk }),
            causal: c.causal,
            masked_rows: if c.zero_rows { MaskedRows::Zero } else { MaskedRows::Uniform },
        };
        let shape = AttentionShape { batch: c.b, seq_q: c.sq, seq_k: c.sk, num_heads: c.heads, kv_heads: c.kv_heads, head_dim: c.d };
        for isa in Isa::available() {
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; c.b * c.sq * h];
                attention(shape, &q, &k, &v, &masking, rope, Some(0.3), RunOptions { threads: Some(threads), isa: Some(isa) }, &mut out).unwrap();
                let got_nan: Vec<bool> = out.iter().map(|x| x.is_nan()).collect();
                let want_nan: Vec<bool> = want.iter().map(|x| x.is_nan()).collect();
                assert_eq!(got_nan, want_nan, "case {n} {isa} t{threads}: NaN positions");
                let (g, w): (Vec<f32>, Vec<f64>) = out.iter().zip(&want).filter(|(_, w)| !w.is_nan()).map(|(&g, &w)| (g, w)).unzip();
                assert_close(&g, &w, 1e-4, &format!("attention case {n} {isa} t{threads}"));
            }
        }
    }
}

#[test]
fn kernels_attention_rejects_bad_masks_and_heads() {
    let (q, k) = (vec![0.0f32; 2 * 3 * 8], vec![0.0f32; 2 * 5 * 4]);
    let mut out = vec![0.0f32; 2 * 3 * 8];
    let shape = AttentionShape { batch: 2, seq_q: 3, seq_k: 5, num_heads: 2, kv_heads: 1, head_dim: 4 };
    let short = vec![1.0f32; 9];
    let e = attention(shape, &q, &k, &k, &Masking::keep_keys(&short, 5), None, None, RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("mask") && e.0.contains("[2, 2, 3, 5]"), "{e}");
    let e = attention(AttentionShape { kv_heads: 3, ..shape }, &q, &k, &k, &Masking::default(), None, None, RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("must divide"), "{e}");
    let (cos, sin) = rope_tables(5, 2);
    let e = attention(AttentionShape { seq_q: 6, ..shape }, &[0.0; 96], &k, &k, &Masking::default(), Some(Rope::neox(&cos, &sin, 4)), None, RunOptions::default(), &mut [0.0; 96]).unwrap_err();
    assert!(e.0.contains("seq_q <= seq_k"), "{e}");
    attention(shape, &q, &k, &k, &Masking::default(), Some(Rope::neox(&cos, &sin, 4)), None, RunOptions::default(), &mut out).unwrap();
}

#[test]
fn kernels_exp_is_accurate_on_every_path() {
    use super::simd::dispatch;
    let xs: Vec<f32> = (0..2000).map(|i| -90.0 + i as f32 * 0.05).chain([0.0, -0.0, -87.2, 1e-8]).collect();
    for isa in Isa::available() {
        let mut got = vec![0.0f32; xs.len()];
        let (xp, gp, n) = (xs.as_ptr(), got.as_mut_ptr(), xs.len());
        dispatch!(isa, |S| (xp: *const f32, gp: *mut f32, n: usize) {
            let mut i = 0;
            while i < n {
                let m = S::LANES.min(n - i);
                S::store_partial(gp.add(i), S::exp(S::load_partial(xp.add(i), m)), m);
                i += m;
            }
        });
        for (&x, &g) in xs.iter().zip(&got) {
            let want = (x as f64).exp();
            if x < -87.3 {
                assert_eq!(g, 0.0, "{isa}: exp({x}) flushes to 0");
            } else {
                assert!(((g as f64 - want) / want).abs() < 1e-6, "{isa}: exp({x}) = {g}, want {want}");
            }
        }
        let specials = [f32::NAN, f32::NEG_INFINITY];
        let mut out = [1.0f32; 2];
        let (sp, op) = (specials.as_ptr(), out.as_mut_ptr());
        dispatch!(isa, |S| (sp: *const f32, op: *mut f32) {
            S::store_partial(op, S::exp(S::load_partial(sp, 2)), 2);
        });
        assert!(out[0].is_nan(), "{isa}: exp(NaN) is NaN");
        assert_eq!(out[1], 0.0, "{isa}: exp(-inf) is 0");
    }
}

#[test]
fn kernels_nan_propagates_like_numpy() {
    let (b, s, h, heads) = (2, 4, 16, 2);
    let mut rng = Rng::new(5);
    let mut x = rng.vec(b * s * h, 1.0);
    x[s * h + 3] = f32::NAN; // batch 1, position 0
    let qkv_w = rng.vec(h * 3 * h, 0.3);
    let out_w = rng.vec(h * h, 0.3);
    let w = BlockWeights { qkv_w: &qkv_w, qkv_b: None, out_w: &out_w, out_b: None };
    for isa in Isa::available() {
        let mut out = vec![0.0f32; b * s * h];
        let shape = BlockShape { batch: b, seq: s, hidden: h, num_heads: heads };
        fused_attention_block(shape, &x, w, None, MaskedRows::Uniform, None, RunOptions { threads: Some(1), isa: Some(isa) }, &mut out).unwrap();
        assert!(out[..s * h].iter().all(|v| v.is_finite()), "{isa}: batch 0 untouched");
        assert!(out[s * h..].iter().all(|v| v.is_nan()), "{isa}: batch 1 all NaN, as numpy gives");
    }
}

#[test]
fn kernels_reject_bad_shapes_with_named_arguments() {
    let w = vec![0.0f32; 8 * 24];
    let o = vec![0.0f32; 64];
    let bw = BlockWeights { qkv_w: &w, qkv_b: None, out_w: &o, out_b: None };
    let x = vec![0.0f32; 16];
    let mut out = vec![0.0f32; 16];
    let shape = BlockShape { batch: 1, seq: 2, hidden: 8, num_heads: 3 };
    let e = fused_attention_block(shape, &x, bw, None, MaskedRows::Uniform, None, RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("num_heads=3"), "{e}");
    let shape = BlockShape { num_heads: 2, ..shape };
    let e = fused_attention_block(shape, &x[..15], bw, None, MaskedRows::Uniform, None, RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("hidden") && e.0.contains("[1, 2, 8]"), "{e}");
    let e = fused_attention_block(shape, &x, bw, Some(&[1.0]), MaskedRows::Uniform, None, RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("mask") && e.0.contains("[1, 2]"), "{e}");
    let cos = vec![0.0f32; 4];
    let shape_odd = BlockShape { num_heads: 8, ..shape };
    let e = fused_attention_block(shape_odd, &x, bw, None, MaskedRows::Uniform, Some(Rope::neox(&cos, &cos, 1)), RunOptions::default(), &mut out).unwrap_err();
    assert!(e.0.contains("even rotary_dim"), "{e}");
    let bad = BlockWeights { qkv_w: &w[..10], ..bw };
    assert!(PreparedAttentionBlock::new(8, 2, bad).unwrap_err().0.contains("qkv_w"));
}

#[test]
fn kernels_isa_selection_honours_requests() {
    assert_eq!(Isa::select(Some(Isa::Scalar)), Isa::Scalar);
    for isa in Isa::available() {
        assert_eq!(Isa::select(Some(isa)), isa);
    }
    // An unavailable request falls back to something this CPU runs.
    assert!(Isa::select(Some(Isa::Neon)).is_available());
    assert_eq!(Isa::parse(" AVX512 "), Some(Isa::Avx512));
    assert_eq!(Isa::parse("sse"), None);
}

#[test]
fn kernels_packed_panels_start_on_a_cache_line() {
    let (k, n) = (5usize, 70usize);
    let w = Rng::new(9).vec(k * n, 1.0);
    for _ in 0..4 {
        let packed = PackedWeights::pack(&w, None, k, n, 0, 1.0);
        let data = packed.as_ref().data;
        assert_eq!(data.as_ptr() as usize % 64, 0, "panels must start on a 64-byte boundary");
        assert_eq!(data.len(), n.div_ceil(32) * k * 32);
        // Panel 1, row 2, column 3 holds w[2, 35]; the padding past column 70 is zero.
        assert_eq!(data[(k + 2) * 32 + 3], w[2 * n + 35]);
        assert_eq!(data[(2 * k + 4) * 32 + 31], 0.0);
    }
}

#[test]
fn kernels_threshold_counts_weight_reads_of_one_token_calls() {
    let shape = |hidden, seq| BlockShape { batch: 1, seq, hidden, num_heads: 2 };
    // Many rows: the flops decide.
    assert_eq!(shape(384, 64).threshold_work(), shape(384, 64).flops());
    // One token at H=384: 1.2 MFLOP, but 2.4 MB of weights to read, which two threads read faster.
    assert!(shape(384, 1).flops() < PARALLEL_MIN_FLOPS);
    assert!(shape(384, 1).threshold_work() >= PARALLEL_MIN_FLOPS);
    // One token at H=128: small either way, so it stays on the calling thread.
    assert!(shape(128, 1).threshold_work() < PARALLEL_MIN_FLOPS);
}

#[test]
fn kernels_projection_matches_reference_over_threads_and_layouts() {
    use super::gemm::{project, WeightsRef};
    use super::par::Par;
    // Row counts on both sides of the k-outer limit (16), K not a multiple of the k-group or of
    // the thread count, N with a partial panel (and, at N = 200 and 500, several groups of panels
    // packed on the fly, the last one partial); row-major weights (split along K over threads) and
    // packed ones, with and without the bias, serial and over the pool.
    for (m, k, n) in [(1usize, 7usize, 5usize), (8, 100, 70), (16, 33, 96), (3, 300, 33), (17, 64, 40), (5, 16, 32), (20, 50, 200), (17, 300, 500)] {
        let mut rng = Rng::new((m * 1000 + k * 10 + n) as u64);
        let (a, w, bias) = (rng.vec(m * k, 1.0), rng.vec(k * n, 1.0), rng.vec(n, 1.0));
        for with_bias in [false, true] {
            let want: Vec<f64> = (0..m * n)
                .map(|i| (0..k).map(|p| a[i / n * k + p] as f64 * w[p * n + i % n] as f64).sum::<f64>() + if with_bias { bias[i % n] as f64 } else { 0.0 })
                .collect();
            let packed = PackedWeights::pack(&w, with_bias.then_some(&bias[..]), k, n, 0, 1.0);
            for isa in Isa::available() {
                for threads in [1, 2] {
                    for layout in ["row-major", "packed"] {
                        let wr = if layout == "packed" { packed.as_ref() } else { WeightsRef::row_major(&w, with_bias.then_some(&bias[..]), k, n) };
                        let mut c = vec![f32::NAN; m * n];
                        Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &a, k, wr, &mut c, n));
                        assert_close(&c, &want, 1e-5 * (k as f64).sqrt(), &format!("project {layout} {isa} t{threads} m{m} k{k} n{n} bias{with_bias}"));
                    }
                }
            }
        }
    }
}
