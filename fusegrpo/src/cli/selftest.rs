//! `fusegrpo selftest --device cuda`: the CUDA kernels against their CPU
//! references ([`apps::selftest`]); `--bench` adds a fused-vs-unfused
//! timing of the log-prob path. Exits non-zero when a check fails. Needs a
//! binary built with `--features cuda` and an NVIDIA GPU.

use apps::selftest::Group;
use trainer::device::DeviceKind;

#[derive(clap::Args)]
pub struct Args {
    /// Device whose kernels are checked against the CPU references. `cpu`
    /// runs the same sequence where no CUDA path can run: every case fails
    /// with its reason (scripts/gpu-first --dry-run).
    #[arg(long, value_parser = apps::args::choice::<DeviceKind>(&DeviceKind::NAMES), default_value = "cuda")]
    pub device: DeviceKind,
    /// Only these groups (repeat the flag), in the self-test's order: the
    /// cuBLAS log-prob head first, cuDNN last.
    #[arg(long, value_parser = apps::args::choice::<Group>(&Group::NAMES))]
    pub only: Vec<Group>,
    /// Also time fused vs unfused log-probs (forward+backward) at N=1024, d=2560, V=151936.
    #[arg(long)]
    pub bench: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.device == DeviceKind::Cuda && !cfg!(feature = "cuda") {
        anyhow::bail!(
            "fusegrpo selftest --device cuda: this binary was built without CUDA kernels; \
             rebuild with `cargo build --release --features cuda` (docs/gpu.md, 'The CUDA build')"
        );
    }
    if args.device == DeviceKind::Cpu {
        outln!("selftest on the CPU: the CUDA paths cannot run here, so every case fails with its reason (a dry run of the sequence)");
    }
    let dev = args.device.open()?;
    let mut report = apps::selftest::Report::new(Box::new(crate::console::Stdout));
    apps::selftest::check_all(&dev, args.seed, &args.only, &mut report);
    if args.bench && args.device == DeviceKind::Cuda {
        apps::selftest::bench_logprobs(&dev, args.seed, &mut crate::console::Stdout)?;
    }
    outln!("selftest: {} checks, {} failed", report.total, report.failed.len());
    anyhow::ensure!(report.failed.is_empty(), "selftest failed: {}", report.failed.join(", "));
    Ok(())
}
