//! Causal grouped-query attention in memory linear in the sequence length,
//! with a FlashAttention-2 backward.
//!
//! - [`attention`]: `softmax(q k^T * scale + mask) v`, differentiable in `q`,
//!   `k` and `v`, for `q` `[b, heads, t, d]` and `k`, `v` `[b, kv_heads, s,
//!   d]` (`s >= t`: a KV cache in front of the queries; `heads` a multiple of
//!   `kv_heads`, query head `h` reading kv head `h / (heads / kv_heads)`).
//!   The output is `[b, t, heads * d]`, heads merged as the output projection
//!   takes them. Which key a query sees comes from [`Visibility`]: per-row
//!   positions (padding = -1, causal by position) and optional segments
//!   (packed rows: several sequences in one row, each seeing only itself).
//! - [`attention_reference`]: the plain-tensor composition it matches (the
//!   model's former attention: scores, additive mask, softmax, values), which
//!   materializes `[b, heads, t, s]`.
//! - [`AttentionOp`]: the Candle custom op. Its forward keeps only the output
//!   and each query's log-sum-exp; its backward recomputes the probabilities
//!   block by block (`D = rowsum(dO * O)`, `P = exp(S - L)`, dV, dP, dS, dK,
//!   dQ). On the CPU for f32; on CUDA (`cuda.rs`, feature `cuda`) for f32
//!   and bf16 once [`crate::has_native_path`] admits CUDA, which it does only
//!   after `scripts/gpu-check` has passed on a GPU. Until then, and for other
//!   dtypes and devices, [`attention`] runs the reference, and only
//!   `fusegrpo selftest --device cuda` runs the CUDA kernels (through
//!   `kernels::cuda_ops::attention_forward_backward`).

mod cpu;
mod per_query;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cudnn")]
mod cudnn;
pub mod cudnn_map;

use crate::storage::f32_slice;
use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Result, Shape, Tensor, D};
pub use cudnn_map::{Backend, Settings};
use std::sync::{Arc, Mutex, OnceLock};

/// Which keys each query sees, for a batch of `batch` rows with `queries`
/// query slots and `keys` key slots per row.
///
/// Query `i` of row `r` sees key `j` when the query is padding (position
/// < 0: it sees every key, so that its softmax stays finite; its output is
/// never used), or when the key is no padding, its position is at most the
/// query's, and both lie in the same segment.
#[derive(Debug)]
pub struct Visibility {
    batch: usize,
    queries: usize,
    keys: usize,
    query_positions: Vec<i64>,
    key_positions: Vec<i64>,
    /// Segment of each query and key slot (packed rows); `None`: one segment.
    segments: Option<(Vec<u32>, Vec<u32>)>,
    /// The additive mask the reference uses, made once per device on demand.
    dense: OnceLock<Tensor>,
    /// The slots as the CUDA kernels read them, made once per device on demand.
    #[cfg(feature = "cuda")]
    slots: OnceLock<Tensor>,
    /// cuDNN's sequences (`cudnn_map::sequences`), made once on demand.
    #[cfg(feature = "cudnn")]
    cudnn: OnceLock<std::result::Result<Vec<cudnn_map::Sequence>, String>>,
}

impl Visibility {
    /// From row-major query positions `[batch, queries]` and key positions
    /// `[batch, keys]`.
    pub fn new(batch: usize, query_positions: Vec<i64>, key_positions: Vec<i64>) -> Result<Self> {
        if batch == 0 && (!query_positions.is_empty() || !key_positions.is_empty()) {
            candle_core::bail!("attention visibility: positions given for 0 rows");
        }
        let (queries, keys) = (query_positions.len() / batch.max(1), key_positions.len() / batch.max(1));
        if queries * batch != query_positions.len() || keys * batch != key_positions.len() {
            candle_core::bail!(
                "attention visibility: {} query and {} key positions do not split into {batch} rows",
                query_positions.len(),
                key_positions.len()
            );
        }
        Ok(Visibility {
            batch,
            queries,
            keys,
            query_positions,
            key_positions,
            segments: None,
            dense: OnceLock::new(),
            #[cfg(feature = "cuda")]
            slots: OnceLock::new(),
            #[cfg(feature = "cudnn")]
            cudnn: OnceLock::new(),
        })
    }

