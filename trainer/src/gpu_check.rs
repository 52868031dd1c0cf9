//! Whether the CUDA kernels run: `[model] cuda_kernels = "auto" | "on" |
//! "off"`, and the record `scripts/gpu-check` leaves when it passes, which
//! `auto` reads.
//!
//! The record is `<cache>/gpu-check/<build>.json`, where `<build>` is a
//! hash of the running executable's bytes (the same binary copied to
//! another machine is the same build; a rebuild is a new one) and
//! `<cache>` is `$FUSEGRPO_CACHE`, else `$XDG_CACHE_HOME/fusegrpo`, else
//! `~/.cache/fusegrpo`. `fusegrpo kernels record` writes it (gpu-check calls
//! it when every check passed); `fusegrpo kernels status` prints the
//! choice and why.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[model] cuda_kernels`: the fused CUDA kernels (attention, token
/// log-probs, RMSNorm, rotary, sampling) or their plain-tensor references.
/// Without the attention kernel, attention on CUDA materializes every
/// score: memory quadratic in the sequence length (the planner counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaKernels {
    /// `FUSEGRPO_CUDA_KERNELS=1` (on) or `=0` (off) when the environment
    /// has it, else on when `scripts/gpu-check` has passed for this build,
    /// else off.
    #[default]
    Auto,
    On,
    Off,
}

impl CudaKernels {
    /// Every name, as configs and `--cuda-kernels` spell them.
    pub const NAMES: [&'static str; 3] = ["auto", "on", "off"];

    pub fn is_auto(&self) -> bool {
        *self == CudaKernels::Auto
    }

    /// The choice for this process and build, with the reason.
    pub fn resolve(self) -> Choice {
        if !cfg!(feature = "cuda") {
            return Choice { on: false, why: "this build has no CUDA (cargo build --features cuda)".into() };
        }
        match self {
            CudaKernels::On => Choice { on: true, why: "cuda_kernels = \"on\"".into() },
            CudaKernels::Off => Choice { on: false, why: "cuda_kernels = \"off\"".into() },
            CudaKernels::Auto if kernels::cuda_kernels_in_env().is_some() => {
                let on = kernels::cuda_kernels_in_env() == Some(true);
                Choice { on, why: format!("cuda_kernels = \"auto\" and FUSEGRPO_CUDA_KERNELS={} in the environment", if on { 1 } else { 0 }) }
            }
            CudaKernels::Auto => match passed() {
                Some(r) => Choice { on: true, why: format!("cuda_kernels = \"auto\": scripts/gpu-check passed for this build on {} ({})", r.passed_at, r.gpu) },
                None => Choice {
                    on: false,
                    why: "cuda_kernels = \"auto\": scripts/gpu-check has not passed for this build (run it on the GPU, or set [model] cuda_kernels = \"on\" / --cuda-kernels on)".into(),
                },
            },
        }
    }

    /// Whether a run with this setting will use the kernels on a GPU, for
    /// the memory planner: `on` and `off` as they say; `auto` as the
    /// environment or this build's gpu-check record says (the planner may
    /// run in another build than the GPU's, so its features do not count).
    pub fn planned(self) -> bool {
        match self {
            CudaKernels::On => true,
            CudaKernels::Off => false,
            CudaKernels::Auto => kernels::cuda_kernels_in_env().unwrap_or_else(|| passed().is_some()),
        }
    }

    /// Resolves the choice and switches the kernels accordingly for the
    /// process; returns it.
    pub fn apply(self) -> Choice {
        let c = self.resolve();
        kernels::set_cuda_kernels(c.on);
        c
    }
}

/// Whether the kernels are on, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub on: bool,
    pub why: String,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA kernels {}: {}", if self.on { "on" } else { "off" }, self.why)
    }
}

/// `[model] attention`: which attention runs on CUDA with the kernels on
/// (cuDNN's fused attention, the fused kernel, or cuDNN where it takes the
/// call). Carried with the model to every call (`kernels::attention::
/// Settings`) and in the run's config hash; `FUSEGRPO_ATTENTION`, read once
/// by the binary's `main`, overrides it ([`set_attention_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// cuDNN where it takes the call (bf16/f16, Hopper or newer, libcudnn
    /// found, its backward's workspace within budget), else the fused
    /// kernel, said once in the log.
    #[default]
    Auto,
    /// cuDNN's fused attention, an error where it declines (benchmarks).
    Cudnn,
    /// The fused kernel, never cuDNN.
    Kernel,
}

impl Attention {
    /// Every name, as configs and `--attention` spell them.
    pub const NAMES: [&'static str; 3] = kernels::attention::Backend::NAMES;

    pub fn is_auto(&self) -> bool {
        *self == Attention::Auto
    }

    pub fn backend(self) -> kernels::attention::Backend {
        use kernels::attention::Backend;
        match self {
            Attention::Auto => Backend::Auto,
            Attention::Cudnn => Backend::Cudnn,
            Attention::Kernel => Backend::Kernel,
        }
    }

    fn of(b: kernels::attention::Backend) -> Attention {
        use kernels::attention::Backend;
        match b {
            Backend::Auto => Attention::Auto,
            Backend::Cudnn => Attention::Cudnn,
            Backend::Kernel => Attention::Kernel,
        }
    }

    /// This setting, or `FUSEGRPO_ATTENTION` where `main` found it set.
    pub fn with_env(self) -> Attention {
        ATTENTION_ENV.get().copied().flatten().map_or(self, Attention::of)
    }
}

impl std::str::FromStr for Attention {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        s.parse::<kernels::attention::Backend>().map(Attention::of)
    }
}

