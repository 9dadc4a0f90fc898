//! The fused attention block (`qkv = x·Wqkv + b` → RoPE → attention → `out = ctx·Wout + b`), one-shot or prepared with weights packed once and the score scale folded into Q (prepared: QKV, RoPE and attention in one work item per (batch, head)); plus the standalone `attention` entry point and its variants (soft-cap, sliding window, V's own head size).

use super::attention::{self, AttentionVariant, AttnShape, MaskedRows, Masking, RowsView, ScoreTensor};
use super::gemm::{project, projection_phases, PackedWeights, SendPtr, WeightsRef, NR};
use super::par::{resolve_threads, Par};
use super::rope::{apply_rope, Rope};
use super::simd::Isa;
use super::KernelError;
use std::cell::RefCell;

/// How one call runs: thread count and SIMD path (`None`: environment, then machine default).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    pub threads: Option<usize>,
    pub isa: Option<Isa>,
}

/// Sizes of a fused block call: `hidden` is `[batch, seq, hidden]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    pub batch: usize,
    pub seq: usize,
    pub hidden: usize,
    pub num_heads: usize,
}

impl BlockShape {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.num_heads.max(1)
    }

    fn rows(&self) -> usize {
        self.batch * self.seq
    }

    /// Floating-point operations of one call (projections plus attention).
    pub fn flops(&self) -> f64 {
        let (m, h, s) = (self.rows() as f64, self.hidden as f64, self.seq as f64);
        8.0 * m * h * h + 4.0 * self.batch as f64 * s * s * h
    }

    /// Work of one call as the small-work threshold counts it: its flops, or, when reading the
    /// weights takes longer than the arithmetic (one or two rows), the weight bytes in flop
    /// equivalents. Two threads then read the weights at twice the bandwidth: H=384 at one token
    /// (1.2 MFLOP, 2.4 MB of weights) takes 24 µs on 2 threads against 43 on 1.
    pub fn threshold_work(&self) -> f64 {
        let h = self.hidden as f64;
        let weight_bytes = 4.0 * (4.0 * h * h + 4.0 * h);
        self.flops().max(WEIGHT_FLOPS_PER_BYTE * weight_bytes)
    }
}

/// Flops worth one byte of weights read from L3, for [`BlockShape::threshold_work`]: the FMA peak
/// over the read bandwidth of one core on the reference machine (117 GFLOP/s ÷ 95 GB/s).
const WEIGHT_FLOPS_PER_BYTE: f64 = 1.25;

/// Weights of a fused block, `[in, out]` row-major: `qkv_w` is `[H, 3H]`, `out_w` is `[H, H]`.
#[derive(Clone, Copy, Debug)]
pub struct BlockWeights<'a> {
    pub qkv_w: &'a [f32],
    pub qkv_b: Option<&'a [f32]>,
    pub out_w: &'a [f32],
    pub out_b: Option<&'a [f32]>,
}

fn err(msg: String) -> KernelError {
    KernelError(msg)
}

/// `got == want`, else an error naming the argument and its expected `shape` (formatted only then:
/// these checks run on every call).
fn check_len(name: &str, got: usize, want: usize, shape: impl FnOnce() -> String) -> Result<(), KernelError> {
    if got != want {
        return Err(err(format!("{name} must have {want} elements ({}), got {got}", shape())));
    }
    Ok(())
}

fn check_heads(hidden: usize, num_heads: usize) -> Result<usize, KernelError> {
    if num_heads == 0 {
        return Err(err("num_heads must be positive".into()));
    }
    if !hidden.is_multiple_of(num_heads) {
        return Err(err(format!("hidden size {hidden} is not divisible by num_heads={num_heads}")));
    }
    Ok(hidden / num_heads)
}