    /// The same, restricted to segments: a query sees only keys of its own
    /// segment (row-major `[batch, queries]` and `[batch, keys]` ids).
    pub fn with_segments(mut self, query_segments: Vec<u32>, key_segments: Vec<u32>) -> Result<Self> {
        if query_segments.len() != self.query_positions.len() || key_segments.len() != self.key_positions.len() {
            candle_core::bail!(
                "attention visibility: {} query and {} key segment ids for {} queries and {} keys",
                query_segments.len(),
                key_segments.len(),
                self.query_positions.len(),
                self.key_positions.len()
            );
        }
        self.segments = Some((query_segments, key_segments));
        Ok(self)
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Query slots per row.
    pub fn queries(&self) -> usize {
        self.queries
    }

    /// Key slots per row.
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// Whether query `i` of row `r` is padding (position < 0).
    pub fn is_padding_query(&self, r: usize, i: usize) -> bool {
        self.query_positions[r * self.queries + i] < 0
    }

    /// Whether query `i` of row `r` sees key `j`.
    #[inline]
    pub fn sees(&self, r: usize, i: usize, j: usize) -> bool {
        let q = self.query_positions[r * self.queries + i];
        if q < 0 {
            return true;
        }
        let k = self.key_positions[r * self.keys + j];
        k >= 0 && k <= q && self.segments.as_ref().is_none_or(|(qs, ks)| qs[r * self.queries + i] == ks[r * self.keys + j])
    }

    /// This visibility as cuDNN's sequences, or why it is not (made once).
    #[cfg(feature = "cudnn")]
    pub(crate) fn cudnn_sequences(&self) -> std::result::Result<&[cudnn_map::Sequence], String> {
        self.cudnn.get_or_init(|| cudnn_map::sequences(self)).as_deref().map_err(Clone::clone)
    }

    /// Additive mask `[batch, 1, queries, keys]`: 0 where seen, -inf elsewhere.
    pub fn additive_mask(&self, device: &Device) -> Result<Tensor> {
        if let Some(m) = self.dense.get().filter(|m| m.device().same_device(device)) {
            return Ok(m.clone());
        }
        let mut data = Vec::with_capacity(self.batch * self.queries * self.keys);
        for r in 0..self.batch {
            for i in 0..self.queries {
                data.extend((0..self.keys).map(|j| if self.sees(r, i, j) { 0f32 } else { f32::NEG_INFINITY }));
            }
        }
        let mask = Tensor::from_vec(data, (self.batch, 1, self.queries, self.keys), device)?;
        Ok(self.dense.get_or_init(|| mask.clone()).clone())
    }
}

/// The shapes of one call, checked against each other and the visibility.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub queries: usize,
    pub keys: usize,
    pub head_dim: usize,
}

impl Dims {
    fn of(q: &[usize], k: &[usize], v: &[usize], vis: &Visibility) -> Result<Dims> {
        let (&[b, h, t, d], &[bk, hk, s, dk]) = (q, k) else {
            candle_core::bail!("attention: q is {q:?} and k {k:?}, expected [b, heads, t, d] and [b, kv_heads, s, d]");
        };
        if k != v || b != bk || d != dk || hk == 0 || h % hk != 0 || s < t || d == 0 {
            candle_core::bail!(
                "attention: q {q:?}, k {k:?}, v {v:?}: need equal k and v, the same b and d, heads a multiple of kv_heads, s >= t"
            );
        }
        if (vis.batch, vis.queries, vis.keys) != (b, t, s) {
            candle_core::bail!(
                "attention: visibility is for {} rows x {} queries x {} keys, tensors for {b} x {t} x {s}",
                vis.batch,
                vis.queries,
                vis.keys
            );
        }
        Ok(Dims { batch: b, heads: h, kv_heads: hk, queries: t, keys: s, head_dim: d })
    }