/// `FUSEGRPO_ATTENTION` as `main` read it, once.
static ATTENTION_ENV: std::sync::OnceLock<Option<kernels::attention::Backend>> = std::sync::OnceLock::new();

/// Called once by the binary's `main` with the value of
/// `FUSEGRPO_ATTENTION` (`kernels::attention::Backend::parse_env`): it
/// overrides `[model] attention` and `--attention` where configs and flags
/// are read (so the config hash records what runs). Libraries never read
/// the variable.
pub fn set_attention_env(value: Option<kernels::attention::Backend>) {
    let _ = ATTENTION_ENV.set(value);
}

/// The attention settings a model carries, from `[model] attention` and
/// `attention_deterministic` and `attention_workspace_mib` (the
/// environment's override applied).
pub fn attention_settings(attention: Attention, deterministic: bool, workspace_mib: u64) -> kernels::attention::Settings {
    kernels::attention::Settings { backend: attention.with_env().backend(), deterministic, workspace_budget: workspace_mib.saturating_mul(1 << 20) }
}

/// Which attention runs on CUDA with the kernels `on` (or off) and these
/// settings, in words: the quadratic reference when they are off; else, in
/// a build with `--features cudnn`, as the backend says; in a build without
/// it, the fused kernel. `plan` and `kernels status` print this one line.
/// `probe` opens libcudnn to say where it is (`kernels status`); the
/// planner does not.
pub fn attention_line(on: bool, probe: bool, settings: kernels::attention::Settings) -> String {
    use kernels::attention::Backend;
    if !on {
        return "attention on CUDA: the quadratic reference (the CUDA kernels are off)".into();
    }
    let det = if settings.deterministic { "" } else { ", non-deterministic backward" };
    match settings.backend {
        Backend::Kernel => "attention on CUDA: the fused kernel ([model] attention = \"kernel\")".into(),
        _ if !cfg!(feature = "cudnn") => "attention on CUDA: the fused kernel (this build has no cuDNN attention: cargo build --features cuda,cudnn)".into(),
        Backend::Cudnn => format!("attention on CUDA: cuDNN's fused attention, an error where it declines ([model] attention = \"cudnn\"{det}){}", cudnn_found(probe)),
        Backend::Auto => format!(
            "attention on CUDA: cuDNN's fused attention where it takes the call (bf16/f16, Hopper or newer, backward workspace <= {} MiB, [model] attention_workspace_mib), else the fused kernel, said once in the log ([model] attention = \"auto\"{det}){}",
            settings.workspace_budget >> 20,
            cudnn_found(probe)
        ),
    }
}

/// "; libcudnn <version> at <path>" or why none loads, when `probe`.
#[cfg(feature = "cudnn")]
fn cudnn_found(probe: bool) -> String {
    if !probe {
        return String::new();
    }
    match kernels::attention::cudnn_library() {
        Ok(lib) => format!("; libcudnn {} at {}", lib.version, lib.path.display()),
        Err(e) => format!("; {e}"),
    }
}

/// Nothing: a build without cuDNN attention.
#[cfg(not(feature = "cudnn"))]
fn cudnn_found(_probe: bool) -> String {
    String::new()
}

/// What `scripts/gpu-check` leaves when it passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub build: String,
    pub version: String,
    /// UTC, RFC 3339.
    pub passed_at: String,
    /// The GPU and driver, as nvidia-smi names them.
    pub gpu: String,
    /// gpu-check's report.
    pub report: String,
}

/// FNV-1a 64 of the running executable's bytes, as hex.
pub fn build_id() -> Result<String> {
    let exe = std::env::current_exe().map_err(|e| Error::invalid("the running executable", e.to_string()))?;
    let bytes = std::fs::read(&exe).map_err(|e| Error::io(&exe, e))?;
    let mut h = lm::fnv::Fnv1a::default();
    h.eat(&bytes);
    Ok(h.hex())
}

/// `<cache>/gpu-check`.
pub fn record_dir() -> PathBuf {
    let cache = std::env::var_os("FUSEGRPO_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("fusegrpo")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/fusegrpo")))
        .unwrap_or_else(|| PathBuf::from(".fusegrpo-cache"));
    cache.join("gpu-check")
}

/// This build's record, when gpu-check passed for it (a record that does
/// not parse, or names another build, counts as none).
pub fn passed() -> Option<Record> {
    let build = build_id().ok()?;
    let text = std::fs::read_to_string(record_dir().join(format!("{build}.json"))).ok()?;
    serde_json::from_str::<Record>(&text).ok().filter(|r| r.build == build)
}

/// Writes this build's record (atomically) and returns its path.
pub fn record(gpu: &str, report: &Path, passed_at: &str) -> Result<PathBuf> {
    let build = build_id()?;
    let dir = record_dir();
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let rec = Record { build: build.clone(), version: env!("CARGO_PKG_VERSION").into(), passed_at: passed_at.into(), gpu: gpu.into(), report: report.display().to_string() };
    let path = dir.join(format!("{build}.json"));
    let tmp = dir.join(format!(".{build}.json.tmp"));
    std::fs::write(&tmp, serde_json::to_string_pretty(&rec).expect("a record serializes") + "\n").map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}
