//! Python bindings of the fused attention kernels (numpy in, numpy out, GIL released): every argument check lives here, once.
//!
//! Each entry point checks type, dtype, rank, shape, contiguity and alignment of every array up front
//! (a `TypeError` for a wrong type or dtype, a `KernelError` — a `ValueError` — for the rest, each
//! naming the argument and the shapes), then runs the core kernel with the GIL released. A panic in the
//! kernel (a bug) comes back as a `KernelError` of kind "internal", never an abort.

use crate::errors::{new_err, Class};
use numpy::{PyArray3, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBool;
use rlx_rules_core::kernels::{self as core, BlockShape, BlockWeights, Isa, MaskedRows, Masking, RunOptions, ScoreTensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A `KernelError` of `kind` ("shape", "layout", "argument" or "internal").
fn kerr(kind: &str, msg: impl Into<String>) -> PyErr {
    new_err(Class::Kernel, kind, msg)
}

/// A C-contiguous, aligned float32 array argument.
struct F32Arg<'py> {
    array: PyReadonlyArrayDyn<'py, f32>,
}

impl F32Arg<'_> {
    fn shape(&self) -> &[usize] {
        self.array.shape()
    }
    fn slice(&self) -> &[f32] {
        // Contiguity and alignment were checked when the argument was taken.
        self.array.as_slice().unwrap_or(&[])
    }
}

fn shape_str(shape: &[usize]) -> String {
    format!("[{}]", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

fn dtype_str(a: &Bound<'_, PyUntypedArray>) -> String {
    a.dtype().str().map(|s| s.to_string()).unwrap_or_default()
}

/// Takes `obj` as a C-contiguous, aligned float32 array of rank `ndim`, or says clearly why not.
fn f32_arg<'py>(name: &str, obj: &Bound<'py, PyAny>, ndim: usize) -> PyResult<F32Arg<'py>> {
    let untyped = obj.cast::<PyUntypedArray>().map_err(|_| PyTypeError::new_err(format!("{name} must be a numpy.ndarray of float32, got a {}", type_name(obj))))?;
    let typed = untyped.cast::<PyArrayDyn<f32>>().map_err(|_| {
        let (dtype, shape) = (dtype_str(untyped), shape_str(untyped.shape()));
        PyTypeError::new_err(format!("{name} must have dtype float32, got dtype {dtype} with shape {shape}; convert with {name}.astype(numpy.float32)"))
    })?;
    // (The shape is formatted only for an error: these checks run on every call.)
    let shape = || shape_str(typed.shape());
    if typed.ndim() != ndim {
        return Err(kerr("shape", format!("{name} must have {ndim} dimensions, got shape {}", shape())));
    }
    if !typed.is_c_contiguous() {
        return Err(kerr("layout", format!("{name} (shape {}) must be C-contiguous; pass numpy.ascontiguousarray({name})", shape())));
    }
    if !typed.is_aligned() || (typed.len() > 0 && !(typed.data() as usize).is_multiple_of(std::mem::align_of::<f32>())) {
        return Err(kerr("layout", format!("{name} (shape {}) is not aligned to 4 bytes (a view at an odd byte offset); pass {name}.copy()", shape())));
    }
    let array = typed.try_readonly().map_err(|e| kerr("layout", format!("{name}: {e}")))?;
    Ok(F32Arg { array })
}

fn opt_f32_arg<'py>(name: &str, obj: Option<&Bound<'py, PyAny>>, ndim: usize) -> PyResult<Option<F32Arg<'py>>> {
    match obj {
        Some(o) if !o.is_none() => f32_arg(name, o, ndim).map(Some),
        _ => Ok(None),
    }
}

/// A keep mask of a bool, integer or float dtype as a contiguous, aligned float32 array (a copy
/// unless it already is one: masks are small next to the activations).
fn mask_arg<'py>(obj: Option<&Bound<'py, PyAny>>, want: &str) -> PyResult<Option<F32Arg<'py>>> {
    mask_arg_with(obj, || want.to_string())
}