    pub fn groups(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// Which implementation ran an attention call's forward (the backward
/// follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// The plain-tensor composition ([`attention_reference`]).
    Reference,
    /// The fused op on the CPU.
    Cpu,
    /// The fused CUDA kernel (`kernels/cuda/attention.cu`).
    Kernel,
    /// cuDNN's fused attention (feature `cudnn`).
    Cudnn,
}

impl Ran {
    pub fn name(self) -> &'static str {
        match self {
            Ran::Reference => "reference",
            Ran::Cpu => "cpu",
            Ran::Kernel => "kernel",
            Ran::Cudnn => "cudnn",
        }
    }
}

/// Attention of `q` `[b, heads, t, d]` over `k`, `v` `[b, kv_heads, s, d]`
/// (any strides with a contiguous last dimension, e.g. views of a KV
/// cache; token-major views `[b, t, heads, d]` transposed are what cuDNN
/// reads without a copy), scores scaled by `scale`; returns `[b, t, heads *
/// d]`. Differentiable in `q`, `k` and `v`. The fused op runs where the
/// kernels run natively ([`crate::has_native_path`]) for a dtype they take
/// ([`fused_dtype`]), the reference elsewhere; on CUDA `settings` (carried
/// with the model) pick cuDNN or the fused kernel.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, settings: Settings) -> Result<Tensor> {
    attention_ran(q, k, v, vis, scale, settings).map(|(out, _)| out)
}

/// [`attention`] and which implementation ran it (benchmarks report it).
pub fn attention_ran(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, settings: Settings) -> Result<(Tensor, Ran)> {
    let dims = Dims::of(q.dims(), k.dims(), v.dims(), vis)?;
    let native = crate::has_native_path(q.device()) && fused_dtype(q.device(), q.dtype()) && [k, v].iter().all(|x| x.dtype() == q.dtype());
    if !native || !f16_admitted(q.device(), q.dtype(), dims.head_dim, settings.backend) {
        return Ok((attention_reference(q, k, v, vis, scale)?, Ran::Reference));
    }
    let grads = [q, k, v].iter().any(|x| x.track_op());
    let op = AttentionOp::new(vis, scale, dims, settings, grads);
    let ran = op.ran.clone();
    let out = q.apply_op3(k, v, op)?;
    let ran = ran.lock().expect("attention ran lock").unwrap_or(Ran::Cpu);
    Ok((out, ran))
}

/// Whether a call with `queries` queries per row on `device` in `dtype`,
/// tracking no gradients, computes each query exactly as a call of that
/// query alone (with the keys up to its last visible one) would: the CPU's
/// f32 forward for few queries at inference. One such call checks a drafted
/// continuation with one-token steps' bits.
pub fn queries_alone(device: &Device, dtype: DType, queries: usize) -> bool {
    device.is_cpu() && crate::has_native_path(device) && fused_dtype(device, dtype) && queries <= per_query::MAX_QUERIES
}

/// Whether the fused op has kernels for `dtype` on `device`: f32 on the CPU,
/// f32 and bf16 on CUDA (with feature `cuda`), and f16 there too with
/// feature `cudnn` (cuDNN only: see [`f16_admitted`]).
pub fn fused_dtype(device: &Device, dtype: DType) -> bool {
    match device {
        Device::Cpu => dtype == DType::F32,
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => matches!(dtype, DType::F32 | DType::BF16) || (cfg!(feature = "cudnn") && dtype == DType::F16),
        _ => false,
    }
}

/// f16 runs on cuDNN alone (the fused kernel has none): where cuDNN cannot
/// take it (said once), the reference runs; other dtypes pass.
fn f16_admitted(device: &Device, dtype: DType, head_dim: usize, backend: Backend) -> bool {
    if dtype != DType::F16 {
        return true;
    }
    #[cfg(feature = "cudnn")]
    if let Device::Cuda(dev) = device {
        if backend == Backend::Kernel {
            return false;
        }
        return match cudnn::admits(dev, dtype, head_dim) {
            Ok(()) => true,
            Err(why) => {
                cudnn_map::note_once(&format!("f16 attention runs the reference: cuDNN declined: {why}"));
                false
            }
        };
    }
    let _ = (device, head_dim, backend);
    false
}

