//! `fusegrpo tasks import` (published rows over local repositories; a row
//! that cannot be used is named and skipped, never fatal) and `fusegrpo
//! tasks split` (by repository; SWE-bench's repositories never train).

use e2e::{fusegrpo, fusegrpo_ok, git, read_jsonl};
use serde_json::{json, Value};
use std::path::Path;

const CALC: &str = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";

/// `repos/o__calc` with one commit; returns its id.
fn calc_repo(dir: &Path) -> String {
    let repo = dir.join("repos/o__calc");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("calc.py"), CALC).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "base"]);
    git(&repo, &["rev-parse", "HEAD"])
}

/// The diff of calc.py changed to `after` (the work tree is restored).
fn diff_to(dir: &Path, after: &str) -> String {
    let repo = dir.join("repos/o__calc");
    std::fs::write(repo.join("calc.py"), after).unwrap();
    let diff = git(&repo, &["diff"]) + "\n";
    git(&repo, &["checkout", "-q", "--", "."]);
    diff
}

fn row(id: &str, repo: &str, base: &str, patch: &str, edited: &[&str]) -> String {
    json!({"instance_id": id, "repo": repo, "base_commit": base, "problem_statement": format!("issue of {id}"),
           "patch": patch, "edited_entities": edited, "FAIL_TO_PASS": ["t"]})
    .to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The calc repository ([`calc_repo`]) and two bugs as patches against
/// its commit: `a + b` made `a * b`, and `a - b` made `b - a`.
fn calc_bugs(dir: &std::path::Path) -> (String, String, String) {
    let base = calc_repo(dir);
    let bug_add = diff_to(dir, &CALC.replace("a + b", "a * b"));
    let bug_sub = diff_to(dir, &CALC.replace("a - b", "b - a"));
    (base, bug_add, bug_sub)
}

#[test]
fn tasks_import_swe_smith_imports_good_rows_and_names_the_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (base, bug_add, bug_sub) = calc_bugs(dir);
    let short = &base[..7];
    let stale = bug_add.replace("-    return a + b", "-    return a + b + 1");
    let mut empty_statement: Value = serde_json::from_str(&row("calc.blank", "o/calc", short, &bug_add, &[])).unwrap();
    empty_statement["problem_statement"] = "".into();
    let rows = [
        row("calc.add", "o/calc", short, &bug_add, &["calc.py:add"]),
        row("calc.missing", "o/calc", "0badc0de", &bug_add, &["calc.py:add"]),
        "not json".to_string(),
        row("calc.stale", "o/calc", short, &stale, &["calc.py:add"]),
        empty_statement.to_string(),
        row("other.x", "o/absent", short, &bug_add, &[]),
        row("calc.sub", "o/calc", short, &bug_sub, &["calc.py:sub", "calc.py:add"]),
    ];
    let input = dir.join("rows.jsonl");
    std::fs::write(&input, rows.join("\n") + "\n\n").unwrap();
    let (out, report) = (dir.join("tasks.jsonl"), dir.join("report.json"));
    let d = |p: &Path| p.to_str().unwrap().to_string();
    let args = ["tasks", "import", "--format", "swe-smith", "--input", &d(&input), "--repos-dir", &d(&dir.join("repos")), "--out", &d(&out), "--report", &d(&report)];
    let run = fusegrpo(&args);
    let err = stderr(&run);
    assert!(run.status.success(), "bad rows are never fatal: {err}");
    for (id, why) in [
        ("calc.missing", "0badc0de"),
        ("rows.jsonl:3", "not a row"),
        ("calc.stale", "does not apply"),
        ("calc.blank", "problem statement is empty"),
        ("other.x", "o/absent"),
    ] {
        assert!(err.lines().any(|l| l.starts_with(&format!("skipped {id}")) || (l.starts_with("skipped") && l.contains(id) && l.contains(why))), "{id} not named:\n{err}");
        assert!(err.contains(why), "{id}: {why} not said:\n{err}");
    }
    assert!(err.contains("2 of 7 rows imported"), "{err}");

    let tasks = read_jsonl(&out);
    let ids: Vec<&str> = tasks.iter().map(|t| t["instance_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["calc.add", "calc.sub"]);
    let work = dir.join("repos/o__calc");
    for (t, func) in tasks.iter().zip(["calc.py:add", "calc.py:sub"]) {
        let commit = t["base_commit"].as_str().unwrap();
        assert_eq!(commit.len(), 40);
        assert_eq!(git(&work, &["rev-parse", &format!("{commit}^")]), base, "the buggy commit's parent is the base");
        let id = t["instance_id"].as_str().unwrap();
        assert_eq!(git(&work, &["rev-parse", &format!("refs/fusegrpo/swe-smith/{id}")]), commit);
        assert_eq!(t["gold"]["files"], json!(["calc.py"]));
        assert_eq!(t["gold"]["functions"], json!([func]));
        assert!(t["patch"].as_str().unwrap().contains("+    return a"), "the fix restores the base: {}", t["patch"]);
    }
    // The environment reads the buggy commit.
    let call = r#"{"name": "read_file", "arguments": {"path": "calc.py"}}"#;
    let shown = fusegrpo_ok(&["tool", "--repos-dir", &d(&dir.join("repos")), "--repo", "o/calc", "--commit", tasks[0]["base_commit"].as_str().unwrap(), "--call", call]);
    assert!(shown.contains("return a * b"), "{shown}");

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!((r["rows"].as_u64(), r["imported"].as_u64()), (Some(7), Some(2)), "{r}");
    let skipped: Vec<&String> = r["skipped"].as_object().unwrap().keys().collect();
    assert_eq!(skipped.len(), 5, "{r}");
    for id in ["calc.missing", "calc.stale", "calc.blank", "other.x"] {
        assert!(r["skipped"][id].is_string(), "{id}: {r}");
    }
    assert!(skipped.iter().any(|k| k.ends_with("rows.jsonl:3")), "{r}");
    // add: equal; sub: ours {sub}, theirs {sub, add}: Jaccard 1/2, recall 1/2.
    let a = &r["agreement"];
    assert_eq!((a["rows"].as_u64(), a["equal"].as_u64()), (Some(2), Some(1)), "{a}");
    assert!((a["mean_jaccard"].as_f64().unwrap() - 0.75).abs() < 1e-9 && (a["mean_recall"].as_f64().unwrap() - 0.75).abs() < 1e-9, "{a}");
    assert!(err.contains("1 of 2 equal"), "{err}");

    // Imported again: the same tasks, the same commits.
    fusegrpo_ok(&args);
    assert_eq!(read_jsonl(&out), tasks);
}

#[test]
fn tasks_import_swe_gym_keeps_the_fix_at_the_base_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = calc_repo(dir);
    let fix = diff_to(dir, &CALC.replace("a - b", "b - a"));
    let input = dir.join("gym.jsonl");
    std::fs::write(&input, [row("calc-1", "o/calc", &base[..9], &fix, &[]), row("calc-2", "o/calc", "feedface", &fix, &[])].join("\n")).unwrap();
    let (out, report) = (dir.join("tasks.jsonl"), dir.join("report.json"));
    let d = |p: &Path| p.to_str().unwrap().to_string();
    let run = fusegrpo(&["tasks", "import", "--format", "swe-gym", "--input", &d(&input), "--repos-dir", &d(&dir.join("repos")), "--out", &d(&out), "--report", &d(&report)]);
    let err = stderr(&run);
    assert!(run.status.success() && err.contains("skipped calc-2") && err.contains("feedface"), "{err}");
    let tasks = read_jsonl(&out);
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["base_commit"], base.as_str(), "the row's commit, its full id");
    assert_eq!(tasks[0]["patch"], fix.as_str());
    assert_eq!(tasks[0]["gold"]["functions"], json!(["calc.py:sub"]));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["agreement"].is_null(), "no published gold to compare: {r}");
    assert_eq!(r["skipped"].as_object().unwrap().len(), 1);
    assert!(git(&dir.join("repos/o__calc"), &["for-each-ref", "refs/fusegrpo"]).is_empty(), "SWE-Gym rows write no commit");
}

