//! `trainer::files`: outputs that are inputs refused before any work, and
//! `.partial` files removed when a write fails.

use std::path::Path;
use trainer::files::check_outputs;

fn refused(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> String {
    check_outputs(inputs, outputs).expect_err("should be refused").to_string()
}

#[test]
fn an_output_that_is_an_input_is_refused_whatever_its_spelling() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tasks = dir.join("t.jsonl");
    std::fs::write(&tasks, "{}\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(&tasks, dir.join("link.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir, dir.join("sub/up")).unwrap();
    std::fs::hard_link(&tasks, dir.join("hard.jsonl")).unwrap();
    let spellings = [
        tasks.clone(),
        dir.join("./t.jsonl"),
        dir.join("sub/../t.jsonl"),
        dir.join("link.jsonl"),
        dir.join("sub/up/t.jsonl"),
        dir.join("hard.jsonl"),
    ];
    for out in &spellings {
        let err = refused(&[("--config", &dir.join("c.toml")), ("--tasks", &tasks)], &[("--out", out)]);
        assert!(err.contains("--out") && err.contains("--tasks") && err.contains("nothing was done"), "{}: {err}", out.display());
    }
    // Relative to the working folder.
    let cwd = std::env::current_dir().unwrap();
    let rel = pathdiff(&tasks, &cwd);
    refused(&[("--input", &rel)], &[("--out", &tasks)]);
    // Different files pass, existing or not.
    check_outputs(&[("--tasks", &tasks)], &[("--out", &dir.join("episodes.jsonl")), ("--report", &dir.join("sub/r.json"))]).unwrap();
    check_outputs(&[("--tasks", &tasks)], &[("--out", &dir.join("new/dir/t.jsonl"))]).unwrap();
}

#[test]
fn two_outputs_on_one_path_are_refused_even_when_neither_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("o.jsonl");
    let err = refused(&[], &[("--train", &out), ("--heldout", &dir.join("sub/../o.jsonl"))]);
    assert!(err.contains("--heldout") && err.contains("--train") && err.contains("one output would replace the other"), "{err}");
    // A symlinked folder to a folder that exists, the file in neither.
    std::fs::create_dir(dir.join("real")).unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("alias")).unwrap();
    refused(&[], &[("--train", &dir.join("real/x.jsonl")), ("--heldout", &dir.join("alias/x.jsonl"))]);
}

/// `path` relative to `base` (both absolute), with `..` as needed.
fn pathdiff(path: &Path, base: &Path) -> std::path::PathBuf {
    let ups = base.components().count() - 1;
    let mut out = std::path::PathBuf::new();
    for _ in 0..ups {
        out.push("..");
    }
    out.join(path.strip_prefix("/").unwrap())
}

/// A row that serializes, or one that fails to (as a write fails midway).
enum Row {
    Good(u32),
    Unwritable,
}

impl serde::Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Row::Good(n) => s.serialize_u32(*n),
            Row::Unwritable => Err(serde::ser::Error::custom("no room left")),
        }
    }
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_partial() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("out.jsonl");
    std::fs::write(&path, "old\n").unwrap();
    let err = trainer::files::write_json_lines(&path, &[Row::Good(1), Row::Unwritable]).unwrap_err();
    // The cause is kept under the context (the binary prints the chain).
    let chain: Vec<String> = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source()).map(|e| e.to_string()).collect();
    assert!(chain.iter().any(|m| m.contains("no room left")), "{chain:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\n");
    assert!(!tmp.path().join("out.jsonl.partial").exists(), "the .partial stays after a failure");
    // A folder guarded the same way goes too, files and all.
    let dir = tmp.path().join("model.partial");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), b"x").unwrap();
    drop(trainer::files::Partial::new(dir.clone()));
    assert!(!dir.exists());
    // Committed, it is renamed into place and kept.
    std::fs::create_dir(&dir).unwrap();
    trainer::files::Partial::new(dir.clone()).commit(&tmp.path().join("model")).unwrap();
    assert!(tmp.path().join("model").is_dir() && !dir.exists());
}
