//! `tasks import`: SWE-smith rows (the patch introduces the bug; the bug
//! becomes a commit with a fixed author and date, kept by a ref, and the fix
//! is its diff back), SWE-Gym rows (the patch is the fix), and the rows that
//! cannot become tasks.

use crate::repo_builder;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use repo_builder::{git, TempRepo};
use rollout::tasks::import::{import_ref, import_row, Agreement, ImportError, ImportFormat, Row, IMPORT_AUTHOR};

const CALC: &str = "\
def add(a, b):
    return a + b


def sub(a, b):
    return a - b


class Meter:
    def reset(self):
        self.value = 0
";

const UTIL: &str = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n";

/// `o/calc` with one commit made at a fixed date, so that two repositories
/// built by it hold the same commit id.
fn calc_repo() -> (TempRepo, String) {
    let repo = TempRepo::new("o/calc");
    repo.file("calc.py", CALC).file("pkg/util.py", UTIL);
    git(&repo.work, &["add", "-A"]);
    let out = Command::new("git")
        .current_dir(&repo.work)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "base"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &repo.work)
        .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let base = git(&repo.work, &["rev-parse", "HEAD"]).trim().to_string();
    (repo, base)
}

/// The diff `git diff` makes for `calc.py` changed to `after` (the work tree is restored).
fn diff_of(repo: &TempRepo, path: &str, after: &str) -> String {
    let before = std::fs::read_to_string(repo.work.join(path)).unwrap();
    repo.file(path, after);
    let diff = git(&repo.work, &["diff", "-U3"]);
    repo.file(path, before);
    assert!(diff.contains("diff --git"), "{diff}");
    diff
}

fn row(id: &str, base: &str, patch: &str, edited: Option<&[&str]>) -> Row {
    Row {
        instance_id: id.to_string(),
        repo: "o/calc".to_string(),
        base_commit: base.to_string(),
        problem_statement: "add() returns the difference of its arguments".to_string(),
        patch: patch.to_string(),
        edited_entities: edited.map(|e| e.iter().map(|s| s.to_string()).collect()),
    }
}