/// The libcudnn.so.9 this process opened for cuDNN's attention (feature
/// `cudnn`), opened now if it was not yet, or why none loads.
#[cfg(feature = "cudnn")]
pub fn cudnn_library() -> std::result::Result<&'static cudnn::Library, String> {
    cudnn::library()
}

/// The fused op's forward and backward called directly, without an autograd
/// graph: `(out, dq, dk, dv)` for the upstream gradient `grad_out`
/// `[b, t, heads * d]`. For benchmarks that measure the op's own working
/// memory; f32 on the CPU only.
pub fn forward_backward(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, grad_out: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let dims = Dims::of(q.dims(), k.dims(), v.dims(), vis)?;
    if !q.device().is_cpu() || [q, k, v].iter().any(|x| x.dtype() != DType::F32) {
        candle_core::bail!("attention forward_backward: f32 on the CPU only");
    }
    run_op(q, k, v, vis, scale, grad_out, dims, Settings::default()).map(|(o, dq, dk, dv, _)| (o, dq, dk, dv))
}

/// [`forward_backward`] on CUDA, f32 or bf16 (`grad_out` in the inputs'
/// dtype): the op's `cuda_fwd` and CUDA backward whatever
/// [`crate::has_native_path`] says, the backend as `settings` say, for the
/// GPU self-test; with which implementation ran.
#[cfg(feature = "cuda")]
pub(crate) fn forward_backward_cuda(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, grad_out: &Tensor, settings: Settings) -> Result<(Tensor, Tensor, Tensor, Tensor, Ran)> {
    let dims = Dims::of(q.dims(), k.dims(), v.dims(), vis)?;
    if !q.device().is_cuda() || !fused_dtype(q.device(), q.dtype()) || [k, v].iter().any(|x| x.dtype() != q.dtype()) {
        candle_core::bail!("attention forward_backward_cuda: q, k, v on a CUDA device, all f32 or all bf16");
    }
    run_op(q, k, v, vis, scale, grad_out, dims, settings)
}

/// [`forward_backward_cuda`] on cuDNN's fused attention only (bf16 or
/// f16): an error says why cuDNN declined; for the GPU self-test.
#[cfg(feature = "cudnn")]
pub(crate) fn forward_backward_cudnn(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, grad_out: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let dims = Dims::of(q.dims(), k.dims(), v.dims(), vis)?;
    if !q.device().is_cuda() || [k, v].iter().any(|x| x.dtype() != q.dtype()) {
        candle_core::bail!("attention forward_backward_cudnn: q, k, v on a CUDA device, one dtype");
    }
    let settings = Settings { backend: Backend::Cudnn, ..Settings::default() };
    run_op(q, k, v, vis, scale, grad_out, dims, settings).map(|(o, dq, dk, dv, _)| (o, dq, dk, dv))
}

/// The op's forward then its backward, outside autograd.
#[allow(clippy::too_many_arguments)]
fn run_op(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, grad_out: &Tensor, dims: Dims, settings: Settings) -> Result<(Tensor, Tensor, Tensor, Tensor, Ran)> {
    let op = AttentionOp::new(vis, scale, dims, settings, true);
    let (q, k, v) = (q.detach(), k.detach(), v.detach());
    let out = q.apply_op3_no_bwd(&k, &v, &op)?;
    let (dq, dk, dv) = op.bwd(&q, &k, &v, &out, grad_out)?;
    let missing = || candle_core::Error::Msg("attention backward returned no gradient".into());
    let ran = op.ran.lock().expect("attention ran lock").unwrap_or(Ran::Cpu);
    Ok((out, dq.ok_or_else(missing)?, dk.ok_or_else(missing)?, dv.ok_or_else(missing)?, ran))
}

