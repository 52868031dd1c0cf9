//! The generated practice repository: deterministic from its seed, valid
//! Python at every commit, a history that mostly becomes tasks with
//! function-level gold, and tasks the scripted teacher solves only in part.

use rollout::chat::{write_small_tokenizer, ChatTokenizer};
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::EpisodeConfig;
use rollout::practice::{generate, PracticeConfig, PracticeError, PracticeRepo};
use rollout::repo::{open_repository_path, SnapshotStore};
use rollout::reward::RewardConfig;
use rollout::spans::{FileSpans, Language, SpanKind};
use rollout::tasks::history::{tasks_from_history, HistoryConfig};
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;

fn make(dir: &std::path::Path, seed: u64, commits: usize) -> PracticeRepo {
    generate(dir, &PracticeConfig { name: "practice/shop".into(), seed, commits }).unwrap()
}

/// Every commit id, newest first.
fn history(repo: &git2::Repository) -> Vec<git2::Oid> {
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    walk.map(Result::unwrap).collect()
}

#[test]
fn same_seed_same_history_other_seed_other_history() {
    let (a, b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ra, rb, rc) = (make(a.path(), 7, 20), make(b.path(), 7, 20), make(c.path(), 8, 20));
    assert_eq!(ra.head, rb.head, "same seed, same HEAD");
    assert_ne!(ra.head, rc.head, "another seed, another HEAD");
    assert_eq!(ra.commits, 21);
    let (ga, gb) = (open_repository_path(&ra.path).unwrap(), open_repository_path(&rb.path).unwrap());
    let (ha, hb) = (history(&ga), history(&gb));
    assert_eq!(ha, hb);
    assert_eq!(ha.len(), 21);
    let tree = |g: &git2::Repository, id| g.find_commit(id).unwrap().tree_id();
    assert!(ha.iter().all(|&id| tree(&ga, id) == tree(&gb, id)), "identical trees at every commit");
    // The work tree holds HEAD's files.
    assert!(ra.path.join("shop/__init__.py").is_file() && ra.path.join("README.md").is_file());
    // A second run refuses to overwrite.
    let again = generate(a.path(), &PracticeConfig { name: "practice/shop".into(), seed: 7, commits: 20 });
    assert!(matches!(again, Err(PracticeError::Exists(_))), "{again:?}");
    let bad = generate(a.path(), &PracticeConfig { name: "practice/9lives".into(), seed: 7, commits: 1 });
    assert!(matches!(bad, Err(PracticeError::PackageName(_))), "{bad:?}");
}

#[test]
fn every_file_at_every_commit_is_python_with_functions() {
    let dir = tempfile::tempdir().unwrap();
    let repo = make(dir.path(), 0, 60);
    let git = open_repository_path(&repo.path).unwrap();
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&tree_sitter_python::LANGUAGE.into()).unwrap();
    let (mut files, mut functions) = (0, 0);
    for id in history(&git) {
        let tree = git.find_commit(id).unwrap().tree().unwrap();
        tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
            let path = format!("{root}{}", entry.name().unwrap());
            if !path.ends_with(".py") {
                return git2::TreeWalkResult::Ok;
            }
            let blob = git.find_blob(entry.id()).unwrap();
            let parsed = parser.parse(blob.content(), None).unwrap();
            assert!(!parsed.root_node().has_error(), "{path} at {id} does not parse:\n{}", String::from_utf8_lossy(blob.content()));
            let spans = FileSpans::parse(Language::Python, blob.content());
            let count = spans.spans.iter().filter(|s| s.kind == SpanKind::Function).count();
            assert!(path.ends_with("__init__.py") || count > 0, "{path} has no functions");
            files += 1;
            functions += count;
            git2::TreeWalkResult::Ok
        })
        .unwrap();
    }
    println!("61 commits: {files} Python files parsed, {functions} function spans");
}

fn practice_tasks(dir: &std::path::Path, seed: u64, commits: usize) -> Vec<Task> {
    let repo = make(dir, seed, commits);
    let git = open_repository_path(&repo.path).unwrap();
    tasks_from_history(&git, "practice/shop", &HistoryConfig::default()).unwrap()
}

#[test]
fn most_commits_become_tasks_with_function_gold() {
    for seed in [0, 1, 2] {
        let dir = tempfile::tempdir().unwrap();
        let tasks = practice_tasks(dir.path(), seed, 60);
        let two = tasks.iter().filter(|t| t.gold.as_ref().unwrap().functions.len() > 1).count();
        let named = tasks
            .iter()
            .filter(|t| {
                let gold = t.gold.as_ref().unwrap();
                gold.functions.iter().any(|f| {
                    let name = f.to_string();
                    let qual = name.rsplit(':').next().unwrap().to_string();
                    t.problem_statement.contains(&format!("`{qual}`"))
                })
            })
            .count();
        println!("seed {seed}: {} tasks of 60 commits, {two} with two gold functions, {named} name a gold function", tasks.len());
        assert!(tasks.len() >= 48, "seed {seed}: only {} tasks", tasks.len());
        for t in &tasks {
            let gold = t.gold.as_ref().unwrap();
            assert!(!gold.functions.is_empty() && gold.functions.len() <= 2, "{}: {gold:?}", t.problem_statement);
            assert!(gold.files.len() == 1, "one module per commit: {gold:?}");
        }
        assert!(named > tasks.len() / 5 && named < tasks.len() * 4 / 5, "a mix of easy and hard messages: {named}");
    }
}

#[test]
fn scripted_teacher_solves_some_but_not_all() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = practice_tasks(dir.path(), 0, 60);
    let tok_dir = tempfile::tempdir().unwrap();
    write_small_tokenizer(tok_dir.path(), 1500).unwrap();
    let tok = ChatTokenizer::from_dir(tok_dir.path()).unwrap();
    let store = SnapshotStore::open(dir.path());
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let eps = run_episodes(&mut ScriptedTeacher::default(), &env, &tasks, 1, &EpisodeConfig::default(), |_| {}).unwrap();
    let scores: Vec<_> = eps.iter().map(|e| e.score.unwrap()).collect();
    let mean = |f: fn(&rollout::reward::Score) -> f64| scores.iter().map(f).sum::<f64>() / scores.len() as f64;
    let (file, func, e) = (mean(|s| s.f1_file), mean(|s| s.f1_func), mean(|s| s.e));
    let perfect = scores.iter().filter(|s| s.f1_func == 1.0).count();
    let zero = scores.iter().filter(|s| s.f1_file == 0.0).count();
    println!(
        "scripted teacher on {} tasks: F1_file {file:.3}, F1_func {func:.3}, e {e:.3}; {perfect} perfect functions, {zero} wrong files",
        scores.len()
    );
    assert!(file > 0.3 && file < 0.95, "file F1 {file}");
    assert!(func > 0.1 && func < 0.9, "function F1 {func}");
    assert!(perfect > 0 && zero > 0);
}
