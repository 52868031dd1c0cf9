//! `fusegrpo tasks synth` on a small Python + Rust + Go repository made
//! here with git: deterministic by seed, gold that exists at the commit, no
//! path in any issue, tests and one-liners skipped, Rust and Go functions as
//! gold; `--verify`'s recall line; the bad inputs (a tree without a
//! function, more tasks than functions, an HTTP teacher that fails for some
//! functions or all). Also, on the same repository's history: `tool` grep /
//! read_file report Rust and Go function entities and `tasks from-history`
//! gives function-level gold.

use e2e::{fusegrpo, fusegrpo_ok, git, read_jsonl};
use serde_json::{json, Value};
use rollout::testutil::{StubReply, StubServer};
use std::path::Path;

const PY: &str = "class Cart:\n    def add_item(self, item, quantity=1):\n        \"\"\"Add an item to the cart with a quantity.\"\"\"\n        if quantity <= 0:\n            raise ValueError(\"quantity must be positive\")\n        self.line_items.append((item, quantity))\n\n    def size(self):\n        return len(self.line_items)\n";
const RS: &str = "pub struct Stack {\n    items: Vec<u32>,\n    high_water: usize,\n}\n\nimpl Stack {\n    /// Pushes a value and records the high water mark.\n    pub fn push(&mut self, value: u32) {\n        self.items.push(value);\n        self.high_water = self.high_water.max(self.items.len());\n        self.pushes += 1;\n    }\n\n    pub fn len(&self) -> usize { self.items.len() }\n}\n";
const GO: &str = "package queue\n\n// Enqueue appends a job and wakes one waiting worker.\nfunc (q *Queue) Enqueue(job Job) error {\n\tif q.closed {\n\t\treturn errors.New(\"queue is closed for new jobs\")\n\t}\n\tq.pendingJobs = append(q.pendingJobs, job)\n\treturn nil\n}\n";
const GO_TEST: &str = "package queue\n\nfunc TestEnqueue(t *testing.T) {\n\tq := &Queue{}\n\tq.Enqueue(Job{})\n\tif len(q.pendingJobs) != 1 {\n\t\tt.Fatal(\"len\")\n\t}\n}\n";

/// `dir/repos/acme__mixed` (three commits: the files, then a Rust fix, then
/// a Go fix) and `dir/repos/acme__docs` (no code); returns the first commit.
pub(crate) fn world(dir: &Path) -> String {
    let work = dir.join("repos/acme__mixed");
    for (path, text) in [("shop/cart.py", PY), ("src/stack.rs", RS), ("queue/queue.go", GO), ("queue/queue_test.go", GO_TEST)] {
        let p = work.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "initial version of the shop, the stack and the queue"]);
    let base = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("src/stack.rs"), RS.replace("self.items.len());", "self.items.len() + 1);")).unwrap();
    git(&work, &["commit", "-qam", "Stack::push must count the new item in the high water mark"]);
    std::fs::write(work.join("queue/queue.go"), GO.replace("return nil", "q.wakeWorker()\n\treturn nil")).unwrap();
    git(&work, &["commit", "-qam", "Queue.Enqueue forgot to wake a worker after appending the job"]);
    let docs = dir.join("repos/acme__docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("README.md"), "only docs\n").unwrap();
    git(&docs, &["init", "-q", "-b", "main"]);
    git(&docs, &["add", "-A"]);
    git(&docs, &["commit", "-qm", "docs"]);
    base
}