/// [`mask_arg`] with the expected shape formatted only for an error message.
fn mask_arg_with<'py>(obj: Option<&Bound<'py, PyAny>>, want: impl FnOnce() -> String) -> PyResult<Option<F32Arg<'py>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    let untyped = obj.cast::<PyUntypedArray>().map_err(|_| PyTypeError::new_err(format!("mask must be a numpy.ndarray of shape {}, got a {}", want(), type_name(obj))))?;
    // Already contiguous, aligned float32 (the usual case): taken as it is, without the call into
    // numpy.require below (a few µs, as much as a whole small block).
    if let Ok(typed) = untyped.cast::<PyArrayDyn<f32>>() {
        if typed.is_c_contiguous() && typed.is_aligned() {
            return f32_arg("mask", obj, typed.ndim()).map(Some);
        }
    }
    let kind: String = untyped.dtype().getattr("kind")?.extract()?;
    if !"biuf".contains(kind.as_str()) || kind.len() != 1 {
        return Err(PyTypeError::new_err(format!("mask must have a bool, integer or float dtype, got dtype {} with shape {}", dtype_str(untyped), shape_str(untyped.shape()))));
    }
    let py = obj.py();
    let converted = py.import("numpy")?.getattr("require")?.call1((obj, "float32", "CA"))?;
    let ndim = converted.cast::<PyUntypedArray>().map(|a| a.ndim()).unwrap_or(0);
    f32_arg("mask", &converted, ndim).map(Some)
}

/// A positive integer argument (not a bool), with `what` ending the message.
fn positive_int(name: &str, obj: &Bound<'_, PyAny>, or_none: bool) -> PyResult<usize> {
    let value = if obj.is_instance_of::<PyBool>() { None } else { obj.extract::<i64>().ok() };
    match value {
        Some(n) if n >= 1 => Ok(n as usize),
        _ => {
            let repr = obj.repr().map(|r| r.to_string()).unwrap_or_default();
            Err(kerr("argument", format!("{name} must be a positive integer{}, got {repr}", if or_none { " or None" } else { "" })))
        }
    }
}

fn expect_shape(name: &str, arg: &F32Arg<'_>, want: &[usize], why: &str) -> PyResult<()> {
    if arg.shape() != want {
        return Err(kerr("shape", format!("{name} must have shape {} ({why}), got {}", shape_str(want), shape_str(arg.shape()))));
    }
    Ok(())
}

/// `num_heads` checked against the hidden size; returns `(num_heads, head_dim)`.
fn heads(hidden: usize, num_heads: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let n = positive_int("num_heads", num_heads, false)?;
    if !hidden.is_multiple_of(n) {
        return Err(kerr("shape", format!("hidden size {hidden} is not divisible by num_heads={n}")));
    }
    Ok((n, hidden / n))
}

fn run_options(threads: Option<&Bound<'_, PyAny>>) -> PyResult<RunOptions> {
    let threads = match threads {
        Some(t) if !t.is_none() => Some(positive_int("threads", t, true)?),
        _ => None,
    };
    Ok(RunOptions { threads, isa: None })
}

fn masked_rows(value: &str) -> PyResult<MaskedRows> {
    match value {
        "uniform" => Ok(MaskedRows::Uniform),
        "zero" => Ok(MaskedRows::Zero),
        other => Err(kerr("argument", format!("masked_rows must be 'uniform' (RLX: a fully masked row averages V) or 'zero' (PyTorch SDPA: it is 0), got {other:?}"))),
    }
}

/// Runs `f` without the GIL; a kernel error becomes `KernelError`, a panic `KernelError` of kind "internal".
fn run_detached<F>(py: Python<'_>, f: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), core::KernelError> + Send,
{
    let result = py.detach(move || catch_unwind(AssertUnwindSafe(f)));
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(kerr("argument", e.to_string())),
        Err(panic) => {
            let msg = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            Err(kerr("internal", format!("internal error in the attention kernel: {msg}")))
        }
    }
}

/// The checked `(cos, sin)` rope tables.
type RopeArgs<'py> = (F32Arg<'py>, F32Arg<'py>);

/// Rope tables of `[positions, rotary_dim / 2]` for heads of `d`: both or neither, same shape,
/// `rotary_dim` even and at most `d`.
fn rope_args<'py>(positions: usize, d: usize, rope_cos: Option<&Bound<'py, PyAny>>, rope_sin: Option<&Bound<'py, PyAny>>) -> PyResult<Option<RopeArgs<'py>>> {
    let cos = opt_f32_arg("rope cos", rope_cos, 2)?;
    let sin = opt_f32_arg("rope sin", rope_sin, 2)?;
    match (cos, sin) {
        (None, None) => Ok(None),
        (Some(c), Some(sn)) => {
            let half = c.shape()[1];
            if half == 0 || 2 * half > d {
                return Err(kerr("shape", format!("rope tables of {half} columns rotate {} dims: rope needs an even rotary_dim between 2 and head_dim={d} (tables [seq, rotary_dim / 2])", 2 * half)));
            }
            expect_shape("rope cos", &c, &[positions, half], "[seq, rotary_dim / 2]")?;
            expect_shape("rope sin", &sn, &[positions, half], "[seq, rotary_dim / 2], as rope cos")?;
            Ok(Some((c, sn)))
        }
        _ => Err(kerr("argument", "rope needs both the cos and the sin table")),
    }
}

