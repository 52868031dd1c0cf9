//! `fusegrpo bench ...`: the benchmarks of [`apps::bench`].

use anyhow::Result;
use apps::bench;

/// The benchmarks of `fusegrpo bench`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// One training micro-batch: forward+backward of the mean NLL of a random model (scripts/bench_step_torch.py).
    Step(bench::step::Args),
    /// Greedy (or sampled) decoding of a random model: tokens/s, log-probs kept (scripts/bench_generate.py).
    Decode(bench::decode::Args),
    /// Attention forward(+backward) at given head shapes, fused or unfused (scripts/bench_attention_torch.py).
    Attention(bench::attention::Args),
    /// Token log-probs of `hidden @ lm_head^T` (forward + backward), fused or unfused (scripts/bench_logprob_torch.py).
    Logprob(bench::logprob::Args),
    /// RMSNorm and rotary embedding (forward + backward): fused kernels vs the model's compositions.
    Ops(bench::ops::Args),
    /// Load time, memory and forward time of a full-size random model (Qwen3-4B).
    Model(bench::model::Args),
    /// Peak RSS of one GRPO forward+backward with activation recomputation off vs per layer.
    Memory(bench::memory::Args),
    /// Our grep on a warm snapshot against ripgrep on a checkout.
    Grep(bench::grep::Args),
    /// The search index of a snapshot: build time (spans parsed anew), query time, heap and RSS.
    Search(bench::search::Args),
    /// Host memory of saving and resuming a checkpoint (model + AdamW state) of a random model.
    Checkpoint(bench::checkpoint::Args),
}

pub fn run(cmd: Command) -> Result<()> {
    let out = &mut crate::console::Stdout;
    match cmd {
        Command::Step(args) => bench::step::run(args, out),
        Command::Decode(args) => bench::decode::run(args, out),
        Command::Attention(args) => bench::attention::run(args, out),
        Command::Logprob(args) => bench::logprob::run(args, out),
        Command::Ops(args) => bench::ops::run(args, out),
        Command::Model(args) => bench::model::run(args, out),
        Command::Memory(args) => bench::memory::run(args, out),
        Command::Grep(args) => bench::grep::run(args, out),
        Command::Search(args) => bench::search::run(args, out),
        Command::Checkpoint(args) => bench::checkpoint::run(args, out),
    }
}

