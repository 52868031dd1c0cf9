//! Issue 52's data-loss regressions: an output that is an input (or another
//! output) is refused before any work, whatever its spelling; `eval` learns
//! that `--out` cannot be written before it runs an episode; a task file
//! with a repeated id is refused by line; `compare` names the field of a bad
//! episode line and refuses numbers out of range.

use e2e::{fusegrpo_ok, read_jsonl, shop_world, fusegrpo_fails as fails, s};



#[test]
fn eval_and_rollout_refuse_an_out_that_is_their_tasks_or_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let tasks = dir.join("tasks.jsonl");
    let before = std::fs::read(&tasks).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(&tasks, dir.join("link.jsonl")).unwrap();
    for out in [tasks.clone(), dir.join("./sub/../tasks.jsonl"), dir.join("link.jsonl")] {
        for cmd in ["eval", "rollout"] {
            let err = fails(&[cmd, "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--group", "1", "--out", s(&out)]);
            assert!(err.contains("--out") && err.contains("--tasks") && err.contains("nothing was done"), "{cmd} --out {}: {err}", out.display());
            assert_eq!(std::fs::read(&tasks).unwrap(), before, "{cmd} --out {}: the tasks file changed", out.display());
        }
    }
    let config_before = std::fs::read(&cfg).unwrap();
    let err = fails(&["eval", "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--out", s(&cfg)]);
    assert!(err.contains("--config"), "{err}");
    assert_eq!(std::fs::read(&cfg).unwrap(), config_before);
}

#[test]
fn tasks_import_and_split_refuse_outputs_on_their_inputs_or_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    e2e::shop_repo(dir);
    let tasks = dir.join("tasks.jsonl");
    let before = std::fs::read(&tasks).unwrap();
    let repos = dir.join("repos");
    let err = fails(&["tasks", "import", "--format", "swe-bench", "--input", s(&tasks), "--repos-dir", s(&repos), "--out", s(&tasks)]);
    assert!(err.contains("--out") && err.contains("--input"), "{err}");
    let report = dir.join("r.json");
    let err = fails(&["tasks", "import", "--format", "swe-bench", "--input", s(&tasks), "--repos-dir", s(&repos), "--out", s(&report), "--report", s(&report)]);
    assert!(err.contains("--report") && err.contains("--out"), "{err}");
    assert!(!report.exists());

    let held = dir.join("held.txt");
    std::fs::write(&held, "acme/shop\n").unwrap();
    let out = dir.join("o.jsonl");
    let err = fails(&["tasks", "split", "--input", s(&tasks), "--heldout-repos", s(&held), "--train", s(&out), "--heldout", s(&dir.join("./o.jsonl"))]);
    assert!(err.contains("--train") && err.contains("--heldout"), "{err}");
    assert!(!out.exists(), "nothing written");
    let err = fails(&["tasks", "split", "--input", s(&tasks), "--heldout-repos", s(&held), "--train", s(&tasks), "--heldout", s(&out)]);
    assert!(err.contains("--train") && err.contains("--input"), "{err}");
    assert_eq!(std::fs::read(&tasks).unwrap(), before);
    let err = fails(&["tasks", "split", "--input", s(&tasks), "--heldout-repos", s(&held), "--train", s(&out), "--heldout", s(&held)]);
    assert!(err.contains("--heldout-repos"), "{err}");
    assert_eq!(std::fs::read_to_string(&held).unwrap(), "acme/shop\n");
}

#[test]
fn eval_finds_an_unwritable_out_before_running_an_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let tasks = dir.join("tasks.jsonl");
    // A teacher nobody serves: an episode that ran would fail on it first.
    let nobody = "http://127.0.0.1:9";
    for out in [dir.join("tasks.jsonl/e.jsonl"), dir.join("model")] {
        let err = fails(&["eval", "--config", s(&cfg), "--tasks", s(&tasks), "--policy", nobody, "--out", s(&out)]);
        assert!(err.contains("--out") && err.contains("nothing was run"), "{}: {err}", out.display());
    }
    // Folders that do not exist yet are made.
    let nested = dir.join("new/dir/e.jsonl");
    fusegrpo_ok(&["eval", "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--group", "1", "--out", s(&nested)]);
    assert_eq!(read_jsonl(&nested).len(), 2);
}

