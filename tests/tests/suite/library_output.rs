//! Issue 63: the libraries return and the binary speaks. No library crate
//! of the workspace (every member with a `src/lib.rs`, the tests' helpers
//! aside) defines printing macros of std's names or prints to stdout or
//! stderr outside its tests (what they tell the user goes through
//! `trainer::progress` or a writer their caller passes, their notes through
//! `tracing`); and `trainer` returns its own error type, not anyhow's.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

/// The library crates' folders: the workspace's members with a lib.rs,
/// without `tests` (this crate).
fn library_crates() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest.lines().find(|l| l.starts_with("members")).expect("[workspace] members");
    members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| *m != "tests")
        .map(|m| root().join(m))
        .filter(|d| d.join("src/lib.rs").is_file())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code before its tests (the first `#[cfg(test)]`), without comments.
fn code(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .enumerate()
        .take_while(|(_, l)| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").to_string()))
        .collect()
}

/// Whether `line` calls the macro `name!` (not `eprintln!` for `println!`, nor `writeln!`).
fn calls(line: &str, name: &str) -> bool {
    line.match_indices(&format!("{name}!(")).any(|(i, _)| i == 0 || !matches!(line.as_bytes()[i - 1], b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'0'..=b'9'))
}

#[test]
fn no_library_crate_prints_or_shadows_std_printing() {
    let crates = library_crates();
    let names: Vec<String> = crates.iter().map(|c| c.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for want in ["kernels", "lm", "rollout", "trainer", "apps"] {
        assert!(names.iter().any(|n| n == want), "library crates found: {names:?}");
    }
    let mut found = Vec::new();
    let mut files = 0;
    for dir in &crates {
        let mut paths = Vec::new();
        rust_files(&dir.join("src"), &mut paths);
        for path in paths {
            files += 1;
            let shown = path.strip_prefix(root()).unwrap().display().to_string();
            let whole = std::fs::read_to_string(&path).unwrap();
            for (n, line) in whole.lines().enumerate() {
                let compact: String = line.split_whitespace().collect();
                for m in ["println", "eprintln", "print", "eprint"] {
                    if compact.starts_with(&format!("macro_rules!{m}{{")) || compact.starts_with(&format!("macro_rules!{m}(")) {
                        found.push(format!("{shown}:{}: defines {m}!", n + 1));
                    }
                }
                if compact.starts_with("#[macro_use]") && whole.lines().nth(n + 1).is_some_and(|next| next.contains("extern crate")) {
                    found.push(format!("{shown}:{}: #[macro_use] extern crate", n + 1));
                }
            }
            for (n, line) in code(&path) {
                for m in ["println", "eprintln", "print", "eprint"] {
                    if calls(&line, m) {
                        found.push(format!("{shown}:{n}: {m}!"));
                    }
                }
            }
        }
    }
    println!("{} library crates, {files} files", crates.len());
    assert!(files > 200, "only {files} files read");
    assert!(found.is_empty(), "library code that prints (return it, or tell it through trainer::progress or tracing):\n  {}", found.join("\n  "));
}

/// `trainer` returns `trainer::Error` (rollout's wrapped); anyhow is the
/// binary's (and the recipe's and apps'): not a dependency of trainer.
#[test]
fn trainer_returns_its_own_errors_not_anyhow() {
    let src = root().join("trainer/src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut found = Vec::new();
    for path in &paths {
        let rel = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        for (n, line) in std::fs::read_to_string(path).unwrap().lines().enumerate() {
            if line.contains("anyhow") {
                found.push(format!("trainer/src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(paths.len() > 50, "only {} files read", paths.len());
    assert!(found.is_empty(), "anyhow in trainer (its errors are trainer::Error):\n  {}", found.join("\n  "));
    let manifest = std::fs::read_to_string(root().join("trainer/Cargo.toml")).unwrap();
    // [dependencies] only: the tests may use it (the tiny models they build).
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]" {
            assert!(!line.starts_with("anyhow"), "trainer/Cargo.toml depends on anyhow: {line}");
        }
    }
}