fn synth(dir: &Path, base: &str, out: &str, extra: &[&str]) -> std::process::Output {
    let repos = dir.join("repos");
    let out = dir.join(out);
    let mut args = vec!["tasks", "synth", "--repos-dir", repos.to_str().unwrap(), "--repo", "acme/mixed", "--commit", base, "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    fusegrpo(&args)
}

fn success(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON summary on stdout")
}

#[test]
fn synth_is_deterministic_multi_language_and_leaks_no_path() {
    let tmp = tempfile::tempdir().unwrap();
    let base = world(tmp.path());
    let a = synth(tmp.path(), &base, "a.jsonl", &["--count", "10", "--seed", "5"]);
    let summary = success(&a);
    // Three real functions; the test function and the one-liners are skipped.
    assert_eq!((summary["candidates"].as_u64(), summary["tasks"].as_u64(), summary["failed"].as_u64()), (Some(3), Some(3), Some(0)));
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(err.contains("10 tasks asked for, only 3 functions qualify: all of them were taken"), "{err}");
    let rows = read_jsonl(&tmp.path().join("a.jsonl"));
    let mut gold: Vec<String> = rows.iter().map(|r| r["gold"]["functions"][0].as_str().unwrap().to_string()).collect();
    gold.sort();
    assert_eq!(gold, ["queue/queue.go:Queue.Enqueue", "shop/cart.py:Cart.add_item", "src/stack.rs:Stack.push"]);
    let repos = tmp.path().join("repos");
    for r in &rows {
        let func = r["gold"]["functions"][0].as_str().unwrap();
        let (path, _) = func.split_once(':').unwrap();
        assert_eq!(r["gold"]["files"], json!([path]));
        assert_eq!(r["base_commit"], base.as_str());
        assert!(!r["problem_statement"].as_str().unwrap().contains(path), "{r}");
        // The gold function exists at the commit: reading the file surfaces it.
        let call = json!({"name": "read_file", "arguments": {"path": path}}).to_string();
        let v: Value = serde_json::from_str(&fusegrpo_ok(&["tool", "--repos-dir", repos.to_str().unwrap(), "--repo", "acme/mixed", "--commit", &base, "--call", &call])).unwrap();
        assert!(v["entities"].as_array().unwrap().contains(&json!(func)), "{func} not at {base}: {v}");
    }
    success(&synth(tmp.path(), &base, "b.jsonl", &["--count", "10", "--seed", "5"]));
    assert_eq!(std::fs::read(tmp.path().join("a.jsonl")).unwrap(), std::fs::read(tmp.path().join("b.jsonl")).unwrap(), "same seed, same file");
    // The lines are ordinary tasks: `tasks gold`-free commands load them (reward takes one).
    let task = tmp.path().join("task.json");
    std::fs::write(&task, rows[0].to_string()).unwrap();
    let episode = tmp.path().join("episode.json");
    std::fs::write(&episode, json!({"turns": [rows[0]["gold"]["functions"][0]]}).to_string()).unwrap();
    let r: Value = serde_json::from_str(&fusegrpo_ok(&["reward", "--task", task.to_str().unwrap(), "--episode", episode.to_str().unwrap()])).unwrap();
    assert_eq!(r["f1"], 1.0, "{r}");
}

#[test]
fn verify_reports_the_recall_distribution() {
    let tmp = tempfile::tempdir().unwrap();
    let base = world(tmp.path());
    let out = synth(tmp.path(), &base, "v.jsonl", &["--count", "3", "--verify"]);
    let summary = success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recall: count 3, mean "), "{err}");
    let r = &summary["recall"];
    assert_eq!(r["count"], 3);
    assert_eq!(r["zero"].as_u64().unwrap() + r["partial"].as_u64().unwrap() + r["one"].as_u64().unwrap(), 3);
    let rows = read_jsonl(&tmp.path().join("v.jsonl"));
    assert!(rows.iter().all(|t| t["synth"]["recall"].is_number() && t["synth"]["instruction"].is_string()));
    let strict = synth(tmp.path(), &base, "s.jsonl", &["--count", "3", "--verify", "--min-recall", "1"]);
    if r["one"] == 0 {
        assert!(!strict.status.success());
    } else {
        assert_eq!(success(&strict)["tasks"], r["one"]);
    }
    let needs = synth(tmp.path(), &base, "n.jsonl", &["--min-recall", "0.5"]);
    assert!(String::from_utf8_lossy(&needs.stderr).contains("--min-recall needs --verify"));
}

#[test]
fn a_tree_without_functions_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    world(tmp.path());
    let repos = tmp.path().join("repos");
    let out = tmp.path().join("d.jsonl");
    let r = fusegrpo(&["tasks", "synth", "--repos-dir", repos.to_str().unwrap(), "--repo", "acme/docs", "--out", out.to_str().unwrap()]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("acme/docs") && err.contains("no function to make a task of"), "{err}");
    assert!(!out.exists());
}