#[test]
fn eval_refuses_a_task_file_with_a_repeated_id_by_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let tasks = dir.join("tasks.jsonl");
    let mut lines: Vec<serde_json::Value> = read_jsonl(&tasks);
    lines[1]["instance_id"] = lines[0]["instance_id"].clone();
    let dup = dir.join("dup.jsonl");
    std::fs::write(&dup, lines.iter().map(|l| l.to_string() + "\n").collect::<String>()).unwrap();
    let err = fails(&["eval", "--config", s(&cfg), "--tasks", s(&dup), "--policy", "scripted", "--group", "1"]);
    assert!(err.contains("dup.jsonl:2") && err.contains("shop-1") && err.contains("line 1"), "{err}");
    lines[1]["instance_id"] = "".into();
    std::fs::write(&dup, lines.iter().map(|l| l.to_string() + "\n").collect::<String>()).unwrap();
    let err = fails(&["eval", "--config", s(&cfg), "--tasks", s(&dup), "--policy", "scripted", "--group", "1", "--skip-bad-tasks"]);
    assert!(err.contains("dup.jsonl:2") && err.contains("instance_id") && err.contains("empty"), "{err}");
}

#[test]
fn compare_names_the_bad_field_and_refuses_numbers_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let good = dir.join("good.jsonl");
    fusegrpo_ok(&["eval", "--config", s(&cfg), "--tasks", s(&dir.join("tasks.jsonl")), "--policy", "scripted", "--group", "1", "--out", s(&good)]);
    let rows = read_jsonl(&good);
    let with = |name: &str, edit: &dyn Fn(&mut serde_json::Value) -> String| {
        let mut rows = rows.clone();
        let mut text = String::new();
        for (i, r) in rows.iter_mut().enumerate() {
            text += &if i == 1 { edit(r) } else { r.to_string() };
            text += "\n";
        }
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        fails(&["compare", s(&good), s(&path)])
    };
    let set = |field: &'static str, v: serde_json::Value| {
        move |r: &mut serde_json::Value| {
            r["score"][field] = v.clone();
            r.to_string()
        }
    };
    let err = with("null.jsonl", &set("reward", serde_json::Value::Null));
    assert!(err.contains("null.jsonl:2") && err.contains("score.reward is null"), "{err}");
    let err = with("nan.jsonl", &|r| r.to_string().replace(&format!("\"reward\":{}", r["score"]["reward"]), "\"reward\":NaN"));
    assert!(err.contains("nan.jsonl:2") && err.contains("NaN"), "{err}");
    let err = with("huge.jsonl", &set("reward", 1e300.into()));
    assert!(err.contains("huge.jsonl:2") && err.contains("score.reward is 1e+300"), "{err}");
    let err = with("seven.jsonl", &set("f1_file", 7.into()));
    assert!(err.contains("seven.jsonl:2") && err.contains("score.f1_file is 7") && err.contains("[0, 1]"), "{err}");
    let err = with("neg.jsonl", &set("e", (-0.5).into()));
    assert!(err.contains("score.e is -0.5"), "{err}");
    let err = with("secs.jsonl", &|r| {
        r["seconds"] = serde_json::Value::Null;
        r.to_string()
    });
    assert!(err.contains("secs.jsonl:2") && err.contains("seconds"), "{err}");
}

/// Issue 66 (D8): `localize --out` on its `--config`, its `--issue` or a
/// file of the searched `--repo` is refused before any work, the file kept;
/// a new file (inside the repository or not) is written.
#[test]
fn localize_refuses_an_out_that_is_its_config_issue_or_a_searched_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let repo = dir.join("repos/acme__shop");
    let issue = dir.join("issue.txt");
    std::fs::write(&issue, "`compute_tax` uses a flat rate; it must depend on the region.").unwrap();
    let source = repo.join("shop/tax.py");
    let run = |out: &std::path::Path| {
        vec!["localize", "--config", s(&cfg), "--policy", "scripted", "--repo", s(&repo), "--issue", s(&issue), "--out", s(out)]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for (out, input) in [(cfg.clone(), "--config"), (dir.join("./issue.txt"), "--issue"), (source.clone(), "--repo")] {
        let before = std::fs::read(&out).unwrap();
        let args = run(&out);
        let err = fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(err.contains("--out") && err.contains(input) && err.contains("nothing was done"), "--out {}: {err}", out.display());
        assert!(!err.contains("attempt 1 of 1"), "work was done before the refusal: {err}");
        assert_eq!(std::fs::read(&out).unwrap(), before, "--out {} changed it", out.display());
    }
    for out in [dir.join("episodes.jsonl"), repo.join("episodes.jsonl")] {
        let args = run(&out);
        fusegrpo_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(read_jsonl(&out).len(), 1, "{}", out.display());
    }
}

