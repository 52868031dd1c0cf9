//! Attention on cuDNN's fused SDPA (feature `cudnn`): the C shim
//! `kernels/cudnn/sdpa.cpp` over cudnn-frontend, fed with the sequences,
//! lengths, ragged offsets and graph keys of [`super::cudnn_map`].
//!
//! The op's `cuda_fwd` calls [`try_forward`] first: cuDNN runs where it
//! takes the call (bf16 or f16, head dim a multiple of 8 up to 256, a
//! Hopper or newer GPU, libcudnn.so.9 found, the graph built and, when
//! gradients are needed, the backward's graph built with its workspace
//! within [`Settings::workspace_budget`]), else the fused kernel runs and the log says
//! why, once per reason ([`super::cudnn_map::note_once`]). The backend is a
//! value carried with the model ([`Settings`]): `cudnn` makes a decline an
//! error, `kernel` never tries cuDNN. A forward that ran on cuDNN keeps its
//! statistics, sequence buffers and layouts ([`Saved`]) for [`backward`].
//!
//! cuDNN gets token-major operands (`[b, len, heads, d]`, its THD layout):
//! q, k, v as they are when they already are (the model's projections),
//! else a token-major copy; the gradients are written token-major and
//! returned as `[b, heads, len, d]` views. The workspace is one grow-only
//! buffer per stream, never zeroed (cuDNN initializes what it needs).
//!
//! Outputs start as zeros: cuDNN writes the slots of its sequences only,
//! so padding queries read 0 (ours elsewhere: the mean of every value,
//! never used) and unseen keys get zero gradients.

use super::cuda::{strided, In};
use super::cudnn_map::{self, count_bucket, Backend, GraphKey, IoType, Layouts, PackedStarts, Ragged, Sequence, Settings};
use super::{Dims, Visibility};
use crate::cuda_util::wrap;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::{CudaDevice, DType, Result};
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Device pointers of one call (`FgSdpaPtrs` in sdpa.cpp).
#[repr(C)]
struct Pointers {
    q: *mut c_void,
    k: *mut c_void,
    v: *mut c_void,
    o: *mut c_void,
    stats: *mut c_void,
    d_o: *mut c_void,
    dq: *mut c_void,
    dk: *mut c_void,
    dv: *mut c_void,
    /// seq_q, seq_kv and the ragged offsets, one buffer ([`Ragged::packed`]).
    ints: *mut c_void,
    /// Where each array starts in `ints`, in bytes (16-byte aligned).
    starts: PackedStarts,
    workspace: *mut c_void,
}

extern "C" {
    fn fg_cudnn_open(path: *const c_char, err: *mut c_char, n: usize) -> i64;
    fn fg_cudnn_prepare(key: *const GraphKey, ordinal: c_int, workspace: *mut i64, err: *mut c_char, n: usize) -> c_int;
    fn fg_cudnn_execute(key: *const GraphKey, ordinal: c_int, p: *const Pointers, stream: *mut c_void, err: *mut c_char, n: usize) -> c_int;
    fn fg_dlopen_global(path: *const c_char, err: *mut c_char, n: usize) -> c_int;
    fn fg_cudnn_set_cudart(name: *const c_char);
    fn fg_cudnn_set_dp_limit(bytes: i64);
}

/// The shim's message buffer.
struct ErrBuf([u8; 1024]);

impl ErrBuf {
    fn new() -> Self {
        ErrBuf([0; 1024])
    }
    fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr().cast()
    }
    fn text(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
}

/// The libcudnn this process opened: its path and version (e.g. 92700).
#[derive(Debug, Clone)]
pub struct Library {
    pub path: PathBuf,
    pub version: i64,
}

