//! Fused kernels: SIMD, multithreaded attention and the fused attention block.
