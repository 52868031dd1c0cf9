//! `[model]`: the model a run starts from.

use crate::device::{DTypeKind, DeviceKind};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The model a run starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A folder (config.json + safetensors + tokenizer) or a hub id.
    pub path: String,
    /// Tokenizer folder (default: the model folder).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template that replaces the tokenizer's own (relative to
    /// the config file): e.g. `configs/chatml-tools.jinja` declares the tools
    /// and the `<tool_call>` format to a ChatML model whose template has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<PathBuf>,
    /// A LoRA adapter applied to the model (relative to the config file):
    /// PEFT's folder or a LoRA run's checkpoint. With `[lora]`, training
    /// starts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<PathBuf>,
    #[serde(default)]
    pub dtype: DTypeKind,
    #[serde(default)]
    pub device: DeviceKind,
    /// The fused CUDA kernels on a GPU: `auto` (on once scripts/gpu-check
    /// has passed for this build), `on` or `off` (`crate::gpu_check`).
    #[serde(default, skip_serializing_if = "crate::gpu_check::CudaKernels::is_auto")]
    pub cuda_kernels: crate::gpu_check::CudaKernels,
    /// Which attention runs on CUDA with the kernels on: `auto` (cuDNN
    /// where it takes the call, else the fused kernel), `cudnn` or `kernel`
    /// (`crate::gpu_check::Attention`). `FUSEGRPO_ATTENTION` overrides it.
    #[serde(default, skip_serializing_if = "crate::gpu_check::Attention::is_auto")]
    pub attention: crate::gpu_check::Attention,
    /// cuDNN's deterministic backward (bitwise reruns; on Hopper with
    /// cuDNN < 9.25 its workspace is quadratic in the sequence, and `auto`
    /// falls back to the fused kernel over the budget: docs/gpu.md).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub attention_deterministic: bool,
    /// The most workspace (MiB) cuDNN's attention backward may take: over
    /// it `auto` runs the fused kernel for that call (with cuDNN >= 9.25 on
    /// Hopper the deterministic backward keeps under it). The memory
    /// planner counts it in the updates wherever cuDNN may run.
    #[serde(default = "default_workspace_mib", skip_serializing_if = "is_default_workspace_mib")]
    pub attention_workspace_mib: u64,
}

/// 4096 MiB (`kernels::attention::cudnn_map::WORKSPACE_BUDGET`).
pub fn default_workspace_mib() -> u64 {
    kernels::attention::cudnn_map::WORKSPACE_BUDGET >> 20
}

fn is_default_workspace_mib(m: &u64) -> bool {
    *m == default_workspace_mib()
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl ModelSection {
    /// Where the model runs: `device`, `dtype`, `cuda_kernels`, attention.
    pub fn placement(&self) -> crate::device::Placement {
        crate::device::Placement {
            device: self.device,
            dtype: self.dtype,
            cuda_kernels: self.cuda_kernels,
            attention: crate::gpu_check::attention_settings(self.attention, self.attention_deterministic, self.attention_workspace_mib),
        }
    }
}
