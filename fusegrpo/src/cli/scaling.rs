//! Test-time scaling options of `fusegrpo eval` and `fusegrpo rollout`
//! (`--attempts N --select ... [--refine] [--judge ...]`), run by
//! [`recipe::attempts`].

use anyhow::{bail, Result};
use rollout::scaling::{ScalingConfig, Selector, SummarySource};
use std::path::PathBuf;
pub use recipe::attempts::JudgeSpec;

#[derive(clap::Args, Debug, Clone)]
pub struct ScalingArgs {
    /// Attempts per task: turns on test-time scaling; the selectors are
    /// applied to the first 1, 2, 4, ... of them up to N (one table row each).
    /// Scripted attempts are varied by the config's sampling seed.
    #[arg(long)]
    pub attempts: Option<usize>,
    /// Selectors, comma-separated: first, vote, tournament (default: all three).
    #[arg(long, value_delimiter = ',')]
    pub select: Option<Vec<Selector>>,
    /// One more attempt per task and selector, with the selected attempt's
    /// summary in its prompt; its answer is final (reported beside).
    #[arg(long)]
    pub refine: bool,
    /// Tournament judge: evidence | model (the policy being evaluated) | http://host:port.
    #[arg(long)]
    pub judge: Option<JudgeSpec>,
    /// Votes an entity needs (default: a majority of the attempts that answered).
    #[arg(long)]
    pub vote_min: Option<usize>,
    /// Model name sent to an HTTP judge.
    #[arg(long, default_value = "judge")]
    pub judge_model: String,
    /// Times a judge's malformed answer is asked again before the evidence fallback decides.
    #[arg(long, default_value_t = 2)]
    pub judge_retries: usize,
    /// New tokens of a judge's answer at most.
    #[arg(long, default_value_t = 16)]
    pub judge_max_tokens: usize,
    /// Who writes the summaries judges and refine read: episode (made from
    /// the episode) | judge (written by the model or HTTP judge from the transcript).
    #[arg(long, default_value = "episode")]
    pub summaries: SummarySource,
    /// New tokens of a judge-written summary at most.
    #[arg(long, default_value_t = 160)]
    pub summary_max_tokens: usize,
    /// Folder for attempts.jsonl, summaries.jsonl, selection.jsonl, refine.jsonl, scaling.json and scaling.png.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

impl ScalingArgs {
    /// The scaling settings, or None when `--attempts` is not given (an
    /// error if another scaling option is).
    pub fn config(&self, seed: u64) -> Result<Option<ScalingConfig>> {
        let Some(attempts) = self.attempts else {
            let stray = [
                ("--select", self.select.is_some()),
                ("--refine", self.refine),
                ("--judge", self.judge.is_some()),
                ("--vote-min", self.vote_min.is_some()),
                ("--out-dir", self.out_dir.is_some()),
            ];
            if let Some((name, _)) = stray.iter().find(|(_, given)| *given) {
                bail!("{name} selects among attempts: give --attempts N too");
            }
            return Ok(None);
        };
        let cfg = ScalingConfig {
            attempts,
            selectors: self.select.clone().unwrap_or_else(|| vec![Selector::First, Selector::Vote, Selector::Tournament]),
            refine: self.refine,
            vote_min: self.vote_min,
            seed,
            judge_retries: self.judge_retries,
            judge_max_tokens: self.judge_max_tokens,
            summaries: self.summaries,
            summary_max_tokens: self.summary_max_tokens,
        };
        cfg.validate().map_err(|(key, msg)| anyhow::anyhow!("--{key}: {msg}"))?;
        trainer::run_config::check_flag("--attempts", attempts, trainer::run_config::MAX_GROUP)?;
        if self.judge.is_some() && !cfg.selectors.contains(&Selector::Tournament) && cfg.summaries == SummarySource::Episode {
            bail!("--judge decides tournaments: add tournament to --select");
        }
        if cfg.summaries == SummarySource::Judge && matches!(self.judge, None | Some(JudgeSpec::Evidence)) {
            bail!("--summaries judge: the evidence judge writes none; give --judge model or --judge http://...");
        }
        Ok(Some(cfg))
    }
}
