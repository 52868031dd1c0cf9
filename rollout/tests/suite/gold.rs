//! Gold from patches on small synthetic repositories, the filters' flags,
//! the JSONL loader, and tasks mined from history.

use crate::repo_builder;

use std::collections::BTreeSet;

use repo_builder::{git, TempRepo};
use rollout::tasks::gold::{derive_gold, GoldFlag};
use rollout::tasks::history::{tasks_from_history, HistoryConfig};
use rollout::tasks::{load_tasks, TaskError};

const BASE: &str = "\
import os

TIMEOUT = 3


class Session:
    retries = 1

    def request(self, url):
        def helper():
            return url
        return helper()

    @property
    def name(self):
        return 'n'


def merge(a, b):
    return a or b
";

/// A diff of `before` -> `after` for `path`, made by git itself.
fn git_diff(path: &str, before: &str, after: &str) -> String {
    let repo = TempRepo::new("o/diff");
    repo.file(path, before);
    repo.commit("before");
    repo.file(path, after);
    git(&repo.work, &["diff", "-U3"])
}

fn names(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

#[test]
fn gold_cases() {
    let cases: &[(&str, &str, &[&str], &[GoldFlag])] = &[
        // Change inside a nested function: the enclosing method owns it.
        ("nested", "            return url\n", &["m.py:Session.request"], &[]),
        // Class attribute line: the class owns it.
        ("class body", "    retries = 1\n", &["m.py:Session"], &[]),
        // A decorator line belongs to the decorated method.
        ("decorator", "    @property\n", &["m.py:Session.name"], &[]),
        // Module-level constant: file only.
        ("module", "TIMEOUT = 3\n", &[], &[GoldFlag::NoFunctions]),
        ("function", "    return a or b\n", &["m.py:merge"], &[]),
    ];
    for (label, line, want, flags) in cases {
        let after = BASE.replacen(line, &format!("{}  # changed\n", line.trim_end_matches('\n')), 1);
        assert_ne!(after, BASE, "{label}");
        let report = derive_gold_for("m.py", BASE, &git_diff("m.py", BASE, &after));
        assert_eq!(names(&report.gold.files), ["m.py"], "{label}");
        assert_eq!(names(&report.gold.functions), *want, "{label}");
        assert_eq!(report.flags, flags.iter().copied().collect(), "{label}");
    }
}

fn derive_gold_for(path: &str, base: &str, patch: &str) -> rollout::tasks::gold::GoldReport {
    let repo = TempRepo::new("o/base");
    repo.file(path, base);
    repo.commit("base");
    derive_gold(patch, &*repo.snapshot("HEAD")).expect("gold")
}

#[test]
fn added_lines_belong_to_the_line_before_them() {
    // Appending a statement at the end of `request` (after `return helper()`)
    // and inserting one at the start of `merge`'s body.
    let after = BASE
        .replace("        return helper()\n", "        return helper()\n        print('unreachable')\n")
        .replace("def merge(a, b):\n", "def merge(a, b):\n    a = a or {}\n");
    let report = derive_gold_for("m.py", BASE, &git_diff("m.py", BASE, &after));
    assert_eq!(names(&report.gold.functions), ["m.py:Session.request", "m.py:merge"]);
    assert!(report.flags.is_empty(), "{:?}", report.flags);
}

#[test]
fn new_function_new_file_and_non_code_are_flagged() {
    let after = BASE.replace("def merge(a, b):", "def added():\n    return 0\n\n\ndef merge(a, b):");
    let patch = git_diff("m.py", BASE, &after);
    let report = derive_gold_for("m.py", BASE, &patch);
    assert!(report.flags.contains(&GoldFlag::AddsFunction), "{:?}", report.flags);

    let repo = TempRepo::new("o/multi");
    repo.file("m.py", BASE).file("README.md", "hi\n");
    repo.commit("base");
    repo.file("README.md", "hello\n").file("new.py", "x = 1\n").file("m.py", BASE.replace("a or b", "b or a"));
    git(&repo.work, &["add", "-N", "new.py"]);
    let patch = git(&repo.work, &["diff"]);
    let report = derive_gold(&patch, &*repo.snapshot("HEAD")).unwrap();
    assert_eq!(names(&report.gold.files), ["README.md", "m.py", "new.py"]);
    assert_eq!(names(&report.gold.functions), ["m.py:merge"]);
    let want: BTreeSet<GoldFlag> = [GoldFlag::AddsFile, GoldFlag::NonCodeFile].into();
    assert_eq!(report.flags, want);
}

#[test]
fn patch_against_missing_file_is_an_error() {
    let patch = "--- a/gone.py\n+++ b/gone.py\n@@ -1 +1 @@\n-x\n+y\n";
    let repo = TempRepo::new("o/missing");
    repo.file("a.py", "x\n");
    repo.commit("one");
    let err = derive_gold(patch, &*repo.snapshot("HEAD")).unwrap_err();
    assert!(err.to_string().contains("gone.py"), "{err}");
    let bad = "--- a/a.py\n+++ b/a.py\n@@ -x +1 @@\n";
    assert!(derive_gold(bad, &*repo.snapshot("HEAD")).unwrap_err().to_string().contains("line 3"));
}

#[test]
fn jsonl_loader_reports_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let good = r#"{"instance_id":"a","repo":"o/r","base_commit":"abc","problem_statement":"p","patch":"","extra":1}"#;
    std::fs::write(&path, format!("{good}\n\n{{\"instance_id\": 3}}\n")).unwrap();
    let err = load_tasks(&path).unwrap_err();
    assert!(matches!(err, TaskError::Parse { line: 3, .. }), "{err}");
    let nogold = r#"{"instance_id":"b","repo":"o/r","base_commit":"abc","problem_statement":"p"}"#;
    std::fs::write(&path, format!("{good}\n{nogold}\n")).unwrap();
    assert!(matches!(load_tasks(&path).unwrap_err(), TaskError::NoGold { line: 2, .. }));
    std::fs::write(&path, format!("{good}\n")).unwrap();
    assert_eq!(load_tasks(&path).unwrap()[0].instance_id, "a");
}