fn task(id: &str, repo: &str, statement: &str) -> String {
    json!({"instance_id": id, "repo": repo, "base_commit": "0123456789abcdef0123456789abcdef01234567", "problem_statement": statement,
           "gold": {"files": ["a.py"], "functions": []}})
    .to_string()
}

#[test]
fn tasks_split_by_repository_keeps_swe_bench_out_of_training() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = dir.join("a.jsonl");
    let b = dir.join("b.jsonl");
    let long = "x".repeat(200);
    std::fs::write(
        &a,
        [
            task("one-1", "acme/one", "short"),
            task("one-2", "acme/one", &long),
            task("two-1", "acme/two", "short"),
            task("req-1", "psf/requests", "short"),
            task("dj-1", "django/django", "short"),
        ]
        .join("\n"),
    )
    .unwrap();
    // one-1 again word for word (kept once), and a third repository.
    std::fs::write(&b, [task("one-1", "acme/one", "short"), task("three-1", "acme/three", "short"), task("two-2", "acme/two", "short")].join("\n")).unwrap();
    let held = dir.join("held.txt");
    // Spelled as GitHub would accept it: names ignore case.
    std::fs::write(&held, "# the held-out repositories\nAcme/Two  # a comment\n\n").unwrap();
    let (train, heldout) = (dir.join("train.jsonl"), dir.join("heldout.jsonl"));
    let d = |p: &Path| p.to_str().unwrap().to_string();
    let ids = |p: &Path| read_jsonl(p).iter().map(|t| format!("{}@{}", t["instance_id"].as_str().unwrap(), t["repo"].as_str().unwrap())).collect::<Vec<_>>();
    let split = |extra: &[&str]| {
        let mut args = vec!["tasks".to_string(), "split".into(), "--input".into(), d(&a), d(&b), "--heldout-repos".into(), d(&held)];
        args.extend(["--train".into(), d(&train), "--heldout".into(), d(&heldout)]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = fusegrpo(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };

    let err = split(&[]);
    assert_eq!(ids(&train), ["one-1@acme/one", "one-2@acme/one", "three-1@acme/three"]);
    assert_eq!(ids(&heldout), ["two-1@acme/two", "two-2@acme/two"]);
    assert!(err.contains("2 tasks of SWE-bench's repositories left out of training"), "{err}");
    assert!(err.contains("1 tasks repeated word for word"), "{err}");

    let err = split(&["--max-statement-chars", "100"]);
    assert_eq!(ids(&train), ["one-1@acme/one", "three-1@acme/three"], "the long statement is dropped");
    assert!(err.contains("1 tasks dropped"), "{err}");

    // A SWE-bench repository named as held out is held out.
    std::fs::write(&held, "acme/two\npsf/requests\n").unwrap();
    split(&[]);
    assert_eq!(ids(&heldout), ["two-1@acme/two", "req-1@psf/requests", "two-2@acme/two"]);
    assert!(!ids(&train).iter().any(|t| t.contains("psf/requests") || t.contains("django")));

    std::fs::write(&held, "# nothing\n").unwrap();
    let out = fusegrpo(&["tasks", "split", "--input", &d(&a), "--heldout-repos", &d(&held), "--train", &d(&train), "--heldout", &d(&heldout)]);
    assert!(!out.status.success() && stderr(&out).contains("names no repository"), "{}", stderr(&out));
    std::fs::write(&held, "not-a-repo\n").unwrap();
    let out = fusegrpo(&["tasks", "split", "--input", &d(&a), "--heldout-repos", &d(&held), "--train", &d(&train), "--heldout", &d(&heldout)]);
    assert!(!out.status.success() && stderr(&out).contains("held.txt:1"), "{}", stderr(&out));
}

#[test]
fn tasks_split_refuses_an_id_repeated_with_other_contents_and_a_heldout_name_that_matches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, b, held) = (dir.join("a.jsonl"), dir.join("b.jsonl"), dir.join("held.txt"));
    std::fs::write(&a, [task("one-1", "acme/one", "short"), task("two-1", "Acme/Two", "short")].join("\n")).unwrap();
    std::fs::write(&b, task("one-1", "acme/three", "short")).unwrap();
    std::fs::write(&held, "acme/two\n").unwrap();
    let (train, heldout) = (dir.join("train.jsonl"), dir.join("heldout.jsonl"));
    let d = |p: &Path| p.to_str().unwrap().to_string();
    let split = |inputs: &[&Path]| {
        let mut args = vec!["tasks".to_string(), "split".into(), "--input".into()];
        args.extend(inputs.iter().map(|p| d(p)));
        args.extend(["--heldout-repos".into(), d(&held), "--train".into(), d(&train), "--heldout".into(), d(&heldout)]);
        fusegrpo(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = split(&[&a, &b]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("b.jsonl:1") && err.contains("one-1") && err.contains("a.jsonl:1"), "{err}");
    assert!(!train.exists() && !heldout.exists(), "nothing written");
    // Within one file: refused by line.
    std::fs::write(&b, [task("x-1", "acme/one", "short"), task("x-1", "acme/one", "other")].join("\n")).unwrap();
    let out = split(&[&b]);
    assert!(!out.status.success() && stderr(&out).contains("b.jsonl:2"), "{}", stderr(&out));
    // `acme/two` holds out `Acme/Two`'s tasks.
    let out = split(&[&a]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_jsonl(&heldout).len(), 1);
    assert_eq!(read_jsonl(&train).len(), 1);
    // A held-out name that matches no task is a typo, not an empty split.
    std::fs::write(&held, "acme/two\nacme/tow\n").unwrap();
    let out = split(&[&a]);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("acme/tow") && err.contains("match no task"), "{err}");
}

