//! `fusegrpo selftest --device cuda`: the CUDA kernels against their CPU
//! references ([`apps::selftest`]); `--bench` adds a fused-vs-unfused
//! timing of the log-prob path. Exits non-zero when a check fails. Needs a
//! binary built with `--features cuda` and an NVIDIA GPU.

use trainer::device::DeviceKind;

#[derive(clap::Args)]
pub struct Args {
    /// Device whose kernels are checked against the CPU references.
    #[arg(long, value_parser = apps::args::choice::<DeviceKind>(&DeviceKind::NAMES), default_value = "cuda")]
    pub device: DeviceKind,
    /// Also time fused vs unfused log-probs (forward+backward) at N=1024, d=2560, V=151936.
    #[arg(long)]
    pub bench: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[cfg(not(feature = "cuda"))]
pub fn run(args: Args) -> anyhow::Result<()> {
    let _ = (args.device, args.bench, args.seed);
    anyhow::bail!(
        "fusegrpo selftest --device cuda: this binary was built without CUDA kernels; \
         rebuild with `cargo build --release --features cuda` (docs/gpu.md, 'The CUDA build')"
    )
}

#[cfg(feature = "cuda")]
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.device == DeviceKind::Cuda, "selftest checks the CUDA kernels: use --device cuda");
    let dev = args.device.open()?;
    let mut report = apps::selftest::Report::default();
    apps::selftest::check_all(&dev, args.seed, &mut report)?;
    if args.bench {
        apps::selftest::bench_logprobs(&dev, args.seed)?;
    }
    println!("selftest: {} checks, {} failed", report.total, report.failed.len());
    anyhow::ensure!(report.failed.is_empty(), "selftest failed: {}", report.failed.join(", "));
    Ok(())
}