/// libcudnn.so.9, opened on first use from the first of
/// [`cudnn_map::library_candidates`] that loads, or why none did.
pub fn library() -> std::result::Result<&'static Library, String> {
    static LIB: OnceLock<std::result::Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> std::result::Result<Library, String> {
    let env = |k: &str| std::env::var(k).ok();
    let mut tried = Vec::new();
    for path in cudnn_map::library_candidates(&env) {
        preload_cudart(&path);
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        let mut err = ErrBuf::new();
        // SAFETY: a NUL-terminated path and a buffer of the length given.
        let version = unsafe { fg_cudnn_open(c.as_ptr(), err.ptr(), err.0.len()) };
        if version > 0 {
            return Ok(Library { path, version });
        }
        tried.push(format!("{}: {}", path.display(), err.text()));
    }
    Err(format!(
        "no usable libcudnn.so.9 ({}); install cuDNN 9 (pip install nvidia-cudnn-cu13, or a PyTorch that ships it) or set {}",
        tried.join("; "),
        cudnn_map::LIBRARY_ENV
    ))
}

/// The frontend opens `libcudart.so.12` / `.13` by name: where the loader
/// would not find one, the one beside a Python wheel's cuDNN is opened
/// first (an already open library satisfies the name).
fn preload_cudart(cudnn: &std::path::Path) {
    if std::env::var_os("CUDNN_FRONTEND_CUDART_LIB_NAME").is_some() {
        return;
    }
    let nvidia = cudnn.parent().and_then(|lib| lib.parent()).and_then(|c| c.parent());
    let mut names: Vec<PathBuf> = vec!["libcudart.so.13".into(), "libcudart.so.12".into()];
    if let Some(nv) = nvidia {
        names.extend([nv.join("cu13/lib/libcudart.so.13"), nv.join("cuda_runtime/lib/libcudart.so.13"), nv.join("cuda_runtime/lib/libcudart.so.12")]);
    }
    for name in names {
        let Ok(c) = CString::new(name.to_string_lossy().as_bytes()) else { continue };
        let mut err = ErrBuf::new();
        // SAFETY: a NUL-terminated path and a buffer of the length given.
        if unsafe { fg_dlopen_global(c.as_ptr(), err.ptr(), err.0.len()) } == 0 {
            // The frontend opens this one by name, never both .12 and .13.
            // SAFETY: a NUL-terminated name; the shim sets it under its lock.
            unsafe { fg_cudnn_set_cudart(c.as_ptr()) };
            return;
        }
    }
}

/// What the forward leaves for the backward.
pub(super) struct Saved {
    /// `[slots, heads, max_q]` f32 (cuDNN's softmax statistics).
    stats: CudaSlice<f32>,
    /// seq_q, seq_kv and the ragged offsets ([`Ragged::packed`]).
    ints: CudaSlice<u8>,
    starts: PackedStarts,
    /// The forward's key; the backward's differs in `backward` only.
    key: GraphKey,
    /// The strides cuDNN read q, k, v with (the backward must see the same).
    layouts: Layouts,
    /// No sequence at all (every query padding): nothing ran.
    empty: bool,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cudnn::Saved({:?})", self.key)
    }
}

/// cuDNN's forward `(out [b, t, heads * d], saved)` when it takes the call;
/// `None` when the fused kernel is to run (said once per reason).
/// `grads`: the backward will run (its graph is prepared now, so that Auto
/// declines here rather than failing the step later).
pub(super) fn try_forward(dims: Dims, scale: f32, vis: &Visibility, settings: Settings, grads: bool, q: In, k: In, v: In) -> Result<Option<(CudaStorage, Saved)>> {
    let backend = settings.backend;
    if backend == Backend::Kernel {
        cudnn_map::note_once("the fused attention kernel runs ([model] attention = \"kernel\")");
        return Ok(None);
    }
    let dtype = q.0.dtype();
    let ran = match dtype {
        DType::BF16 => forward::<half::bf16>(dims, scale, vis, &settings, grads, IoType::Bf16, [q, k, v]),
        DType::F16 => forward::<half::f16>(dims, scale, vis, &settings, grads, IoType::F16, [q, k, v]),
        other => Err(cudnn_map::static_decline(other, dims.head_dim).unwrap_or_else(|| format!("{other:?}"))),
    };
    match ran {
        Ok(r) => {
            if let Ok(lib) = library() {
                cudnn_map::note_once(&format!("cuDNN fused attention runs ({} {})", lib.path.display(), lib.version));
            }
            Ok(Some(r))
        }
        Err(why) if backend == Backend::Auto && dtype != DType::F16 => {
            cudnn_map::note_once(&format!("the fused attention kernel runs: cuDNN declined: {why}"));
            Ok(None)
        }
        Err(why) => candle_core::bail!(
            "attention: cuDNN declined ({why}){}",
            if backend == Backend::Cudnn { " and [model] attention = \"cudnn\" forbids the fused kernel" } else { "; the fused kernel has no f16 (use bf16)" }
        ),
    }
}

