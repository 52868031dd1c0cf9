//! `fusegrpo bench ...`: micro-benchmarks of single kernels.

use anyhow::Result;

/// The benchmarks of `fusegrpo bench`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Token log-probs of `hidden @ lm_head^T` (forward + backward), fused or unfused.
    Logprob(super::bench_logprob::Args),
    /// RMSNorm and rotary embedding (forward + backward): fused kernels vs the model's compositions.
    Ops(super::bench_ops::Args),
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Logprob(args) => super::bench_logprob::run(args),
        Command::Ops(args) => super::bench_ops::run(args),
    }
}
