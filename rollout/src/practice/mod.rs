//! A generated practice repository with history, for demos and tests that
//! need tasks without downloading anything.
//!
//! [`generate`]`(repos_dir, &`[`PracticeConfig`]`)` writes
//! `<repos_dir>/<owner>__<name>`: a Python package of 6-9 modules in 3
//! packages (billing, inventory, shipping, customers, orders; see
//! [`vocab`]), each with constants, a class and module-level helpers whose
//! docstrings, checks and error messages are distinctive (see [`build`]),
//! followed by `commits` commits that each edit one or two functions (a
//! boundary, a limit, an error message, a new or dropped check, a renamed
//! local, a default) with a message written like an issue (see [`history`]).
//! Everything is drawn from one ChaCha8 RNG seeded by `seed`, and commit
//! dates are fixed, so the same config gives the same HEAD commit id.
//! [`crate::tasks::history::tasks_from_history`] turns the history into tasks.

pub mod build;
pub mod code;
pub mod git;
pub mod history;
pub mod vocab;

use std::path::{Path, PathBuf};

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use crate::repo::repo_dir_name;
use history::{draw_difficulty, edit_function, locations, FnLoc};

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PracticeConfig {
    /// Repository name, `owner/name`; `name` (with `-` as `_`) is the Python package.
    pub name: String,
    /// Seed of every random draw.
    pub seed: u64,
    /// Commits after the initial one.
    pub commits: usize,
}

impl Default for PracticeConfig {
    fn default() -> Self {
        PracticeConfig { name: "practice/shop".into(), seed: 0, commits: 60 }
    }
}

/// What was generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PracticeRepo {
    /// The repository directory.
    pub path: PathBuf,
    /// The HEAD commit id (hex).
    pub head: String,
    /// Commits in total, the initial one included.
    pub commits: usize,
}

/// Why generation failed.
#[derive(Debug, Error)]
pub enum PracticeError {
    /// The name is not `owner/name`.
    #[error(transparent)]
    Name(#[from] crate::repo::RepoError),
    /// The name does not make a Python package name.
    #[error("'{0}' does not make a Python package name (letters, digits, '_' or '-', not starting with a digit)")]
    PackageName(String),
    /// The target directory exists.
    #[error("{0} already exists; remove it first")]
    Exists(PathBuf),
    /// Creating the repos dir failed.
    #[error("creating {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A git operation failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// Seconds since the epoch of the initial commit (2024-01-01T09:00:00Z).
const START_TIME: i64 = 1_704_099_600;

/// Share of commits (in percent) that edit two functions of one module.
const TWO_FUNCTION_PERCENT: u32 = 15;

/// Share of commits (in percent) that are release bumps (no function changed).
const RELEASE_PERCENT: u32 = 5;

/// Writes the practice repository under `repos_dir` (see the module docs).
pub fn generate(repos_dir: &Path, config: &PracticeConfig) -> Result<PracticeRepo, PracticeError> {
    let dir = repos_dir.join(repo_dir_name(&config.name)?);
    let package = package_name(&config.name)?;
    if dir.exists() {
        return Err(PracticeError::Exists(dir));
    }
    std::fs::create_dir_all(repos_dir).map_err(|source| PracticeError::Io { path: repos_dir.to_path_buf(), source })?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut code = build::build(&package, &mut rng);
    let mut writer = git::HistoryWriter::init(&dir)?;
    let mut time = START_TIME;
    let mut head = writer.commit(&code.files(), &format!("Initial import of the {package} package"), vocab::AUTHORS[0], time)?;
    for _ in 0..config.commits {
        time += rng.random_range(1800..3 * 86_400);
        let message = next_change(&mut code, &mut rng);
        let author = *vocab::AUTHORS.choose(&mut rng).expect("non-empty");
        head = writer.commit(&code.files(), &message, author, time)?;
    }
    writer.checkout()?;
    Ok(PracticeRepo { path: dir, head: head.to_string(), commits: config.commits + 1 })
}

/// The Python package of `owner/name`: `name` with `-` as `_`.
fn package_name(repo: &str) -> Result<String, PracticeError> {
    let name = repo.rsplit('/').next().unwrap_or(repo).replace('-', "_");
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(name)
    } else {
        Err(PracticeError::PackageName(repo.to_string()))
    }
}

/// Edits the codebase for the next commit and returns its message.
fn next_change(code: &mut build::Codebase, rng: &mut ChaCha8Rng) -> String {
    let roll = rng.random_range(0..100);
    if roll < RELEASE_PERCENT {
        code.release += 1;
        return format!("Release 0.1.{}", code.release);
    }
    let locs = locations(code);
    let Some((loc, first)) = edit_somewhere(code, &locs, rng) else {
        code.release += 1;
        return format!("Release 0.1.{}", code.release);
    };
    if roll >= RELEASE_PERCENT + TWO_FUNCTION_PERCENT {
        return first;
    }
    let same_module: Vec<FnLoc> = locs.iter().copied().filter(|l| l.module == loc.module && *l != loc).collect();
    match edit_somewhere(code, &same_module, rng) {
        Some((_, second)) => format!("{first} Also: {}", lower_first(&second)),
        None => first,
    }
}

/// Edits a random function of `locs`, trying others when no drawn edit applies.
fn edit_somewhere(code: &mut build::Codebase, locs: &[FnLoc], rng: &mut ChaCha8Rng) -> Option<(FnLoc, String)> {
    let difficulty = draw_difficulty(rng);
    for _ in 0..64 {
        let &loc = locs.choose(rng)?;
        if let Some(message) = edit_function(code, loc, difficulty, rng) {
            return Some((loc, message));
        }
    }
    None
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_lowercase().collect::<String>() + c.as_str()).unwrap_or_default()
}
