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
    /// The first CUDA GPU (needs a build with `--features cuda`).
    Cuda,
}

impl DeviceKind {
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::Cpu),
            DeviceKind::Cuda => Device::new_cuda(0).map_err(|e| {
                Error::invalid("--device cuda", format!("{e} (is this binary built with --features cuda?)"))
            }),
        }
    }
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
