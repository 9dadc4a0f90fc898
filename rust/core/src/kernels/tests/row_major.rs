//! Tests of the one-shot projections on row-major weights at every alignment: the k-group order with its panels shifted to a cache line (and the two edge windows) gives the reference, and a probe that times it against the unshifted order.

use super::*;
use crate::kernels::gemm::{project, WeightsRef};
use crate::kernels::gemm_rows::ALIGN_ENV;
use crate::kernels::par::Par;

fn reference(m: usize, k: usize, n: usize, a: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    (0..m * n).map(|i| (0..k).map(|p| a[i / n * k + p] as f64 * w[p * n + i % n] as f64).sum::<f64>() + bias.map_or(0.0, |b| b[i % n] as f64)).collect()
}

/// A float buffer of at least `len + 16` floats from its first cache line boundary, and that
/// boundary's index.
fn lines(len: usize) -> (Vec<f32>, usize) {
    let v = vec![0.0f32; len + 32];
    let start = v.as_ptr().align_offset(64);
    (v, start)
}

#[test]
fn kernels_row_major_projection_is_exact_at_every_alignment() {
    // Every offset of the weights from a cache line (0..15 floats), row strides that keep the rows
    // aligned alike (n multiple of 16) or not, N with and without a tail after the shifted panels,
    // 1 to 16 rows (the k-group order), serial and split along K over 2 threads, with and without
    // the bias; each serial result is bit-identical to the packed panels' (the same FMAs in the
    // same order).
    for (m, k, n) in [(8usize, 40usize, 64usize), (1, 17, 48), (16, 33, 96), (5, 64, 80), (12, 20, 33), (3, 8, 16)] {
        let mut rng = Rng::new((m * 7919 + k * 31 + n) as u64);
        let (a, vals, bias) = (rng.vec(m * k, 1.0), rng.vec(k * n, 1.0), rng.vec(n, 1.0));
        let (mut buf, start) = lines(k * n);
        for offset in start..start + 16 {
            buf[offset..offset + k * n].copy_from_slice(&vals);
            let w = &buf[offset..offset + k * n];
            for with_bias in [false, true] {
                let b = with_bias.then_some(&bias[..]);
                let want = reference(m, k, n, &a, &vals, b);
                let packed = PackedWeights::pack(&vals, b, k, n, 0, 1.0);
                for isa in Isa::available() {
                    for threads in [1, 2] {
                        let what = format!("{isa} t{threads} m{m} k{k} n{n} offset{offset} bias{with_bias}");
                        let mut c = vec![f32::NAN; m * n];
                        Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &a, k, WeightsRef::row_major(w, b, k, n), &mut c, n));
                        assert_close(&c, &want, 1e-5 * (k as f64).sqrt(), &what);
                        if threads > 1 {
                            continue; // split along K: the partial sums add in another order
                        }
                        // The same float operations in the same order as the packed panels.
                        let mut c_packed = vec![f32::NAN; m * n];
                        Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &a, k, packed.as_ref(), &mut c_packed, n));
                        assert!(c.iter().zip(&c_packed).all(|(x, y)| x.to_bits() == y.to_bits()), "{what}: not bit-identical to the packed panels");
                    }
                }
            }
        }
    }
}

/// Not a pass/fail test: prints row-major / packed projection times at K=768, N=2304 and 768 for
/// weights at offsets from a cache line (numpy's are 16 bytes past one), panels shifted to a line
/// against not, with 32 MiB of other memory written between calls (`RLX_PROBE_M=1,8` picks the
/// row counts; above 16 both columns run the same code, packing on the fly). `cargo test
/// --release -p rlx-rules-core --lib kernels_row_major_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernels_row_major_timing() {
    let k = 768usize;
    let mut junk = vec![1.0f32; 8 << 20];
    let isa = Isa::best();
    for n in [2304usize, 768] {
        let mut rng = Rng::new(5);
        let vals = rng.vec(k * n, 1.0);
        let packed = PackedWeights::pack(&vals, None, k, n, 0, 1.0);
        let (mut buf, start) = lines(k * n);
        for offset in [0usize, 4] {
            buf[start + offset..start + offset + k * n].copy_from_slice(&vals);
            let w = &buf[start + offset..start + offset + k * n];
            for m in std::env::var("RLX_PROBE_M").ok().map_or(vec![1usize, 4, 8, 16], |s| s.split(',').map(|x| x.parse().expect("m")).collect()) {
                let a = rng.vec(m * k, 1.0);
                for threads in [1usize, 2] {
                    let mut c = vec![0.0f32; m * n];
                    let mut times = [vec![], vec![], vec![]];
                    for _round in 0..31 {
                        for (v, t) in times.iter_mut().enumerate() {
                            for x in junk.iter_mut().step_by(16) {
                                *x += 1.0;
                            }
                            std::env::set_var(ALIGN_ENV, if v == 2 { "0" } else { "1" });
                            let wr = if v == 0 { packed.as_ref() } else { WeightsRef::row_major(w, None, k, n) };
                            let t0 = std::time::Instant::now();
                            Par::run(threads, f64::INFINITY, |par| project(isa, &par, m, &a, k, wr, &mut c, n));
                            t.push(t0.elapsed().as_secs_f64() * 1e6);
                        }
                    }
                    let [p, shifted, plain] = times.map(|mut v| {
                        v.sort_by(f64::total_cmp);
                        v[v.len() / 2]
                    });
                    println!("n{n} offset {:2} B m{m:2} t{threads}: packed {p:5.0} us; row-major shifted {:.2}x, unshifted {:.2}x", 4 * offset, shifted / p, plain / p);
                }
            }
        }
    }
    std::env::remove_var(ALIGN_ENV);
}