#[test]
fn jsonl_loader_refuses_empty_and_repeated_ids_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let task = |id: &str, file: &str| format!(r#"{{"instance_id":"{id}","repo":"o/r","base_commit":"abc","problem_statement":"p","gold":{{"files":["{file}"],"functions":[]}}}}"#);
    std::fs::write(&path, [task("a", "x.py"), task("b", "x.py"), String::new(), task("a", "y.py")].join("\n")).unwrap();
    let err = load_tasks(&path).unwrap_err();
    assert!(matches!(err, TaskError::DuplicateId { line: 4, first: 1, ref instance_id, .. } if instance_id == "a"), "{err}");
    assert!(err.to_string().contains("t.jsonl:4") && err.to_string().contains("line 1"), "{err}");
    for blank in ["", "  "] {
        std::fs::write(&path, [task("a", "x.py"), task(blank, "x.py")].join("\n")).unwrap();
        let err = load_tasks(&path).unwrap_err();
        assert!(matches!(err, TaskError::EmptyId { line: 2, .. }), "{blank:?}: {err}");
        assert!(err.to_string().contains("t.jsonl:2") && err.to_string().contains("instance_id"), "{err}");
    }
}

#[test]
fn tasks_from_history_filters_and_derives_gold() {
    let repo = TempRepo::new("o/hist");
    repo.file("m.py", BASE);
    repo.commit("initial import of the session module");
    repo.file("m.py", BASE.replace("a or b", "b or a"));
    let fix = repo.commit("Fix merge: prefer the second mapping when both are set");
    repo.file("m.py", BASE.replace("a or b", "b or a").replace("TIMEOUT = 3", "TIMEOUT = 5"));
    repo.commit("Raise the default timeout to five seconds for slow hosts");
    repo.file("docs.md", "docs\n");
    repo.commit("Document the session module and its configuration");
    repo.file("m.py", BASE.replace("return 'n'", "return 'm'"));
    repo.commit("typo");
    let git_repo = git2::Repository::open(&repo.work).unwrap();
    let tasks = tasks_from_history(&git_repo, "o/hist", &HistoryConfig::default()).unwrap();
    // Kept: only the fix (the timeout commit is module-level, the docs commit
    // is non-code, "typo" is too short, the first commit has no parent).
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    let task = &tasks[0];
    assert_eq!(task.instance_id, format!("o__hist-{}", &fix[..12]));
    assert_eq!(task.problem_statement, "Fix merge: prefer the second mapping when both are set");
    let gold = task.gold.as_ref().unwrap();
    assert_eq!(names(&gold.functions), ["m.py:merge"]);
    let parent = git(&repo.work, &["rev-parse", &format!("{fix}^")]);
    assert_eq!(task.base_commit, parent.trim());
    let limited = HistoryConfig { max_tasks: 0, ..Default::default() };
    assert!(tasks_from_history(&git_repo, "o/hist", &limited).unwrap().is_empty());
}
