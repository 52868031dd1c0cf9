//! Issue 66 (D5, D12): a job's result never depends on its stderr, full
//! (`2>/dev/full`) or closed (`2>&1 | head -1` after head left), even when
//! it logs a warning; and a command whose one product, its stdout, cannot
//! be written does not exit 0.

use e2e::{fusegrpo_bin, read_jsonl, s, shop_world};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// How a stream is broken: `/dev/full` (every write fails with ENOSPC) or a
/// pipe whose reader has gone (EPIPE).
#[derive(Clone, Copy, Debug)]
enum Broken {
    Full,
    Closed,
}

fn dev_full() -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full"))
}

/// Runs `fusegrpo args` in `dir` with stderr broken as `how` and stdout
/// kept; returns (exit code, stdout).
fn with_broken_stderr(dir: &Path, how: Broken, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(fusegrpo_bin());
    cmd.args(args).current_dir(dir).env("FUSEGRPO_LOG", "info").stdin(Stdio::null()).stdout(Stdio::piped());
    match how {
        Broken::Full => cmd.stderr(dev_full()),
        Broken::Closed => cmd.stderr(Stdio::piped()),
    };
    let mut child = cmd.spawn().expect("spawn fusegrpo");
    drop(child.stderr.take());
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    (child.wait().unwrap().code(), out)
}

/// A `train` that warns (off-policy with the built-in engine on the CPU)
/// and a `localize` that warns (a file name that is not UTF-8) finish
/// their work and exit 0 with stderr full or closed.
#[test]
fn a_warning_to_a_broken_stderr_stops_no_job() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shop_world(dir);
    for (i, how) in [Broken::Full, Broken::Closed].into_iter().enumerate() {
        let out = format!("run{i}");
        let args = ["train", "--config", "run.toml", "--out", &out, "--max-steps", "1", "--set", "rollout.off_policy=1", "--set", "grpo.rollout_correction=tis"];
        let (code, _) = with_broken_stderr(dir, how, &args);
        assert_eq!(code, Some(0), "train with stderr {how:?}");
        assert!(dir.join(&out).join("step_00000001/model.safetensors").is_file(), "train with stderr {how:?} saved its step");
        assert_eq!(read_jsonl(&dir.join(&out).join("metrics.jsonl")).len(), 1);
    }
    let folder = dir.join("plain");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("cart.py"), "class Cart:\n    def add_item(self, item):\n        raise ValueError('negative price')\n").unwrap();
    {
        use std::os::unix::ffi::OsStrExt;
        std::fs::write(folder.join(std::ffi::OsStr::from_bytes(b"bad\xffname.py")), "x = 1\n").unwrap();
    }
    std::fs::write(dir.join("issue.txt"), "add_item raises 'negative price' for discounts").unwrap();
    for how in [Broken::Full, Broken::Closed] {
        let (code, out) = with_broken_stderr(dir, how, &["localize", "--config", "run.toml", "--policy", "scripted", "--repo", "plain", "--issue", "issue.txt"]);
        assert_eq!(code, Some(0), "localize with stderr {how:?}");
        assert!(out.contains("cart.py"), "localize with stderr {how:?}: {out}");
    }
}

/// `mcp` with a full or closed stderr: a refused frame's warning does not
/// stop the frame reader; every request after it is answered.
#[test]
fn mcp_answers_after_a_warning_to_a_broken_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    for how in [Broken::Full, Broken::Closed] {
        mcp_with_broken_stderr(dir, &cfg, how);
    }
}

fn mcp_with_broken_stderr(dir: &Path, cfg: &Path, how: Broken) {
    let mut child = Command::new(fusegrpo_bin())
        .args(["mcp", "--config", s(cfg), "--policy", "scripted", "--repo", s(&dir.join("repos/acme__shop"))])
        .env("FUSEGRPO_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(match how {
            Broken::Full => dev_full(),
            Broken::Closed => Stdio::piped(),
        })
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    let frames = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "this is not JSON",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"def"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"glob","arguments":{"pattern":"**/*.py"}}}"#,
    ];
    for f in frames {
        writeln!(stdin, "{f}").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    drop(stdin);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let _ = child.wait();
    let replies: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let has = |id: serde_json::Value| replies.iter().any(|r| r["id"] == id && r.get("result").is_some());
    assert!(has(2.into()) && has(3.into()), "stderr {how:?}: {out}");
    assert!(replies.iter().any(|r| r["error"]["code"] == -32700), "the garbage frame's error: {out}");
}

