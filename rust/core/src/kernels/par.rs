//! Threading for the kernels: thread-count resolution (`threads=`, `RLX_RULES_THREADS`, core count), one cached fork-join pool per count whose workers spin briefly between phases, and the small-work thresholds below which a call stays on the calling thread.
//!
//! Why not rayon: a fused block is four short parallel phases (QKV projection, RoPE, attention,
//! output projection) of 50–500 µs each at the sizes that matter. With rayon every phase wakes
//! sleeping workers (tens of µs on a VM) and the call itself hops onto a pool thread. Here the
//! calling thread takes part as worker 0, the other workers spin for [`SPIN`] after each phase
//! (so the next phase of the same call, or the next call, finds them awake) and only then park.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use crate::cores;

/// Environment variable giving the default thread count.
pub const THREADS_ENV: &str = "RLX_RULES_THREADS";

/// Below this many floating-point operations a call runs on the calling thread: waking the pool
/// costs more than it saves. Measured with `benchmarks/bench_attention.py --threshold` (see
/// BENCHMARKS.md).
pub const PARALLEL_MIN_FLOPS: f64 = 2.0e6;

/// Below this many floating-point operations a call does not wake a pool whose workers have all
/// parked (after [`SPIN`] without work), unless it comes right after another call: a woken pool
/// costs a call of 2–5 MFLOP more than it saves (`benchmarks/bench_attention.py --threshold`).
pub const WAKE_MIN_FLOPS: f64 = 6.0e6;

/// Environment variable overriding both [`PARALLEL_MIN_FLOPS`] and [`WAKE_MIN_FLOPS`] (for
/// measuring them; `0` always uses the pool).
pub const PARALLEL_MIN_FLOPS_ENV: &str = "RLX_RULES_PARALLEL_MIN_FLOPS";

/// How long a worker spins for the next phase before it parks.
const SPIN: Duration = Duration::from_micros(100);

/// The small-work thresholds in force, for a pool with a spinning worker and for one whose
/// workers have all parked: `RLX_RULES_PARALLEL_MIN_FLOPS` for both, else
/// ([`PARALLEL_MIN_FLOPS`], [`WAKE_MIN_FLOPS`]).
pub fn parallel_min_flops() -> (f64, f64) {
    match std::env::var(PARALLEL_MIN_FLOPS_ENV).ok().and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| *v >= 0.0) {
        Some(v) => (v, v),
        None => (PARALLEL_MIN_FLOPS, WAKE_MIN_FLOPS),
    }
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
    cores()
}

/// The task function of the phase in flight, lifetime erased (see [`Pool::run`]).
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
}