#[test]
fn tasks_import_refuses_repeated_and_empty_ids_before_any_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (base, bug_add, bug_sub) = calc_bugs(dir);
    let input = dir.join("rows.jsonl");
    let out = dir.join("tasks.jsonl");
    let d = |p: &Path| p.to_str().unwrap().to_string();
    let import = |format: &str| fusegrpo(&["tasks", "import", "--format", format, "--input", &d(&input), "--repos-dir", &d(&dir.join("repos")), "--out", &d(&out)]);
    std::fs::write(&input, [row("calc.a", "o/calc", &base, &bug_add, &[]), row("calc.b", "o/calc", &base, &bug_sub, &[]), row("calc.a", "o/calc", &base, &bug_sub, &[])].join("\n")).unwrap();
    for format in ["swe-smith", "swe-bench"] {
        let run = import(format);
        let err = stderr(&run);
        assert!(!run.status.success() && err.contains("rows.jsonl:3") && err.contains("calc.a") && err.contains("line 1"), "{format}: {err}");
        assert!(!out.exists(), "{format}: nothing written");
    }
    assert!(git(&dir.join("repos/o__calc"), &["for-each-ref", "refs/fusegrpo"]).is_empty(), "no row was imported");
    std::fs::write(&input, [row("calc.a", "o/calc", &base, &bug_add, &[]), row("", "o/calc", &base, &bug_sub, &[])].join("\n")).unwrap();
    let run = import("swe-gym");
    let err = stderr(&run);
    assert!(!run.status.success() && err.contains("rows.jsonl:2") && err.contains("instance_id") && err.contains("empty"), "{err}");
}

