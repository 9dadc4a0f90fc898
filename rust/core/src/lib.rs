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