/// A fork-join pool of `workers` threads plus the calling thread.
struct Pool {
    workers: usize,
    /// When the last call that wanted this pool ended ([`now_ns`]).
    last_end_ns: AtomicU64,
    /// Held by the call using the pool; a concurrent call runs serially instead.
    busy: Mutex<()>,
    /// Bumped to publish a phase.
    epoch: AtomicUsize,
    job: UnsafeCell<Job>,
    next_task: AtomicUsize,
    /// Whether the published phase still accepts workers (closed once every task is claimed).
    open: AtomicBool,
    /// Workers inside a phase (joined and not yet left).
    active: AtomicUsize,
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the caller holding `busy`, while the phase is closed and no
// worker is active; a worker reads it only after joining (`active += 1`) and seeing the phase
// open, and the caller, after closing the phase, does not return (so the closure stays alive)
// until `active == 0`. Both sides use SeqCst, so a worker either sees the phase closed or is
// seen as active by the caller.
unsafe impl Sync for Pool {}
unsafe impl Send for Pool {}

fn noop(_: usize) {}

impl Pool {
    fn start(threads: usize) -> &'static Pool {
        let noop_ref: &'static (dyn Fn(usize) + Sync) = &noop;
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            workers: threads - 1,
            last_end_ns: AtomicU64::new(0),
            busy: Mutex::new(()),
            epoch: AtomicUsize::new(0),
            job: UnsafeCell::new(Job { f: noop_ref as *const _, n: 0 }),
            next_task: AtomicUsize::new(0),
            open: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        }));
        for i in 1..threads {
            std::thread::Builder::new()
                .name(format!("rlx-kernels-{threads}-{i}"))
                .spawn(move || pool.worker())
                .expect("failed to start a kernel worker thread");
        }
        pool
    }

    fn worker(&self) {
        let mut seen = 0usize;
        loop {
            // Wait for a new phase: spin, then park.
            let start = Instant::now();
            let mut spins = 0u32;
            while self.epoch.load(Ordering::SeqCst) == seen {
                std::hint::spin_loop();
                spins += 1;
                if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                    let guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
                    self.sleepers.fetch_add(1, Ordering::SeqCst);
                    let mut guard = guard;
                    while self.epoch.load(Ordering::SeqCst) == seen {
                        guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                    }
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
            }
            seen = self.epoch.load(Ordering::SeqCst);
            self.active.fetch_add(1, Ordering::SeqCst);
            if self.open.load(Ordering::SeqCst) {
                // SAFETY: see `unsafe impl Sync for Pool`.
                let job = unsafe { *self.job.get() };
                self.drain(job);
            }
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether every worker has parked (none is spinning, so using the pool means waking them).
    fn all_parked(&self) -> bool {
        self.sleepers.load(Ordering::SeqCst) >= self.workers
    }

    /// Runs tasks of `job` until none is left.
    fn drain(&self, job: Job) {
        loop {
            let i = self.next_task.fetch_add(1, Ordering::Relaxed);
            if i >= job.n {
                return;
            }
            // SAFETY: the closure outlives the phase (the caller waits for active workers).
            let f = unsafe { &*job.f };
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Runs `f(0..n)` over the caller and whichever workers join in time; returns when all tasks
    /// are done and no worker is inside the phase. A worker that is not running (descheduled on a
    /// busy machine, or still waking) is not waited for: the caller then does its share.
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        // SAFETY: erases the lifetime of `f`; it is only used until this function returns (below
        // we close the phase and wait until no worker is active).
        let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f) };
        unsafe { *self.job.get() = Job { f: f_static, n } };
        self.next_task.store(0, Ordering::SeqCst);
        self.open.store(true, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.park.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_all();
        }
        self.drain(Job { f: f_static, n });
        self.open.store(false, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.active.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
            spins += 1;
            if spins > 4096 {
                std::thread::yield_now();
            }
        }
        if self.panicked.swap(false, Ordering::SeqCst) {
            panic!("a kernel task panicked");
        }
    }
}

/// Nanoseconds since the first call of this function (a monotonic clock).
fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Whether a call of `flops` is worth the pool, given the thresholds for a pool with a spinning
/// worker and for one that would have to be woken (`must_wake`: every worker has parked and no
/// call has just ended).
fn uses_pool(flops: f64, (min_flops, wake_min_flops): (f64, f64), must_wake: bool) -> bool {
    flops >= min_flops && (flops >= wake_min_flops || !must_wake)
}

/// The pool for `threads` threads (caller included), started on first use and kept.
fn pool(threads: usize) -> &'static Pool {
    static POOLS: OnceLock<Mutex<HashMap<usize, &'static Pool>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut pools = pools.lock().unwrap_or_else(|e| e.into_inner());
    pools.entry(threads).or_insert_with(|| Pool::start(threads))
}

/// How one call runs its loops: on the calling thread, or over a pool.
#[derive(Clone, Copy)]
pub(crate) struct Par {
    pub threads: usize,
    pub parallel: bool,
    pool: Option<&'static Pool>,
}

impl Par {
    pub const SERIAL: Par = Par { threads: 1, parallel: false, pool: None };

