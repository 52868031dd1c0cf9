//! Argument groups several commands share, and clap's parser of the
//! trainer's setting enums (the trainer knows no command line: its enums
//! are read by name, as configs spell them, with [`choice`]).

// The `///` docs of the arguments are the --help text, where `[model]` names
// a config section, not a link.
#![allow(rustdoc::broken_intra_doc_links)]

use candle_core::Device;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use trainer::device::{DTypeKind, DeviceKind, Placement};
use trainer::gpu_check::{Attention, CudaKernels};
use trainer::Result;

/// clap's parser of a trainer enum by its `names` (listed in `--help` and
/// in clap's error for any other value).
pub fn choice<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: std::str::FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).map(|name| name.parse::<T>().unwrap_or_else(|e| unreachable!("a listed name: {e}")))
}

/// `--device`, `--dtype` and `--cuda-kernels` of the commands that run a
/// model: where and in which precision it runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOn {
    /// Device to run on.
    #[arg(long, value_parser = choice::<DeviceKind>(&DeviceKind::NAMES), default_value = "cpu")]
    pub device: DeviceKind,
    /// Weights/activations dtype (checkpoint weights are converted to it).
    #[arg(long, value_parser = choice::<DTypeKind>(&DTypeKind::NAMES), default_value = "f32")]
    pub dtype: DTypeKind,
    /// The fused CUDA kernels with --device cuda: auto (on once
    /// scripts/gpu-check has passed for this build), on or off.
    #[arg(long, value_parser = choice::<CudaKernels>(&CudaKernels::NAMES), default_value = "auto")]
    pub cuda_kernels: CudaKernels,
    /// Attention on CUDA with the kernels on ([model] attention): auto
    /// (cuDNN where it takes the call, else the fused kernel), cudnn or
    /// kernel. FUSEGRPO_ATTENTION overrides it.
    #[arg(long, value_parser = choice::<Attention>(&Attention::NAMES), default_value = "auto")]
    pub attention: Attention,
}

impl RunOn {
    /// The device, dtype, kernels and attention these flags name.
    pub fn placement(&self) -> Placement {
        Placement {
            device: self.device,
            dtype: self.dtype,
            cuda_kernels: self.cuda_kernels,
            attention: trainer::gpu_check::attention_settings(self.attention, true, trainer::run_config::default_workspace_mib()),
        }
    }

    /// Opens the device, the CUDA kernels switched as `cuda_kernels` says.
    pub fn open(&self) -> Result<Device> {
        self.placement().open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed name parses to a variant whose own name it is, so a
    /// name list cannot drift from its enum unnoticed.
    #[test]
    fn every_listed_name_is_its_variant() {
        fn roundtrip<T: std::str::FromStr<Err = String> + serde::Serialize + std::fmt::Debug>(names: &[&str]) {
            for name in names {
                let v: T = name.parse().unwrap();
                assert_eq!(serde_json::to_value(&v).unwrap(), serde_json::json!(name));
            }
            assert!("nonsense".parse::<T>().unwrap_err().contains("expected one of"));
        }
        roundtrip::<DeviceKind>(&DeviceKind::NAMES);
        roundtrip::<DTypeKind>(&DTypeKind::NAMES);
        roundtrip::<CudaKernels>(&CudaKernels::NAMES);
        roundtrip::<Attention>(&Attention::NAMES);
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        on: RunOn,
    }

    #[test]
    fn the_flags_parse_and_refuse_by_name() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!((cli.on.device, cli.on.dtype, cli.on.cuda_kernels), (DeviceKind::Cpu, DTypeKind::F32, CudaKernels::Auto));
        let cli = Cli::try_parse_from(["x", "--device", "cuda", "--dtype", "bf16", "--cuda-kernels", "off"]).unwrap();
        assert_eq!((cli.on.device, cli.on.dtype, cli.on.cuda_kernels), (DeviceKind::Cuda, DTypeKind::Bf16, CudaKernels::Off));
        let err = Cli::try_parse_from(["x", "--dtype", "f64"]).err().unwrap().to_string();
        assert!(err.contains("[possible values: f32, bf16, f16]"), "{err}");
    }
}
