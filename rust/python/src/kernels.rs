//! Python bindings of the fused attention kernels (numpy in, numpy out, GIL released).
//!
//! Each entry point checks dtype, rank, shape and contiguity of every array up front (naming the
//! argument and the shapes in a `TypeError`/`ValueError`), then runs the core kernel with the GIL
//! released. A panic in the kernel (a bug) comes back as a `RuntimeError`, never an abort.

use numpy::{PyArray3, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use rlx_rules_core::kernels::{self as core, BlockShape, BlockWeights, Isa, MaskRef, RunOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A contiguous float32 array argument of a known rank.
struct F32Arg<'py> {
    array: PyReadonlyArrayDyn<'py, f32>,
}

impl F32Arg<'_> {
    fn shape(&self) -> &[usize] {
        self.array.shape()
    }
    fn slice(&self) -> &[f32] {
        // Contiguity was checked when the argument was taken.
        self.array.as_slice().expect("contiguous array")
    }
}

fn shape_str(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

/// Takes `obj` as a C-contiguous float32 array of rank `ndim`, or says clearly why not.
fn f32_arg<'py>(name: &str, obj: &Bound<'py, PyAny>, ndim: usize) -> PyResult<F32Arg<'py>> {
    let untyped = obj
        .cast::<PyUntypedArray>()
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a numpy.ndarray of float32, got {}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_default())))?;
    let typed = untyped.cast::<PyArrayDyn<f32>>().map_err(|_| {
        let dtype = untyped.dtype().str().map(|s| s.to_string()).unwrap_or_default();
        PyTypeError::new_err(format!("{name} must have dtype float32, got {dtype} with shape {}", shape_str(untyped.shape())))
    })?;
    if typed.ndim() != ndim {
        return Err(PyValueError::new_err(format!("{name} must have {ndim} dimensions, got shape {}", shape_str(typed.shape()))));
    }
    if !typed.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{name} (shape {}) must be C-contiguous; pass numpy.ascontiguousarray({name})", shape_str(typed.shape()))));
    }
    let array = typed.try_readonly().map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
    Ok(F32Arg { array })
}

fn opt_f32_arg<'py>(name: &str, obj: Option<&Bound<'py, PyAny>>, ndim: usize) -> PyResult<Option<F32Arg<'py>>> {
    match obj {
        Some(o) if !o.is_none() => f32_arg(name, o, ndim).map(Some),
        _ => Ok(None),
    }
}

fn expect_shape(name: &str, arg: &F32Arg<'_>, want: &[usize], why: &str) -> PyResult<()> {
    if arg.shape() != want {
        return Err(PyValueError::new_err(format!("{name} must have shape {} ({why}), got {}", shape_str(want), shape_str(arg.shape()))));
    }
    Ok(())
}

fn check_heads(hidden: usize, num_heads: usize) -> PyResult<usize> {
    if num_heads == 0 {
        return Err(PyValueError::new_err("num_heads must be a positive integer"));
    }
    if !hidden.is_multiple_of(num_heads) {
        return Err(PyValueError::new_err(format!("hidden size {hidden} is not divisible by num_heads={num_heads}")));
    }
    Ok(hidden / num_heads)
}

fn run_options(threads: Option<usize>) -> PyResult<RunOptions> {
    if threads == Some(0) {
        return Err(PyValueError::new_err("threads must be a positive integer or None"));
    }
    Ok(RunOptions { threads, isa: None })
}

/// Runs `f` without the GIL; a kernel error becomes `ValueError`, a panic `RuntimeError`.
fn run_detached<F>(py: Python<'_>, f: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), core::KernelError> + Send,
{
    let result = py.detach(move || catch_unwind(AssertUnwindSafe(f)));
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(PyValueError::new_err(e.to_string())),
        Err(panic) => {
            let msg = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            Err(PyRuntimeError::new_err(format!("internal error in the attention kernel: {msg}")))
        }
    }
}

/// The checked `(cos, sin)` rope tables.
type RopeArgs<'py> = (F32Arg<'py>, F32Arg<'py>);

