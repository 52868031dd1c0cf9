//! `fusegrpo localize`: the trained localizer on any repository and issue
//! ([`apps::localize`]), its report printed.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use apps::localize::{check_request, localize_episodes, Request, Search};
use trainer::run_config::{Override, RunConfig};

use trainer::episodes::{with_policy, TeacherOpts};

/// The localizer both `localize` and `mcp` load: a config and its model overrides.
#[derive(clap::Args)]
pub struct LocalizerArgs {
    /// Run configuration: the model, its chat template and the episode setting (configs/smollm2-real.toml for the shipped localizer).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// The model (a folder, a checkpoint or a hub id) instead of the config's [model] path.
    #[arg(long)]
    pub model: Option<String>,
    /// A LoRA adapter instead of the config's [model] adapter.
    #[arg(long, conflicts_with = "no_adapter")]
    pub adapter: Option<PathBuf>,
    /// The base model alone, whatever the config's [model] adapter says.
    #[arg(long)]
    pub no_adapter: bool,
    /// combined (the index search first, then the model's attempts) | model | scripted (the scripted search alone, no model) | search (the index search alone, no model).
    #[arg(long, default_value = "combined")]
    pub policy: Search,
}

impl LocalizerArgs {
    /// The config with the model overrides.
    pub fn config(&self) -> Result<RunConfig> {
        let mut flags = vec![];
        if let Some(m) = &self.model {
            flags.push(Override::flag(format!("--model {m}"), "model.path", m)?);
            flags.push(Override::flag_unset(format!("--model {m}"), "model.adapter"));
        }
        if let Some(a) = &self.adapter {
            flags.push(Override::flag(format!("--adapter {}", a.display()), "model.adapter", a.to_string_lossy())?);
        }
        if self.no_adapter {
            flags.push(Override::flag_unset("--no-adapter", "model.adapter"));
        }
        self.set.load_with(&self.config, flags)
    }
}

/// `fusegrpo localize`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub localizer: LocalizerArgs,
    /// The repository (a git work tree; bare repositories need --rev), or a plain folder searched as it is (its .gitignore files honoured).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// A revision to search instead of the working tree as it is.
    #[arg(long)]
    pub rev: Option<String>,
    /// The issue: a file, or `-` for standard input.
    #[arg(long)]
    pub issue: String,
    /// The model's attempts (episodes), their answers ranked by votes; the search (index or scripted) runs once besides.
    #[arg(long, default_value_t = 1)]
    pub attempts: usize,
    /// The attempts' sampling temperature (0: greedy) instead of the config's; several attempts under a greedy config sample at [localize] attempts_temperature (0.7).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// The most tokens of the issue kept: a longer one is cut to its beginning and its end (default: [localize] max_issue_tokens, else half of the episode's budget after the prompt's fixed part).
    #[arg(long)]
    pub max_issue_tokens: Option<usize>,
    /// With several attempts: `vote` (rank by the attempts naming each) or `tournament` (pairwise, the evidence judge; the winner's answer first).
    #[arg(long, default_value = "vote", value_parser = ["vote", "tournament"])]
    pub select: String,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Also write the attempts' episodes here (JSONL, as `eval --out`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `fusegrpo localize`.
pub fn run(args: Args) -> Result<()> {
    check_paths(&args)?;
    let cfg = args.localizer.config()?;
    let issue = read_issue(&args.issue)?;
    let request = Request {
        rev: args.rev.clone(),
        attempts: args.attempts,
        tournament: args.select == "tournament",
        temperature: args.temperature,
        max_issue_tokens: args.max_issue_tokens,
        search: args.localizer.policy.clone(),
        ..Request::new(issue, args.repo.clone())
    };
    check_request(&request)?;
    apps::localize::temperature(&cfg, &request).context("--temperature / --attempts")?;
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (result, episodes) = with_policy(&cfg, &request.search.loads(), &TeacherOpts::default(), |policy, env| {
        localize_episodes(&cfg, policy, env, &request, &mut |p| say!("localize: {}", p.message), &cancel)
    })?;
    if let Some(out) = &args.out {
        trainer::episodes::jsonl::write_episodes_atomic(out, &episodes)?;
    }
    if args.json {
        let mut json = serde_json::to_value(&result)?;
        // What was searched, so the answer can be reproduced.
        json["repository"] = serde_json::json!(std::fs::canonicalize(&args.repo).unwrap_or_else(|_| args.repo.clone()).display().to_string());
        json["revision"] = serde_json::json!(searched_revision(&args.repo, args.rev.as_deref()));
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        out!("{}", result.render());
    }
    Ok(())
}

/// The revision searched: the commit `--rev` names (its full id), else
/// `worktree` (a repository's working tree as it is, uncommitted edits
/// included) or `folder` (a plain folder).
fn searched_revision(repo: &std::path::Path, rev: Option<&str>) -> String {
    match git2::Repository::open(repo) {
        Ok(git) => match rev {
            Some(rev) => rollout::repo::resolve_commit(&git, "", rev).map_or_else(|_| rev.to_string(), |id| id.to_string()),
            None => rollout::repo::WORKTREE.to_string(),
        },
        Err(_) => rollout::repo::FOLDER.to_string(),
    }
}

/// Refuses, before any work, an `--out` that is one of the inputs
/// (`--config`, `--issue`, `--adapter`, a `--model` folder) or a file of the
/// searched `--repo`, and an `--out` that could not be written.
fn check_paths(args: &Args) -> Result<()> {
    let Some(out) = &args.out else { return Ok(()) };
    let l = &args.localizer;
    let mut inputs = vec![("--config", l.config.as_path())];
    if args.issue != "-" {
        inputs.push(("--issue", std::path::Path::new(&args.issue)));
    }
    inputs.extend(l.adapter.as_deref().map(|a| ("--adapter", a)));
    inputs.extend(l.model.as_deref().map(|m| ("--model", std::path::Path::new(m))));
    trainer::files::check_outputs(&inputs, &[("--out", out)])?;
    trainer::files::check_not_inside("--out", out, "--repo", &args.repo)?;
    Ok(trainer::files::check_writable("--out", out)?)
}

fn read_issue(arg: &str) -> Result<String> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("--issue -: reading the issue from standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(arg).with_context(|| format!("--issue {arg}: reading the issue file"))
}