#[test]
fn tasks_import_swe_bench_skips_a_fix_that_does_not_apply_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = calc_repo(dir);
    let fix = diff_to(dir, &CALC.replace("a - b", "b - a"));
    let stale = fix.replace("-    return a - b", "-    return a - b - 0");
    assert_ne!(stale, fix);
    let input = dir.join("bench.jsonl");
    std::fs::write(&input, [row("calc-1", "o/calc", &base, &fix, &[]), row("calc-2", "o/calc", &base, &stale, &[])].join("\n")).unwrap();
    let out = dir.join("tasks.jsonl");
    let d = |p: &Path| p.to_str().unwrap().to_string();
    for format in ["swe-bench", "swe-gym"] {
        let run = fusegrpo(&["tasks", "import", "--format", format, "--input", &d(&input), "--repos-dir", &d(&dir.join("repos")), "--out", &d(&out)]);
        let err = stderr(&run);
        assert!(run.status.success(), "{err}");
        assert!(err.contains("skipped calc-2 (") && err.contains("bench.jsonl:2") && err.contains("does not apply"), "{format}: {err}");
        assert!(err.contains("1 of 2 rows imported"), "{err}");
        let ids: Vec<String> = read_jsonl(&out).iter().map(|t| t["instance_id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, ["calc-1"], "{format}");
    }
}

#[test]
fn swe_smith_ids_that_clean_alike_both_evaluate_after_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (base, bug_add, bug_sub) = calc_bugs(dir);
    let input = dir.join("rows.jsonl");
    std::fs::write(&input, [row("col x", "o/calc", &base, &bug_add, &[]), row("col_x", "o/calc", &base, &bug_sub, &[])].join("\n")).unwrap();
    let (out, repos) = (dir.join("tasks.jsonl"), dir.join("repos"));
    let d = |p: &Path| p.to_str().unwrap().to_string();
    fusegrpo_ok(&["tasks", "import", "--format", "swe-smith", "--input", &d(&input), "--repos-dir", &d(&repos), "--out", &d(&out)]);
    let work = repos.join("o__calc");
    let refs = git(&work, &["for-each-ref", "--format=%(refname)", "refs/fusegrpo"]);
    assert_eq!(refs.lines().count(), 2, "one ref per id: {refs}");
    git(&work, &["gc", "--prune=now", "-q"]);
    fusegrpo_ok(&["init-tiny", "--out", &d(&dir.join("model")), "--small-vocab", "1024", "--seed", "2"]);
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, "name = \"e2e\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n[episode]\nmax_turns = 3\nmax_turn_tokens = 16\n").unwrap();
    let episodes = dir.join("episodes.jsonl");
    fusegrpo_ok(&["eval", "--config", &d(&cfg), "--tasks", &d(&out), "--policy", "scripted", "--group", "1", "--out", &d(&episodes)]);
    let ids: Vec<String> = read_jsonl(&episodes).iter().map(|e| e["task_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["col x", "col_x"]);
}
