//! `fusegrpo rollout` and `fusegrpo eval` on a generated repository, with the
//! scripted teacher and with a tiny random model.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl, shop_world as setup};

#[test]
fn scripted_and_model_rollouts_write_complete_episodes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let out = tmp.path().join("episodes.jsonl");
    let args = |policy: &str| -> Vec<String> {
        ["rollout", "--config", cfg.to_str().unwrap(), "--tasks", tasks.to_str().unwrap(), "--out", out.to_str().unwrap(), "--policy", policy]
            .map(String::from)
            .to_vec()
    };
    let run = |policy: &str| {
        let a = args(policy);
        fusegrpo_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        read_jsonl(&out)
    };
    let eps = run("scripted");
    assert_eq!(eps.len(), 4, "2 tasks x group 2");
    for e in &eps {
        for key in ["task_id", "tokens", "loss_mask", "logprobs", "turns", "answer", "score", "stop_reason", "policy_tokens", "tool_calls", "seconds"] {
            assert!(e.get(key).is_some(), "missing {key}");
        }
        assert_eq!(e["stop_reason"], "answer");
        assert_eq!(e["score"]["f1_file"], 1.0, "{}", e["answer"]);
        assert!(e["turns"][0]["calls"][0]["entities"].is_array());
    }
    let model_eps = run("model");
    assert_eq!(model_eps.len(), 4);
    for e in &model_eps {
        let n = e["tokens"].as_array().unwrap().len();
        assert_eq!(n, e["loss_mask"].as_array().unwrap().len());
        assert!(e["policy_tokens"].as_u64().unwrap() > 0);
    }
    let again = run("model");
    let toks = |v: &[serde_json::Value]| v.iter().map(|e| e["tokens"].clone()).collect::<Vec<_>>();
    assert_eq!(toks(&model_eps), toks(&again), "seeded model rollouts repeat");

    let table = fusegrpo_ok(&["eval", "--config", cfg.to_str().unwrap(), "--tasks", tasks.to_str().unwrap(), "--policy", "scripted"]);
    assert!(table.contains("f1_file") && table.contains("calls/turn"), "{table}");
    let row = table.lines().find(|l| l.starts_with("eval")).unwrap();
    assert_eq!(row.split_whitespace().nth(2), Some("1.000"), "file F1 column: {row}");

    // The same config elsewhere, its relative model and repositories now
    // missing: --model and --repos-dir stand in and give the same episodes.
    let moved = tmp.path().join("elsewhere/run.toml");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::copy(&cfg, &moved).unwrap();
    let out2 = tmp.path().join("moved.jsonl");
    let (model, repos) = (tmp.path().join("model"), tmp.path().join("repos"));
    let base = ["rollout", "--config", moved.to_str().unwrap(), "--tasks", tasks.to_str().unwrap(), "--out", out2.to_str().unwrap()];
    let failed = fusegrpo(&base);
    assert!(!failed.status.success(), "the moved config's own paths are missing");
    let overridden = [&base[..], &["--model", model.to_str().unwrap(), "--repos-dir", repos.to_str().unwrap()]].concat();
    fusegrpo_ok(&overridden);
    assert_eq!(toks(&read_jsonl(&out2)), toks(&model_eps), "--model and --repos-dir replace the config's paths");
}