fn check_weights(hidden: usize, num_heads: usize, w: &BlockWeights<'_>) -> Result<(), KernelError> {
    let h = hidden;
    check_heads(h, num_heads)?;
    check_len("qkv_w", w.qkv_w.len(), h * 3 * h, || format!("[{h}, {}]", 3 * h))?;
    check_len("out_w", w.out_w.len(), h * h, || format!("[{h}, {h}]"))?;
    if let Some(b) = w.qkv_b {
        check_len("qkv_b", b.len(), 3 * h, || format!("[{}]", 3 * h))?;
    }
    if let Some(b) = w.out_b {
        check_len("out_b", b.len(), h, || format!("[{h}]"))?;
    }
    Ok(())
}

fn check_call(shape: &BlockShape, hidden: &[f32], mask: Option<&[f32]>, rope: Option<&Rope<'_>>, out: &[f32]) -> Result<(), KernelError> {
    let BlockShape { batch: b, seq: s, hidden: h, num_heads } = *shape;
    let d = check_heads(h, num_heads)?;
    check_len("hidden", hidden.len(), b * s * h, || format!("[{b}, {s}, {h}]"))?;
    check_len("out", out.len(), b * s * h, || format!("[{b}, {s}, {h}]"))?;
    if let Some(m) = mask {
        check_len("mask", m.len(), b * s, || format!("[{b}, {s}]"))?;
    }
    if let Some(r) = rope {
        check_rope(r, s, d)?;
    }
    Ok(())
}

/// Checks rope tables of `positions` rows for heads of `head_dim`.
fn check_rope(r: &Rope<'_>, positions: usize, d: usize) -> Result<(), KernelError> {
    let rot = r.rotary_dim;
    if !rot.is_multiple_of(2) || rot > d || (rot == 0 && d > 0) {
        return Err(err(format!("rope needs an even rotary_dim between 2 and head_dim={d}, got {rot} (tables of {} columns)", rot / 2)));
    }
    check_len("rope cos", r.cos.len(), positions * rot / 2, || format!("[{positions}, {}]", rot / 2))?;
    check_len("rope sin", r.sin.len(), positions * rot / 2, || format!("[{positions}, {}]", rot / 2))
}

thread_local! {
    /// The qkv and ctx buffers of the block, kept between calls on the orchestrating thread.
    static BLOCK_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with a scratch buffer of at least `len` floats (contents unspecified).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    BLOCK_SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        // Re-entered on this thread (a pool worker helping another call): use a fresh buffer.
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// The block on already-validated inputs; `scale` is the score scale still to apply.
#[allow(clippy::too_many_arguments)]
fn run_block(
    shape: BlockShape,
    hidden: &[f32],
    qkv_w: WeightsRef<'_>,
    out_w: WeightsRef<'_>,
    scale: f32,
    mask: Option<&[f32]>,
    masked_rows: MaskedRows,
    rope: Option<Rope<'_>>,
    opts: RunOptions,
    out: &mut [f32],
) {
    let isa = Isa::select(opts.isa);
    let threads = resolve_threads(opts.threads);
    let BlockShape { batch, seq, hidden: h, num_heads } = shape;
    let d = h / num_heads;
    let m = shape.rows();
    if m == 0 {
        return;
    }
    // The small-work thresholds were measured on the prepared block's three phases (two
    // projections and attention); a block with more hand-offs between the threads (RoPE, or
    // row-major weights split along K with their sums) needs proportionally more work to gain
    // from a second thread: H=128 at 16 tokens, one-shot, took 59 µs on 2 threads against 32 on 1.
    let phases = 1 + projection_phases(m, &qkv_w) + projection_phases(m, &out_w) + usize::from(rope.is_some());
    Par::run(threads, shape.threshold_work() * 3.0 / phases as f64, |par| {
        if let Some(heads) = HeadPanels::new(&qkv_w, h, d).filter(|_| par.parallel || m >= HEADS_SERIAL_MIN_ROWS) {
            return with_scratch(m * h, |ctx| {
                heads_phase(isa, &par, shape, hidden, &heads, rope, mask, masked_rows, scale, ctx);
                project(isa, &par, m, ctx, h, out_w, out, h);
            });
        }
        with_scratch(m * 4 * h, |buf| {
            let (qkv, ctx) = buf.split_at_mut(m * 3 * h);
            project(isa, &par, m, hidden, h, qkv_w, qkv, 3 * h);
            if let Some(rope) = rope {
                apply_rope(isa, &par, qkv, m, seq, 0, 3 * h, &[0, h], num_heads, d, rope);
            }
            let view = |offset| RowsView { data: &*qkv, offset, row_stride: 3 * h, batch_stride: seq * 3 * h };
            let attn_shape = AttnShape { batch, seq_q: seq, seq_k: seq, num_heads, kv_heads: num_heads, head_dim: d };
            let masking = Masking { keep: mask.map(|m| ScoreTensor::per_key(m, seq)), masked_rows, ..Masking::default() };
            attention::attention(isa, &par, attn_shape, view(0), view(h), view(2 * h), &masking, scale, ctx, h);
            project(isa, &par, m, ctx, h, out_w, out, h);
        })
    });
}

/// The packed QKV weights seen per head: panels `[h·d/NR, (h+1)·d/NR)` hold head `h`'s Q columns,
/// the same shifted by `H` and `2H` its K and V columns.
struct HeadPanels<'a> {
    qkv: WeightsRef<'a>,
    /// Panels per head (`d / NR`) and panels per `H` columns.
    per_head: usize,
    per_hidden: usize,
}

