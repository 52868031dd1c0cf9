//! Gradients summed on the GPUs by NCCL (feature `nccl`): the communicator
//! is built once, at the first sum, from rank 0's NCCL unique id handed to
//! the other ranks over MPI (as NVIDIA's nccl-tests do); each bucket of f32
//! gradients is all-reduced in place on the device. NCCL's ring and tree
//! all-reduce give every rank the same bits, which the parameter hash at
//! every checkpoint checks. bf16 parameters keep f32 gradients, f32 sums
//! and f32 AdamW masters.

use super::Collective;
use crate::error::{Error, Result};
use crate::optim::Gradients;
use candle_core::cuda_backend::cudarc::nccl::{Comm, Id, ReduceOp};
use candle_core::cuda_backend::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, DType, Device, Storage, Tensor, Var};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// The process's communicator: built by the first sum, used from the main
/// thread only (the training loop's).
struct Group {
    comm: Comm,
    device: CudaDevice,
}

// SAFETY: NCCL calls are made from the main thread only; the lock orders them.
unsafe impl Send for Group {}

static GROUP: OnceLock<Mutex<Group>> = OnceLock::new();

fn nccl_error(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::invalid("NCCL", format!("{what}: {e:?} (is libnccl.so.2 on LD_LIBRARY_PATH? NCCL_DEBUG=INFO tells more)"))
}

/// The communicator over every rank, on this rank's GPU: rank 0 makes the
/// unique id, the all-gather over MPI hands it to the others.
fn group(dist: &dyn Collective, device: &CudaDevice) -> Result<&'static Mutex<Group>> {
    if let Some(g) = GROUP.get() {
        return Ok(g);
    }
    let id = if dist.rank() == 0 { Some(Id::new().map_err(|e| nccl_error("ncclGetUniqueId", e))?) } else { None };
    let mine: Vec<u8> = id.as_ref().map(|id| id.internal().iter().map(|&c| c as u8).collect()).unwrap_or_default();
    let root = dist.all_gather_bytes(&mine)?.swap_remove(0);
    let internal: [std::ffi::c_char; 128] = std::array::from_fn(|i| root.get(i).copied().unwrap_or(0) as std::ffi::c_char);
    if root.len() != 128 {
        return Err(Error::invalid("NCCL", format!("rank 0 sent a unique id of {} bytes, expected 128", root.len())));
    }
    let comm = Comm::from_rank(device.cuda_stream(), dist.rank(), dist.world(), id.unwrap_or_else(|| Id::uninit(internal)))
        .map_err(|e| nccl_error("ncclCommInitRank", e))?;
    Ok(GROUP.get_or_init(|| Mutex::new(Group { comm, device: device.clone() })))
}

/// Sums `grads` over ranks on the GPU when they live on one (true), leaving
/// CPU gradients to the MPI path (false). Same buckets and presence rules
/// as [`super::reduce::sum_gradients`].
pub fn sum_gradients(dist: &dyn Collective, params: &BTreeMap<String, Var>, buckets: &[Vec<&String>], grads: &mut Gradients) -> Result<bool> {
    let Some(Device::Cuda(device)) = params.values().next().map(|v| v.device().clone()) else { return Ok(false) };
    let group = group(dist, &device)?.lock().map_err(|_| Error::invalid("NCCL", "the communicator's lock was poisoned"))?;
    let mut summed = Gradients::default();
    for bucket in buckets {
        let parts: Vec<Tensor> = bucket
            .iter()
            .map(|name| match grads.get(name) {
                Some(g) => Ok(g.to_dtype(DType::F32)?.flatten_all()?),
                None => Ok(Tensor::zeros(params[*name].as_tensor().elem_count(), DType::F32, &Device::Cuda(device.clone()))?),
            })
            .collect::<Result<_>>()?;
        let flat = Tensor::cat(&parts, 0)?.contiguous()?;
        let n = flat.elem_count();
        let mut out = group.device.alloc_zeros::<f32>(n)?;
        {
            let (storage, layout) = flat.storage_and_layout();
            let Storage::Cuda(s) = &*storage else { return Err(Error::invalid("NCCL", "a gradient bucket is not on the GPU")) };
            let src = f32::as_cuda_slice(s)?.slice(layout.start_offset()..layout.start_offset() + n);
            group.comm.all_reduce(&src, &mut out, &ReduceOp::Sum).map_err(|e| nccl_error("ncclAllReduce", e))?;
        }
        let storage = Storage::Cuda(f32::wrap_cuda_slice(out, group.device.clone()));
        let flat = Tensor::from_storage(storage, n, BackpropOp::none(), false);
        let mut at = 0;
        for name in bucket {
            let t = params[*name].as_tensor();
            let len = t.elem_count();
            summed.add(name, &flat.narrow(0, at, len)?.reshape(t.dims())?)?;
            at += len;
        }
    }
    // The sums are on the communicator's stream; Candle's ops use the same.
    Device::Cuda(group.device.clone()).synchronize()?;
    *grads = summed;
    Ok(true)
}