fn open(work: &Path) -> git2::Repository {
    git2::Repository::open(work).unwrap()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const SMITH_ID: &str = "o__calc.1a2b3c4d.func_pm_op_swap__x1";

#[test]
fn swe_smith_row_becomes_a_reproducible_buggy_commit_with_the_fix_as_patch() {
    let (repo, base) = calc_repo();
    let bug = diff_of(&repo, "calc.py", &CALC.replace("return a + b", "return a - b"));
    let short = &base[..7];
    let r = row(SMITH_ID, short, &bug, Some(&["calc.py:add"]));

    let first = import_row(&open(&repo.work), &r, ImportFormat::SweSmith).expect("import");
    let buggy = first.task.base_commit.clone();
    assert_eq!(buggy.len(), 40, "a full commit id: {buggy}");
    assert_ne!(buggy, base, "the episode's tree is the buggy commit, not the base");
    // A commit whose parent is the base, with the fixed author and date.
    assert_eq!(git(&repo.work, &["rev-parse", &format!("{buggy}^")]).trim(), base);
    assert_eq!(git(&repo.work, &["rev-list", "--count", &buggy]).trim(), "2");
    let who = git(&repo.work, &["log", "-1", "--format=%an|%ae|%at|%cn|%ct", &buggy]);
    assert_eq!(who.trim(), format!("{}|{}|946684800|{}|946684800", IMPORT_AUTHOR.0, IMPORT_AUTHOR.1, IMPORT_AUTHOR.0));
    assert!(git(&repo.work, &["show", &format!("{buggy}:calc.py")]).contains("def add(a, b):\n    return a - b\n"));
    assert_eq!(git(&repo.work, &["show", &format!("{buggy}:pkg/util.py")]), UTIL, "files the bug does not touch are the base's");
    // The ref keeps it.
    let reference = import_ref(SMITH_ID);
    assert_eq!(reference, format!("refs/fusegrpo/swe-smith/{SMITH_ID}"));
    assert_eq!(git(&repo.work, &["rev-parse", &reference]).trim(), buggy);

    // Gold comes from the fix, and names the edited function.
    let gold = first.task.gold.as_ref().expect("explicit gold");
    assert_eq!(gold.files, set(&["calc.py"]));
    assert_eq!(gold.functions, set(&["calc.py:add"]));
    assert_eq!(first.published_functions, Some(set(&["calc.py:add"])));
    assert_eq!(first.task.repo, "o/calc");
    assert_eq!(first.task.problem_statement, r.problem_statement);

    // The fix reverses the bug: applied onto the buggy commit it gives the base's file back.
    let fix = first.task.patch.clone().expect("the fix as patch");
    assert!(fix.contains("-    return a - b") && fix.contains("+    return a + b"), "{fix}");
    git(&repo.work, &["checkout", "-q", &buggy]);
    assert_ne!(std::fs::read_to_string(repo.work.join("calc.py")).unwrap(), CALC);
    let fix_file = repo.repos_dir.path().join("fix.patch");
    std::fs::write(&fix_file, &fix).unwrap();
    git(&repo.work, &["apply", "--check", fix_file.to_str().unwrap()]);
    git(&repo.work, &["apply", fix_file.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(repo.work.join("calc.py")).unwrap(), CALC);
    git(&repo.work, &["checkout", "-q", "--", "."]);
    git(&repo.work, &["checkout", "-q", "main"]);

    // Imported again into the same repository: the same commit, the ref unchanged.
    let again = import_row(&open(&repo.work), &r, ImportFormat::SweSmith).expect("re-import");
    assert_eq!(again.task.base_commit, buggy);
    assert_eq!(again.task.patch, first.task.patch);
    assert_eq!(git(&repo.work, &["rev-parse", &reference]).trim(), buggy);

    // Into a second, separately built but identical repository (with the full base id): the same commit id.
    let (other, other_base) = calc_repo();
    assert_eq!(other_base, base, "the two repositories hold the same base commit");
    let elsewhere = import_row(&open(&other.work), &row(SMITH_ID, &base, &bug, None), ImportFormat::SweSmith).expect("import elsewhere");
    assert_eq!(elsewhere.task.base_commit, buggy, "the commit id depends on the tree alone");
    assert_eq!(elsewhere.published_functions, None);
}

#[test]
fn swe_smith_gold_is_compared_with_edited_entities() {
    let (repo, base) = calc_repo();
    let g = open(&repo.work);
    // Two bugs: one in add (published gold agrees), one in Meter.reset (published gold names two functions).
    let bug_add = diff_of(&repo, "calc.py", &CALC.replace("return a + b", "return a * b"));
    let bug_reset = diff_of(&repo, "calc.py", &CALC.replace("self.value = 0", "self.value = 1"));
    let a = import_row(&g, &row("o__calc.1.add", &base[..8], &bug_add, Some(&["calc.py:add"])), ImportFormat::SweSmith).unwrap();
    let b = import_row(&g, &row("o__calc.1.reset", &base[..8], &bug_reset, Some(&["calc.py:Meter.reset", "calc.py:sub"])), ImportFormat::SweSmith)
        .unwrap();
    assert_ne!(a.task.base_commit, b.task.base_commit, "two bugs, two commits");
    assert_eq!(b.task.gold.as_ref().unwrap().functions, set(&["calc.py:Meter.reset"]));
    let ours: Vec<BTreeSet<String>> = [&a, &b].iter().map(|i| i.task.gold.as_ref().unwrap().functions.clone()).collect();
    let theirs: Vec<BTreeSet<String>> = [&a, &b].iter().map(|i| i.published_functions.clone().unwrap()).collect();
    let agreement = Agreement::of(ours.iter().zip(theirs.iter()));
    assert_eq!(agreement.rows, 2);
    assert_eq!(agreement.equal, 1);
    // add: Jaccard 1, recall 1; reset: {reset} vs {reset, sub}: Jaccard 1/2, recall 1/2.
    assert!((agreement.mean_jaccard - 0.75).abs() < 1e-12, "{agreement:?}");
    assert!((agreement.mean_recall - 0.75).abs() < 1e-12, "{agreement:?}");
    let empty = BTreeSet::new();
    assert_eq!(Agreement::of([(&empty, &empty)]), Agreement { rows: 1, equal: 1, mean_jaccard: 1.0, mean_recall: 1.0 });
    assert_eq!(Agreement::of(std::iter::empty()), Agreement::default());
    // Both commits stay reachable by their refs.
    for (id, imported) in [("o__calc.1.add", &a), ("o__calc.1.reset", &b)] {
        assert_eq!(git(&repo.work, &["rev-parse", &import_ref(id)]).trim(), imported.task.base_commit);
    }
}

#[test]
fn swe_gym_row_keeps_its_patch_and_base_commit() {
    let (repo, base) = calc_repo();
    let fix = diff_of(&repo, "pkg/util.py", "def clamp(x, lo, hi):\n    return min(hi, max(x, lo))\n");
    for format in [ImportFormat::SweGym, ImportFormat::SweBench] {
        let imported = import_row(&open(&repo.work), &row("o__calc-7", &base[..10], &fix, None), format).expect("import");
        assert_eq!(imported.task.base_commit, base, "{format:?}: the full id of the row's commit");
        assert_eq!(imported.task.patch.as_deref(), Some(fix.as_str()));
        let gold = imported.task.gold.as_ref().unwrap();
        assert_eq!(gold.files, set(&["pkg/util.py"]));
        assert_eq!(gold.functions, set(&["pkg/util.py:clamp"]));
        assert!(imported.flags.is_empty(), "{:?}", imported.flags);
        assert_eq!(imported.published_functions, None);
    }
    let refs = git(&repo.work, &["for-each-ref", "refs/fusegrpo"]);
    assert!(refs.trim().is_empty(), "SWE-Gym rows write no commit: {refs}");
    assert_eq!("swe-gym".parse::<ImportFormat>(), Ok(ImportFormat::SweGym));
    assert_eq!("swe-smith".parse::<ImportFormat>(), Ok(ImportFormat::SweSmith));
    assert!("swebench".parse::<ImportFormat>().unwrap_err().contains("swe-bench"));
}

#[test]
fn rows_that_cannot_become_tasks_are_typed_errors() {
    let (repo, base) = calc_repo();
    let g = open(&repo.work);
    let bug = diff_of(&repo, "calc.py", &CALC.replace("return a + b", "return a - b"));
    for format in [ImportFormat::SweSmith, ImportFormat::SweGym] {
        let err = import_row(&g, &row("o__calc.missing", "deadbeef", &bug, None), format).unwrap_err();
        assert!(matches!(err, ImportError::MissingCommit { ref commit } if commit == "deadbeef"), "{format:?}: {err}");
        assert!(err.to_string().contains("deadbeef"), "{err}");
    }
    // A bug patch made against other contents does not apply.
    let stale = bug.replace("-    return a + b", "-    return a + b + 0");
    assert_ne!(stale, bug);
    // A patch of a file the tree lacks.
    let elsewhere = bug.replace("calc.py", "nowhere.py");
    // Whatever the format: a fix (SWE-bench, SWE-Gym) that does not apply to
    // its base commit is not that commit's fix either.
    for format in [ImportFormat::SweSmith, ImportFormat::SweBench, ImportFormat::SweGym] {
        let err = import_row(&g, &row("o__calc.stale", &base[..7], &stale, None), format).unwrap_err();
        assert!(matches!(err, ImportError::DoesNotApply { ref commit, .. } if *commit == base), "{format:?}: {err}");
        let err = import_row(&g, &row("o__calc.nowhere", &base[..7], &elsewhere, None), format).unwrap_err();
        assert!(matches!(err, ImportError::DoesNotApply { .. }), "{format:?}: {err}");
    }
    // An empty statement.
    let mut blank = row("o__calc.blank", &base, &bug, None);
    blank.problem_statement = "  \n".into();
    assert!(matches!(import_row(&g, &blank, ImportFormat::SweSmith), Err(ImportError::EmptyStatement)));
    // None of them left a commit behind.
    let refs = git(&repo.work, &["for-each-ref", "refs/fusegrpo"]);
    assert!(refs.trim().is_empty(), "{refs}");
}

#[test]
fn import_ref_is_a_valid_ref_name_for_odd_ids() {
    assert_eq!(import_ref("pandas-dev__pandas.95280573.combine_file__abc"), "refs/fusegrpo/swe-smith/pandas-dev__pandas.95280573.combine_file__abc");
    assert!(import_ref("a/b c:d").starts_with("refs/fusegrpo/swe-smith/a_b_c_d="), "{}", import_ref("a/b c:d"));
    assert!(import_ref("..x").starts_with("refs/fusegrpo/swe-smith/_.x="));
    for id in ["a/b c:d", "x~1^2", "pandas-dev__pandas.95280573.combine_file__abc", "a..b", "x.lock", "x.", ".", ".."] {
        assert!(git2::Reference::is_valid_name(&import_ref(id)), "{id}: {}", import_ref(id));
    }
}

#[test]
fn import_refs_of_ids_that_clean_alike_differ() {
    let ids = ["col x", "col_x", "col/x", "col:x", "x.", "x", "x.lock", "x.lock_", "..", "_", "", "_."];
    let refs: BTreeSet<String> = ids.iter().map(|id| import_ref(id)).collect();
    assert_eq!(refs.len(), ids.len(), "{refs:?}");
}

#[test]
fn swe_smith_ids_that_clean_alike_keep_both_commits_through_gc() {
    let (repo, base) = calc_repo();
    let g = git2::Repository::open(&repo.work).unwrap();
    let sub = diff_of(&repo, "calc.py", &CALC.replace("a - b", "b - a"));
    let add = diff_of(&repo, "calc.py", &CALC.replace("a + b", "a * b"));
    let a = import_row(&g, &row("col x", &base, &add, None), ImportFormat::SweSmith).unwrap();
    let b = import_row(&g, &row("col_x", &base, &sub, None), ImportFormat::SweSmith).unwrap();
    assert_ne!(a.task.base_commit, b.task.base_commit);
    git(&repo.work, &["gc", "--prune=now", "-q"]);
    for t in [&a.task, &b.task] {
        let kind = git(&repo.work, &["cat-file", "-t", &t.base_commit]);
        assert_eq!(kind.trim(), "commit", "{}: {} was dropped by gc", t.instance_id, t.base_commit);
    }
}

/// Twenty functions `fNN` of four lines each (`return NN` on line 4 NN + 2).
fn long_module() -> String {
    (0..20).map(|k| format!("def f{k:02}():\n    return {k}\n\n\n")).collect()
}

/// `o/long` holding `long.py` = [`long_module`], and its commit.
fn long_repo() -> (TempRepo, String) {
    let repo = TempRepo::new("o/long");
    repo.file("long.py", long_module());
    let base = repo.commit("base");
    (repo, base)
}

/// The diff of `long.py` from `before` to `after`, made in a scratch
/// repository: a fix published against another version of the file.
fn diff_between(before: &str, after: &str) -> String {
    let scratch = TempRepo::new("o/scratch");
    scratch.file("long.py", before);
    scratch.commit("before");
    scratch.file("long.py", after);
    git(&scratch.work, &["diff", "-U3"])
}

/// Fixes of `long_module()` made against a version 14 lines shorter at the
/// top (the hunk is 14 lines further down in the base) and one 14 lines
/// longer (14 lines further up): (patch, function, offset).
fn offset_fixes() -> Vec<(String, &'static str, i64)> {
    let base = long_module();
    let shorter: String = base.split_inclusive('\n').skip(14).collect();
    let longer: String = (0..14).map(|i| format!("# pad {i}\n")).collect::<String>() + &base;
    vec![
        (diff_between(&shorter, &shorter.replace("return 10\n", "return 100\n")), "long.py:f10", 14),
        (diff_between(&longer, &longer.replace("return 3\n", "return 30\n")), "long.py:f03", -14),
    ]
}

/// `@@ -a,b +c,d @@` of a one-hunk patch, its starts moved by `shift`.
fn shift_header(patch: &str, shift: i64) -> String {
    let header = patch.lines().find(|l| l.starts_with("@@ ")).unwrap();
    let nums: Vec<i64> = header.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    let moved = format!("@@ -{},{} +{},{} @@", nums[0] + shift, nums[1], nums[2] + shift, nums[3]);
    patch.replace(&header[..header.find(" @@").unwrap() + 3], &moved)
}

#[test]
fn hunks_fourteen_lines_off_apply_where_git_apply_puts_them() {
    let (repo, base) = long_repo();
    let g = open(&repo.work);
    let patch_file = repo.repos_dir.path().join("fix.patch");
    for (n, (fix, function, offset)) in offset_fixes().into_iter().enumerate() {
        // git's own verdict: it applies, at the offset.
        std::fs::write(&patch_file, &fix).unwrap();
        let out = Command::new("git").current_dir(&repo.work).args(["apply", "-v", patch_file.to_str().unwrap()]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success() && said.contains(&format!("(offset {offset} lines)")), "{said}");
        let by_git = std::fs::read_to_string(repo.work.join("long.py")).unwrap();
        git(&repo.work, &["checkout", "-q", "--", "."]);

        // A SWE-Gym row: imported, the headers moved to where the hunk applies.
        let r = Row { repo: "o/long".into(), ..row(&format!("o__long-{n}"), &base, &fix, None) };
        let imported = import_row(&g, &r, ImportFormat::SweGym).unwrap_or_else(|e| panic!("offset {offset}: {e}"));
        let placed = imported.task.patch.clone().unwrap();
        assert_eq!(placed, shift_header(&fix, offset), "the body as published, the header where it applies");
        assert_eq!(imported.task.gold.as_ref().unwrap().functions, set(&[function]), "gold from the lines the fix changes");
        std::fs::write(&patch_file, &placed).unwrap();
        let out = Command::new("git").current_dir(&repo.work).args(["apply", "-v", "--check", patch_file.to_str().unwrap()]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success() && !said.contains("offset"), "the stored patch applies where it says: {said}");

        // A SWE-smith row: the buggy commit's file is what `git apply` wrote.
        let smith = Row { repo: "o/long".into(), ..row(&format!("o__long.smith.{n}"), &base, &fix, None) };
        let buggy = import_row(&g, &smith, ImportFormat::SweSmith).unwrap_or_else(|e| panic!("offset {offset}: {e}"));
        assert_eq!(git(&repo.work, &["show", &format!("{}:long.py", buggy.task.base_commit)]), by_git);
    }
}

#[test]
fn a_hunk_whose_context_is_nowhere_is_still_refused() {
    let (repo, base) = long_repo();
    let g = open(&repo.work);
    let (fix, _, _) = offset_fixes().remove(0);
    let wrong = fix.replace(" def f10():", " def f10(x):");
    assert_ne!(wrong, fix);
    for format in [ImportFormat::SweGym, ImportFormat::SweSmith] {
        let r = Row { repo: "o/long".into(), ..row("o__long-wrong", &base, &wrong, None) };
        let err = import_row(&g, &r, format).unwrap_err();
        assert!(matches!(err, ImportError::DoesNotApply { ref commit, .. } if *commit == base), "{format:?}: {err}");
        let text = err.to_string();
        assert!(text.contains("long.py") && text.contains("hunk 1") && text.contains(&base), "{format:?}: {text}");
    }
}