/// Whether cuDNN can take `dtype` at `head_dim` on `device` before any call
/// (library, GPU generation, dtype, head dim); `Err` says why not.
pub(crate) fn admits(device: &CudaDevice, dtype: DType, head_dim: usize) -> std::result::Result<(), String> {
    if let Some(why) = cudnn_map::static_decline(dtype, head_dim) {
        return Err(why);
    }
    let (major, minor) = device.cuda_stream().context().compute_capability().map_err(|e| e.to_string())?;
    if major < 9 {
        return Err(format!("compute capability {major}.{minor}: cuDNN's packed (ragged) attention needs 9.0 (Hopper) or newer"));
    }
    library().map(|_| ())
}

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The GPU's compute capability as cuDNN's SM version (90 for 9.0).
fn sm_version(dev: &CudaDevice) -> std::result::Result<i32, String> {
    let (major, minor) = dev.cuda_stream().context().compute_capability().map_err(s)?;
    Ok(major * 10 + minor)
}

/// Before the process's first graph: with cuDNN >= 9.25 on Hopper the
/// deterministic backward then keeps its workspace under `budget` (linear
/// in the sequence). The first forward's budget holds for the process (a
/// run's models share one `[model]` section).
fn dp_limit(budget: u64) {
    static SET: std::sync::Once = std::sync::Once::new();
    // SAFETY: the shim sets the variable under its lock.
    SET.call_once(|| unsafe { fg_cudnn_set_dp_limit(budget.min(i64::MAX as u64) as i64) });
}

/// The graph of `key`, built or found: its workspace in bytes. The first
/// build of each key is logged once with its time and workspace.
fn prepare(dev: &CudaDevice, key: &GraphKey) -> std::result::Result<u64, String> {
    let ordinal = dev.cuda_stream().context().ordinal() as c_int;
    dev.cuda_stream().context().bind_to_thread().map_err(s)?;
    let mut ws = 0i64;
    let mut err = ErrBuf::new();
    let t0 = std::time::Instant::now();
    // SAFETY: a valid key and out-pointer; the buffer's length is given.
    if unsafe { fg_cudnn_prepare(key, ordinal, &mut ws, err.ptr(), err.0.len()) } != 0 {
        return Err(format!("{} graph build: {}", if key.backward != 0 { "backward" } else { "forward" }, err.text()));
    }
    cudnn_map::note_once(&format!(
        "cuDNN {} graph ready in {} ms, workspace {} MiB ({} slots, q bucket {}, kv bucket {}, deterministic {}, sm {}); later graphs are not logged",
        if key.backward != 0 { "backward" } else { "forward" },
        t0.elapsed().as_millis(),
        ws as u64 >> 20,
        key.slots,
        key.max_q,
        key.max_kv,
        key.deterministic,
        key.sm_version
    ));
    Ok(ws.max(0) as u64)
}

/// One grow-only workspace per stream, allocated without zeroing.
static WORKSPACES: Mutex<Vec<(usize, CudaSlice<u8>)>> = Mutex::new(Vec::new());

