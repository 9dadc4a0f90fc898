//! Machine roofline probes for the benchmark: read bandwidth over a buffer of a given size (from cache when it fits) and peak fused-multiply-add throughput, for a thread count.

use super::gemm::SendPtr;
use super::par::Par;
use super::simd::{dispatch, Isa};
use std::time::Instant;

/// Best-of-`repeats` bytes per second for `threads` threads together reading an `nbytes` buffer
/// once (each thread its own contiguous part), after one warm-up pass.
pub fn read_bandwidth(nbytes: usize, threads: usize, repeats: usize) -> f64 {
    let n = (nbytes / 4).max(1024);
    let buf: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let isa = Isa::select(None);
    let mut sums = vec![0.0f32; threads.max(1)];
    let mut best = f64::INFINITY;
    Par::run(threads, f64::INFINITY, |par| {
        let parts = if par.parallel { par.threads } else { 1 };
        for rep in 0..=repeats.max(1) {
            let out = SendPtr(sums.as_mut_ptr());
            let t0 = Instant::now();
            par.for_each(parts, |t| {
                let (lo, hi) = (t * n / parts, (t + 1) * n / parts);
                let s = sum(isa, &buf[lo..hi]);
                // SAFETY: one slot per part, `parts <= sums.len()`.
                unsafe { *out.add(t) = s };
            });
            let dt = t0.elapsed().as_secs_f64();
            if rep > 0 {
                best = best.min(dt);
            }
        }
    });
    std::hint::black_box(&sums);
    (n * 4) as f64 / best
}

fn sum(isa: Isa, x: &[f32]) -> f32 {
    let mut out = 0.0f32;
    let (p, n, o) = (x.as_ptr(), x.len(), &mut out as *mut f32);
    dispatch!(isa, |S| (p: *const f32, n: usize, o: *mut f32) {
        let l = S::LANES;
        let mut acc = [S::zero(); 8];
        let mut i = 0;
        while i + 8 * l <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = S::add(*a, S::load(p.add(i + j * l)));
            }
            i += 8 * l;
        }
        let mut total = 0.0;
        for a in acc {
            total += S::hsum(a);
        }
        while i < n {
            total += *p.add(i);
            i += 1;
        }
        *o = total;
    });
    out
}

/// Best-of-3 floating-point operations per second of `threads` threads each running independent
/// fused multiply-add chains on the fastest SIMD path.
pub fn peak_flops(threads: usize) -> f64 {
    const ITERS: usize = 2_000_000;
    let isa = Isa::select(None);
    let lanes = match isa {
        Isa::Avx512 => 16,
        Isa::Avx2 | Isa::Scalar => 8,
        Isa::Neon => 4,
    };
    let mut best = f64::INFINITY;
    let mut sink = vec![0.0f32; threads.max(1)];
    Par::run(threads, f64::INFINITY, |par| {
        let parts = if par.parallel { par.threads } else { 1 };
        for rep in 0..4 {
            let out = SendPtr(sink.as_mut_ptr());
            let t0 = Instant::now();
            par.for_each(parts, |t| {
                let s = fma_chains(isa, ITERS);
                // SAFETY: one slot per part.
                unsafe { *out.add(t) = s };
            });
            let dt = t0.elapsed().as_secs_f64();
            if rep > 0 {
                best = best.min(dt);
            }
        }
        std::hint::black_box(&sink);
        (2 * 12 * lanes * ITERS * parts) as f64 / best
    })
}

fn fma_chains(isa: Isa, iters: usize) -> f32 {
    let mut out = 0.0f32;
    let o = &mut out as *mut f32;
    dispatch!(isa, |S| (iters: usize, o: *mut f32) {
        let mut acc = [S::zero(); 12];
        let a = S::splat(std::hint::black_box(0.999_999));
        let b = S::splat(std::hint::black_box(1e-7));
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = S::fmadd(*x, a, b);
            }
        }
        let mut total = 0.0;
        for x in acc {
            total += S::hsum(x);
        }
        *o = total;
    });
    out
}