impl<'a> HeadPanels<'a> {
    /// `Some` when the weights are packed and every head spans whole panels.
    fn new(qkv: &WeightsRef<'a>, h: usize, d: usize) -> Option<Self> {
        (qkv.packed && d > 0 && d.is_multiple_of(NR)).then_some(HeadPanels { qkv: *qkv, per_head: d / NR, per_hidden: h / NR })
    }

    /// The weights of part `part` (0: Q, 1: K, 2: V) of head `head`, as a packed matrix of
    /// `d` columns (the same panels, so each output element gets the same float operations).
    fn part(&self, part: usize, head: usize) -> WeightsRef<'a> {
        let (k, p0) = (self.qkv.k, part * self.per_hidden + head * self.per_head);
        let p1 = p0 + self.per_head;
        WeightsRef { k, n: (p1 - p0) * NR, data: &self.qkv.data[p0 * k * NR..p1 * k * NR], packed: true, bias: self.qkv.bias.map(|b| &b[p0 * NR..p1 * NR]) }
    }
}

/// Fewest rows for which a call on one thread runs the per-head schedule ([`heads_phase`]): with
/// no hand-offs to save it gains only from locality (1.02-1.10x at 1x512 and 8x128, H=384 and 768),
/// and below 64 rows it was 0.92-0.98x (each head's Q, K and V panels read apart, where the
/// phase-by-phase projection streams all panels in one run). Both give the same bits.
const HEADS_SERIAL_MIN_ROWS: usize = 128;

