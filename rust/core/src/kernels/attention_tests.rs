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