/// Issue 66 (D11, D17): `eval --out` records what made its episodes
/// (`made_by`: policy, model, adapter, group, the settings that change
/// episodes); `eval --reuse` refuses a file of another policy, model, group
/// or config by name, and reads a file without the record (older) checking
/// its tasks and group, with a warning. A repeated (task_id, sample) row is
/// refused by `--reuse` and `compare`, naming the line and the pair.
#[test]
fn eval_reuse_refuses_episodes_made_otherwise_and_repeated_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = shop_world(dir);
    let tasks = dir.join("tasks.jsonl");
    let eval = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["eval", "--config", s(&cfg), "--tasks", s(&tasks)].iter().map(|a| a.to_string()).collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let model_eps = dir.join("model.jsonl");
    let scripted_eps = dir.join("scripted.jsonl");
    fusegrpo_ok(&refs(&eval(&["--policy", "model", "--group", "2", "--out", s(&model_eps)])));
    fusegrpo_ok(&refs(&eval(&["--policy", "scripted", "--group", "2", "--out", s(&scripted_eps)])));
    let rows = read_jsonl(&model_eps);
    assert_eq!(rows[0]["made_by"]["policy"], "model", "{}", rows[0]["made_by"]);
    assert_eq!(rows[0]["made_by"]["group"], 2);
    // The same settings: reused.
    fusegrpo_ok(&refs(&eval(&["--policy", "model", "--group", "2", "--reuse", s(&model_eps)])));
    fusegrpo_ok(&["init-tiny", "--out", s(&dir.join("model2")), "--small-vocab", "1024", "--seed", "5"]);
    for (extra, says) in [
        (vec!["--policy", "model", "--group", "2", "--reuse", s(&scripted_eps)], "policy `scripted`"),
        (vec!["--policy", "model", "--group", "4", "--reuse", s(&model_eps)], "group"),
        (vec!["--policy", "model", "--group", "2", "--set", "sampling.temperature=0.5", "--reuse", s(&model_eps)], "[sampling] differs"),
        (vec!["--policy", "model", "--group", "2", "--set", "episode.max_turns=2", "--reuse", s(&model_eps)], "[episode] differs"),
        (vec!["--policy", "model", "--group", "2", "--model", s(&dir.join("model2")), "--reuse", s(&model_eps)], "model2"),
    ] {
        let err = fails(&refs(&eval(&extra)));
        assert!(err.contains("--reuse") && err.contains(says), "{extra:?}: {err}");
    }
    // An older file (no made_by): its tasks and group are checked, with a warning.
    let old = dir.join("old.jsonl");
    let stripped: String = rows.iter().map(|r| {
        let mut r = r.clone();
        r.as_object_mut().unwrap().remove("made_by");
        format!("{r}\n")
    }).collect();
    std::fs::write(&old, stripped).unwrap();
    let out = e2e::fusegrpo(&refs(&eval(&["--policy", "model", "--group", "2", "--reuse", s(&old)])));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("without a record of what made them"), "{err}");
    let err = fails(&refs(&eval(&["--policy", "model", "--group", "3", "--reuse", s(&old)])));
    assert!(err.contains("group is 3"), "{err}");
    // D17: a repeated (task_id, sample) row.
    let dup = dir.join("dup.jsonl");
    let text = std::fs::read_to_string(&model_eps).unwrap();
    std::fs::write(&dup, format!("{text}{}\n", text.lines().next().unwrap())).unwrap();
    let line = text.lines().count() + 1;
    let task = rows[0]["task_id"].as_str().unwrap();
    let err = fails(&["compare", s(&model_eps), s(&model_eps), "--against", "search"]);
    assert!(err.contains("--against picks a policy of ranked files"), "{err}");
    let err = fails(&["compare", s(&model_eps), s(&dup)]);
    assert!(err.contains(&format!("dup.jsonl:{line}")) && err.contains(&format!("task '{task}' sample 0 again (first at line 1)")), "{err}");
    let err = fails(&refs(&eval(&["--policy", "model", "--group", "2", "--reuse", s(&dup)])));
    assert!(err.contains(&format!("dup.jsonl:{line}")), "{err}");
}