thread_local! {
    /// One (batch, head) item's `[S, 3d]` Q|K|V rows and `[S, d]` attention output.
    static HEAD_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The QKV projection, RoPE and attention with one work item per (batch, head), no hand-off
/// between them: the item projects its head's Q, K and V panels of the batch's rows into
/// per-thread scratch, rotates them, runs the head's attention and copies the result into its own
/// columns of `ctx` (`[B·S, H]`). Every output element gets the same float operations as in the
/// phase-by-phase schedule (same panels, same attention kernel), for any thread count.
#[allow(clippy::too_many_arguments)]
fn heads_phase(isa: Isa, par: &Par, shape: BlockShape, hidden: &[f32], heads: &HeadPanels<'_>, rope: Option<Rope<'_>>, mask: Option<&[f32]>, masked_rows: MaskedRows, scale: f32, ctx: &mut [f32]) {
    let BlockShape { batch, seq, hidden: h, num_heads } = shape;
    let d = h / num_heads;
    assert!(hidden.len() >= batch * seq * h && ctx.len() >= batch * seq * h, "block buffers too short");
    let ctx_ptr = SendPtr(ctx.as_mut_ptr());
    par.for_each_spread(batch * num_heads, |item| {
        let (b, head) = (item / num_heads, item % num_heads);
        let run = |buf: &mut Vec<f32>| {
            if buf.len() < seq * 4 * d {
                buf.resize(seq * 4 * d, 0.0);
            }
            let (qkv, att) = buf.split_at_mut(seq * 3 * d);
            let x = &hidden[b * seq * h..(b + 1) * seq * h];
            for part in 0..3 {
                project(isa, &Par::SERIAL, seq, x, h, heads.part(part, head), &mut qkv[part * d..], 3 * d);
            }
            if let Some(rope) = rope {
                apply_rope(isa, &Par::SERIAL, qkv, seq, seq, 0, 3 * d, &[0, d], 1, d, rope);
            }
            let view = |offset| RowsView { data: &*qkv, offset, row_stride: 3 * d, batch_stride: seq * 3 * d };
            let attn_shape = AttnShape { batch: 1, seq_q: seq, seq_k: seq, num_heads: 1, kv_heads: 1, head_dim: d };
            let masking = Masking { keep: mask.map(|m| ScoreTensor::per_key(&m[b * seq..(b + 1) * seq], seq)), masked_rows, ..Masking::default() };
            attention::attention(isa, &Par::SERIAL, attn_shape, view(0), view(d), view(2 * d), &masking, scale, &mut att[..seq * d], d);
            for (s, row) in att[..seq * d].chunks_exact(d).enumerate() {
                // SAFETY: in bounds (checked above); item (b, head) alone writes these columns.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), ctx_ptr.add((b * seq + s) * h + head * d), d) };
            }
        };
        HEAD_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => run(&mut buf),
            Err(_) => run(&mut Vec::new()),
        });
    });
}

/// `fused_attention_block` on raw `[in, out]` weights: every argument checked, then computed.
///
/// `mask` is the `[B, S]` keep mask (`None`: every key kept), `masked_rows` what a fully masked
/// row gives; `out` is `[B, S, H]`.
#[allow(clippy::too_many_arguments)]
pub fn fused_attention_block(
    shape: BlockShape,
    hidden: &[f32],
    weights: BlockWeights<'_>,
    mask: Option<&[f32]>,
    masked_rows: MaskedRows,
    rope: Option<Rope<'_>>,
    opts: RunOptions,
    out: &mut [f32],
) -> Result<(), KernelError> {
    check_weights(shape.hidden, shape.num_heads, &weights)?;
    check_call(&shape, hidden, mask, rope.as_ref(), out)?;
    let h = shape.hidden;
    let scale = (shape.head_dim() as f32).powf(-0.5);
    let qkv = WeightsRef::row_major(weights.qkv_w, weights.qkv_b, h, 3 * h);
    let out_w = WeightsRef::row_major(weights.out_w, weights.out_b, h, h);
    run_block(shape, hidden, qkv, out_w, scale, mask, masked_rows, rope, opts, out);
    Ok(())
}

/// A fused block with its weights packed once into panels and `head_dim^-0.5` folded into the Q
/// columns of `qkv_w` and `qkv_b` (RoPE is linear, so folding before it is exact).
#[derive(Clone, Debug)]
pub struct PreparedAttentionBlock {
    hidden: usize,
    num_heads: usize,
    qkv: PackedWeights,
    out: PackedWeights,
}

impl PreparedAttentionBlock {
    pub fn new(hidden: usize, num_heads: usize, weights: BlockWeights<'_>) -> Result<Self, KernelError> {
        check_weights(hidden, num_heads, &weights)?;
        let h = hidden;
        let scale = ((h / num_heads) as f32).powf(-0.5);
        let qkv = PackedWeights::pack(weights.qkv_w, weights.qkv_b, h, 3 * h, h, scale);
        let out = PackedWeights::pack(weights.out_w, weights.out_b, h, h, 0, 1.0);
        Ok(PreparedAttentionBlock { hidden, num_heads, qkv, out })
    }