/// `localize --json > /dev/full`: the result is lost, so the exit is 1 and
/// stderr says why; a reader that left (`| head -1`) is not an error.
#[test]
fn a_lost_stdout_is_a_failure_and_a_reader_that_left_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shop_world(dir);
    std::fs::write(dir.join("issue.txt"), "compute_tax uses a flat rate").unwrap();
    let args = ["localize", "--config", "run.toml", "--policy", "scripted", "--repo", "repos/acme__shop", "--issue", "issue.txt", "--json"];
    let out = Command::new(fusegrpo_bin()).args(args).current_dir(dir).env("FUSEGRPO_LOG", "warn").stdout(dev_full()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Error: writing the output to stdout: No space left on device"), "{err}");
    let mut child = Command::new(fusegrpo_bin()).args(args).current_dir(dir).env("FUSEGRPO_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{err}");
}

/// Issue 66 D15: `localize --issue` of a 10 MB issue is cut in bounded
/// memory (it peaked at 1.96 GB): its peak RSS stays under 600 MB, and
/// the note says how long it was.
#[test]
fn a_ten_megabyte_issue_is_cut_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shop_world(dir);
    std::fs::write(dir.join("big.txt"), "compute_tax shop ".repeat(600_000)).unwrap();
    // Through python3, whose getrusage(RUSAGE_CHILDREN) sees this one child only.
    let measure = "import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:], capture_output=True)\nsys.stdout.buffer.write(r.stdout)\nsys.stderr.buffer.write(r.stderr)\nprint('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\nsys.exit(r.returncode)";
    let out = Command::new("python3")
        .args(["-c", measure, s(&fusegrpo_bin()), "localize", "--config", "run.toml", "--policy", "scripted", "--repo", "repos/acme__shop", "--issue", "big.txt"])
        .current_dir(dir)
        .env("FUSEGRPO_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("note: the issue is ") && text.contains("tokens of its middle were dropped"), "{text}");
    let peak_kb: f64 = text.lines().find_map(|l| l.strip_prefix("PEAK_KB ")).unwrap().trim().parse().unwrap();
    let peak_mb = peak_kb / 1024.0;
    println!("localize of a 10 MB issue: peak RSS {peak_mb:.0} MB");
    assert!(peak_mb < 600.0, "{peak_mb:.0} MB");
}

/// Issue 66 D19: a `--repo` that is a link to a plain folder is read as
/// the folder, without a warning that its path is not UTF-8.
#[test]
fn a_linked_plain_folder_is_read_without_a_false_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shop_world(dir);
    std::fs::create_dir_all(dir.join("p1")).unwrap();
    std::fs::write(dir.join("p1/tax.py"), "def compute_tax(total):\n    return total\n").unwrap();
    std::os::unix::fs::symlink("p1", dir.join("linkp1")).unwrap();
    std::fs::write(dir.join("issue.txt"), "compute_tax is wrong").unwrap();
    let out = Command::new(fusegrpo_bin())
        .args(["localize", "--config", "run.toml", "--policy", "scripted", "--repo", "linkp1", "--issue", "issue.txt"])
        .current_dir(dir)
        .env("FUSEGRPO_LOG", "info")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("not UTF-8"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("tax.py"));
}

