//! Rollouts on a vLLM server (`[rollout] engine = "vllm"`): the engine of
//! `[rollout.vllm]`, checked to serve this config's model (the log-probs of
//! a probe against ours), and GRPO's engine kept in step with the weights.

use crate::run_config::RunConfig;
use crate::error::{Context, Result};
use rollout::chat::ChatTokenizer;
use rollout::engine::vllm::{VllmConfig, VllmEngine};
use std::path::{Path, PathBuf};

/// The vLLM engine of `[rollout.vllm]`, checked: it serves the configured
/// model, and returns the sampled distribution's log-probs.
pub fn engine(cfg: &RunConfig, tok: &ChatTokenizer) -> Result<VllmEngine> {
    // `load_model` may reload the weights in place (which pauses the server).
    let resume = cfg.rollout.vllm.as_ref().is_some_and(|v| v.load_model) && cfg.model.adapter.is_none();
    let (mut engine, probe) = connect(cfg, tok, resume)?;
    let info = engine.check()?;
    let (mean, max) = same_model(cfg, &mut engine, &probe)?;
    crate::progress::say(&format!(
        "rollouts on vLLM at {} ({}, context {}); its log-probs of a {}-token probe against this config's model: mean |diff| {mean:.2e}, max {max:.2e}",
        engine.base(),
        engine.model(),
        info.max_model_len.map_or("unknown".to_string(), |n| n.to_string()),
        probe.len()
    ));
    Ok(engine)
}

/// GRPO's rollouts on the vLLM engine of `[rollout.vllm]`, kept in step
/// with the weights being trained (`crate::grpo::engine`): each sync's
/// folder goes under `run_dir/engine-weights` (the server must read it).
pub fn training_engine(cfg: &RunConfig, tok: &ChatTokenizer, run_dir: &Path) -> Result<crate::grpo::engine_sync::EngineSync> {
    // Whole-model syncs pause the server: one killed mid-sync left it paused.
    let (engine, probe) = connect(cfg, tok, cfg.lora.is_none())?;
    let v = cfg.rollout.vllm.as_ref().expect("vllm_connect checked the section");
    let dir = std::path::absolute(run_dir.join("engine-weights")).with_context(|| format!("{}", run_dir.display()))?;
    crate::progress::say(&format!("rollouts on vLLM at {} ({}): the weights are synced to it before each step (folders in {})", engine.base(), v.served_model, dir.display()));
    Ok(crate::grpo::engine_sync::EngineSync::new(engine, dir, probe, v.probe_tolerance, cfg.sampling.seed))
}

/// The vLLM engine of `[rollout.vllm]`, its model listed and its log-probs
/// the sampled distribution's, and the probe's tokens. With `resume`, a
/// `/resume` first: a process killed between a reload's `/pause` and
/// `/resume` leaves the server paused, and every request would wait for
/// the whole `timeout_s` (the server needs VLLM_SERVER_DEV_MODE=1, as the
/// reload does).
fn connect(cfg: &RunConfig, tok: &ChatTokenizer, resume: bool) -> Result<(VllmEngine, Vec<u32>)> {
    let v = cfg.rollout.vllm.as_ref().context("[rollout] engine = \"vllm\" needs a [rollout.vllm] section")?;
    let engine = VllmEngine::new(VllmConfig {
        url: v.url.clone(),
        served_model: v.served_model.clone(),
        temperature: cfg.sampling.temperature,
        top_p: cfg.sampling.top_p,
        seed: cfg.sampling.seed,
        stop_token_ids: tok.stop_ids().to_vec(),
        max_concurrency: v.max_concurrency,
        timeout: std::time::Duration::from_secs_f64(v.timeout_s),
        retry: rollout::http::Retry {
            max_retries: v.max_retries,
            initial_backoff: std::time::Duration::from_millis(500),
            max_backoff: std::time::Duration::from_secs(30),
        },
    })?;
    if resume {
        engine.resume().with_context(|| format!("vllm engine at {}: POST /resume (a process killed during a weight reload leaves the server paused)", engine.base()))?;
    }
    engine.check()?;
    let probe = tok.encode(VLLM_PROBE).context("tokenizing the engine's probe")?;
    engine.check_processed_logprobs(&probe)?;
    Ok((engine, probe))
}

