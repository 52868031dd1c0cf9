//! `fusegrpo`: the command-line entry point. Each subcommand lives in its own
//! module under `cli/`, with its arguments and a `run` function.

// The `///` docs of clap's arguments are the --help text, where `[model]`
// names a config section and `<run>` a placeholder, not links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

// First: its `out!`, `outln!` and `say!` are the only way to the terminal.
#[macro_use]
mod console;
mod cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// A GRPO trainer for tool-using code-localization agents (Qwen3, Llama and Qwen2 on Candle).
#[derive(Parser)]
#[command(
    name = "fusegrpo",
    version,
    about = "A GRPO trainer for tool-using code-localization agents (Qwen3, Llama and Qwen2 on Candle)",
    long_about = "A GRPO trainer for tool-using code-localization agents (Qwen3, Llama and Qwen2 on Candle).\n\n\
Quick start on the CPU (what scripts/smoke.sh does):\n  \
fusegrpo practice-repo --out checkpoints/smoke/repos\n  \
fusegrpo tasks from-history --repo practice/shop --repos-dir checkpoints/smoke/repos --out checkpoints/smoke/tasks.jsonl\n  \
fusegrpo init-tiny --out checkpoints/smoke/model --small-vocab 8192 --corpus-repo practice/shop --repos-dir checkpoints/smoke/repos\n  \
fusegrpo pipeline --config configs/smoke-cpu.toml --out checkpoints/smoke/pipeline\n  \
fusegrpo plot checkpoints/smoke/pipeline/grpo\n\n\
The stages alone: synth (teacher trajectories), sft, train (GRPO), eval.\n\n\
Every command has --help."
)]
struct Cli {
    /// Log filter (error, warn, info, debug, trace or a tracing directive).
    #[arg(long, global = true, default_value = "info", env = "FUSEGRPO_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a random tiny model (Qwen3, Qwen2 or Llama) in Hugging Face format, with a tokenizer.
    InitTiny(cli::init_tiny::Args),
    /// Convert a GGUF file (llama.cpp) into a Hugging Face model folder: weights dequantized, tokenizer rebuilt.
    ImportGguf(cli::import_gguf::Args),
    /// Merge a LoRA adapter into its base: a whole Hugging Face model folder.
    MergeAdapter(cli::merge_adapter::Args),
    /// Copy a LoRA adapter (or a LoRA run's checkpoint) into a clean PEFT folder, its weights in bf16 (or another dtype).
    ExportAdapter(cli::export_adapter::Args),
    /// Log-probability of every token of each input sequence given its prefix.
    Score(cli::score::Args),
    /// Continue each input sequence (batched, KV cache, greedy or sampled).
    Generate(cli::generate::Args),
    /// Benchmarks, one JSON line each: step, decode, attention, logprob, ops, model, memory, grep, search.
    #[command(subcommand)]
    Bench(cli::bench::Command),
    /// Run episodes for a task set with a policy; write them as JSONL.
    Rollout(cli::rollout::Args),
    /// Run episodes and print the FuseSearch table (F1, e, turns, calls, tokens, time);
    /// with --attempts N, select among N attempts per task (first, vote, tournament, refine).
    Eval(cli::rollout::Args),
    /// Localize an issue in a repository (its working tree as it is, or --rev): the files and functions, ranked, with the evidence and the cost.
    Localize(cli::localize::Args),
    /// A Model Context Protocol server over stdio: the `localize` tool (and grep, glob, read_file) for coding agents.
    Mcp(cli::mcp::Args),
    /// OpenAI-compatible chat-completions server (tool calls in OpenAI's format).
    Serve(cli::serve::Args),
    /// Teacher trajectories for SFT: K scored episodes per task (scripted or HTTP teacher).
    Synth(cli::synth::Args),
    /// Supervised fine-tuning on filtered teacher trajectories.
    Sft(cli::sft::Args),
    /// GRPO training with checkpoints and exact resume.
    Train(cli::train::Args),
    /// The whole recipe: synth -> filter -> sft -> grpo -> eval, with report.json.
    Pipeline(cli::pipeline::Args),
    /// Several pipeline runs (seeds) side by side in Markdown: stage tables, paired differences per run
    /// and pooled over the runs, and the held-out tasks a gain would need.
    Seeds(cli::seeds::Args),
    /// Episode files of several models on the same tasks side by side: means, and each later file
    /// minus the first paired by task (R, file F1, function F1, answered) with 95% bootstrap intervals.
    Compare(cli::compare::Args),
    /// The memory plan of a run config: bytes per phase and part, and whether it fits.
    Plan(cli::plan::Args),
    /// Draw a run's reward, F1, e, loss and KL curves (metrics.jsonl) to a PNG.
    Plot(cli::plot::Args),
    /// Draw F1 and tokens against the number of attempts (scaling.json of `eval --attempts --out-dir`).
    PlotScaling(cli::plot_scaling::Args),
    /// Chat-template utilities.
    #[command(subcommand)]
    Chat(cli::chat::Command),
    /// Run one tool call (grep, glob, read_file) on a repository at a commit.
    Tool(cli::env::ToolArgs),
    /// Score an episode against its task: F1_file, F1_func, e and R.
    Reward(cli::env::RewardArgs),
    /// Task data: gold from patches, tasks from a repository's history.
    #[command(subcommand)]
    Tasks(cli::env::TasksCommand),
    /// Repositories a task file needs: clone them into a repos dir, check every base commit.
    #[command(subcommand)]
    Repos(cli::repos::Command),
    /// Write the generated practice repository (Python code with an issue-like history).
    PracticeRepo(cli::practice::Args),
    /// Check the CUDA kernels against their CPU references (needs --features cuda and a GPU).
    Selftest(cli::selftest::Args),
    /// Whether the fused CUDA kernels run for this build ([model] cuda_kernels), and gpu-check's record.
    #[command(subcommand)]
    Kernels(cli::kernels::Command),
    /// A rollout engine in a child process: `engine vllm` starts vLLM for [rollout] engine = "vllm".
    #[command(subcommand)]
    Engine(cli::engine::Command),
    /// Data parallelism's check (run it under mpirun): each loss aggregation's and SFT's
    /// gradient and update with the ranks against one process's, on the same episodes.
    DistCheck(cli::dist_check::Args),
}

