"""Type stubs of the compiled extension rlx_rules._native (the pyo3 binding layer over rlx-rules-core)."""

import os
from typing import Optional, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "__version__", "RlxRulesError", "GraphError", "ProgramError", "ParamError", "ApplyError", "KernelError",
    "OutputError", "Graph", "Program", "program_layout", "sha256_hex", "fused_attention_block", "attention",
    "simd_paths", "selected_simd", "default_threads", "machine_roofline", "PreparedAttentionBlock",
    "PARALLEL_MIN_FLOPS", "WAKE_MIN_FLOPS", "write_npz",
]

__version__: str

# ---- exceptions (created in rust/python/src/errors.rs; re-exported by rlx_rules.errors; docs/errors.md) ----
class RlxRulesError(Exception):
    """Base class of every error that rlx-rules raises on bad input. `kind` names the cause (None if unset)."""

    kind: Optional[str]

class GraphError(RlxRulesError, ValueError):
    """A graph failed to load, validate or write. kind: json, format, duplicate_id, dangling_input, cycle,
    bad_output, arity, attr_type, io, too_large."""

class ProgramError(RlxRulesError, ValueError):
    """A compiled matcher program was malformed or of an unsupported version. kind: json, format, version,
    invalid, builtins."""

class ParamError(RlxRulesError, ValueError):
    """A parameter or an argument got a value it cannot take. kind: unknown_param, param_type, bad_option,
    argument."""

class ApplyError(RlxRulesError):
    """Applying rules failed; no output was written. kind: invalid_result, debug_failure, report, and (only with
    on_limit="raise") rewrite_limit, time_budget, which also set `graph` and `report` to the work done."""

    graph: Graph
    report: str

class KernelError(RlxRulesError, ValueError):
    """A fused kernel refused its arguments or failed. kind: shape, layout, argument, internal."""

class OutputError(RlxRulesError, OSError):
    """A file could not be written (the weights archive, a graph streamed to a file descriptor). kind: io."""

# ---- engine ----
@final
class Graph:
    """A validated graph held in Rust (immutable; once an apply with consume=True took it, every method raises
    GraphError, kind "consumed")."""

    @staticmethod
    def from_json(text: str, max_nodes: Optional[int] = None) -> Graph: ...
    @staticmethod
    def load(path: str, max_nodes: Optional[int] = None, max_bytes: Optional[int] = None) -> Graph: ...
    def to_json(self, pretty: bool = False) -> str: ...
    def write_to_fd(self, fd: int, pretty: bool = False) -> None: ...
    def write(self, path: str, pretty: bool = False) -> None: ...
    @property
    def warnings(self) -> list[str]: ...
    @property
    def name(self) -> Optional[str]: ...
    @property
    def outputs(self) -> list[int]: ...
    def __len__(self) -> int: ...
    def field(self, name: str) -> Optional[str]: ...
    def op_counts(self) -> dict[str, int]: ...

@final
class Program:
    """A compiled, validated matcher program (docs/program.md). Raises rlx_rules.ProgramError."""

    def __new__(cls, text: str) -> Program: ...
    def apply(
        self,
        graph: Graph,
        params_json: str = "{}",
        *,
        max_rewrites: Optional[int] = None,
        time_budget_s: Optional[float] = None,
        max_iterations: Optional[int] = None,
        on_limit: str = "raise",
        fail_after_rewrites: Optional[int] = None,
        explain: Optional[str] = None,
        explain_rule: Optional[str] = None,
        explain_node: Optional[int] = None,
        consume: bool = False,
    ) -> tuple[Graph, str]:
        """Apply to `graph` with resolved parameter values (a JSON object); returns (new graph, report JSON).

        Limits (None: 10 million rewrites, 600 s, 1000 iterations per phase) stop the apply with the work done;
        the report's `stop` is fixpoint, iteration_cap, rewrite_limit or time_budget. With on_limit="raise" a
        rewrite or time limit raises ApplyError holding that work; with "stop" it is returned. With consume=True
        the apply takes `graph`'s nodes instead of copying the survivors, and `graph` is left consumed."""
    def to_bytes(self) -> bytes:
        """The validated program in a compact binary form (postcard), for the compiled-rule cache."""
    @staticmethod
    def from_bytes(data: bytes) -> Program:
        """A program that to_bytes of a build with the same program_layout() wrote; not validated again (the
        cache checks its entry's SHA-256 first). Bytes that do not decode: ProgramError, kind "format"."""
    @property
    def rule_names(self) -> list[str]: ...

def program_layout() -> str:
    """A hash of what defines Program.to_bytes' layout and meaning in this build (hex), for cache keys."""
def sha256_hex(parts: list[bytes]) -> str:
    """The SHA-256 of the parts concatenated, as hex (the compiled-rule cache's hash, without loading OpenSSL)."""

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

@final
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
    softcap: Optional[float] = None,
    window: Optional[int] = None,
    threads: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...
def simd_paths() -> list[str]: ...
def selected_simd() -> str: ...
def default_threads() -> int: ...
def machine_roofline(nbytes: int, threads: int) -> tuple[float, float]: ...

def write_npz(path: str | os.PathLike[str], names: list[str], headers: list[bytes],
              data: list[npt.NDArray[np.uint8]]) -> None:
    """A new uncompressed .npz at `path`: one NAME.npy member per name, its .npy header then its data (a
    contiguous 1-D uint8 view of the array). Written without the GIL. Raises OutputError (an OSError) when the
    file cannot be written, ParamError (a ValueError) for mismatched or non-contiguous arguments."""