    pub fn hidden(&self) -> usize {
        self.hidden
    }

    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// Bytes of packed weights held.
    pub fn nbytes(&self) -> usize {
        self.qkv.nbytes() + self.out.nbytes()
    }

    /// Runs the block on `hidden` `[batch, seq, H]`, writing `out` `[batch, seq, H]`.
    #[allow(clippy::too_many_arguments)]
    pub fn run(&self, batch: usize, seq: usize, hidden: &[f32], mask: Option<&[f32]>, masked_rows: MaskedRows, rope: Option<Rope<'_>>, opts: RunOptions, out: &mut [f32]) -> Result<(), KernelError> {
        let shape = BlockShape { batch, seq, hidden: self.hidden, num_heads: self.num_heads };
        check_call(&shape, hidden, mask, rope.as_ref(), out)?;
        run_block(shape, hidden, self.qkv.as_ref(), self.out.as_ref(), 1.0, mask, masked_rows, rope, opts, out);
        Ok(())
    }
}

/// Sizes of a standalone attention call: q is `[batch, seq_q, num_heads·head_dim]`, k and v
/// `[batch, seq_k, kv_heads·head_dim]` (`kv_heads` dividing `num_heads`: GQA/MQA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub num_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    /// Multi-head attention with as many K/V heads as query heads, `hidden = num_heads·head_dim`.
    pub fn mha(batch: usize, seq_q: usize, seq_k: usize, hidden: usize, num_heads: usize) -> Self {
        AttentionShape { batch, seq_q, seq_k, num_heads, kv_heads: num_heads, head_dim: hidden / num_heads.max(1) }
    }
}

fn check_scores(name: &str, t: &ScoreTensor<'_>, s: &AttentionShape) -> Result<(), KernelError> {
    if t.covers(s.batch, s.num_heads, s.seq_q, s.seq_k) {
        return Ok(());
    }
    Err(err(format!("{name} has {} elements, too few for its strides over the scores [B, H, Sq, Sk] = [{}, {}, {}, {}]", t.data.len(), s.batch, s.num_heads, s.seq_q, s.seq_k)))
}

