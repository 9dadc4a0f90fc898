//! Threading for the kernels: thread-count resolution (`threads=`, `RLX_RULES_THREADS`, core count), one cached rayon pool per count, and the small-work threshold below which a call stays on the calling thread.

use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Environment variable giving the default thread count.
pub const THREADS_ENV: &str = "RLX_RULES_THREADS";

/// Below this many floating-point operations a call runs on the calling thread: waking the pool
/// costs more than it saves. Measured with `benchmarks/bench_attention.py --threshold` (see
/// docs/kernels.md): on the 2-core reference machine two threads start to win at about 2 MFLOP.
pub const PARALLEL_MIN_FLOPS: f64 = 2.0e6;

/// Environment variable overriding [`PARALLEL_MIN_FLOPS`] (for measuring it; `0` always wakes the pool).
pub const PARALLEL_MIN_FLOPS_ENV: &str = "RLX_RULES_PARALLEL_MIN_FLOPS";

/// The small-work threshold in force: `RLX_RULES_PARALLEL_MIN_FLOPS`, else [`PARALLEL_MIN_FLOPS`].
pub fn parallel_min_flops() -> f64 {
    std::env::var(PARALLEL_MIN_FLOPS_ENV).ok().and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| *v >= 0.0).unwrap_or(PARALLEL_MIN_FLOPS)
}

/// Thread count for a call: `requested` if given (and > 0), else `RLX_RULES_THREADS`, else the
/// number of cores.
pub fn resolve_threads(requested: Option<usize>) -> usize {
    if let Some(t) = requested.filter(|&t| t > 0) {
        return t;
    }
    if let Some(t) = std::env::var(THREADS_ENV).ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|&t| t > 0) {
        return t;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The dedicated pool for `threads` workers, built on first use and kept for the process.
fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut pools = pools.lock().unwrap_or_else(|e| e.into_inner());
    pools
        .entry(threads)
        .or_insert_with(|| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(move |i| format!("rlx-kernels-{threads}-{i}"))
                    .build()
                    .expect("failed to start the kernel thread pool"),
            )
        })
        .clone()
}

/// How one call runs its loops: on the calling thread, or over a pool of `threads`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Par {
    pub threads: usize,
    pub parallel: bool,
}

impl Par {
    pub const SERIAL: Par = Par { threads: 1, parallel: false };

    /// Runs `body` with a `Par` for `threads`, inside the pool when the work (in flops) is large
    /// enough to be worth it, else directly on the calling thread.
    pub fn run<R: Send>(threads: usize, flops: f64, body: impl FnOnce(Par) -> R + Send) -> R {
        if threads <= 1 || flops < parallel_min_flops() {
            body(Par::SERIAL)
        } else {
            let par = Par { threads, parallel: true };
            pool(threads).install(|| body(par))
        }
    }

    /// Calls `f(i)` for every `i` in `0..n`, in parallel when this call is parallel.
    pub fn for_each(&self, n: usize, f: impl Fn(usize) + Send + Sync) {
        if self.parallel && n > 1 {
            (0..n).into_par_iter().for_each(f);
        } else {
            (0..n).for_each(f);
        }
    }
}