/// Exit status of an ordinary failure (a bad argument, config, task file,
/// checkpoint, ...): the message says what and where.
const EXIT_FAILURE: u8 = 1;

fn main() -> ExitCode {
    quiet_error_backtraces();
    let malloc = trainer::malloc::tune();
    let threads = trainer::threads::pin();
    let cli = Cli::parse();
    trainer::progress::install(Box::new(console::Stderr));
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cli.log))
        .with_writer(|| console::Stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    tracing::debug!(?malloc, ?threads, "allocator and thread settings");
    // FUSEGRPO_ATTENTION, read here once: it overrides [model] attention and
    // --attention wherever they are read (trainer::gpu_check::set_attention_env).
    match kernels::attention::Backend::parse_env(std::env::var(kernels::attention::cudnn_map::BACKEND_ENV).ok().as_deref()) {
        Ok(value) => trainer::gpu_check::set_attention_env(value),
        Err(e) => return report(&anyhow::anyhow!(e)),
    }
    let launch = match trainer::dist::launch::init() {
        Ok(launch) => launch,
        Err(e) => return report(&e.into()),
    };
    let result = run(cli.command);
    // An interrupt stops every rank at the same step (they agree on it); an
    // error on one rank ends them all.
    if let Err(e) = &result {
        if interrupted(e).is_none() {
            launch.fail(e);
        }
    }
    drop(launch);
    match result {
        // A closed or full stdout, handled here once (console): a reader
        // that left is no error; lost output is.
        Ok(()) => match console::stdout_failed() {
            None => ExitCode::SUCCESS,
            Some(e) => {
                say!("Error: writing the output to stdout: {e}");
                ExitCode::from(EXIT_FAILURE)
            }
        },
        Err(e) => report(&e),
    }
}

