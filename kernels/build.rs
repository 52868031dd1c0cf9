//! With feature `cuda`: compiles `cuda/*.cu` to PTX with nvcc into OUT_DIR,
//! where `src/cuda_util.rs` embeds it with `include_str!`. Without the feature
//! it does nothing, so CPU builds never need nvcc.
//!
//! nvcc is `$NVCC`, else `$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH; the
//! target is `compute_$CUDA_COMPUTE_CAP` (default 90, Hopper), PTX that the
//! driver JIT-compiles for that GPU generation and newer.
//!
//! With feature `cudnn` as well: compiles `cudnn/sdpa.cpp` (the shim over
//! NVIDIA's header-only cudnn-frontend) with the `cc` crate and
//! `NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING`, so that nothing links against
//! cuDNN: libcudnn.so.9 is dlopen()ed at run time. Headers:
//! `$CUDNN_FRONTEND_INCLUDE` (cudnn_frontend.h) and `$CUDNN_INCLUDE`
//! (cudnn.h), as `scripts/cudnn-headers.sh` prints them, and
//! `$CUDA_HOME/include` (cuda.h, cuda_runtime_api.h).

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
    #[cfg(feature = "cudnn")]
    cudnn_shim();
}

/// Compiles `cudnn/sdpa.cpp` into a static library linked into `kernels`.
#[cfg(feature = "cudnn")]
fn cudnn_shim() {
    for var in ["CUDNN_FRONTEND_INCLUDE", "CUDNN_INCLUDE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=cudnn");
    let include = |var: &str, file: &str| -> PathBuf {
        let dir = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
            panic!("feature `cudnn` needs ${var} (the folder of {file}): eval \"$(scripts/cudnn-headers.sh)\" sets it")
        });
        if !dir.join(file).exists() {
            panic!("${var}={}: no {file} there (eval \"$(scripts/cudnn-headers.sh)\")", dir.display());
        }
        dir
    };
    let frontend = include("CUDNN_FRONTEND_INCLUDE", "cudnn_frontend.h");
    let cudnn = include("CUDNN_INCLUDE", "cudnn.h");
    let cuda = std::env::var_os("CUDA_HOME").map(|h| Path::new(&h).join("include")).filter(|p| p.join("cuda_runtime_api.h").exists());
    let mut build = cc::Build::new();
    build.cpp(true).std("c++17").define("NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING", None).include(frontend).include(cudnn);
    if let Some(cuda) = cuda {
        build.include(cuda);
    }
    // The frontend's headers warn a lot; they are not ours to fix.
    // Optimised as the profile is (CI's unoptimised ci-cuda build compiles it fastest).
    build.warnings(false).file("cudnn/sdpa.cpp").compile("fusegrpo_cudnn");
    println!("cargo:rustc-link-lib=dylib=dl");
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
