//! Device and dtype choices, as enums (no strings past the CLI parser).

use crate::error::{Error, Result};
use candle_core::{DType, Device};

/// Where tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The host CPU (always available).
    #[default]
    Cpu,
    /// A CUDA GPU (needs a build with `--features cuda`): GPU 0, or the
    /// rank's local rank under data parallelism.
    Cuda,
}

impl DeviceKind {
    /// `cpu` or `cuda`, as configs spell it.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// Opens the device; for CUDA, GPU `local rank` (0 with one process; see
    /// [`cuda_unavailable`] for the error).
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda => Device::new_cuda(crate::dist::current().local_rank()).map_err(|e| {
                // Candle appends a backtrace when RUST_BACKTRACE is set; the first line says it all.
                let cause = e.to_string();
                cuda_unavailable(cause.lines().next().unwrap_or_default().trim_end_matches('('))
            }),
        }
    }
}

/// Opens `device`; for CUDA, first switches the fused kernels as `kernels`
/// says and prints the choice and its reason (rank 0).
pub fn open_with_kernels(device: DeviceKind, kernels: crate::gpu_check::CudaKernels) -> Result<Device> {
    if device == DeviceKind::Cuda {
        let choice = kernels.apply();
        if crate::dist::current().rank() == 0 {
            crate::dist::say(&choice.to_string());
        }
    }
    device.open()
}

/// The error for `--device cuda` when no GPU can be opened: which of "built
/// without CUDA" or "no driver / stub driver / no GPU" it is, and what to do.
fn cuda_unavailable(cause: &str) -> Error {
    let message = if !cfg!(feature = "cuda") {
        "this binary was built without CUDA support; rebuild it with \
         `cargo build --release --features cuda`, or use `--device cpu`"
            .to_string()
    } else {
        let stub = cause.contains("STUB_LIBRARY") || cause.contains("stub");
        let what = if stub {
            "the CUDA driver (libcuda) is a stub: this machine has no NVIDIA driver"
        } else {
            "no CUDA device was found (is an NVIDIA GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)"
        };
        format!("no usable CUDA GPU: {what} ({cause}); use `--device cpu` to run on the CPU")
    };
    Error::invalid("--device cuda", message)
}

/// Floating-point type of the weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DTypeKind {
    /// 32-bit float (CPU default; exact parity with the references).
    #[default]
    F32,
    /// bfloat16 (GPU training and large models on the CPU).
    Bf16,
    /// float16.
    F16,
}

impl From<DTypeKind> for DType {
    fn from(d: DTypeKind) -> DType {
        match d {
            DTypeKind::F32 => DType::F32,
            DTypeKind::Bf16 => DType::BF16,
            DTypeKind::F16 => DType::F16,
        }
    }
}

/// Where and in which precision a model runs: the device, the dtype its
/// weights are converted to, and the fused CUDA kernels' switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub device: DeviceKind,
    pub dtype: DTypeKind,
    pub cuda_kernels: crate::gpu_check::CudaKernels,
}

impl Placement {
    /// Opens the device, the CUDA kernels switched as `cuda_kernels` says.
    pub fn open(&self) -> Result<Device> {
        open_with_kernels(self.device, self.cuda_kernels)
    }
}

/// `--device`, `--dtype` and `--cuda-kernels` of the commands that run a
/// model: where and in which precision it runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOn {
    /// Device to run on.
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    pub device: DeviceKind,
    /// Weights/activations dtype (checkpoint weights are converted to it).
    #[arg(long, value_enum, default_value_t = DTypeKind::F32)]
    pub dtype: DTypeKind,
    /// The fused CUDA kernels with --device cuda: auto (on once
    /// scripts/gpu-check has passed for this build), on or off.
    #[arg(long, value_enum, default_value_t = crate::gpu_check::CudaKernels::Auto)]
    pub cuda_kernels: crate::gpu_check::CudaKernels,
}

impl RunOn {
    /// The device, dtype and kernels these flags name.
    pub fn placement(&self) -> Placement {
        Placement { device: self.device, dtype: self.dtype, cuda_kernels: self.cuda_kernels }
    }

    /// Opens the device, the CUDA kernels switched as `cuda_kernels` says.
    pub fn open(&self) -> Result<Device> {
        self.placement().open()
    }
}

