//! `scripts/gpu-bench --dry-run`: the GPU benchmark's whole sequence on the
//! CPU with tiny shapes, as CI runs it (its PyTorch rows "not run" where the
//! Python has no torch): one JSON report of every section, our rows timed,
//! the step profiled per phase, a section with no time left skipped with
//! "skipped: time" rather than failing the call; bad options named.

use e2e::fusegrpo_bin;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gpu_bench(args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-bench");
    Command::new("python3").arg(script).args(args).env("FUSEGRPO_BIN", fusegrpo_bin()).env("FUSEGRPO_LOG", "warn").output().expect("python3 runs scripts/gpu-bench")
}

fn rows<'a>(report: &'a Value, section: &str) -> &'a Vec<Value> {
    report["sections"][section]["rows"].as_array().unwrap_or_else(|| panic!("no rows in section {section}: {report}"))
}

#[test]
fn gpu_bench_dry_run_reports_every_section_and_skips_a_section_out_of_time() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("out");
    // The step_big section gets no time: it must be recorded as skipped.
    let run = gpu_bench(&["--dry-run", out.to_str().unwrap(), "--limit", "step_big=0", "--rounds", "2", "--reps", "2"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("gpu-bench.json")).unwrap()).unwrap();
    assert_eq!(report["schema"], 1);
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["device"], "cpu");
    for key in ["gpu", "driver", "cuda_driver_api", "torch", "cudnn", "binary_version", "cpu"] {
        assert!(report["machine"].get(key).is_some(), "machine.{key} missing: {}", report["machine"]);
    }
    let torch = report["machine"]["torch_importable"] == true;
    // Attention: ours timed at both lengths, TFLOP/s counted; torch ran or says why not.
    let attention = rows(&report, "attention");
    for t in [64, 128] {
        let ours = attention.iter().find(|r| r["tokens"] == t && r["impl"] == "ours").expect("our attention row");
        assert_eq!(ours["status"], "ok", "{ours}");
        assert!(ours["seconds"].as_f64().unwrap() > 0.0 && ours["tflops"].as_f64().unwrap() > 0.0, "{ours}");
        assert_eq!(ours["runs"].as_array().unwrap().len(), 2, "one result per round: {ours}");
        assert_eq!(ours["kernel"], "fused");
        let theirs = attention.iter().find(|r| r["tokens"] == t && r["impl"].as_str().unwrap().starts_with("torch")).expect("a torch row");
        if torch {
            assert_eq!(theirs["status"], "ok", "{theirs}");
        } else {
            assert!(theirs["status"].as_str().unwrap().starts_with("not run: torch not importable"), "{theirs}");
        }
    }
    // The log-prob head: ours fused and unfused, with the same checksum source.
    let logprob = rows(&report, "logprob");
    for name in ["ours fused", "ours unfused", "torch"] {
        assert!(logprob.iter().any(|r| r["impl"] == name), "{name} missing: {logprob:?}");
    }
    let fused = logprob.iter().find(|r| r["impl"] == "ours fused").unwrap();
    assert!(fused["seconds"].as_f64().unwrap() > 0.0, "{fused}");
    // The step: both shapes timed, tokens/s, the planner's figure, and the
    // last round's profiled step with every phase summing to at most it.
    let step = rows(&report, "step");
    for t in [64, 128] {
        let ours = step.iter().find(|r| r["tokens"] == t && r["impl"] == "ours").expect("our step row");
        assert_eq!(ours["status"], "ok", "{ours}");
        assert!(ours["tokens_per_second"].as_f64().unwrap() > 0.0 && ours["planned_peak_mib"].as_f64().unwrap() > 0.0, "{ours}");
        let phases = &ours["phases"];
        let seconds = phases["seconds"].as_object().unwrap_or_else(|| panic!("no phases: {ours}"));
        let names: Vec<&str> = seconds.keys().map(String::as_str).collect();
        assert_eq!(names, ["attention", "matmul", "logprob_head", "norm_rope_elementwise", "optimizer", "other"]);
        let sum: f64 = seconds.values().map(|v| v.as_f64().unwrap()).sum();
        assert!(sum > 0.0 && sum <= phases["step_seconds"].as_f64().unwrap() * 1.01, "{phases}");
    }
    // No time for the 36-layer (here 3-layer) section: skipped, not failed.
    let big = &report["sections"]["step_big"];
    assert!(big["status"].as_str().unwrap().starts_with("skipped: time"), "{big}");
    let ours_big = rows(&report, "step_big").iter().find(|r| r["impl"] == "ours").unwrap().clone();
    assert_eq!(ours_big["status"], "skipped: time", "{ours_big}");
    // One table, printed and written.
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.starts_with("| section | case | impl | seconds (median) | TFLOP/s |"), "{table}");
    assert!(stdout.contains(table.lines().next().unwrap()) && table.contains("skipped: time"), "{stdout}");
    assert!(report["seconds"].as_f64().unwrap() < 120.0, "the dry run is meant to take seconds: {}", report["seconds"]);

    // Bad options name what is wrong and run nothing.
    let bad = gpu_bench(&["--dry-run", out.to_str().unwrap(), "--limit", "nonsense=3"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("--limit nonsense=3: no section 'nonsense'"), "{err}");
    let missing = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-bench"))
        .args(["--dry-run", out.to_str().unwrap(), "--bin", "/nonexistent/fusegrpo"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && err.contains("no executable fusegrpo binary at /nonexistent/fusegrpo"), "{err}");
}

/// `bench attention` says which implementation ran (issue 61, B11): the
/// fused op's CPU path, or the reference composition; never just "fused".
#[test]
fn bench_attention_reports_the_backend_that_ran() {
    let run = |mode: &str| -> Value {
        let out = e2e::fusegrpo_ok(&["bench", "attention", "--tokens", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--mode", mode, "--backward", "--reps", "1", "--warmup", "0", "--attention", "kernel"]);
        serde_json::from_str(out.lines().last().expect("a JSON line")).expect("JSON")
    };
    let fused = run("fused");
    assert_eq!(fused["backend"], "cpu", "{fused}");
    let unfused = run("unfused");
    assert_eq!(unfused["backend"], "reference", "{unfused}");
    assert_eq!(fused["checksum"].as_f64().map(|c| c.is_finite()), Some(true));
}