/// [`attention`] from stock ops (any dtype, any device): scores in f32 with
/// the additive mask, a max-shifted softmax, then the values; query heads of
/// one kv head are folded into one matmul.
pub fn attention_reference(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Visibility, scale: f64) -> Result<Tensor> {
    let Dims { batch: b, heads, kv_heads: kv, queries: t, keys: s, head_dim: d } = Dims::of(q.dims(), k.dims(), v.dims(), vis)?;
    let groups = heads / kv;
    let mask = vis.additive_mask(q.device())?;
    let q = q.contiguous()?.reshape((b, kv, groups * t, d))?;
    let scores = (q.matmul(&k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let scores = scores.reshape((b, kv, groups, t, s))?.broadcast_add(&mask.unsqueeze(2)?)?;
    let max = scores.max_keepdim(D::Minus1)?.detach();
    let e = scores.broadcast_sub(&max)?.exp()?;
    let probs = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    let probs = probs.to_dtype(v.dtype())?.reshape((b, kv, groups * t, s))?;
    let out = probs.matmul(v)?.reshape((b, heads, t, d))?;
    out.transpose(1, 2)?.reshape((b, t, heads * d))
}

/// The custom op: `(q, k, v)` -> `[b, t, heads * d]`. The forward leaves
/// each query's log-sum-exp (`[b, heads, t]`) in `lse` for the backward.
#[derive(Debug)]
pub struct AttentionOp {
    vis: Arc<Visibility>,
    scale: f32,
    dims: Dims,
    /// The CUDA backend and cuDNN's backward (carried with the model).
    #[cfg_attr(not(feature = "cudnn"), allow(dead_code))]
    settings: Settings,
    /// Whether the backward will run (cuDNN prepares its graph up front).
    #[cfg_attr(not(feature = "cudnn"), allow(dead_code))]
    grads: bool,
    lse: Mutex<Option<Lse>>,
    /// Which implementation the forward ran.
    ran: Arc<Mutex<Option<Ran>>>,
}

impl AttentionOp {
    fn new(vis: &Arc<Visibility>, scale: f64, dims: Dims, settings: Settings, grads: bool) -> AttentionOp {
        AttentionOp { vis: vis.clone(), scale: scale as f32, dims, settings, grads, lse: Mutex::new(None), ran: Arc::new(Mutex::new(None)) }
    }

    fn record(&self, ran: Ran) {
        *self.ran.lock().expect("attention ran lock") = Some(ran);
    }
}

/// The forward's log-sum-exp, where the forward ran.
#[derive(Debug, Clone)]
enum Lse {
    Cpu(Vec<f32>),
    /// `[b, heads, t]` f32 on the CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(Tensor),
    /// The forward ran on cuDNN: its statistics and sequence buffers.
    #[cfg(feature = "cudnn")]
    Cudnn(Arc<cudnn::Saved>),
}

/// A strided f32 view of a rank-4 tensor whose last dimension is contiguous.
pub(crate) struct View4<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    /// Strides of the first three dimensions (the last one is 1).
    pub strides: [usize; 3],
}

impl<'a> View4<'a> {
    fn of(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<Self> {
        let data = f32_slice(s, what)?;
        let st = l.stride();
        if l.dims().len() != 4 || (st[3] != 1 && l.dims()[3] > 1) {
            candle_core::bail!("attention: {what} must be rank 4 with a contiguous last dimension, got strides {st:?}");
        }
        Ok(View4 { data, offset: l.start_offset(), strides: [st[0], st[1], st[2]] })
    }

    /// Offset of element `(a, b, c, 0)`.
    #[inline]
    pub fn at(&self, a: usize, b: usize, c: usize) -> usize {
        self.offset + a * self.strides[0] + b * self.strides[1] + c * self.strides[2]
    }
}

impl CustomOp3 for AttentionOp {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let p = cpu::Problem {
            q: View4::of(s1, l1, "q")?,
            k: View4::of(s2, l2, "k")?,
            v: View4::of(s3, l3, "v")?,
            vis: &self.vis,
            dims: self.dims,
            scale: self.scale,
        };
        // Inference with few queries: each on its own, so that a query gets
        // the same bits alone or beside others (training keeps one kernel
        // for every length, so splits of a batch agree).
        let (out, lse) = if !self.grads && self.dims.queries <= per_query::MAX_QUERIES { per_query::forward(&p) } else { cpu::forward(&p) };
        *self.lse.lock().expect("attention lse lock") = Some(Lse::Cpu(lse));
        self.record(Ran::Cpu);
        let Dims { batch, queries, heads, head_dim, .. } = self.dims;
        Ok((CpuStorage::F32(out), Shape::from((batch, queries, heads * head_dim))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        #[cfg(feature = "cudnn")]
        if let Some((out, saved)) = cudnn::try_forward(self.dims, self.scale, &self.vis, self.settings, self.grads, (s1, l1), (s2, l2), (s3, l3))? {
            *self.lse.lock().expect("attention lse lock") = Some(Lse::Cudnn(Arc::new(saved)));
            self.record(Ran::Cudnn);
            let Dims { batch, queries, heads, head_dim, .. } = self.dims;
            return Ok((out, Shape::from((batch, queries, heads * head_dim))));
        }
        let (out, lse) = cuda::forward(self.dims, self.scale, &self.vis, (s1, l1), (s2, l2), (s3, l3))?;
        let Dims { batch, queries, heads, head_dim, .. } = self.dims;
        let lse = candle_core::Tensor::from_storage(candle_core::Storage::Cuda(lse), (batch, heads, queries), candle_core::op::BackpropOp::none(), false);
        *self.lse.lock().expect("attention lse lock") = Some(Lse::Cuda(lse));
        self.record(Ran::Kernel);
        Ok((out, Shape::from((batch, queries, heads * head_dim))))
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let lse = self.lse.lock().expect("attention lse lock").clone();
        let lse = match lse {
            Some(Lse::Cpu(lse)) => lse,
            #[cfg(feature = "cuda")]
            Some(Lse::Cuda(lse)) => return self.bwd_cuda(q, k, v, res, grad_res, &lse),
            #[cfg(feature = "cudnn")]
            Some(Lse::Cudnn(saved)) => return self.bwd_cudnn(q, k, v, res, grad_res, &saved),
            None => candle_core::bail!("attention backward: the forward kept no log-sum-exp"),
        };
        let (out, grad_out) = (res.contiguous()?, grad_res.to_dtype(DType::F32)?.contiguous()?);
        let (sq, lq) = q.storage_and_layout();
        let (sk, lk) = k.storage_and_layout();
        let (sv, lv) = v.storage_and_layout();
        let (so, lo) = out.storage_and_layout();
        let (sg, lg) = grad_out.storage_and_layout();
        use candle_core::Storage::Cpu;
        let (Cpu(cq), Cpu(ck), Cpu(cv), Cpu(co), Cpu(cg)) = (&*sq, &*sk, &*sv, &*so, &*sg) else {
            candle_core::bail!("attention backward: every input must be on the CPU");
        };
        let p = cpu::Problem {
            q: View4::of(cq, lq, "q")?,
            k: View4::of(ck, lk, "k")?,
            v: View4::of(cv, lv, "v")?,
            vis: &self.vis,
            dims: self.dims,
            scale: self.scale,
        };
        let o = contiguous_f32(co, lo, "attention output")?;
        let g = contiguous_f32(cg, lg, "attention output gradient")?;
        let grads = cpu::backward(&p, o, g, &lse);
        let device = q.device();
        let Dims { batch, heads, kv_heads, queries, keys, head_dim } = self.dims;
        Ok((
            Some(Tensor::from_vec(grads.q, (batch, heads, queries, head_dim), device)?),
            Some(Tensor::from_vec(grads.k, (batch, kv_heads, keys, head_dim), device)?),
            Some(Tensor::from_vec(grads.v, (batch, kv_heads, keys, head_dim), device)?),
        ))
    }
}

#[cfg(feature = "cuda")]
impl AttentionOp {
    /// The backward on CUDA: the output and its gradient made contiguous in
    /// the inputs' dtype, then `cuda::backward`.
    fn bwd_cuda(&self, q: &Tensor, k: &Tensor, v: &Tensor, res: &Tensor, grad_res: &Tensor, lse: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        use candle_core::Storage::Cuda;
        let (out, grad_out) = (res.contiguous()?, grad_res.to_dtype(q.dtype())?.contiguous()?);
        let (sq, lq) = q.storage_and_layout();
        let (sk, lk) = k.storage_and_layout();
        let (sv, lv) = v.storage_and_layout();
        let (so, lo) = out.storage_and_layout();
        let (sg, lg) = grad_out.storage_and_layout();
        let (sl, ll) = lse.storage_and_layout();
        let (Cuda(cq), Cuda(ck), Cuda(cv), Cuda(co), Cuda(cg), Cuda(cl)) = (&*sq, &*sk, &*sv, &*so, &*sg, &*sl) else {
            candle_core::bail!("attention backward: every input must be on the CUDA device of the forward");
        };
        let [dq, dk, dv] = cuda::backward(self.dims, self.scale, &self.vis, (cq, lq), (ck, lk), (cv, lv), (co, lo), (cg, lg), (cl, ll))?;
        let Dims { batch, heads, kv_heads, queries, keys, head_dim } = self.dims;
        let tensor = |s, shape: (usize, usize, usize, usize)| Tensor::from_storage(Cuda(s), shape, candle_core::op::BackpropOp::none(), false);
        Ok((
            Some(tensor(dq, (batch, heads, queries, head_dim))),
            Some(tensor(dk, (batch, kv_heads, keys, head_dim))),
            Some(tensor(dv, (batch, kv_heads, keys, head_dim))),
        ))
    }
}

#[cfg(feature = "cudnn")]
impl AttentionOp {
    /// The backward on cuDNN after a cuDNN forward: the output and its
    /// gradient contiguous in the inputs' dtype, then `cudnn::backward`.
    fn bwd_cudnn(&self, q: &Tensor, k: &Tensor, v: &Tensor, res: &Tensor, grad_res: &Tensor, saved: &cudnn::Saved) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        use candle_core::Storage::Cuda;
        let (out, grad_out) = (res.contiguous()?, grad_res.to_dtype(q.dtype())?.contiguous()?);
        let (sq, lq) = q.storage_and_layout();
        let (sk, lk) = k.storage_and_layout();
        let (sv, lv) = v.storage_and_layout();
        let (so, lo) = out.storage_and_layout();
        let (sg, lg) = grad_out.storage_and_layout();
        let (Cuda(cq), Cuda(ck), Cuda(cv), Cuda(co), Cuda(cg)) = (&*sq, &*sk, &*sv, &*so, &*sg) else {
            candle_core::bail!("attention backward: every input must be on the CUDA device of the forward");
        };
        let [dq, dk, dv] = cudnn::backward(self.dims, saved, (cq, lq), (ck, lk), (cv, lv), (co, lo), (cg, lg))?;
        let Dims { batch, heads, kv_heads, queries, keys, head_dim } = self.dims;
        // Token-major [b, len, heads, d] as cuDNN wrote them, viewed [b, heads, len, d].
        let tensor = |s, shape: (usize, usize, usize, usize)| Tensor::from_storage(Cuda(s), shape, candle_core::op::BackpropOp::none(), false).transpose(1, 2);
        Ok((
            Some(tensor(dq, (batch, queries, heads, head_dim))?),
            Some(tensor(dk, (batch, keys, kv_heads, head_dim))?),
            Some(tensor(dv, (batch, keys, kv_heads, head_dim))?),
        ))
    }
}

fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<&'a [f32]> {
    crate::storage::contiguous_slice(f32_slice(s, what)?, l, what)
}