/// A chat-completions server: 500 for requests about a Go file (or for
/// every request with `always_fail`), a usable issue otherwise.
fn flaky_server(always_fail: bool) -> StubServer {
    StubServer::start(move |r| {
        if always_fail || r.body.contains(".go") {
            StubReply::json(500, &json!({"error": {"message": "the teacher is down"}}))
        } else {
            let text = "After upgrading, adding things to my order sometimes fails with a confusing message about the amount.";
            StubReply::json(200, &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}))
        }
    })
}

#[test]
fn a_failing_http_teacher_is_reported_per_function_and_the_rest_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let base = world(tmp.path());
    let server = flaky_server(false);
    let out = synth(tmp.path(), &base, "h.jsonl", &["--count", "3", "--teacher", &server.url, "--max-retries", "0", "--concurrency", "1"]);
    assert_eq!(server.requests().len(), 3, "one request per function, no retry");
    let summary = success(&out);
    assert_eq!((summary["tasks"].as_u64(), summary["failed"].as_u64()), (Some(2), Some(1)), "{summary}");
    let err = String::from_utf8_lossy(&out.stderr);
    let short = &base[..8];
    assert!(err.lines().any(|l| l.contains("acme/mixed") && l.contains(short) && l.contains("queue/queue.go:Queue.Enqueue") && l.contains("HTTP 500") && l.contains("the teacher is down")), "{err}");
    let rows = read_jsonl(&tmp.path().join("h.jsonl"));
    assert_eq!(rows.len(), 2, "the other tasks are kept");
    assert!(rows.iter().all(|r| r["synth"]["writer"].as_str().unwrap().starts_with("http:")));
    assert!(!tmp.path().join("h.jsonl.partial").exists());

    let server = flaky_server(true);
    let out = synth(tmp.path(), &base, "f.jsonl", &["--count", "3", "--teacher", &server.url, "--max-retries", "0", "--concurrency", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no task made (3 functions drawn, 3 failed") && err.contains("the teacher is down"), "{err}");
    assert!(!tmp.path().join("f.jsonl").exists(), "nothing written when no task was made");
}

/// The grammars on a fetched-like Rust / Go repository: the tools name
/// function entities and history gives function-level gold.
#[test]
fn rust_and_go_history_gives_function_gold_and_tools_name_functions() {
    let tmp = tempfile::tempdir().unwrap();
    let base = world(tmp.path());
    let repos = tmp.path().join("repos");
    let r = repos.to_str().unwrap();
    let grep = json!({"name": "grep", "arguments": {"pattern": "high_water|pendingJobs"}}).to_string();
    let v: Value = serde_json::from_str(&fusegrpo_ok(&["tool", "--repos-dir", r, "--repo", "acme/mixed", "--commit", &base, "--call", &grep])).unwrap();
    let entities = v["entities"].as_array().unwrap();
    for e in ["src/stack.rs:Stack.push", "src/stack.rs:Stack", "queue/queue.go:Queue.Enqueue", "queue/queue_test.go:TestEnqueue"] {
        assert!(entities.contains(&json!(e)), "{e} not in {v}");
    }
    let read = json!({"name": "read_file", "arguments": {"path": "src/stack.rs", "start_line": 8, "end_line": 14}}).to_string();
    let v: Value = serde_json::from_str(&fusegrpo_ok(&["tool", "--repos-dir", r, "--repo", "acme/mixed", "--commit", &base, "--call", &read])).unwrap();
    assert_eq!(v["entities"], json!(["src/stack.rs", "src/stack.rs:Stack", "src/stack.rs:Stack.len", "src/stack.rs:Stack.push"]));
    let out = tmp.path().join("history.jsonl");
    fusegrpo_ok(&["tasks", "from-history", "--repo", "acme/mixed", "--repos-dir", r, "--out", out.to_str().unwrap()]);
    let rows = read_jsonl(&out);
    let gold: Vec<&Value> = rows.iter().map(|t| &t["gold"]["functions"]).collect();
    assert_eq!(gold, [&json!(["queue/queue.go:Queue.Enqueue"]), &json!(["src/stack.rs:Stack.push"])], "{rows:?}");
}