/// Runs `key` with `p` (every pointer but the workspace), the stream's
/// workspace grown to `ws` bytes first.
fn execute(dev: &CudaDevice, key: &GraphKey, ws: u64, mut p: Pointers) -> std::result::Result<(), String> {
    let ordinal = dev.cuda_stream().context().ordinal() as c_int;
    let stream = dev.cuda_stream();
    let id = stream.cu_stream() as usize;
    let mut all = WORKSPACES.lock().map_err(|_| "cuDNN workspace lock poisoned".to_string())?;
    // SAFETY (both allocations): cuDNN writes the workspace before it reads it.
    let at = match all.iter().position(|(sid, _)| *sid == id) {
        Some(i) if all[i].1.len() as u64 >= ws => i,
        Some(i) => {
            all[i].1 = unsafe { dev.alloc::<u8>(ws as usize) }.map_err(s)?;
            i
        }
        None => {
            all.push((id, unsafe { dev.alloc::<u8>(ws.max(1) as usize) }.map_err(s)?));
            all.len() - 1
        }
    };
    let (wp, _w) = all[at].1.device_ptr_mut(&stream);
    p.workspace = raw(wp);
    let mut err = ErrBuf::new();
    // SAFETY: every pointer of `p` the graph reads or writes is a live
    // device allocation of the size the key's dims and the ragged offsets
    // address (checked by `strided` and allocated here); the call is
    // ordered on Candle's stream, which also orders the workspace's reuse.
    if unsafe { fg_cudnn_execute(key, ordinal, &p, stream.cu_stream() as *mut c_void, err.ptr(), err.0.len()) } != 0 {
        return Err(format!("execute: {}", err.text()));
    }
    Ok(())
}

/// A device pointer as the shim takes it.
fn raw(p: u64) -> *mut c_void {
    p as usize as *mut c_void
}

type Typed<T> = std::result::Result<T, String>;

/// A token-major copy `[b, len, heads, d]` of a `[b, heads, len, d]` operand.
fn token_major_copy<T: CudaDType + DeviceRepr>(dev: &CudaDevice, (st, l): In, what: &str) -> Typed<CudaStorage> {
    let n = l.shape().elem_count();
    // SAFETY: every element is written by the copy below.
    let mut dst = wrap(unsafe { dev.alloc::<T>(n.max(1)) }.map_err(s)?, dev);
    let src = l.transpose(1, 2).map_err(s)?;
    st.copy_strided_src(&mut dst, 0, &src).map_err(|e| format!("token-major copy of {what}: {e}"))?;
    cudnn_map::note_once(&format!("cuDNN reads {what} from a token-major copy ({} elements): pass it token-major to avoid the copy", n));
    Ok(dst)
}

