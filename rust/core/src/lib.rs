//! rlx-rules core: the graph model, the matcher program, the rewrite engine and fused kernels, with no Python.
//!
//! Pipeline: [`graph`] loads graph.json, [`program`] loads the compiled rules, [`apply`] runs them
//! ([`matcher`] finds matches, [`rewrite`] applies them on a [`workgraph`]), and [`graph`] writes
//! the result.

pub mod apply;
pub mod builtins;
pub mod error;
pub mod explain;
pub mod expr;
pub mod graph;
pub mod kernels;
pub mod matcher;
pub mod npz;
pub mod prepared;
pub mod program;
pub mod registry;
pub mod rewrite;
pub mod workgraph;

/// Number of cores (logical CPUs) available to this process, read once: the standard library reads the affinity mask
/// and cgroup quota files each time (tens of µs per call on Linux). The loader, the writer and the kernels' pool ask it.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