/// NCCL on this rank's GPU, checked: rank r all-reduces `r + 1` in every
/// element of a buffer of `n` f32 (not a multiple of NCCL's chunks); every
/// element must be `world (world + 1) / 2`. Returns a line for the report.
pub fn self_check(dist: &dyn Collective, device: &CudaDevice, n: usize) -> Result<String> {
    let group = group(dist, device)?.lock().map_err(|_| Error::invalid("NCCL", "the communicator's lock was poisoned"))?;
    let src = group.device.clone_htod(&vec![(dist.rank() + 1) as f32; n][..])?;
    let mut out = group.device.alloc_zeros::<f32>(n)?;
    group.comm.all_reduce(&src, &mut out, &ReduceOp::Sum).map_err(|e| nccl_error("ncclAllReduce", e))?;
    let host = group.device.clone_dtoh(&out)?;
    let want = (dist.world() * (dist.world() + 1) / 2) as f32;
    let wrong = host.iter().filter(|&&x| x != want).count();
    if wrong > 0 {
        return Err(Error::invalid("NCCL", format!("all-reduce of {n} f32 over {} ranks: {wrong} elements differ from {want}", dist.world())));
    }
    Ok(format!("NCCL all-reduce of {n} f32 over {} rank(s) on GPU {}: every element {want}", dist.world(), dist.local_rank()))
}

/// ZeRO-1's all-gather of updated weights on the GPU: each parameter is
/// broadcast by NCCL from its owner into every rank's `Var` (true), or
/// false when the weights are not on a GPU (the MPI path then runs).
pub fn broadcast_parameters(dist: &dyn Collective, partition: &super::partition::Partition, params: &BTreeMap<String, Var>) -> Result<bool> {
    let Some(Device::Cuda(device)) = params.values().next().map(|v| v.device().clone()) else { return Ok(false) };
    let group = group(dist, &device)?.lock().map_err(|_| Error::invalid("NCCL", "the communicator's lock was poisoned"))?;
    for (name, var) in params {
        let root = partition.owner(name) as i32;
        let t = var.as_tensor().contiguous()?;
        let n = t.elem_count();
        let fresh = match t.dtype() {
            DType::F32 => broadcast_typed::<f32>(&group, &t, n, root)?,
            DType::BF16 => broadcast_typed::<half::bf16>(&group, &t, n, root)?,
            DType::F16 => broadcast_typed::<half::f16>(&group, &t, n, root)?,
            other => return Err(Error::invalid("NCCL", format!("`{name}` is {other:?}: ZeRO-1 broadcasts f32, bf16 and f16 weights"))),
        };
        let storage = Storage::Cuda(fresh);
        var.set(&Tensor::from_storage(storage, n, BackpropOp::none(), false).reshape(t.dims())?)?;
    }
    Device::Cuda(group.device.clone()).synchronize()?;
    Ok(true)
}

/// One tensor's values broadcast from `root` into a new device buffer.
fn broadcast_typed<T>(group: &Group, t: &Tensor, n: usize, root: i32) -> Result<candle_core::CudaStorage>
where
    T: CudaDType + candle_core::cuda_backend::cudarc::nccl::NcclType + candle_core::cuda_backend::cudarc::driver::DeviceRepr + candle_core::cuda_backend::cudarc::driver::ValidAsZeroBits,
{
    let mut out = group.device.alloc_zeros::<T>(n)?;
    {
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cuda(s) = &*storage else { return Err(Error::invalid("NCCL", "a weight is not on the GPU")) };
        let src = T::as_cuda_slice(s)?.slice(layout.start_offset()..layout.start_offset() + n);
        group.comm.broadcast(Some(&src), &mut out, root).map_err(|e| nccl_error("ncclBroadcast", e))?;
    }
    Ok(T::wrap_cuda_slice(out, group.device.clone()))
}