/// Prints `e` (with its causes) and picks the exit status: 130 for a run
/// stopped by SIGINT/SIGTERM with its checkpoint saved, 1 otherwise.
fn report(e: &anyhow::Error) -> ExitCode {
    if let Some(stop) = interrupted(e) {
        say!("{stop}");
        return ExitCode::from(trainer::interrupt::EXIT_INTERRUPTED);
    }
    say!("Error: {e:?}");
    ExitCode::from(EXIT_FAILURE)
}

/// The interruption `e` is (from the trainer library, or from the
/// pipeline's stages), if it is one.
fn interrupted(e: &anyhow::Error) -> Option<&trainer::interrupt::Interrupted> {
    e.downcast_ref::<trainer::interrupt::Interrupted>().or_else(|| e.downcast_ref::<trainer::Error>().and_then(trainer::Error::interrupted))
}

/// Errors are a message and their causes; stack backtraces are for panics.
/// anyhow captures one for every error when RUST_BACKTRACE is set (as many
/// environments set it) unless RUST_LIB_BACKTRACE says otherwise, which a
/// user can still set to 1 to see them.
fn quiet_error_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Before any thread starts: nothing else reads the environment yet.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// Runs one subcommand.
fn run(command: Command) -> anyhow::Result<()> {
    only_data_parallel_commands_under_a_launcher(&command)?;
    match command {
        Command::InitTiny(args) => cli::init_tiny::run(args),
        Command::ImportGguf(args) => cli::import_gguf::run(args),
        Command::MergeAdapter(args) => cli::merge_adapter::run(args),
        Command::ExportAdapter(args) => cli::export_adapter::run(args),
        Command::Score(args) => cli::score::run(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::Chat(cmd) => cli::chat::run(cmd),
        Command::Train(args) => cli::train::run(args),
        Command::Synth(args) => cli::synth::run(args),
        Command::Sft(args) => cli::sft::run(args),
        Command::Pipeline(args) => cli::pipeline::run(args),
        Command::Seeds(args) => cli::seeds::run(args),
        Command::Compare(args) => cli::compare::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Plot(args) => cli::plot::run(args),
        Command::PlotScaling(args) => cli::plot_scaling::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Rollout(args) => cli::rollout::run_rollout(args),
        Command::Eval(args) => cli::rollout::run_eval(args),
        Command::Localize(args) => cli::localize::run(args),
        Command::Mcp(args) => cli::mcp::run(args),
        Command::Tool(args) => cli::env::run_tool(args),
        Command::Reward(args) => cli::env::run_reward(args),
        Command::Tasks(cmd) => cli::env::run_tasks(cmd),
        Command::Repos(cmd) => cli::repos::run(cmd),
        Command::PracticeRepo(args) => cli::practice::run(args),
        Command::Selftest(args) => cli::selftest::run(args),
        Command::Bench(cmd) => cli::bench::run(cmd),
        Command::DistCheck(args) => cli::dist_check::run(args),
        Command::Kernels(cmd) => cli::kernels::run(cmd),
        Command::Engine(cmd) => cli::engine::run(cmd),
    }
}

/// Under `mpirun`/`srun` with several ranks, only the data-parallel
/// commands run: any other would run N times over the same files.
fn only_data_parallel_commands_under_a_launcher(command: &Command) -> anyhow::Result<()> {
    let dist = trainer::dist::current();
    let parallel = matches!(command, Command::Train(_) | Command::Sft(_) | Command::Pipeline(_) | Command::DistCheck(_));
    anyhow::ensure!(
        dist.world() == 1 || parallel,
        "started as one of {} ranks: only `train`, `sft`, `pipeline` and `dist-check` run data-parallel; run this command as one process",
        dist.world()
    );
    Ok(())
}
