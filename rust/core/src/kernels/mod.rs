//! Fused kernels: SIMD, multithreaded attention and the fused attention block.
//!
//! Stages: [`simd`] picks the instruction set at run time, [`par`] the threads; [`gemm`] does the
//! projections, [`rope`] the rotary embedding, [`attention`] the blocked online-softmax attention,
//! and [`block`] chains them into the public entry points re-exported here.

// Kernels take pointers, strides and sizes; bundling them into structs would only hide them.
#![allow(clippy::too_many_arguments)]

pub mod attention;
mod attention_tile;
pub mod block;
pub mod gemm;
mod gemm_rows;
pub mod par;
pub mod roofline;
pub mod rope;
pub mod simd;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod attention_tests;

pub use attention::{AttentionVariant, MaskedRows, Masking, ScoreTensor, MASKED_SCORE};
pub use block::{attention, attention_variant, fused_attention_block, AttentionShape, BlockShape, BlockWeights, PreparedAttentionBlock, RunOptions};
pub use gemm::PackedWeights;
pub use par::{resolve_threads, PARALLEL_MIN_FLOPS, THREADS_ENV, WAKE_MIN_FLOPS};
pub use rope::Rope;
pub use simd::{Isa, SIMD_ENV};

/// A kernel call rejected before any work: the message names the argument and the shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelError(pub String);

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KernelError {}