fn rope_ref<'a>(rope: &'a Option<RopeArgs<'_>>, interleaved: bool) -> Option<core::Rope<'a>> {
    rope.as_ref().map(|(c, sn)| core::Rope { cos: c.slice(), sin: sn.slice(), rotary_dim: 2 * c.shape()[1], interleaved })
}

/// Checks the `[B, S]` mask and the rope tables of a block call of `hidden` shape `[b, s, ·]`.
fn block_extras<'py>(
    b: usize,
    s: usize,
    d: usize,
    mask: Option<&Bound<'py, PyAny>>,
    rope_cos: Option<&Bound<'py, PyAny>>,
    rope_sin: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Option<F32Arg<'py>>, Option<RopeArgs<'py>>)> {
    let mask = mask_arg_with(mask, || shape_str(&[b, s]))?;
    if let Some(m) = &mask {
        expect_shape("mask", m, &[b, s], "[batch, seq] of hidden")?;
    }
    Ok((mask, rope_args(s, d, rope_cos, rope_sin)?))
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

fn weights_ref<'a>(w: &'a BlockWeightArgs<'_>) -> BlockWeights<'a> {
    BlockWeights { qkv_w: w.0.slice(), qkv_b: w.2.as_ref().map(F32Arg::slice), out_w: w.1.slice(), out_b: w.3.as_ref().map(F32Arg::slice) }
}

/// A new zeroed `[b, s, h]` output, filled by `f` with its slice.
fn with_output<'py>(py: Python<'py>, shape: [usize; 3], f: impl FnOnce(&mut [f32]) -> PyResult<()>) -> PyResult<Bound<'py, PyArray3<f32>>> {
    let out = PyArray3::<f32>::zeros(py, shape, false);
    {
        let mut out_rw = out.readwrite();
        let out_slice = out_rw.as_slice_mut().map_err(|e| kerr("internal", e.to_string()))?;
        f(out_slice)?;
    }
    Ok(out)
}

