//! Ranked, grounded answers of an evaluation (issue 56): each task's
//! episodes ranked over the snapshot they searched
//! ([`rollout::ranking::rank`]), or the scripted search's and the model's
//! combined ([`rollout::ranking::combine`]), scored by set F1 and
//! accuracy@1/3/5; the rows `eval --ranked` writes and `compare` pairs.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result};
use rollout::episode::driver::task_gold;
use rollout::episode::Episode;
use rollout::ranking::{combine, rank, RankSummary, Ranking, TaskRanking, KS};
use rollout::repo::SnapshotStore;
use rollout::tasks::Task;
use serde::Serialize;

use crate::stats;

/// Per task: its episodes of each of `runs` ranked, then `merge`d into one
/// ranking, scored against the task's gold. Tasks no run has episodes of
/// are left out.
fn rank_with(
    store: &SnapshotStore,
    tasks: &[Task],
    runs: &[&[Episode]],
    policy: &str,
    merge: impl Fn(Vec<Ranking>) -> Ranking,
) -> Result<Vec<TaskRanking>> {
    let by_task: Vec<BTreeMap<&str, Vec<&Episode>>> = runs
        .iter()
        .map(|eps| {
            let mut m: BTreeMap<&str, Vec<&Episode>> = BTreeMap::new();
            for e in eps.iter() {
                m.entry(e.task_id.as_str()).or_default().push(e);
            }
            m
        })
        .collect();
    let mut rows = Vec::new();
    for task in tasks {
        let id = task.instance_id.as_str();
        if by_task.iter().all(|m| !m.contains_key(id)) {
            continue;
        }
        let snapshot = store.get(&task.repo, &task.base_commit).with_context(|| format!("task '{id}': its snapshot"))?;
        let gold = task_gold(task, &snapshot).with_context(|| format!("task '{id}': its gold"))?;
        let rankings = by_task.iter().map(|m| rank(m.get(id).map_or(&[][..], Vec::as_slice), &snapshot)).collect();
        rows.push(TaskRanking::new(id, policy, merge(rankings), &gold, &snapshot));
    }
    Ok(rows)
}

/// One policy's episodes, ranked per task (votes over a task's episodes).
pub fn rank_episodes(store: &SnapshotStore, tasks: &[Task], episodes: &[Episode], policy: &str) -> Result<Vec<TaskRanking>> {
    rank_with(store, tasks, &[episodes], policy, |mut r| r.remove(0))
}

/// The scripted search's episodes and the model's, combined per task.
pub fn rank_combined(store: &SnapshotStore, tasks: &[Task], scripted: &[Episode], model: &[Episode]) -> Result<Vec<TaskRanking>> {
    rank_with(store, tasks, &[scripted, model], "combined", |r| combine(&r[0], &r[1]))
}

/// What [`rank_search`] spent: indexes built and the seconds of each part.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SearchCost {
    pub tasks: usize,
    /// Indexes built (one per commit; tasks on one commit share it).
    pub indexes_built: usize,
    /// Seconds loading snapshots (shared with any other policy's run).
    pub snapshot_seconds: f64,
    /// Seconds of the searches, index builds included.
    pub search_seconds: f64,
    /// Tasks whose issue had nothing to search for (an empty ranking).
    pub empty_queries: usize,
}

/// The index search ([`rollout::search`]) on each task: its ranking and
/// answer set, scored. A task whose issue gives no query (no name or word
/// to search for) gets an empty ranking, counted in the cost.
pub fn rank_search(store: &SnapshotStore, tasks: &[Task], cfg: &rollout::search::SearchConfig) -> Result<(Vec<TaskRanking>, SearchCost)> {
    let cache = rollout::search::IndexCache::default();
    let mut cost = SearchCost { tasks: tasks.len(), ..SearchCost::default() };
    let mut rows = Vec::new();
    for task in tasks {
        let id = task.instance_id.as_str();
        let t0 = std::time::Instant::now();
        let snapshot = store.get(&task.repo, &task.base_commit).with_context(|| format!("task '{id}': its snapshot"))?;
        let gold = task_gold(task, &snapshot).with_context(|| format!("task '{id}': its gold"))?;
        let t1 = std::time::Instant::now();
        let ranking = match rollout::ranking::search_snapshot(&cache, &snapshot, &task.problem_statement, cfg) {
            Ok((_, r)) => r,
            Err(rollout::search::SearchError::EmptyQuery) => {
                cost.empty_queries += 1;
                Ranking::default()
            }
            Err(e) => return Err(anyhow::anyhow!("task '{id}': the search: {e}")),
        };
        cost.snapshot_seconds += (t1 - t0).as_secs_f64();
        cost.search_seconds += t1.elapsed().as_secs_f64();
        rows.push(TaskRanking::new(id, "search", ranking, &gold, &snapshot));
    }
    cost.indexes_built = cache.builds();
    Ok((rows, cost))
}

