//! Timing probes of the kernels (ignored tests that print, never assert a speed): projections against the `gemm` crate, attention alone, the pool against rayon, where a block's time goes.

use super::*;

/// Not a pass/fail test: prints single-thread projection times of our micro-kernel (packed and
/// row-major) against the `gemm` crate, the measurement behind the choice in gemm.rs. Run with
/// `cargo test --release -p rlx-rules-core kernels_projection_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_projection_timing_vs_gemm_crate() {
    use crate::kernels::gemm::{project, WeightsRef};
    use crate::kernels::par::Par;
    use std::time::Instant;
    let (k, n) = (768usize, 2304usize);
    let mut rng = Rng::new(1);
    let w = rng.vec(k * n, 0.1);
    let bias = rng.vec(n, 0.1);
    let packed = PackedWeights::pack(&w, Some(&bias), k, n, 0, 1.0);
    let isa = Isa::select(None);
    let best = |f: &mut dyn FnMut()| {
        f();
        (0..15).map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        }).fold(f64::INFINITY, f64::min)
    };
    println!("M, ours packed µs, ours row-major µs, gemm crate µs (K=768, N=2304, 1 thread, {isa})");
    for m in [1usize, 4, 8, 16, 64, 256, 1024] {
        let a = rng.vec(m * k, 1.0);
        let mut c = vec![0.0f32; m * n];
        let t_packed = best(&mut || project(isa, &Par::SERIAL, m, &a, k, packed.as_ref(), &mut c, n));
        let t_raw = best(&mut || project(isa, &Par::SERIAL, m, &a, k, WeightsRef::row_major(&w, Some(&bias), k, n), &mut c, n));
        let t_gemm = best(&mut || unsafe {
            for row in c.chunks_mut(n) {
                row.copy_from_slice(&bias);
            }
            ::gemm::gemm(m, n, k, c.as_mut_ptr(), 1, n as isize, true, a.as_ptr(), 1, k as isize, w.as_ptr(), 1, n as isize, 1.0f32, 1.0f32, false, false, false, ::gemm::Parallelism::None);
        });
        println!("{m}, {:.0}, {:.0}, {:.0}", t_packed * 1e6, t_raw * 1e6, t_gemm * 1e6);
    }
}

/// Attention alone, one thread, on every SIMD path this CPU has (median of 15 calls; not a test
/// of speed, a probe): `cargo test --release -p rlx-rules-core kernels_attention_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_attention_timing() {
    use crate::kernels::attention::{AttnShape, RowsView};
    use crate::kernels::par::Par;
    use std::time::Instant;
    println!("path, H/heads, B×S, µs, GFLOP/s");
    for isa in Isa::available() {
        for (h, heads, b, s) in [(384usize, 6usize, 1usize, 8usize), (768, 12, 1, 8), (768, 12, 1, 16), (768, 12, 1, 64), (384, 6, 1, 128), (384, 6, 1, 512), (768, 12, 1, 512), (384, 6, 8, 128)] {
            let m = b * s;
            let qkv = Rng::new(3).vec(m * 3 * h, 1.0);
            let mask = vec![1.0f32; m];
            let mut ctx = vec![0.0f32; m * h];
            let view = |offset| RowsView { data: &qkv[..], offset, row_stride: 3 * h, batch_stride: s * 3 * h };
            let shape = AttnShape { batch: b, seq_q: s, seq_k: s, num_heads: heads, kv_heads: heads, head_dim: h / heads };
            let mut times: Vec<f64> = (0..16)
                .map(|_| {
                    let t = Instant::now();
                    attention::attention(isa, &Par::SERIAL, shape, view(0), view(h), view(2 * h), &Masking::keep_keys(&mask, s), 0.125, &mut ctx, h);
                    t.elapsed().as_secs_f64()
                })
                .skip(1)
                .collect();
            times.sort_by(|a, b| a.total_cmp(b));
            let t = times[times.len() / 2];
            println!("{isa}, {h}/{heads}, {b}×{s}, {:.1}, {:.1}", t * 1e6, 4.0 * (m * s * h) as f64 / t / 1e9);
        }
    }
}

