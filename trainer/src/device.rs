//! Device and dtype choices, as enums (no strings past the CLI parser).

use crate::error::{Error, Result};
use candle_core::{DType, Device};

/// Where tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
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
    /// Every name, as configs and `--device` spell them.
    pub const NAMES: [&'static str; 2] = ["cpu", "cuda"];

    /// `cpu` or `cuda`, as configs spell it.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// Opens the device; for CUDA, GPU `local rank` (0 with one process; see
    /// [`cuda_unavailable`] for the error), with its memory pool set to keep
    /// freed memory across synchronizations ([`kernels::cuda_pool`];
    /// `FUSEGRPO_CUDA_POOL_RELEASE=1` keeps the driver's default).
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda => {
                let device = Device::new_cuda(crate::dist::current().local_rank()).map_err(|e| {
                    // Candle appends a backtrace when RUST_BACKTRACE is set; the first line says it all.
                    let cause = e.to_string();
                    cuda_unavailable(cause.lines().next().unwrap_or_default().trim_end_matches('('))
                })?;
                keep_pool_memory(&device)?;
                Ok(device)
            }
        }
    }
}

/// Sets the CUDA memory pool's release threshold ([`kernels::cuda_pool`]).
fn keep_pool_memory(device: &Device) -> Result<()> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        kernels::cuda_pool::keep_pool_memory(d)
            .map_err(|e| Error::invalid("--device cuda", format!("setting the CUDA memory pool's release threshold: {e} (FUSEGRPO_CUDA_POOL_RELEASE=1 skips it)")))?;
    }
    let _ = device;
    Ok(())
}

/// Opens `device`; for CUDA, first switches the fused kernels as `kernels`
/// says and prints the choice and its reason (rank 0).
pub fn open_with_kernels(device: DeviceKind, kernels: crate::gpu_check::CudaKernels) -> Result<Device> {
    if device == DeviceKind::Cuda {
        let choice = kernels.apply();
        if crate::dist::current().rank() == 0 {
            crate::progress::say(&choice.to_string());
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
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

impl DTypeKind {
    /// Every name, as configs and `--dtype` spell them.
    pub const NAMES: [&'static str; 3] = ["f32", "bf16", "f16"];
}

/// An enum of these settings from its name (`cpu`, `bf16`, `auto`, ...), as
/// configs spell it: what a command-line parser hands over.
pub fn from_name<T: serde::de::DeserializeOwned>(name: &str, names: &[&str]) -> std::result::Result<T, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| format!("`{name}`: expected one of {}", names.join(", ")))
}

impl std::str::FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        from_name(s, &Self::NAMES)
    }
}

impl std::str::FromStr for DTypeKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        from_name(s, &Self::NAMES)
    }
}

impl std::str::FromStr for crate::gpu_check::CudaKernels {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        from_name(s, &Self::NAMES)
    }
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
    /// How attention runs on CUDA; the models loaded here carry it.
    pub attention: kernels::attention::Settings,
}

impl Placement {
    /// Opens the device, the CUDA kernels switched as `cuda_kernels` says.
    pub fn open(&self) -> Result<Device> {
        open_with_kernels(self.device, self.cuda_kernels)
    }
}