/// The operands q, k, v as cuDNN reads them: views of the inputs, or of the
/// token-major copies in `copies`.
fn operands<'a, T: CudaDType + DeviceRepr>(dev: &CudaDevice, ins: [In<'a>; 3], layouts: &Layouts, copies: &'a mut Vec<CudaStorage>) -> Typed<[CudaView<'a, T>; 3]> {
    let names = ["q", "k", "v"];
    for i in 0..3 {
        if layouts.copied[i] {
            copies.push(token_major_copy::<T>(dev, ins[i], names[i])?);
        }
    }
    let mut copied = copies.iter();
    let mut views = Vec::with_capacity(3);
    for i in 0..3 {
        views.push(if layouts.copied[i] {
            let c = copied.next().expect("one copy per copied operand").as_cuda_slice::<T>().map_err(s)?;
            c.slice(0..c.len())
        } else {
            strided::<T>(ins[i], names[i]).map_err(s)?.data
        });
    }
    let [q, k, v]: [CudaView<'a, T>; 3] = views.try_into().map_err(|_| "three operands".to_string())?;
    Ok([q, k, v])
}

/// The layouts cuDNN reads q, k, v with, from their own strides.
fn layouts_of<T: CudaDType>(dims: Dims, [q, k, v]: [In; 3]) -> Typed<Layouts> {
    let Dims { heads, kv_heads, queries, keys, head_dim: d, .. } = dims;
    let st = |x: In, what: &str| strided::<T>(x, what).map(|v| v.strides).map_err(s);
    Ok(Layouts::new(st(q, "q")?, st(k, "k")?, st(v, "v")?, heads, kv_heads, queries, keys, d))
}

#[allow(clippy::too_many_arguments)]
fn forward<T: CudaDType + DeviceRepr + ValidAsZeroBits>(dims: Dims, scale: f32, vis: &Visibility, settings: &Settings, grads: bool, io: IoType, [q, k, v]: [In; 3]) -> Typed<(CudaStorage, Saved)> {
    let Dims { batch, heads, kv_heads, queries, head_dim: d, .. } = dims;
    let dev = q.0.device().clone();
    admits(&dev, q.0.dtype(), d)?;
    let seqs: &[Sequence] = vis.cudnn_sequences()?;
    let layouts = layouts_of::<T>(dims, [q, k, v])?;
    let ragged = Ragged::new(seqs, &layouts, count_bucket(seqs.len()))?;
    let key = GraphKey::new(false, io, &ragged, heads, kv_heads, d, &layouts, scale).with(settings, sm_version(&dev)?);
    if let Some(op) = key.overlapping() {
        return Err(format!("the {op} descriptor would overlap (strides {:?})", key.strides));
    }
    let out = dev.alloc_zeros::<T>(batch * queries * heads * d).map_err(s)?;
    let mut stats = dev.alloc_zeros::<f32>(key.stats_len()).map_err(s)?;
    let (bytes, starts) = ragged.packed();
    let ints = dev.clone_htod(&bytes[..]).map_err(s)?;
    if seqs.is_empty() {
        return Ok((wrap(out, &dev), Saved { stats, ints, starts, key, layouts, empty: true }));
    }
    dp_limit(settings.workspace_budget);
    let ws = prepare(&dev, &key)?;
    let backward = GraphKey { backward: 1, ..key };
    if grads {
        let bws = prepare(&dev, &backward)?;
        if bws > settings.workspace_budget {
            let why = format!(
                "the backward's workspace is {} MiB, over the {} MiB budget ({}; cuDNN >= 9.25 keeps it small, or set [model] attention_deterministic = false)",
                bws >> 20,
                settings.workspace_budget >> 20,
                if settings.deterministic { "the deterministic backward on Hopper with cuDNN < 9.25 is quadratic in the sequence" } else { "non-deterministic" }
            );
            if settings.backend == Backend::Auto {
                return Err(why);
            }
            cudnn_map::note_once(&format!("cuDNN runs although {why}"));
        }
    }
    let mut out = out;
    let mut copies = Vec::new();
    let [qv, kv, vv] = operands::<T>(&dev, [q, k, v], &layouts, &mut copies)?;
    let stream = dev.cuda_stream();
    let (qp, _a) = qv.device_ptr(&stream);
    let (kp, _b) = kv.device_ptr(&stream);
    let (vp, _c) = vv.device_ptr(&stream);
    let (ip, _d) = ints.device_ptr(&stream);
    let (op, _e) = out.device_ptr_mut(&stream);
    let (sp, _f) = stats.device_ptr_mut(&stream);
    let null = std::ptr::null_mut();
    let p = Pointers { q: raw(qp), k: raw(kp), v: raw(vp), o: raw(op), stats: raw(sp), d_o: null, dq: null, dk: null, dv: null, ints: raw(ip), starts, workspace: null };
    execute(&dev, &key, ws, p)?;
    drop((_a, _b, _c, _d, _e, _f));
    Ok((wrap(out, &dev), Saved { stats, ints, starts, key, layouts, empty: false }))
}

/// cuDNN's backward `(dq, dk, dv)` after [`try_forward`] ran on cuDNN, each
/// token-major (`[b, len, heads, d]`, the inputs' dtype; the caller views
/// them as `[b, heads, len, d]`): `out` is the forward's output and `dout`
/// its gradient, both contiguous `[b, t, heads * d]`; q, k, v must have the
/// strides the forward read them with.
pub(super) fn backward(dims: Dims, saved: &Saved, q: In, k: In, v: In, out: In, dout: In) -> Result<[CudaStorage; 3]> {
    let ran = match q.0.dtype() {
        DType::BF16 => backward_typed::<half::bf16>(dims, saved, [q, k, v, out, dout]),
        DType::F16 => backward_typed::<half::f16>(dims, saved, [q, k, v, out, dout]),
        other => Err(format!("{other:?} inputs")),
    };
    ran.map_err(|why| candle_core::Error::Msg(format!("attention backward (cuDNN): {why}")))
}

fn backward_typed<T: CudaDType + DeviceRepr + ValidAsZeroBits>(dims: Dims, saved: &Saved, [q, k, v, out, dout]: [In; 5]) -> Typed<[CudaStorage; 3]> {
    let Dims { batch, heads, kv_heads, queries, keys, head_dim: d } = dims;
    let dev = q.0.device().clone();
    let mut dq = dev.alloc_zeros::<T>(batch * heads * queries * d).map_err(s)?;
    let mut dk = dev.alloc_zeros::<T>(batch * kv_heads * keys * d).map_err(s)?;
    let mut dv = dev.alloc_zeros::<T>(batch * kv_heads * keys * d).map_err(s)?;
    if saved.empty {
        return Ok([wrap(dq, &dev), wrap(dk, &dev), wrap(dv, &dev)]);
    }
    let layouts = layouts_of::<T>(dims, [q, k, v])?;
    if layouts != saved.layouts {
        return Err(format!("q, k, v reach the backward with other strides than the forward's ({layouts:?}, forward {:?})", saved.layouts));
    }
    let rows = batch * queries * heads * d;
    let (ov, gv) = (super::cuda::dense::<T>(out, rows, "out").map_err(s)?, super::cuda::dense::<T>(dout, rows, "the output gradient").map_err(s)?);
    let key = GraphKey { backward: 1, ..saved.key };
    let ws = prepare(&dev, &key)?;
    let mut copies = Vec::new();
    let [qv, kv, vv] = operands::<T>(&dev, [q, k, v], &layouts, &mut copies)?;
    let stream = dev.cuda_stream();
    let (qp, _a) = qv.device_ptr(&stream);
    let (kp, _b) = kv.device_ptr(&stream);
    let (vp, _c) = vv.device_ptr(&stream);
    let (op, _d) = ov.device_ptr(&stream);
    let (gp, _e) = gv.device_ptr(&stream);
    let (sp, _f) = saved.stats.device_ptr(&stream);
    let (ip, _g) = saved.ints.device_ptr(&stream);
    let (dqp, _h) = dq.device_ptr_mut(&stream);
    let (dkp, _i) = dk.device_ptr_mut(&stream);
    let (dvp, _j) = dv.device_ptr_mut(&stream);
    let p = Pointers {
        q: raw(qp),
        k: raw(kp),
        v: raw(vp),
        o: raw(op),
        stats: raw(sp),
        d_o: raw(gp),
        dq: raw(dqp),
        dk: raw(dkp),
        dv: raw(dvp),
        ints: raw(ip),
        starts: saved.starts,
        workspace: std::ptr::null_mut(),
    };
    execute(&dev, &key, ws, p)?;
    drop((_a, _b, _c, _d, _e, _f, _g, _h, _i, _j));
    Ok([wrap(dq, &dev), wrap(dk, &dev), wrap(dv, &dev)])
}