/// Fork-join overhead of a block-shaped call (three phases: 72 tasks, 12 tasks, 24 tasks of a
/// few µs each, like BERT-base at 8 tokens) on 2 threads: our pool against a 2-thread rayon pool,
/// back to back and 0.5 ms apart (the caller busy in between). Not a test of speed, a probe:
/// `cargo test --release -p rlx-rules-core kernels_pool_vs_rayon -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_pool_vs_rayon() {
    use crate::kernels::par::Par;
    use rayon::prelude::*;
    use std::time::{Duration, Instant};
    fn work(units: usize) -> f32 {
        let mut x = std::hint::black_box(1.0f32);
        for _ in 0..units * 1000 {
            x = x.mul_add(0.999_999, 1e-7);
        }
        x
    }
    let phases = [(72usize, 2usize), (12, 1), (24, 2)];
    let sink = std::sync::atomic::AtomicU32::new(0);
    let run_task = |units: usize| {
        sink.fetch_add(work(units).to_bits() & 1, std::sync::atomic::Ordering::Relaxed);
    };
    let rayon_pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let ours = || {
        Par::run(2, f64::INFINITY, |par| {
            for &(n, units) in &phases {
                par.for_each(n, |_| run_task(units));
            }
        })
    };
    let with_rayon = || {
        rayon_pool.install(|| {
            for &(n, units) in &phases {
                (0..n).into_par_iter().for_each(|_| run_task(units));
            }
        })
    };
    let serial = || {
        for &(n, units) in &phases {
            (0..n).for_each(|_| run_task(units));
        }
    };
    let contenders: [(&str, &dyn Fn()); 3] = [("serial", &serial), ("our pool", &ours), ("rayon", &with_rayon)];
    for gap in [Duration::ZERO, Duration::from_micros(500)] {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
        for _round in 0..20 {
            for (i, (_, f)) in contenders.iter().enumerate() {
                for call in 0..10 {
                    let busy_until = Instant::now() + gap;
                    while Instant::now() < busy_until {}
                    let t = Instant::now();
                    f();
                    if call >= 2 {
                        times[i].push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
            }
        }
        let line: Vec<String> = contenders
            .iter()
            .zip(times.iter_mut())
            .map(|((name, _), t)| {
                t.sort_by(|a, b| a.total_cmp(b));
                format!("{name} {:.0} µs", t[t.len() / 2])
            })
            .collect();
        println!("calls {} µs apart: {}", gap.as_micros(), line.join(", "));
    }
}

/// Where a block's time goes (BERT-base at 1 to 64 tokens, H=384 at 8 to 1,024 tokens), 1 and 2 threads
/// (medians; a probe, not a test of speed): the whole prepared block against its two projections
/// alone and its attention alone; what the parts leave over is hand-offs. `cargo test --release
/// -p rlx-rules-core kernels_block_phase_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_block_phase_timing() {
    use crate::kernels::attention::{AttnShape, RowsView};
    use crate::kernels::gemm::project;
    use crate::kernels::par::Par;
    use std::time::Instant;
    let isa = Isa::select(None);
    for (h, b, s) in [(768usize, 1usize, 1usize), (768, 1, 8), (768, 1, 16), (768, 1, 64), (384, 1, 8), (384, 1, 64), (384, 4, 16), (384, 1, 512), (384, 8, 128)] {
        let heads = h / 64;
        let mut rng = Rng::new(5);
        let qkv_w = rng.vec(h * 3 * h, 0.05);
        let out_w = rng.vec(h * h, 0.05);
        let block = PreparedAttentionBlock::new(h, heads, BlockWeights { qkv_w: &qkv_w, qkv_b: None, out_w: &out_w, out_b: None }).unwrap();
        let pq = PackedWeights::pack(&qkv_w, None, h, 3 * h, 0, 1.0);
        let po = PackedWeights::pack(&out_w, None, h, h, 0, 1.0);
        let m = b * s;
        for threads in [1usize, 2] {
            let x = rng.vec(m * h, 1.0);
            let mut out = vec![0.0f32; m * h];
            let mut qkv = vec![0.0f32; m * 3 * h];
            let mut ctx = vec![0.0f32; m * h];
            let opts = RunOptions { threads: Some(threads), isa: None };
            let mut attn_out = vec![0.0f32; m * h];
            let attn_shape = AttnShape { batch: b, seq_q: s, seq_k: s, num_heads: heads, kv_heads: heads, head_dim: h / heads };
            let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..(4000 / m).clamp(5, 40) {
                // Each phase reads its own copy of the weights: two untimed calls first, so that
                // the copy is back in cache after the other phases' copies passed through it.
                let mut time = |slot: usize, f: &mut dyn FnMut()| {
                    f();
                    f();
                    let t0 = Instant::now();
                    f();
                    t[slot].push(t0.elapsed().as_secs_f64() * 1e6);
                };
                time(0, &mut || block.run(b, s, &x, None, MaskedRows::Uniform, None, opts, &mut out).unwrap());
                time(1, &mut || Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &x, h, pq.as_ref(), &mut qkv, 3 * h)));
                time(2, &mut || Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &x, h, po.as_ref(), &mut ctx, h)));
                time(3, &mut || {
                    Par::run(threads, f64::INFINITY, |par| {
                        project(isa, &par, m, &x, h, pq.as_ref(), &mut qkv, 3 * h);
                        project(isa, &par, m, &x, h, po.as_ref(), &mut ctx, h);
                    })
                });
                let view = |offset| RowsView { data: &qkv[..], offset, row_stride: 3 * h, batch_stride: s * 3 * h };
                time(4, &mut || {
                    Par::run(threads, f64::INFINITY, |par| {
                        attention::attention(isa, &par, attn_shape, view(0), view(h), view(2 * h), &Masking::default(), 0.125, &mut attn_out, h)
                    })
                });
            }
            let med: Vec<String> = t.iter_mut().map(|v| { v.sort_by(|a, b| a.total_cmp(b)); format!("{:.0}", v[v.len() / 2]) }).collect();
            println!("H={h} {b}x{s} threads={threads}: block {} | qkv {} | out {} | qkv+out {} | attention {}", med[0], med[1], med[2], med[3], med[4]);
        }
    }
}