/// One-shot fused attention block on raw `[in, out]` weights.
#[pyfunction]
#[pyo3(signature = (hidden, qkv_w, out_w, mask=None, qkv_b=None, out_b=None, *, num_heads, rope_cos=None, rope_sin=None, masked_rows="uniform", threads=None))]
#[allow(clippy::too_many_arguments)]
fn fused_attention_block<'py>(
    py: Python<'py>,
    hidden: &Bound<'py, PyAny>,
    qkv_w: &Bound<'py, PyAny>,
    out_w: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    qkv_b: Option<&Bound<'py, PyAny>>,
    out_b: Option<&Bound<'py, PyAny>>,
    num_heads: &Bound<'py, PyAny>,
    rope_cos: Option<&Bound<'py, PyAny>>,
    rope_sin: Option<&Bound<'py, PyAny>>,
    masked_rows: &str,
    threads: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray3<f32>>> {
    let x = f32_arg("hidden", hidden, 3)?;
    let (b, s, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (num_heads, d) = heads(h, num_heads)?;
    let weights = block_weight_args(h, qkv_w, out_w, qkv_b, out_b)?;
    let (mask, rope) = block_extras(b, s, d, mask, rope_cos, rope_sin)?;
    let rows = self::masked_rows(masked_rows)?;
    let opts = run_options(threads)?;
    with_output(py, [b, s, h], |out| {
        let shape = BlockShape { batch: b, seq: s, hidden: h, num_heads };
        let (xs, ms, w, rope) = (x.slice(), mask.as_ref().map(F32Arg::slice), weights_ref(&weights), rope_ref(&rope, false));
        run_detached(py, move || core::fused_attention_block(shape, xs, w, ms, rows, rope, opts, out))
    })
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
    fn new(py: Python<'_>, qkv_w: &Bound<'_, PyAny>, out_w: &Bound<'_, PyAny>, qkv_b: Option<&Bound<'_, PyAny>>, out_b: Option<&Bound<'_, PyAny>>, num_heads: &Bound<'_, PyAny>) -> PyResult<Self> {
        let h = f32_arg("qkv_w", qkv_w, 2)?.shape()[0];
        let (num_heads, _) = heads(h, num_heads)?;
        let weights = block_weight_args(h, qkv_w, out_w, qkv_b, out_b)?;
        let w = weights_ref(&weights);
        let mut inner = None;
        run_detached(py, || {
            inner = Some(core::PreparedAttentionBlock::new(h, num_heads, w)?);
            Ok(())
        })?;
        inner.map(|inner| PyPreparedAttentionBlock { inner }).ok_or_else(|| kerr("internal", "the block was not built"))
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

    #[pyo3(signature = (hidden, mask=None, *, rope_cos=None, rope_sin=None, masked_rows="uniform", threads=None))]
    #[allow(clippy::too_many_arguments)]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        hidden: &Bound<'py, PyAny>,
        mask: Option<&Bound<'py, PyAny>>,
        rope_cos: Option<&Bound<'py, PyAny>>,
        rope_sin: Option<&Bound<'py, PyAny>>,
        masked_rows: &str,
        threads: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray3<f32>>> {
        let x = f32_arg("hidden", hidden, 3)?;
        let (b, s, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        if h != self.inner.hidden() {
            return Err(kerr("shape", format!("hidden must have shape [batch, seq, {}] for this block, got {}", self.inner.hidden(), shape_str(x.shape()))));
        }
        let d = h / self.inner.num_heads();
        let (mask, rope) = block_extras(b, s, d, mask, rope_cos, rope_sin)?;
        let rows = self::masked_rows(masked_rows)?;
        let opts = run_options(threads)?;
        with_output(py, [b, s, h], |out| {
            let (xs, ms, rope, inner) = (x.slice(), mask.as_ref().map(F32Arg::slice), rope_ref(&rope, false), &self.inner);
            run_detached(py, move || inner.run(b, s, xs, ms, rows, rope, opts, out))
        })
    }
}

/// `[B, H, Sq, Sk]` strides of a mask or bias of rank 2 (`[B, Sk]`), 3 (`[B, Sq, Sk]`) or 4, each
/// dimension equal to the scores' or 1 (broadcast), the last equal to `Sk`.
fn score_tensor<'a>(name: &str, arg: &'a F32Arg<'_>, scores: [usize; 4]) -> PyResult<ScoreTensor<'a>> {
    let shape = arg.shape();
    let dims: [usize; 4] = match *shape {
        [b, k] => [b, 1, 1, k],
        [b, q, k] => [b, 1, q, k],
        [b, h, q, k] => [b, h, q, k],
        _ => [0; 4],
    };
    let fits = dims.iter().zip(&scores).enumerate().all(|(i, (&got, &want))| got == want || (got == 1 && i < 3));
    if !fits || shape.len() < 2 {
        let [b, _, _, k] = scores;
        return Err(kerr(
            "shape",
            format!(
                "{name} must have shape {} ([batch, seq_k]) or broadcast to the scores [B, H, Sq, Sk] = {} as [B, Sq, Sk] or [B, H, Sq, Sk] (size-1 dims broadcast), got {}",
                shape_str(&[b, k]),
                shape_str(&scores),
                shape_str(shape)
            ),
        ));
    }
    let k = dims[3];
    let (q_stride, h_stride) = (k, dims[2] * k);
    let b_stride = dims[1] * h_stride;
    let s = |dim: usize, stride: usize| if dim == 1 { 0 } else { stride };
    Ok(ScoreTensor { data: arg.slice(), batch_stride: s(dims[0], b_stride), head_stride: s(dims[1], h_stride), row_stride: s(dims[2], q_stride) })
}

/// Multi-head (or grouped-query) attention on `[B, Sq, H]` q, `[B, Sk, H_kv·head_dim]` k and
/// `[B, Sk, H_kv·v_head_dim]` v, with an optional logit soft-cap and sliding window.
#[pyfunction]
#[pyo3(signature = (q, k, v, mask=None, *, num_heads, mask_kind="custom", bias=None, masked_rows="uniform", rope_cos=None, rope_sin=None, rope_style="neox", scale=None, softcap=None, window=None, threads=None))]
#[allow(clippy::too_many_arguments)]
fn attention<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    num_heads: &Bound<'py, PyAny>,
    mask_kind: &str,
    bias: Option<&Bound<'py, PyAny>>,
    masked_rows: &str,
    rope_cos: Option<&Bound<'py, PyAny>>,
    rope_sin: Option<&Bound<'py, PyAny>>,
    rope_style: &str,
    scale: Option<f32>,
    softcap: Option<f32>,
    window: Option<i64>,
    threads: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray3<f32>>> {
    let q = f32_arg("q", q, 3)?;
    let (b, sq, h) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (num_heads, d) = heads(h, num_heads)?;
    let k = f32_arg("k", k, 3)?;
    let (sk, hkv) = (k.shape()[1], k.shape()[2]);
    let kv_heads = if d > 0 && hkv.is_multiple_of(d) { hkv / d } else { 0 };
    if k.shape()[0] != b || kv_heads == 0 || !num_heads.is_multiple_of(kv_heads) {
        let why = format!("[batch, seq_k, H] matching q's batch and H, or [batch, seq_k, H_kv·{d}] with H_kv dividing num_heads={num_heads} for grouped-query attention");
        expect_shape("k", &k, &[b, sk, h], &why)?;
    }
    let v = f32_arg("v", v, 3)?;
    let dv = if v.shape()[2].is_multiple_of(kv_heads.max(1)) { v.shape()[2] / kv_heads.max(1) } else { 0 };
    if dv == 0 || v.shape()[..2] != [b, sk] {
        expect_shape("v", &v, &[b, sk, hkv], &format!("[batch, seq_k, H_kv·v_head_dim]: k's batch and length, {kv_heads} heads of any positive size"))?;
    }
    if sk == 0 && b * sq > 0 {
        return Err(kerr("shape", "k and v need at least one key (sequence length 0)"));
    }
    let mask = mask_arg(mask, &shape_str(&[b, sk]))?;
    let bias = opt_f32_arg("bias", bias, bias.map_or(0, |o| o.cast::<PyUntypedArray>().map(|a| a.ndim()).unwrap_or(0)))?;
    let causal = match mask_kind {
        "custom" if mask.is_none() && bias.is_none() => return Err(kerr("argument", "mask_kind='custom' needs a mask of shape [batch, seq_k] (or [B, Sq, Sk], [B, H, Sq, Sk]) or a bias")),
        "custom" => false,
        "none" if mask.is_some() => return Err(kerr("argument", "mask_kind='none' takes no mask (a bias is allowed)")),
        "none" => false,
        "causal" => true,
        other => return Err(kerr("argument", format!("mask_kind must be 'custom', 'none' or 'causal', got {other:?}"))),
    };
    let scores = [b, num_heads, sq, sk];
    let keep = mask.as_ref().map(|m| score_tensor("mask", m, scores)).transpose()?;
    let bias_t = bias.as_ref().map(|t| score_tensor("bias", t, scores)).transpose()?;
    let masking = Masking { keep, bias: bias_t, causal, masked_rows: self::masked_rows(masked_rows)? };
    let interleaved = match rope_style {
        "neox" => false,
        "gptj" => true,
        other => return Err(kerr("argument", format!("rope_style must be 'neox' (dim i pairs with i + rotary_dim/2) or 'gptj' (2i with 2i+1), got {other:?}"))),
    };
    let rope = rope_args(sk, d, rope_cos, rope_sin)?;
    if rope.is_some() && sq > sk {
        return Err(kerr("shape", format!("rope in attention needs seq_q <= seq_k (the queries are the last positions), got {sq} and {sk}")));
    }
    if let Some(sc) = scale {
        if !sc.is_finite() {
            return Err(kerr("argument", format!("scale must be finite, got {sc}")));
        }
    }
    let window = window.map(|w| usize::try_from(w).map_err(|_| kerr("argument", format!("window must be >= 0, got {w}")))).transpose()?;
    // (the soft-cap's range and RoPE with a variant are the core's checks)
    let variant = core::AttentionVariant { softcap, window, v_head_dim: (dv != d).then_some(dv) };
    let opts = run_options(threads)?;
    with_output(py, [b, sq, num_heads * dv], |out| {
        let (qs, ks, vs, rope) = (q.slice(), k.slice(), v.slice(), rope_ref(&rope, interleaved));
        let shape = core::AttentionShape { batch: b, seq_q: sq, seq_k: sk, num_heads, kv_heads: kv_heads.max(1), head_dim: d };
        let (masking, variant) = (&masking, &variant);
        run_detached(py, move || core::attention_variant(shape, variant, qs, ks, vs, masking, rope, scale, opts, out))
    })
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
        return Err(kerr("argument", "threads must be positive"));
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
