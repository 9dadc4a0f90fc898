"""Type stubs of the compiled extension rlx_rules._native (the pyo3 binding layer over rlx-rules-core)."""

from typing import Optional

import numpy as np
import numpy.typing as npt

__version__: str

# ---- kernels ----
PARALLEL_MIN_FLOPS: float

def fused_attention_block(
    hidden: npt.NDArray[np.float32],
    qkv_w: npt.NDArray[np.float32],
    out_w: npt.NDArray[np.float32],
    mask: Optional[npt.NDArray[np.float32]] = None,
    qkv_b: Optional[npt.NDArray[np.float32]] = None,
    out_b: Optional[npt.NDArray[np.float32]] = None,
    *,
    num_heads: int,
    rope_cos: Optional[npt.NDArray[np.float32]] = None,
    rope_sin: Optional[npt.NDArray[np.float32]] = None,
    threads: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...

class PreparedAttentionBlock:
    def __new__(
        cls,
        qkv_w: npt.NDArray[np.float32],
        out_w: npt.NDArray[np.float32],
        qkv_b: Optional[npt.NDArray[np.float32]] = None,
        out_b: Optional[npt.NDArray[np.float32]] = None,
        *,
        num_heads: int,
    ) -> PreparedAttentionBlock: ...
    @property
    def hidden(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def __call__(
        self,
        hidden: npt.NDArray[np.float32],
        mask: Optional[npt.NDArray[np.float32]] = None,
        *,
        rope_cos: Optional[npt.NDArray[np.float32]] = None,
        rope_sin: Optional[npt.NDArray[np.float32]] = None,
        threads: Optional[int] = None,
    ) -> npt.NDArray[np.float32]: ...

def attention(
    q: npt.NDArray[np.float32],
    k: npt.NDArray[np.float32],
    v: npt.NDArray[np.float32],
    mask: Optional[npt.NDArray[np.float32]] = None,
    *,
    num_heads: int,
    mask_kind: str = "custom",
    scale: Optional[float] = None,
    threads: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...
def simd_paths() -> list[str]: ...
def selected_simd() -> str: ...
def default_threads() -> int: ...
