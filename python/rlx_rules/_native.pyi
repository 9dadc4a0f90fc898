"""Type stubs of the compiled extension rlx_rules._native (the pyo3 binding layer over rlx-rules-core)."""

import os
from typing import Optional

import numpy as np
import numpy.typing as npt

__version__: str

# ---- engine ----
class Graph:
    """A validated graph held in Rust (immutable)."""

    @staticmethod
    def from_json(text: str, max_nodes: Optional[int] = None) -> Graph: ...
    @staticmethod
    def load(path: str, max_nodes: Optional[int] = None) -> Graph: ...
    def to_json(self, pretty: bool = False) -> str: ...
    def write(self, path: str, pretty: bool = False) -> None: ...
    @property
    def warnings(self) -> list[str]: ...
    @property
    def name(self) -> Optional[str]: ...
    @property
    def outputs(self) -> list[int]: ...
    def __len__(self) -> int: ...
    def op_counts(self) -> dict[str, int]: ...

class Program:
    """A compiled, validated matcher program (docs/program.md). Raises rlx_rules.ProgramError."""

    def __init__(self, text: str) -> None: ...
    def apply(
        self,
        graph: Graph,
        params_json: str = "{}",
        *,
        max_rewrites: Optional[int] = None,
        time_budget_s: Optional[float] = None,
        fail_after_rewrites: Optional[int] = None,
        explain: Optional[str] = None,
        explain_rule: Optional[str] = None,
        explain_node: Optional[int] = None,
    ) -> tuple[Graph, str]: ...
    @property
    def rule_names(self) -> list[str]: ...

# ---- kernels ----
PARALLEL_MIN_FLOPS: float  # below it a call runs on the calling thread
WAKE_MIN_FLOPS: float  # below it a call does not wake a pool whose workers have parked

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
    masked_rows: str = "uniform",
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
        masked_rows: str = "uniform",
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
    bias: Optional[npt.NDArray[np.float32]] = None,
    masked_rows: str = "uniform",
    rope_cos: Optional[npt.NDArray[np.float32]] = None,
    rope_sin: Optional[npt.NDArray[np.float32]] = None,
    rope_style: str = "neox",
    scale: Optional[float] = None,
    threads: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...
def simd_paths() -> list[str]: ...
def selected_simd() -> str: ...
def default_threads() -> int: ...
def machine_roofline(nbytes: int, threads: int) -> tuple[float, float]: ...

def write_npz(path: str | os.PathLike[str], names: list[str], headers: list[bytes],
              data: list[npt.NDArray[np.uint8]]) -> None:
    """A new uncompressed .npz at `path`: one NAME.npy member per name, its .npy header then its data (a
    contiguous 1-D uint8 view of the array). Written without the GIL. Raises OSError, ValueError."""
