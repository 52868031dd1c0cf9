//! With feature `cuda`: compiles `cuda/*.cu` to PTX with nvcc into OUT_DIR,
//! where `src/cuda_util.rs` embeds it with `include_str!`. Without the feature
//! it does nothing, so CPU builds never need nvcc.
//!
//! nvcc is `$NVCC`, else `$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH; the
//! target is `compute_$CUDA_COMPUTE_CAP` (default 90, Hopper), PTX that the
//! driver JIT-compiles for that GPU generation and newer.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: [&str; 5] = ["attention", "logprobs", "norm", "rope", "sampling"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    for var in ["NVCC", "CUDA_HOME", "CUDA_COMPUTE_CAP", "NVCC_FLAGS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=cuda");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let nvcc = nvcc_path();
    let cap = compute_cap();
    for name in SOURCES {
        let src = Path::new("cuda").join(format!("{name}.cu"));
        let ptx = out.join(format!("{name}.ptx"));
        compile(&nvcc, &cap, &src, &ptx);
    }
}

/// The nvcc to run.
fn nvcc_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NVCC") {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        let p = Path::new(&home).join("bin").join("nvcc");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("nvcc")
}

/// `CUDA_COMPUTE_CAP` as digits ("90", "80"; a trailing "a" is dropped for PTX).
fn compute_cap() -> String {
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let cap = cap.trim().trim_end_matches('a').replace('.', "");
    if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_digit()) {
        panic!("CUDA_COMPUTE_CAP={cap:?}: expected digits such as 90 or 80");
    }
    cap
}

/// `nvcc --ptx` one source; panics with nvcc's output on failure.
fn compile(nvcc: &Path, cap: &str, src: &Path, ptx: &Path) {
    let mut cmd = Command::new(nvcc);
    cmd.arg("--ptx")
        .arg(format!("-arch=compute_{cap}"))
        .args(["-O3", "-std=c++17", "-Icuda", "-o"])
        .arg(ptx)
        .arg(src);
    if let Ok(extra) = std::env::var("NVCC_FLAGS") {
        cmd.args(extra.split_whitespace());
    }
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {} ({e}): feature `cuda` needs the CUDA toolkit; \
             scripts/cuda-toolchain.sh installs one and prints the environment",
            nvcc.display()
        )
    });
    if !output.status.success() {
        panic!(
            "nvcc failed on {}:\n{}{}",
            src.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
