//! [`crate::cuda_ops`] in a build without the `cuda` feature: the same
//! entry points, each an error saying the build has no CUDA, so that
//! `fusegrpo selftest --device cpu` (`scripts/gpu-first --dry-run`) runs
//! the self-test's whole sequence on any build, every case failing alone
//! with that reason.

use crate::attention::{Ran, Settings, Visibility};
use crate::sampling::SampleMode;
use candle_core::{bail, Result, Tensor};
use std::sync::Arc;

const NO_CUDA: &str = "kernels::cuda_ops: this build has no CUDA kernels (cargo build --features cuda)";

pub fn token_logprobs_stats(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn token_logprobs_backward(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn folded_logprobs(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<(Tensor, Tensor)> {
    bail!("{NO_CUDA}")
}

pub fn sample(_: &Tensor, _: &Tensor, _: SampleMode) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn rms_norm(_: &Tensor, _: &Tensor, _: f64) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn rms_norm_backward(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<(Tensor, Tensor)> {
    bail!("{NO_CUDA}")
}

pub fn rms_norm_backward_packed(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn rope_op(_: &Tensor, _: &Tensor, _: &Tensor, _: bool) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn rope(_: &Tensor, _: &Tensor, _: &Tensor) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

pub fn rope_backward(_: &Tensor, _: &Tensor, _: &Tensor) -> Result<Tensor> {
    bail!("{NO_CUDA}")
}

#[allow(clippy::type_complexity)]
pub fn attention_forward_backward(_: &Tensor, _: &Tensor, _: &Tensor, _: &Arc<Visibility>, _: f64, _: &Tensor, _: Settings) -> Result<(Tensor, Tensor, Tensor, Tensor, Ran)> {
    bail!("{NO_CUDA}")
}