/// Checks the `[B, S]` mask and the rope tables of a block call of `hidden` shape `[b, s, h]`.
fn block_extras<'py>(
    b: usize,
    s: usize,
    d: usize,
    mask: Option<&Bound<'py, PyAny>>,
    rope_cos: Option<&Bound<'py, PyAny>>,
    rope_sin: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Option<F32Arg<'py>>, Option<RopeArgs<'py>>)> {
    let mask = opt_f32_arg("mask", mask, 2)?;
    if let Some(m) = &mask {
        expect_shape("mask", m, &[b, s], "[batch, seq] of hidden")?;
    }
    let cos = opt_f32_arg("rope cos", rope_cos, 2)?;
    let sin = opt_f32_arg("rope sin", rope_sin, 2)?;
    let rope = match (cos, sin) {
        (None, None) => None,
        (Some(c), Some(sn)) => {
            if !d.is_multiple_of(2) {
                return Err(PyValueError::new_err(format!("rope needs an even head_dim, got head_dim={d}")));
            }
            expect_shape("rope cos", &c, &[s, d / 2], "[seq, head_dim / 2]")?;
            expect_shape("rope sin", &sn, &[s, d / 2], "[seq, head_dim / 2]")?;
            Some((c, sn))
        }
        _ => return Err(PyValueError::new_err("rope needs both the cos and the sin table")),
    };
    Ok((mask, rope))
}

type BlockWeightArgs<'py> = (F32Arg<'py>, F32Arg<'py>, Option<F32Arg<'py>>, Option<F32Arg<'py>>);

/// The four weight arguments of a fused block for hidden size `h`, checked: qkv_w [H, 3H], out_w [H, H],
/// qkv_b [3H] and out_b [H] (biases optional).
fn block_weight_args<'py>(
    h: usize,
    qkv_w: &Bound<'py, PyAny>,
    out_w: &Bound<'py, PyAny>,
    qkv_b: Option<&Bound<'py, PyAny>>,
    out_b: Option<&Bound<'py, PyAny>>,
) -> PyResult<BlockWeightArgs<'py>> {
    let qkv_w = f32_arg("qkv_w", qkv_w, 2)?;
    expect_shape("qkv_w", &qkv_w, &[h, 3 * h], "[H, 3H] for hidden size H")?;
    let out_w = f32_arg("out_w", out_w, 2)?;
    expect_shape("out_w", &out_w, &[h, h], "[H, H] for hidden size H")?;
    let qkv_b = opt_f32_arg("qkv_b", qkv_b, 1)?;
    if let Some(a) = &qkv_b {
        expect_shape("qkv_b", a, &[3 * h], "[3H]")?;
    }
    let out_b = opt_f32_arg("out_b", out_b, 1)?;
    if let Some(a) = &out_b {
        expect_shape("out_b", a, &[h], "[H]")?;
    }
    Ok((qkv_w, out_w, qkv_b, out_b))
}

/// One-shot fused attention block on raw `[in, out]` weights.
#[pyfunction]
#[pyo3(signature = (hidden, qkv_w, out_w, mask=None, qkv_b=None, out_b=None, *, num_heads, rope_cos=None, rope_sin=None, threads=None))]
#[allow(clippy::too_many_arguments)]
fn fused_attention_block<'py>(
    py: Python<'py>,
    hidden: &Bound<'py, PyAny>,
    qkv_w: &Bound<'py, PyAny>,
    out_w: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    qkv_b: Option<&Bound<'py, PyAny>>,
    out_b: Option<&Bound<'py, PyAny>>,
    num_heads: usize,
    rope_cos: Option<&Bound<'py, PyAny>>,
    rope_sin: Option<&Bound<'py, PyAny>>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray3<f32>>> {
    let x = f32_arg("hidden", hidden, 3)?;
    let (b, s, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let d = check_heads(h, num_heads)?;
    let (qkv_w, out_w, qkv_b, out_b) = block_weight_args(h, qkv_w, out_w, qkv_b, out_b)?;
    let (mask, rope) = block_extras(b, s, d, mask, rope_cos, rope_sin)?;
    let opts = run_options(threads)?;
    let out = PyArray3::<f32>::zeros(py, [b, s, h], false);
    {
        let mut out_rw = out.readwrite();
        let out_slice = out_rw.as_slice_mut().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let shape = BlockShape { batch: b, seq: s, hidden: h, num_heads };
        let weights = BlockWeights { qkv_w: qkv_w.slice(), qkv_b: qkv_b.as_ref().map(F32Arg::slice), out_w: out_w.slice(), out_b: out_b.as_ref().map(F32Arg::slice) };
        let (xs, ms) = (x.slice(), mask.as_ref().map(F32Arg::slice));
        let rope = rope.as_ref().map(|(c, sn)| core::Rope { cos: c.slice(), sin: sn.slice() });
        run_detached(py, move || core::fused_attention_block(shape, xs, weights, ms, rope, opts, out_slice))?;
    }
    Ok(out)
}

