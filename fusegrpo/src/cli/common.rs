//! Helpers shared by subcommands: model loading and JSONL input/output.

use anyhow::{Context, Result};
use std::io::BufRead;
use std::path::Path;
pub use apps::args::RunOn;

/// `--adapter DIR` of the commands that run a model.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AdapterArg {
    /// A LoRA adapter to apply (PEFT's folder, or a LoRA run's checkpoint).
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
}

/// Read `{"ids": [...]}` lines, each id below `vocab`, or `{"text": "..."}`
/// lines encoded with `tokenizer` (special tokens written in the text stay
/// whole; none added); errors name the file and line.
pub fn read_input_lines(path: &Path, vocab: usize, tokenizer: Option<&tokenizers::Tokenizer>) -> Result<Vec<Vec<u32>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Row {
            ids: Option<Vec<u32>>,
            text: Option<String>,
        }
        let expected = if tokenizer.is_some() { "{\"ids\": [non-negative integers]} or {\"text\": \"...\"}" } else { "{\"ids\": [non-negative integers]}" };
        let where_ = || format!("{}:{}", path.display(), n + 1);
        let row: Row = serde_json::from_str(&line).with_context(|| format!("{}: expected {expected}", where_()))?;
        let ids = match (row.ids, row.text, tokenizer) {
            (Some(ids), None, _) => ids,
            (None, Some(text), Some(tok)) => tok
                .encode(text.as_str(), false)
                .map_err(|e| anyhow::anyhow!("{}: tokenizing the text: {e}", where_()))?
                .get_ids()
                .to_vec(),
            (None, Some(_), None) => anyhow::bail!("{}: a `text` line needs the model's tokenizer.json", where_()),
            _ => anyhow::bail!("{}: expected {expected}", where_()),
        };
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            anyhow::bail!("{}: token id {bad} is outside the vocabulary (size {vocab})", where_());
        }
        out.push(ids);
    }
    Ok(out)
}

/// The model folder's tokenizer.json, when it has one.
pub fn model_tokenizer(spec: &str) -> anyhow::Result<Option<tokenizers::Tokenizer>> {
    let mut path = lm::hub::resolve_model_dir(spec)?.join("tokenizer.json");
    if !path.exists() {
        // An adapter folder without a tokenizer: its base's.
        path = lm::lora::resolve(spec, None)?.base.join("tokenizer.json");
    }
    if !path.exists() {
        return Ok(None);
    }
    tokenizers::Tokenizer::from_file(&path).map(Some).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `--skip-bad-tasks` of the commands that read a task file.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TaskCheckArgs {
    /// Drop the tasks that cannot run (repository or base commit missing,
    /// empty gold, a prompt longer than the context) with a count, instead
    /// of refusing the whole file.
    #[arg(long)]
    pub skip_bad_tasks: bool,
}


/// How a command reaches an OpenAI-compatible endpoint that plays a teacher,
/// a localizer or a judge: flattened into every command that talks to one
/// (`rollout`, `eval`, `synth`, `tasks synth`), and made from `[pipeline]`
/// for the pipeline's teacher.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpTeacherArgs {
    /// Model name sent to an HTTP teacher.
    #[arg(long, default_value = "teacher")]
    pub teacher_model: String,
    /// Environment variable holding the HTTP teacher's API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Bound on requests per second to an HTTP teacher.
    #[arg(long)]
    pub requests_per_second: Option<f64>,
}

impl Default for HttpTeacherArgs {
    fn default() -> Self {
        HttpTeacherArgs { teacher_model: "teacher".into(), api_key_env: None, requests_per_second: None }
    }
}

impl HttpTeacherArgs {
    /// The endpoint these flags describe.
    pub fn endpoint(&self) -> trainer::episodes::Endpoint {
        trainer::episodes::Endpoint { model: self.teacher_model.clone(), api_key_env: self.api_key_env.clone(), requests_per_second: self.requests_per_second }
    }
}

/// `--set section.key=value`, flattened into every command that reads a
/// run config (`--config`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SetArgs {
    /// Set a config key over --config's (repeatable; checked as the file's
    /// keys are): grpo.beta=0.1, 'model.path="m"'. The value is read as
    /// TOML, else taken as a string (model.path=m).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<trainer::run_config::Override>,
}

impl SetArgs {
    /// The run config of `config` with the `--set` keys.
    pub fn load(&self, config: &std::path::Path) -> Result<trainer::run_config::RunConfig> {
        self.load_with(config, Vec::new())
    }

    /// The run config of `config` with the `--set` keys, then `flags`, the
    /// config keys a command's own flags set ([`Override::flag`]): checked
    /// once, as the `--set` keys are.
    ///
    /// [`Override::flag`]: trainer::run_config::Override::flag
    pub fn load_with(&self, config: &std::path::Path, flags: Vec<trainer::run_config::Override>) -> Result<trainer::run_config::RunConfig> {
        let mut all = self.set.clone();
        all.extend(flags);
        Ok(trainer::run_config::RunConfig::from_file_with(config, &all)?)
    }
}
