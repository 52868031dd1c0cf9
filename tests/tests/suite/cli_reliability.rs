//! Issue 52's regressions in the binary: a closed stderr or stdout never
//! panics a job (defect 6); adapters are checked whole on export and
//! record where their base is (defect 8); messages name what is wrong
//! (defect 9).

use e2e::{fusegrpo_bin, read_jsonl, shop_world};
use std::path::Path;
use std::process::{Command, Stdio};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `fusegrpo args` with stderr (or stdout) a pipe whose reader has
/// already gone, as in `fusegrpo ... 2>&1 >/dev/null | head -1` after head
/// exits; returns the exit status.
fn with_closed(stream: &str, args: &[&str]) -> Option<i32> {
    let mut cmd = Command::new(fusegrpo_bin());
    cmd.args(args).env("FUSEGRPO_LOG", "info").stdin(Stdio::null());
    match stream {
        "stderr" => cmd.stdout(Stdio::null()).stderr(Stdio::piped()),
        _ => cmd.stdout(Stdio::piped()).stderr(Stdio::null()),
    };
    let mut child = cmd.spawn().expect("spawn fusegrpo");
    // The reading end closes before the child writes a byte.
    drop(child.stderr.take());
    drop(child.stdout.take());
    child.wait().expect("wait").code()
}

#[test]
fn defect_6_a_closed_stderr_or_stdout_does_not_panic_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let mut rows = read_jsonl(&tasks);
    rows[0]["base_commit"] = "0".repeat(40).into();
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    // A refused task file: the job's own status (1), not a panic's (101).
    let refused = ["eval", "--config", s(&cfg), "--tasks", s(&bad), "--policy", "scripted"];
    assert_eq!(with_closed("stderr", &refused), Some(1));
    // A job that warns and goes on writes its output and exits 0.
    for (stream, name) in [("stderr", "a.jsonl"), ("stdout", "b.jsonl")] {
        let out = tmp.path().join(name);
        let args = ["eval", "--config", s(&cfg), "--tasks", s(&bad), "--policy", "scripted", "--group", "1", "--skip-bad-tasks", "--out", s(&out)];
        assert_eq!(with_closed(stream, &args), Some(0), "closed {stream}");
        assert_eq!(read_jsonl(&out).len(), 1, "closed {stream}: the one good task's episode");
    }
}
