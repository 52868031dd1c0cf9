//! `fusegrpo practice-repo`: the HEAD it prints depends on the seed only, an
//! existing repository is kept unless --force, and its history makes tasks;
//! `bench search` runs on it.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl};

#[test]
fn practice_repo_is_deterministic_and_makes_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let make = |out: &std::path::Path, seed: &str, extra: &[&str]| {
        let mut args = vec!["practice-repo", "--out", out.to_str().unwrap(), "--seed", seed, "--commits", "15"];
        args.extend_from_slice(extra);
        fusegrpo_ok(&args).trim().to_string()
    };
    let head = make(&a, "3", &[]);
    assert_eq!(head.len(), 40, "a commit id: {head}");
    assert_eq!(make(&b, "3", &[]), head, "same seed, same HEAD");
    let again = fusegrpo(&["practice-repo", "--out", a.to_str().unwrap(), "--seed", "3", "--commits", "15"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"), "{}", String::from_utf8_lossy(&again.stderr));
    assert_ne!(make(&a, "4", &["--force"]), head, "another seed, another HEAD");

    let tasks = tmp.path().join("tasks.jsonl");
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", b.to_str().unwrap(), "--out", tasks.to_str().unwrap()]);
    let rows = read_jsonl(&tasks);
    assert!(rows.len() >= 11, "{} tasks from 15 commits", rows.len());
    assert!(rows.iter().all(|r| !r["gold"]["functions"].as_array().unwrap().is_empty()));
}

/// `bench search` on the practice repository: one line with the index's
/// sizes and build time, then a row per query with its first file.
#[test]
fn bench_search_builds_the_index_and_times_the_queries() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("repos");
    let made = fusegrpo(&["practice-repo", "--out", out.to_str().unwrap(), "--seed", "0", "--commits", "6"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let run = fusegrpo(&["bench", "search", "--repos-dir", out.to_str().unwrap(), "--repo", "practice/shop", "--runs", "2", "--query", "payment processing fee", "--query", "the"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let first = stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with("index of practice/shop@") && first.contains(" entities, build median "), "{stdout}");
    assert!(stdout.contains("| `payment processing fee` | shop/billing/"), "{stdout}");
    assert!(stdout.contains("| `the` | (the query has nothing to search for"), "{stdout}");
    let bad = fusegrpo(&["bench", "search", "--repos-dir", out.to_str().unwrap(), "--repo", "practice/shop", "--runs", "0"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--runs must be at least 1"));
}