thread_local! {
    /// Rotated copies of q and k for a standalone attention call with RoPE.
    static ROPE_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Multi-head attention on `[B, S, heads·head_dim]` inputs:
/// `out = softmax(mask(scale · rope(Q) rope(K)ᵀ + bias)) V` per head (see [`Masking`]), with `scale`
/// defaulting to `head_dim^-0.5`. RoPE tables are `[seq_k, rotary_dim/2]`: key `j` uses row `j`,
/// query `i` row `i + seq_k − seq_q` (the queries are the last positions, as for causal).
#[allow(clippy::too_many_arguments)]
pub fn attention(shape: AttentionShape, q: &[f32], k: &[f32], v: &[f32], mask: &Masking<'_>, rope: Option<Rope<'_>>, scale: Option<f32>, opts: RunOptions, out: &mut [f32]) -> Result<(), KernelError> {
    attention_variant(shape, &AttentionVariant::default(), q, k, v, mask, rope, scale, opts, out)
}

/// [`attention`] with a [`AttentionVariant`]: `out = softmax(mask(softcap(scale·Q Kᵀ) + bias)) V`
/// per head, the window hiding keys more than `window` positions before each query. Q and K have
/// heads of `shape.head_dim`, V and `out` heads of `variant.v_head_dim` (default `head_dim`):
/// `v` is `[batch, seq_k, kv_heads·dv]`, `out` `[batch, seq_q, num_heads·dv]`. RoPE is taken with
/// the default variant only.
#[allow(clippy::too_many_arguments)]
pub fn attention_variant(shape: AttentionShape, variant: &AttentionVariant, q: &[f32], k: &[f32], v: &[f32], mask: &Masking<'_>, rope: Option<Rope<'_>>, scale: Option<f32>, opts: RunOptions, out: &mut [f32]) -> Result<(), KernelError> {
    let AttentionShape { batch: b, seq_q, seq_k, num_heads, kv_heads, head_dim: d } = shape;
    if rope.is_some() && *variant != AttentionVariant::default() {
        return Err(err("rope is taken without softcap, window or a v head size other than q's (apply it to q and k first)".into()));
    }
    if let Some(c) = variant.softcap.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(err(format!("softcap must be finite and positive, got {c} (the logit soft-cap)")));
    }
    if num_heads == 0 || kv_heads == 0 || !num_heads.is_multiple_of(kv_heads) {
        return Err(err(format!("k and v have {kv_heads} heads, which must divide q's num_heads={num_heads}")));
    }
    let dv = variant.v_head_dim.unwrap_or(d);
    if dv == 0 {
        return Err(err("v_head_dim must be positive".into()));
    }
    let (h, hkv, hv, hkv_v) = (num_heads * d, kv_heads * d, num_heads * dv, kv_heads * dv);
    check_len("q", q.len(), b * seq_q * h, || format!("[{b}, {seq_q}, {h}]"))?;
    check_len("k", k.len(), b * seq_k * hkv, || format!("[{b}, {seq_k}, {hkv}]"))?;
    check_len("v", v.len(), b * seq_k * hkv_v, || format!("[{b}, {seq_k}, {hkv_v}]"))?;
    check_len("out", out.len(), b * seq_q * hv, || format!("[{b}, {seq_q}, {hv}]"))?;
    if let Some(t) = &mask.keep {
        check_scores("mask", t, &shape)?;
    }
    if let Some(t) = &mask.bias {
        check_scores("bias", t, &shape)?;
    }
    if let Some(r) = &rope {
        if seq_q > seq_k {
            return Err(err(format!("rope in attention needs seq_q <= seq_k (queries are the last positions), got {seq_q} and {seq_k}")));
        }
        check_rope(r, seq_k, d)?;
    }
    if b * seq_q == 0 || hv == 0 {
        return Ok(());
    }
    if seq_k == 0 {
        return Err(err("attention needs at least one key (k has sequence length 0)".into()));
    }
    let scale = scale.unwrap_or((d as f32).powf(-0.5));
    let isa = Isa::select(opts.isa);
    let threads = resolve_threads(opts.threads);
    let seen = variant.window.map_or(seq_k, |w| w.saturating_add(1).min(seq_k));
    let flops = 2.0 * (b * seq_q * seen * num_heads * (d + dv)) as f64;
    fn view(data: &[f32], seq: usize, width: usize) -> RowsView<'_> {
        RowsView { data, offset: 0, row_stride: width, batch_stride: seq * width }
    }
    let attn_shape = AttnShape { batch: b, seq_q, seq_k, num_heads, kv_heads, head_dim: d };
    Par::run(threads, flops, |par| match rope {
        None => attention::flash(isa, &par, attn_shape, variant, view(q, seq_q, h), view(k, seq_k, hkv), view(v, seq_k, hkv_v), mask, scale, out, hv),
        Some(rope) => {
            let mut with = |buf: &mut Vec<f32>| {
                buf.clear();
                buf.extend_from_slice(q);
                buf.extend_from_slice(k);
                let (qr, kr) = buf.split_at_mut(q.len());
                apply_rope(isa, &par, qr, b * seq_q, seq_q, seq_k - seq_q, h, &[0], num_heads, d, rope);
                apply_rope(isa, &par, kr, b * seq_k, seq_k, 0, hkv, &[0], kv_heads, d, rope);
                attention::flash(isa, &par, attn_shape, variant, view(qr, seq_q, h), view(kr, seq_k, hkv), view(v, seq_k, hkv_v), mask, scale, out, hv);
            };
            ROPE_SCRATCH.with(|cell| match cell.try_borrow_mut() {
                Ok(mut buf) => with(&mut buf),
                Err(_) => with(&mut Vec::new()),
            })
        }
    });
    Ok(())
}