    /// Runs `body` with a `Par` for `threads`, over the pool when the work (in flops) is large
    /// enough to be worth it and the pool is free, else directly on the calling thread. Work
    /// below [`WAKE_MIN_FLOPS`] uses the pool only while a worker is still spinning, or when the
    /// previous call ended less than [`SPIN`] ago; it does not wake a parked pool for a lone call.
    ///
    /// `threads` is capped at the number of cores: the pool's workers spin between phases, and
    /// more spinning threads than cores would only steal time from each other.
    pub fn run<R>(threads: usize, flops: f64, body: impl FnOnce(Par) -> R) -> R {
        let threads = threads.min(cores());
        if threads <= 1 {
            return body(Par::SERIAL);
        }
        let thresholds = parallel_min_flops();
        if !uses_pool(flops, thresholds, false) {
            return body(Par::SERIAL);
        }
        let pool = pool(threads);
        let _guard: MutexGuard<'_, ()> = match pool.busy.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // Another thread is using this pool: run this call serially rather than queue.
            Err(TryLockError::WouldBlock) => return body(Par::SERIAL),
        };
        // A parked pool is woken for medium work only when calls come in a stream (the last one
        // ended less than SPIN ago): then the calls that follow find the worker spinning.
        let in_stream = now_ns().saturating_sub(pool.last_end_ns.load(Ordering::Relaxed)) < SPIN.as_nanos() as u64;
        let parallel = uses_pool(flops, thresholds, pool.all_parked() && !in_stream);
        let result = body(if parallel { Par { threads, parallel: true, pool: Some(pool) } } else { Par::SERIAL });
        pool.last_end_ns.store(now_ns(), Ordering::Relaxed);
        result
    }

    /// Calls `f(i)` for every `i` in `0..n`, in parallel when this call is parallel.
    pub fn for_each(&self, n: usize, f: impl Fn(usize) + Sync) {
        match self.pool {
            Some(pool) if n > 1 => pool.run(n, &f),
            _ => (0..n).for_each(f),
        }
    }

    /// Like [`Par::for_each`], but with the items numbered so that each of the `T` threads starts
    /// on its own contiguous stretch of `⌈n/T⌉` items: the `j`-th task claimed is item
    /// `(j mod T)·⌈n/T⌉ + ⌊j/T⌋`. Threads claiming tasks in turn then work on far-apart items
    /// (no cache line of the output shared between neighbouring items bounces between cores) and
    /// each walks its stretch in order, while any thread may still take any item, so the load
    /// evens out to within one item.
    pub fn for_each_spread(&self, n: usize, f: impl Fn(usize) + Sync) {
        if !self.parallel || n <= 1 {
            return self.for_each(n, f);
        }
        let t = self.threads;
        let chunk = n.div_ceil(t);
        self.for_each(chunk * t, |j| {
            let item = (j % t) * chunk + j / t;
            if item < n {
                f(item);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_pool_runs_every_task_once() {
        for threads in [2, 3] {
            // (3 is capped to the core count where there are fewer cores.)
            // (Serial when another test holds the pool; the result must be the same.)
            Par::run(threads, f64::INFINITY, |par| {
                for n in [0usize, 1, 2, 7, 1000] {
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    par.for_each(n, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            });
        }
    }

    #[test]
    fn kernels_pool_many_short_phases() {
        // Thousands of tiny phases back to back: workers join late, early or not at all.
        let total = AtomicUsize::new(0);
        Par::run(2, f64::INFINITY, |par| {
            for round in 0..3000usize {
                let n = 1 + round % 5;
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                par.for_each(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    total.fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "round {round}");
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), (0..3000usize).map(|r| 1 + r % 5).sum::<usize>());
    }

    #[test]
    fn kernels_pool_survives_a_panicking_task() {
        let result = catch_unwind(|| {
            Par::run(2, f64::INFINITY, |par| {
                par.for_each(8, |i| {
                    if i == 5 {
                        panic!("boom");
                    }
                })
            })
        });
        assert!(result.is_err());
        // The pool still works afterwards.
        let count = AtomicUsize::new(0);
        Par::run(2, f64::INFINITY, |par| par.for_each(16, |_| {
            count.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(count.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn kernels_pool_spread_runs_every_item_once() {
        Par::run(2, f64::INFINITY, |par| {
            for n in [0usize, 1, 2, 3, 7, 36, 1001] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                par.for_each_spread(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
            }
        });
    }

    #[test]
    fn kernels_small_work_stays_serial() {
        Par::run(2, 10.0, |par| assert!(!par.parallel));
        Par::run(1, f64::INFINITY, |par| assert!(!par.parallel));
    }

    #[test]
    fn kernels_medium_work_does_not_wake_a_parked_pool() {
        let thresholds = (PARALLEL_MIN_FLOPS, WAKE_MIN_FLOPS);
        let medium = (PARALLEL_MIN_FLOPS + WAKE_MIN_FLOPS) / 2.0;
        assert!(!uses_pool(PARALLEL_MIN_FLOPS / 2.0, thresholds, false));
        assert!(uses_pool(medium, thresholds, false), "a spinning worker is used");
        assert!(!uses_pool(medium, thresholds, true), "a parked pool is not woken");
        assert!(uses_pool(WAKE_MIN_FLOPS, thresholds, true));
        // The override (0) always uses the pool.
        assert!(uses_pool(1.0, (0.0, 0.0), true));
    }
}
