//! `fusegrpo repos fetch`: clones the repositories a task file names from a
//! `--source` template into `owner__name`, skips one that already holds
//! every base commit, and names the task whose base commit is missing.

use e2e::{fusegrpo, fusegrpo_ok, git, read_jsonl};
use std::path::Path;

/// The practice repository's tasks, and a bare clone of it as the source.
fn source(dir: &Path) -> (String, String) {
    let d = |p: &str| dir.join(p).to_str().unwrap().to_string();
    fusegrpo_ok(&["practice-repo", "--out", &d("work"), "--seed", "2", "--commits", "12"]);
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", &d("work"), "--out", &d("tasks.jsonl"), "--max", "4"]);
    std::fs::create_dir_all(dir.join("mirror")).unwrap();
    git(dir, &["clone", "-q", "--bare", &d("work/practice__shop"), &d("mirror/practice__shop.git")]);
    (d("tasks.jsonl"), format!("{}/{{owner}}__{{name}}.git", d("mirror")))
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn repos_fetch_clones_skips_and_names_a_missing_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (tasks, template) = source(tmp.path());
    let repos = tmp.path().join("repos");
    let fetch = |tasks: &str, repos: &Path| {
        fusegrpo(&["repos", "fetch", "--tasks", tasks, "--repos-dir", repos.to_str().unwrap(), "--source", &template])
    };

    let first = fetch(&tasks, &repos);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stderr(&first).contains("cloning"), "{}", stderr(&first));
    let cloned = repos.join("practice__shop");
    for row in read_jsonl(Path::new(&tasks)) {
        git(&cloned, &["cat-file", "-e", &format!("{}^{{commit}}", row["base_commit"].as_str().unwrap())]);
    }
    assert!(!tmp.path().join("repos/practice__shop.part").exists());
    let task = &read_jsonl(Path::new(&tasks))[0];
    let call = r#"{"name": "glob", "arguments": {"pattern": "**/*.py"}}"#;
    let listed = fusegrpo_ok(&["tool", "--repos-dir", repos.to_str().unwrap(), "--repo", "practice/shop", "--commit", task["base_commit"].as_str().unwrap(), "--call", call]);
    assert!(listed.contains(".py"), "the environment reads the clone: {listed}");

    let second = fetch(&tasks, &repos);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(stderr(&second).contains("skipped") && !stderr(&second).contains("cloning"), "{}", stderr(&second));

    let bogus_commit = "0123456789abcdef0123456789abcdef01234567";
    let mut row = task.clone();
    row["instance_id"] = "shop-bogus-7".into();
    row["base_commit"] = bogus_commit.into();
    let bogus = tmp.path().join("bogus.jsonl");
    std::fs::write(&bogus, format!("{}\n{row}\n", std::fs::read_to_string(&tasks).unwrap())).unwrap();
    for (dir, step) in [(&repos, "fetching"), (&tmp.path().join("fresh"), "cloning")] {
        let out = fetch(bogus.to_str().unwrap(), dir);
        assert!(!out.status.success(), "a missing base commit must fail");
        let err = stderr(&out);
        assert!(err.contains(step) && err.contains("shop-bogus-7") && err.contains(bogus_commit), "{err}");
    }
}

/// `--list`: a file of `owner/name` lines is cloned whole (no commit to
/// check) and skipped once present; `--allow-missing-commits` names the
/// tasks whose base commit is missing and succeeds.
#[test]
fn repos_fetch_a_list_and_allow_missing_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let (tasks, template) = source(tmp.path());
    let repos = tmp.path().join("repos");
    let r = repos.to_str().unwrap();
    let list = tmp.path().join("repos.txt");
    std::fs::write(&list, "# the repositories\npractice/shop  # the practice one\n\n").unwrap();
    let l = list.to_str().unwrap();

    let first = fusegrpo(&["repos", "fetch", "--list", l, "--repos-dir", r, "--source", &template]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stderr(&first).contains("1 repositories listed") && stderr(&first).contains("cloning"), "{}", stderr(&first));
    let head = git(tmp.path(), &["--git-dir", tmp.path().join("mirror/practice__shop.git").to_str().unwrap(), "rev-parse", "HEAD"]);
    git(&repos.join("practice__shop"), &["cat-file", "-e", &format!("{head}^{{commit}}")]);
    let second = fusegrpo(&["repos", "fetch", "--list", l, "--repos-dir", r, "--source", &template]);
    assert!(second.status.success() && stderr(&second).contains("skipped") && !stderr(&second).contains("cloning"), "{}", stderr(&second));

    // With a missing base commit: named, not fatal.
    let mut row = read_jsonl(Path::new(&tasks))[0].clone();
    row["instance_id"] = "shop-bogus-9".into();
    row["base_commit"] = "fedcba9876543210fedcba9876543210fedcba98".into();
    let bogus = tmp.path().join("bogus.jsonl");
    std::fs::write(&bogus, format!("{}\n{row}\n", std::fs::read_to_string(&tasks).unwrap())).unwrap();
    let fresh = tmp.path().join("fresh");
    let out = fusegrpo(&["repos", "fetch", "--tasks", bogus.to_str().unwrap(), "--allow-missing-commits", "--repos-dir", fresh.to_str().unwrap(), "--source", &template]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let needed = read_jsonl(&bogus).len();
    assert!(err.contains(&format!("1 of {needed} base commits are missing")) && err.contains("shop-bogus-9"), "{err}");
    assert!(fresh.join("practice__shop").is_dir());

    // A bad line of the list is named; --list and --tasks exclude each other; one of them is needed.
    std::fs::write(&list, "practice/shop\nnot a repo\n").unwrap();
    let out = fusegrpo(&["repos", "fetch", "--list", l, "--repos-dir", r, "--source", &template]);
    assert!(!out.status.success() && stderr(&out).contains("repos.txt:2"), "{}", stderr(&out));
    let out = fusegrpo(&["repos", "fetch", "--list", l, "--tasks", &tasks, "--repos-dir", r]);
    assert!(!out.status.success() && stderr(&out).contains("--list"), "{}", stderr(&out));
    let out = fusegrpo(&["repos", "fetch", "--repos-dir", r]);
    assert!(!out.status.success() && stderr(&out).contains("--tasks"), "{}", stderr(&out));
}
