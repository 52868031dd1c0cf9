//! `fusegrpo kernels status | record`: whether the fused CUDA kernels run
//! for this build, and the record `scripts/gpu-check` leaves when it passed
//! (`trainer::gpu_check`).

use anyhow::Result;
use std::path::PathBuf;
use trainer::gpu_check::{self, Attention, CudaKernels};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Print whether the CUDA kernels would run, and why, for a setting.
    Status {
        /// The setting to resolve ([model] cuda_kernels).
        #[arg(long, value_parser = apps::args::choice::<CudaKernels>(&CudaKernels::NAMES), default_value = "auto")]
        cuda_kernels: CudaKernels,
        /// Which attention runs on CUDA ([model] attention; FUSEGRPO_ATTENTION overrides it).
        #[arg(long, value_parser = apps::args::choice::<Attention>(&Attention::NAMES), default_value = "auto")]
        attention: Attention,
        /// cuDNN's deterministic backward ([model] attention_deterministic).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        attention_deterministic: bool,
    },
    /// Record that scripts/gpu-check passed for this binary (gpu-check runs it).
    Record {
        /// The GPU and driver it passed on (nvidia-smi's line).
        #[arg(long)]
        gpu: String,
        /// gpu-check's report.
        #[arg(long)]
        report: PathBuf,
        /// When it passed (UTC, RFC 3339).
        #[arg(long)]
        at: String,
    },
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Status { cuda_kernels, attention, attention_deterministic } => {
            outln!("build {} (fusegrpo {})", gpu_check::build_id()?, env!("CARGO_PKG_VERSION"));
            match gpu_check::passed() {
                Some(r) => outln!("gpu-check: passed on {} ({}), report {}", r.passed_at, r.gpu, r.report),
                None => outln!("gpu-check: no record for this build in {}", gpu_check::record_dir().display()),
            }
            let choice = cuda_kernels.resolve();
            outln!("{choice}");
            outln!("{}", gpu_check::attention_line(choice.on, true, gpu_check::attention_settings(attention, attention_deterministic, trainer::run_config::default_workspace_mib())));
        }
        Command::Record { gpu, report, at } => {
            anyhow::ensure!(report.is_file(), "--report {}: no such file", report.display());
            let path = gpu_check::record(&gpu, &report, &at)?;
            outln!("recorded: {} (kernels on for this build under cuda_kernels = \"auto\")", path.display());
        }
    }
    Ok(())
}
