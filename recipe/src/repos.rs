//! Repositories for tasks: the `owner__name` repositories a task file (or a
//! list) needs, cloned with git into a repositories folder (where the
//! environment looks for them, `rollout::repo::open_repository`), with every
//! task's base commit checked (`fusegrpo repos fetch`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{bail, Context, Result};
use rollout::repo::repo_dir_name;
use rollout::tasks::load_tasks;

/// What to fetch.
#[derive(Debug, Clone)]
pub enum Wanted {
    /// Every repository of a task JSONL (its `repo` and `base_commit` fields),
    /// each base commit checked.
    Tasks(PathBuf),
    /// A file of `owner/name` lines (`#` starts a comment), each cloned
    /// whole, no commit checked.
    List(PathBuf),
}

/// Where repositories go and come from.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// The folder holding them as `owner__name` (created if missing).
    pub repos_dir: PathBuf,
    /// A URL or path template, `{owner}` and `{name}` replaced.
    pub source: String,
    /// Name the tasks whose base commit is missing and go on, instead of failing.
    pub allow_missing_commits: bool,
}

/// The tasks of one repository: `(instance_id, base_commit)`.
type Needs = Vec<(String, String)>;

pub fn fetch(wanted: &Wanted, args: &FetchOptions) -> Result<()> {
    let mut by_repo: BTreeMap<String, Needs> = BTreeMap::new();
    let what = match wanted {
        Wanted::Tasks(path) => {
            let tasks = load_tasks(path)?;
            for t in &tasks {
                by_repo.entry(t.repo.clone()).or_default().push((t.instance_id.clone(), t.base_commit.clone()));
            }
            trainer::progress::say(&format!("repos fetch: {} tasks in {} need {} repositories", tasks.len(), path.display(), by_repo.len()));
            format!("tasks in {}", path.display())
        }
        Wanted::List(list) => {
            let text = std::fs::read_to_string(list).with_context(|| format!("the list {}", list.display()))?;
            for (i, line) in text.lines().enumerate() {
                let name = line.split('#').next().unwrap_or("").trim();
                if !name.is_empty() {
                    repo_dir_name(name).with_context(|| format!("{}:{}", list.display(), i + 1))?;
                    by_repo.entry(name.to_string()).or_default();
                }
            }
            trainer::progress::say(&format!("repos fetch: {} repositories listed in {}", by_repo.len(), list.display()));
            format!("listed in {}", list.display())
        }
    };
    std::fs::create_dir_all(&args.repos_dir).with_context(|| format!("creating the repositories folder {}", args.repos_dir.display()))?;
    for (i, (repo, needs)) in by_repo.iter().enumerate() {
        let lead = format!("[{}/{}] ", i + 1, by_repo.len());
        fetch_one(repo, needs, args, &lead).with_context(|| format!("repository {repo} ({what})"))?;
    }
    Ok(())
}

/// One repository: skipped when present with every base commit, else
/// cloned (or, when present but lacking commits, fetched into), then
/// checked; its first line opens with `lead` (`[i/n] `).
fn fetch_one(repo: &str, needs: &Needs, args: &FetchOptions, lead: &str) -> Result<()> {
    let base = repo_dir_name(repo)?;
    let url = source_url(&args.source, repo)?;
    let existing = [base.clone(), format!("{base}.git")].into_iter().map(|n| args.repos_dir.join(n)).find(|p| p.is_dir());
    let dir = match existing {
        Some(dir) => {
            let missing = missing_commits(&dir, needs)?;
            if missing.is_empty() {
                trainer::progress::say(&format!("{lead}{repo}: {} holds all {} base commits, skipped", dir.display(), needs.len()));
                return Ok(());
            }
            trainer::progress::say(&format!("{lead}{repo}: {} lacks {} of {} base commits; fetching from {url}", dir.display(), missing.len(), needs.len()));
            git(&dir, &["fetch", "--quiet", "--tags", &url, "+refs/heads/*:refs/remotes/fetched/*"])?;
            dir
        }
        None => clone(&url, &args.repos_dir.join(&base), repo, lead)?,
    };
    let missing = missing_commits(&dir, needs)?;
    if args.allow_missing_commits && !missing.is_empty() {
        let ids: Vec<&str> = missing.iter().map(|(id, _)| id.as_str()).collect();
        trainer::progress::say(&format!("{repo}: {} of {} base commits are missing (missing commits allowed): {}", missing.len(), needs.len(), ids.join(", ")));
        return Ok(());
    }
    if let Some((id, commit)) = missing.first() {
        bail!(
            "task {id}: base commit {commit} is not in {} (from {url}){}",
            dir.display(),
            if missing.len() > 1 { format!("; {} tasks' base commits are missing in all", missing.len()) } else { String::new() }
        );
    }
    trainer::progress::say(&format!("{repo}: {} ready, all {} base commits present", dir.display(), needs.len()));
    Ok(())
}

/// `--source` with `{owner}` and `{name}` of `repo` filled in.
fn source_url(template: &str, repo: &str) -> Result<String> {
    let (owner, name) = repo.split_once('/').with_context(|| format!("repository `{repo}` is not owner/name"))?;
    if !template.contains("{owner}") && !template.contains("{name}") {
        bail!("the source `{template}` has neither {{owner}} nor {{name}}: every repository would come from one place");
    }
    let url = template.replace("{owner}", owner).replace("{name}", name);
    // A local path is made absolute: git runs in other folders.
    Ok(match std::fs::canonicalize(&url) {
        Ok(path) => path.to_string_lossy().into_owned(),
        Err(_) => url,
    })
}

/// `git clone --bare` into `<dest>.part`, renamed to `dest` once complete
/// (an interrupted clone is never mistaken for a repository).
fn clone(url: &str, dest: &Path, repo: &str, lead: &str) -> Result<PathBuf> {
    let part = dest.with_file_name(format!("{}.part", dest.file_name().and_then(|n| n.to_str()).unwrap_or("repo")));
    if part.exists() {
        std::fs::remove_dir_all(&part).with_context(|| format!("removing the unfinished clone {}", part.display()))?;
    }
    trainer::progress::say(&format!("{lead}{repo}: cloning {url} into {}", dest.display()));
    git(Path::new("."), &["clone", "--bare", "--quiet", url, &part.to_string_lossy()])?;
    std::fs::rename(&part, dest).with_context(|| format!("renaming {} to {}", part.display(), dest.display()))?;
    Ok(dest.to_path_buf())
}

/// The tasks whose base commit `dir` does not hold (`git cat-file -e`).
fn missing_commits(dir: &Path, needs: &Needs) -> Result<Needs> {
    let mut missing = Needs::new();
    for (id, commit) in needs {
        let status = Process::new("git")
            .arg("-C")
            .arg(dir)
            .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .stderr(std::process::Stdio::null())
            .status()
            .context("running git (is it installed?)")?;
        if !status.success() {
            missing.push((id.clone(), commit.clone()));
        }
    }
    Ok(missing)
}

/// `git -C dir args...`, never prompting for credentials; the error carries git's stderr.
fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Process::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .context("running git (is it installed?)")?;
    if !out.status.success() {
        bail!("git {} failed in {}: {}", args.join(" "), dir.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