/// A fused attention block whose weights were packed once (score scale folded into Q).
#[pyclass(name = "PreparedAttentionBlock", module = "rlx_rules._native", frozen)]
struct PyPreparedAttentionBlock {
    inner: core::PreparedAttentionBlock,
}

#[pymethods]
impl PyPreparedAttentionBlock {
    #[new]
    #[pyo3(signature = (qkv_w, out_w, qkv_b=None, out_b=None, *, num_heads))]
    fn new(py: Python<'_>, qkv_w: &Bound<'_, PyAny>, out_w: &Bound<'_, PyAny>, qkv_b: Option<&Bound<'_, PyAny>>, out_b: Option<&Bound<'_, PyAny>>, num_heads: usize) -> PyResult<Self> {
        let h = f32_arg("qkv_w", qkv_w, 2)?.shape()[0];
        check_heads(h, num_heads)?;
        let (qkv_w, out_w, qkv_b, out_b) = block_weight_args(h, qkv_w, out_w, qkv_b, out_b)?;
        let weights = BlockWeights { qkv_w: qkv_w.slice(), qkv_b: qkv_b.as_ref().map(F32Arg::slice), out_w: out_w.slice(), out_b: out_b.as_ref().map(F32Arg::slice) };
        let mut inner = None;
        run_detached(py, || {
            inner = Some(core::PreparedAttentionBlock::new(h, num_heads, weights)?);
            Ok(())
        })?;
        Ok(PyPreparedAttentionBlock { inner: inner.expect("set on success") })
    }

    /// Hidden size H.
    #[getter]
    fn hidden(&self) -> usize {
        self.inner.hidden()
    }

    #[getter]
    fn num_heads(&self) -> usize {
        self.inner.num_heads()
    }

    /// Bytes of packed weights held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }

    #[pyo3(signature = (hidden, mask=None, *, rope_cos=None, rope_sin=None, threads=None))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        hidden: &Bound<'py, PyAny>,
        mask: Option<&Bound<'py, PyAny>>,
        rope_cos: Option<&Bound<'py, PyAny>>,
        rope_sin: Option<&Bound<'py, PyAny>>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray3<f32>>> {
        let x = f32_arg("hidden", hidden, 3)?;
        let (b, s, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        if h != self.inner.hidden() {
            return Err(PyValueError::new_err(format!("hidden must have shape [batch, seq, {}] for this block, got {}", self.inner.hidden(), shape_str(x.shape()))));
        }
        let d = h / self.inner.num_heads();
        let (mask, rope) = block_extras(b, s, d, mask, rope_cos, rope_sin)?;
        let opts = run_options(threads)?;
        let out = PyArray3::<f32>::zeros(py, [b, s, h], false);
        {
            let mut out_rw = out.readwrite();
            let out_slice = out_rw.as_slice_mut().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let (xs, ms) = (x.slice(), mask.as_ref().map(F32Arg::slice));
            let rope = rope.as_ref().map(|(c, sn)| core::Rope { cos: c.slice(), sin: sn.slice() });
            let inner = &self.inner;
            run_detached(py, move || inner.run(b, s, xs, ms, rope, opts, out_slice))?;
        }
        Ok(out)
    }
}

