//! rlx-rules core: the graph model, the matcher program, the rewrite engine and fused kernels, with no Python.

pub mod graph;
pub mod kernels;
pub mod registry;