/// The text whose log-probs the engine and this config's model must agree
/// on (a code-and-issue sentence, some 40 tokens).
const VLLM_PROBE: &str = "Issue: calling parse_config() with an empty file raises KeyError instead of returning the defaults.\n\ndef parse_config(path):\n    with open(path) as f:";

/// The engine serves this config's model (`[model] path` and `adapter`):
/// the mean |difference| of the probe's log-probs, ours against the
/// engine's, at most `[rollout.vllm] probe_tolerance`. With `load_model`,
/// a server that serves something else first gets this config's model (the
/// adapter loaded under a name of its own, or the weights reloaded in
/// place). Returns the mean and the max.
fn same_model(cfg: &RunConfig, engine: &mut VllmEngine, probe: &[u32]) -> Result<(f64, f64)> {
    let (model, _) = crate::model_policy::load::load_model(&cfg.model.path, cfg.model.adapter.as_deref(), &cfg.model.placement())?;
    let ours: Vec<f32> = lm::logprobs::score_sequence(&model, probe)?.into_iter().skip(1).map(|l| l.unwrap_or(f32::NAN)).collect();
    drop(model);
    let v = cfg.rollout.vllm.as_ref().context("[rollout.vllm]")?;
    let (mut mean, mut max) = crate::grpo::engine_sync::mean_max_abs_diff(&ours, &engine.prompt_logprobs(probe)?);
    if mean > v.probe_tolerance && v.load_model {
        load_config_model(cfg, engine)?;
        (mean, max) = crate::grpo::engine_sync::mean_max_abs_diff(&ours, &engine.prompt_logprobs(probe)?);
    }
    crate::error::ensure!(
        mean <= v.probe_tolerance,
        "vllm engine at {}: serves another model than this config's ({}{}): the log-probs of a {}-token probe differ by {mean:.4} on average (max {max:.4}; [rollout.vllm] probe_tolerance = {}). Serve that model (and the adapter, as served_model), point [model] at what the server has, or set [rollout.vllm] load_model = true to load it onto the server",
        engine.base(),
        cfg.model.path,
        cfg.model.adapter.as_ref().map_or(String::new(), |a| format!(" with adapter {}", a.display())),
        probe.len(),
        v.probe_tolerance
    );
    Ok((mean, max))
}

/// `[rollout.vllm] load_model`: this config's adapter onto the server under
/// a name of its own (a hash of its folder), or, without an adapter, its
/// model's weights reloaded in place (a tied head from an untied view).
fn load_config_model(cfg: &RunConfig, engine: &mut VllmEngine) -> Result<()> {
    use std::hash::{Hash, Hasher};
    match &cfg.model.adapter {
        Some(adapter) => {
            let dir = std::path::absolute(adapter).with_context(|| format!("{}", adapter.display()))?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            dir.hash(&mut h);
            let name = format!("fusegrpo-{:016x}", h.finish());
            crate::progress::say(&format!("vllm engine at {}: loading the adapter {} as {name}", engine.base(), dir.display()));
            match engine.load_adapter(&name, &dir) {
                // An earlier stage loaded this folder (the name is its
                // path's hash); the probe below checks it is the same.
                Err(e) if e.to_string().contains("already been loaded") => engine.use_adapter(&name),
                r => r?,
            }
        }
        None => {
            let dir = std::path::absolute(lm::hub::resolve_model_dir(&cfg.model.path)?)?;
            let root = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from).join(".cache/fusegrpo/vllm-untied");
            let folder = lm::weights::untied_view(&dir, &root)?.unwrap_or(dir.clone());
            crate::progress::say(&format!("vllm engine at {}: reloading its weights from {}", engine.base(), folder.display()));
            engine.use_base();
            engine.reload_weights(&folder)?;
        }
    }
    Ok(())
}