/// Issue 65 item 8: outside a terminal (`nohup`, CI, `2> log`), `train`
/// and `sft` log a line per step with the figures the progress bar shows,
/// and SFT's last line has its losses.
#[test]
fn train_and_sft_log_a_line_per_step_outside_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let run = |args: &[&str]| -> String {
        let out = Command::new(fusegrpo_bin()).args(args).current_dir(dir).env_remove("FUSEGRPO_LOG").stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        err
    };
    let log = run(&["train", "--config", "run.toml", "--out", "g", "--max-steps", "3"]);
    for k in 1..=3 {
        assert!(log.lines().any(|l| l.contains(&format!("steps {k}/3: reward ")) && l.contains(" loss ")), "step {k}:\n{log}");
    }
    assert!(log.contains("saved "), "{log}");
    let traj = dir.join("traj.jsonl");
    run(&["synth", "--config", s(&cfg), "--tasks", "tasks.jsonl", "--teacher", "scripted", "--samples", "2", "--out", s(&traj)]);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[sft]\nepochs = 2\nbatch_rows = 1\n[sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\n");
    std::fs::write(&cfg, text).unwrap();
    let log = run(&["sft", "--config", "run.toml", "--data", "traj.jsonl", "--out", "s", "--max-steps", "3"]);
    for k in 1..=3 {
        assert!(log.lines().any(|l| l.contains(&format!("sft steps {k}/")) && l.contains("loss ")), "sft step {k}:\n{log}");
    }
}

/// Issue 63: `eval ... 2>&1 >/dev/null | head -1` (stderr's reader leaves
/// after a line) and `eval ... | head -1` (stdout's), and the same with a
/// reader that leaves before the first line (`head -n 0`): the job goes on
/// and exits as it would have (status 0, no panic), its `--out` file
/// complete, and nothing written after the pipe closed reaches the other
/// stream (no "Broken pipe", no error).
#[test]
fn eval_whose_reader_left_exits_as_it_would_have() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shop_world(dir);
    let bin = fusegrpo_bin();
    let eval = |out: &str| format!("'{}' eval --config run.toml --tasks tasks.jsonl --group 2 --out {out}", s(&bin));
    let shell = |script: &str| {
        let run = Command::new("bash").args(["-c", script]).current_dir(dir).env("FUSEGRPO_LOG", "info").stdin(Stdio::null()).output().unwrap();
        assert!(run.status.success(), "{script}: {}", String::from_utf8_lossy(&run.stderr));
        (String::from_utf8_lossy(&run.stdout).into_owned(), String::from_utf8_lossy(&run.stderr).into_owned())
    };
    // As it would have: the same eval with its streams kept.
    let (table, log) = shell(&format!("{} 2>err.txt; echo \"status $?\"; cat err.txt >&2", eval("whole.jsonl")));
    assert!(table.trim_end().ends_with("status 0"), "{table}");
    assert!(table.lines().count() > 3 && log.lines().count() > 1, "a table on stdout and a log on stderr:\n{table}\n{log}");
    let whole = read_jsonl(&dir.join("whole.jsonl"));
    assert!(!whole.is_empty());
    let cases = [
        ("stderr-1", "2>&1 >/dev/null | head -1"),
        ("stderr-0", "2>&1 >/dev/null | head -n 0"),
        ("stdout-1", "2>err.txt | head -1"),
        ("stdout-0", "2>err.txt | head -n 0"),
    ];
    for (name, pipe) in cases {
        let _ = std::fs::remove_file(dir.join("err.txt"));
        let out = format!("{name}.jsonl");
        let script = format!("set -o pipefail; {} {pipe} > first.txt; echo \"status ${{PIPESTATUS[0]}}\"", eval(&out));
        let (status, _) = shell(&script);
        assert_eq!(status.trim(), "status 0", "{name}: {script}");
        let first = std::fs::read_to_string(dir.join("first.txt")).unwrap();
        assert!(first.lines().count() <= 1, "{name}: {first}");
        let episodes = read_jsonl(&dir.join(&out));
        assert_eq!(episodes.len(), whole.len(), "{name}: the --out file is complete");
        let ids = |eps: &[serde_json::Value]| eps.iter().map(|e| (e["task_id"].to_string(), e["sample"].to_string(), e["tokens"].to_string())).collect::<Vec<_>>();
        assert_eq!(ids(&episodes), ids(&whole), "{name}");
        if name.starts_with("stdout") {
            // stderr kept: the log as it would have been, with no word of the closed stdout.
            let err = std::fs::read_to_string(dir.join("err.txt")).unwrap();
            for word in ["panicked", "Broken pipe", "Error", "error"] {
                assert!(!err.contains(word), "{name}: {word}:\n{err}");
            }
        }
    }
}