#[test]
fn bad_configs_name_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("max_turns = 3", "max_turnz = 3")).unwrap();
    let out = fusegrpo(&["eval", "--config", cfg.to_str().unwrap(), "--tasks", "x.jsonl", "--policy", "scripted"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("max_turnz") && err.contains("run.toml"), "{err}");
    let out = fusegrpo(&["eval", "--config", cfg.to_str().unwrap(), "--tasks", "x.jsonl", "--policy", "ftp://nope"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ftp://nope"));
}

/// `compare` on ranked files: each policy of a file is a column, paired
/// with the first column, or with the first of the policy `--against`
/// names. `rows` are `eval --policy search --ranked` rows (both tasks found
/// at rank 1); a second file holds them again as policy `model`, its first
/// task's files missed.
fn compare_pairs_ranked_columns_against_a_policy(dir: &std::path::Path, rows: &[serde_json::Value]) {
    let model: Vec<serde_json::Value> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut r = r.clone();
            r["policy"] = "model".into();
            if i == 0 {
                r["score"]["f1_file"] = 0.0.into();
                r["score"]["first_gold_file"] = serde_json::Value::Null;
            }
            r
        })
        .collect();
    let write = |name: &str, rows: &[serde_json::Value]| {
        let p = dir.join(name);
        std::fs::write(&p, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
        p
    };
    // One file with both policies, model first; another with the search alone.
    let both = write("both.ranked.jsonl", &[model.clone(), rows.to_vec()].concat());
    let search = write("search-only.ranked.jsonl", rows);
    let (b, s) = (both.to_str().unwrap(), search.to_str().unwrap());
    let json = dir.join("ranked.json");
    let table = fusegrpo_ok(&["compare", b, s, "--against", "search", "--json", json.to_str().unwrap()]);
    let label = |p: &str, policy: &str| format!("{p} [{policy}]");
    // Against the first search column: the model and the other search column, not the search itself.
    assert!(table.contains(&format!("| {} - {} |", label(b, "model"), label(b, "search"))), "{table}");
    assert!(table.contains(&format!("| {} - {} |", label(s, "search"), label(b, "search"))), "{table}");
    assert!(!table.contains(&format!("| {} - {} |", label(b, "search"), label(b, "search"))), "{table}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let paired = v["paired"].as_array().unwrap();
    assert_eq!(paired.len(), 2, "{v}");
    let model_row = paired.iter().find(|p| p["later"] == label(b, "model")).unwrap();
    assert_eq!(model_row["earlier"], label(b, "search"));
    assert!((model_row["paired"]["f1_file"]["mean"].as_f64().unwrap() + 0.5).abs() < 1e-9, "one task of two lost F1 1: {model_row}");
    let same = paired.iter().find(|p| p["later"] == label(s, "search")).unwrap();
    assert_eq!(same["paired"]["f1_file"]["mean"], 0.0, "{same}");
    // Without --against the first column (the model) is the base.
    let table = fusegrpo_ok(&["compare", b, s]);
    assert!(table.contains(&format!("| {} - {} |", label(b, "search"), label(b, "model"))), "{table}");
    // A policy no file has is named with the ones there are.
    let out = fusegrpo(&["compare", b, s, "--against", "combined"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--against combined") && err.contains("model, search"), "{err}");
}

/// `eval --policy search` ranks each task by the index search (no model,
/// no episode), and `eval` cuts an issue too long for the episode's token
/// budget instead of refusing it (it used to need --skip-bad-tasks).
#[test]
fn eval_search_ranks_and_long_issues_are_cut_not_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let ranked = tmp.path().join("search.ranked.jsonl");
    let c = cfg.to_str().unwrap();
    let table = fusegrpo_ok(&["eval", "--config", c, "--tasks", tasks.to_str().unwrap(), "--policy", "search", "--ranked", ranked.to_str().unwrap()]);
    assert!(table.contains("| search | 2 |"), "{table}");
    let rows = read_jsonl(&ranked);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["policy"], "search");
        assert_eq!(r["score"]["first_gold_file"], 1, "{r}");
        assert_eq!(r["score"]["first_gold_function"], 1, "{r}");
    }
    compare_pairs_ranked_columns_against_a_policy(tmp.path(), &rows);
    // With --out, --policy search is refused (it runs no episodes).
    let out = tmp.path().join("e.jsonl");
    let refused = fusegrpo(&["eval", "--config", c, "--tasks", tasks.to_str().unwrap(), "--policy", "search", "--out", out.to_str().unwrap()]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("runs no episodes"));

    // An issue far over the budget ([episode] max_total_tokens, default).
    let mut rows = read_jsonl(&tasks);
    let long = format!("`compute_tax` uses a flat rate.\n{}\nIt must depend on the region.", "The tax is wrong for every region we sell in. ".repeat(2000));
    rows[1]["problem_statement"] = long.into();
    let long_tasks = tmp.path().join("long.jsonl");
    std::fs::write(&long_tasks, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    let eps = tmp.path().join("long-eps.jsonl");
    let run = fusegrpo(&["eval", "--config", c, "--tasks", long_tasks.to_str().unwrap(), "--policy", "scripted", "--group", "1", "--out", eps.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("1 issue(s) over the episode's token budget cut to fit"), "{stderr}");
    let episodes = read_jsonl(&eps);
    assert_eq!(episodes.len(), 2, "both tasks ran, none skipped");
    assert!(episodes.iter().any(|e| e["task_id"] == "shop-2"));
    // `rollout` still refuses it (its episodes are training data).
    let refused = fusegrpo(&["rollout", "--config", c, "--tasks", long_tasks.to_str().unwrap(), "--policy", "scripted", "--out", eps.to_str().unwrap()]);
    assert!(!refused.status.success());
}