/// Multi-head attention on `[B, S, H]` q, k, v.
#[pyfunction]
#[pyo3(signature = (q, k, v, mask=None, *, num_heads, mask_kind="custom", scale=None, threads=None))]
#[allow(clippy::too_many_arguments)]
fn attention<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    num_heads: usize,
    mask_kind: &str,
    scale: Option<f32>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray3<f32>>> {
    let q = f32_arg("q", q, 3)?;
    let (b, sq, h) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    check_heads(h, num_heads)?;
    let k = f32_arg("k", k, 3)?;
    let sk = k.shape()[1];
    expect_shape("k", &k, &[b, sk, h], "[batch, seq_k, H] matching q's batch and H")?;
    let v = f32_arg("v", v, 3)?;
    expect_shape("v", &v, &[b, sk, h], "same as k")?;
    if sk == 0 && b * sq > 0 {
        return Err(PyValueError::new_err("k and v need at least one key (sequence length 0)"));
    }
    let mask = opt_f32_arg("mask", mask, 2)?;
    if let Some(m) = &mask {
        expect_shape("mask", m, &[b, sk], "[batch, seq_k]")?;
    }
    let kind = match mask_kind {
        "custom" => {
            if mask.is_none() {
                return Err(PyValueError::new_err("mask_kind='custom' needs a mask of shape [batch, seq_k]"));
            }
            "custom"
        }
        "none" => {
            if mask.is_some() {
                return Err(PyValueError::new_err("mask_kind='none' takes no mask"));
            }
            "none"
        }
        "causal" => {
            if sq != sk {
                return Err(PyValueError::new_err(format!("mask_kind='causal' needs equal query and key lengths, got {sq} and {sk}")));
            }
            "causal"
        }
        other => return Err(PyValueError::new_err(format!("mask_kind must be 'custom', 'none' or 'causal', got {other:?}"))),
    };
    if let Some(sc) = scale {
        if !sc.is_finite() {
            return Err(PyValueError::new_err(format!("scale must be finite, got {sc}")));
        }
    }
    let opts = run_options(threads)?;
    let out = PyArray3::<f32>::zeros(py, [b, sq, h], false);
    {
        let mut out_rw = out.readwrite();
        let out_slice = out_rw.as_slice_mut().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let (qs, ks, vs, ms) = (q.slice(), k.slice(), v.slice(), mask.as_ref().map(F32Arg::slice));
        let shape = core::AttentionShape { batch: b, seq_q: sq, seq_k: sk, hidden: h, num_heads };
        run_detached(py, move || {
            let mask = match kind {
                "custom" => MaskRef::Keep(ms.expect("checked")),
                "causal" => MaskRef::Causal(ms),
                _ => MaskRef::None,
            };
            core::attention(shape, qs, ks, vs, mask, scale, opts, out_slice)
        })?;
    }
    Ok(out)
}

/// The SIMD paths this CPU can run, slowest first.
#[pyfunction]
fn simd_paths() -> Vec<&'static str> {
    Isa::available().into_iter().map(Isa::name).collect()
}

/// The SIMD path a call would use now (honours `RLX_RULES_SIMD`).
#[pyfunction]
fn selected_simd() -> &'static str {
    Isa::select(None).name()
}

/// The thread count a call would use now with `threads=None` (honours `RLX_RULES_THREADS`).
#[pyfunction]
fn default_threads() -> usize {
    core::resolve_threads(None)
}

/// Roofline probes for the benchmark: `(read bytes/s over an nbytes buffer, peak flop/s)` with
/// `threads` threads. Runs for about a second; the GIL is released.
#[pyfunction]
#[pyo3(signature = (nbytes, threads))]
fn machine_roofline(py: Python<'_>, nbytes: usize, threads: usize) -> PyResult<(f64, f64)> {
    if threads == 0 {
        return Err(PyValueError::new_err("threads must be positive"));
    }
    Ok(py.detach(|| (core::roofline::read_bandwidth(nbytes, threads, 30), core::roofline::peak_flops(threads))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fused_attention_block, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(simd_paths, m)?)?;
    m.add_function(wrap_pyfunction!(selected_simd, m)?)?;
    m.add_function(wrap_pyfunction!(default_threads, m)?)?;
    m.add_function(wrap_pyfunction!(machine_roofline, m)?)?;
    m.add_class::<PyPreparedAttentionBlock>()?;
    m.add("PARALLEL_MIN_FLOPS", core::PARALLEL_MIN_FLOPS)?;
    m.add("WAKE_MIN_FLOPS", core::WAKE_MIN_FLOPS)?;
    Ok(())
}
