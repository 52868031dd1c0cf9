//! docs/gpu.md's GPU table, planned: every row's `fusegrpo plan` command runs as
//! written (from the repository root) and must say "fits"; the shipped 4B
//! config without the CUDA kernels must not fit, naming the switch.

use e2e::fusegrpo;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `fusegrpo plan ...` commands in the rows of docs/gpu.md's "A config per
/// GPU size" table.
fn table_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("docs/gpu.md")).unwrap();
    let section = readme.split("## 4. A config per GPU size").nth(1).expect("docs/gpu.md has the GPU table section");
    let section = section.split("\n### ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').find(|cell| cell.starts_with("fusegrpo plan ")).map(str::to_string))
        .collect()
}

#[test]
fn every_row_of_the_readme_gpu_table_fits_and_the_4b_config_without_kernels_does_not() {
    let commands = table_commands();
    assert!(commands.len() >= 5, "the table has a row per GPU setup: {commands:?}");
    for cmd in &commands {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = Command::new(e2e::fusegrpo_bin()).args(&args).current_dir(root()).env("FUSEGRPO_LOG", "warn").env_remove("FUSEGRPO_CUDA_KERNELS").output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{cmd}:\n{stdout}\n{stderr}");
        let verdict = stdout.lines().find(|l| l.starts_with("peak:")).unwrap_or_default();
        assert!(verdict.contains(", fits in"), "{cmd}: {verdict}");
        println!("{cmd}\n  {verdict}");
    }

    // Without the kernels (auto, no gpu-check record for this build): the quadratic attention is counted.
    let cfg = root().join("configs/qwen3-4b-fusesearch.toml");
    let out = Command::new(e2e::fusegrpo_bin())
        .args(["plan", "--config", cfg.to_str().unwrap(), "--gpu-memory", "141GB"])
        .env("FUSEGRPO_LOG", "warn")
        .env_remove("FUSEGRPO_CUDA_KERNELS")
        .env("FUSEGRPO_CACHE", root().join("target/no-gpu-check-record"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("does NOT fit") && stdout.contains("attention_scores") && stdout.contains("cuda_kernels"), "{stdout}");
    assert!(stderr.contains("set [model] cuda_kernels = \"on\""), "{stderr}");
    // The same config with them on fits the H200, as the table says.
    let on = fusegrpo(&["plan", "--config", cfg.to_str().unwrap(), "--gpu-memory", "141GB", "--cuda-kernels", "on"]);
    assert!(on.status.success() && String::from_utf8_lossy(&on.stdout).contains("fits in 141 GB"));
}