/// The index search's rows and the model's episodes, combined per task
/// ([`combine`]: the search first, then what the model alone named).
pub fn rank_search_combined(store: &SnapshotStore, tasks: &[Task], search: &[TaskRanking], model: &[Episode]) -> Result<Vec<TaskRanking>> {
    let by_id: BTreeMap<&str, &TaskRanking> = search.iter().map(|r| (r.task_id.as_str(), r)).collect();
    rank_with(store, tasks, &[model], "combined", |r| r[0].clone())?
        .into_iter()
        .map(|row| {
            let id = row.task_id.clone();
            let task = tasks.iter().find(|t| t.instance_id == id).context("a ranked task")?;
            let snapshot = store.get(&task.repo, &task.base_commit)?;
            let gold = task_gold(task, &snapshot)?;
            let searched = by_id.get(id.as_str()).map(|r| r.ranking.clone()).unwrap_or_default();
            Ok(TaskRanking::new(&id, "combined", combine(&searched, &row.ranking), &gold, &snapshot))
        })
        .collect()
}

/// Reads rows `write` wrote (`eval --ranked`); `None` when the file's first
/// line is not one (an episode file).
pub fn read(path: &Path) -> Result<Option<Vec<TaskRanking>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut rows = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<TaskRanking>(&line) {
            Ok(r) => rows.push(r),
            Err(_) if n == 0 => return Ok(None),
            Err(e) => anyhow::bail!("{}:{}: not a ranked row: {e}", path.display(), n + 1),
        }
    }
    Ok(Some(rows))
}

/// Differences (later minus earlier) paired by task, with 95% bootstrap
/// intervals: set F1, accuracy@1/3/5 (over tasks with gold at that level)
/// and the grounded rate per task.
#[derive(Clone, Debug, Serialize)]
pub struct RankPaired {
    pub tasks: usize,
    pub f1_file: stats::Paired,
    pub f1_func: stats::Paired,
    pub file_at: [stats::Paired; 3],
    pub func_at: [stats::Paired; 3],
    pub grounded_rate: stats::Paired,
}

/// `later - earlier`, paired by task.
pub fn paired(earlier: &[TaskRanking], later: &[TaskRanking]) -> RankPaired {
    let by = |rows: &[TaskRanking], f: &dyn Fn(&TaskRanking) -> Option<f64>| -> BTreeMap<String, f64> {
        rows.iter().filter_map(|r| f(r).map(|v| (r.task_id.clone(), v))).collect()
    };
    let pair = |f: &dyn Fn(&TaskRanking) -> Option<f64>| stats::paired(&by(earlier, f), &by(later, f));
    let grounded = |r: &TaskRanking| Some(rollout::grounding::rate(r.ranking.grounded, r.ranking.named));
    RankPaired {
        tasks: pair(&|_| Some(0.0)).tasks,
        f1_file: pair(&|r| Some(r.score.f1_file)),
        f1_func: pair(&|r| Some(r.score.f1_func)),
        file_at: KS.map(|k| pair(&|r: &TaskRanking| r.score.file_at(k))),
        func_at: KS.map(|k| pair(&|r: &TaskRanking| r.score.func_at(k))),
        grounded_rate: pair(&grounded),
    }
}

/// `+0.012 [-0.004, +0.028]`, said when the interval is off 0.
pub fn cell(p: &stats::Paired) -> String {
    let [lo, hi] = p.ci95;
    let side = if lo > 0.0 {
        " (above 0)"
    } else if hi < 0.0 {
        " (below 0)"
    } else {
        ""
    };
    format!("{:+.3} [{lo:+.3}, {hi:+.3}]{side}", p.mean)
}

/// The Markdown tables of `columns` (label, rows): each one's means, then
/// each `(later, earlier)` of `pairs` (indices into `columns`) paired.
pub fn markdown(columns: &[(String, &[TaskRanking])], pairs: &[(usize, usize)]) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "| ranking | tasks | file F1 | function F1 | file acc@1 | @3 | @5 | function acc@1 | @3 | @5 | named, grounded | reported, grounded |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (label, rows) in columns {
        let s = RankSummary::of(rows);
        let _ = writeln!(
            out,
            "| {label} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1}% ({} of {}) | {:.1}% of {} |",
            s.tasks,
            s.f1_file,
            s.f1_func,
            s.file_at[0],
            s.file_at[1],
            s.file_at[2],
            s.func_at[0],
            s.func_at[1],
            s.func_at[2],
            100.0 * s.grounded_rate,
            s.grounded,
            s.named,
            100.0 * s.reported_grounded_rate,
            s.reported
        );
    }
    if pairs.is_empty() {
        return out;
    }
    out += "\nPaired by task (95% bootstrap over the tasks both have; accuracy over the tasks with gold at that level):\n\n";
    out += "| difference | tasks | file F1 | file acc@1 | file acc@3 | file acc@5 | function F1 | function acc@1 | function acc@3 | function acc@5 |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for &(later, earlier) in pairs {
        let p = paired(columns[earlier].1, columns[later].1);
        let _ = writeln!(
            out,
            "| {} - {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            columns[later].0,
            columns[earlier].0,
            p.tasks,
            cell(&p.f1_file),
            cell(&p.file_at[0]),
            cell(&p.file_at[1]),
            cell(&p.file_at[2]),
            cell(&p.f1_func),
            cell(&p.func_at[0]),
            cell(&p.func_at[1]),
            cell(&p.func_at[2])
        );
    }
    out
}
