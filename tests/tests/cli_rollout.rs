//! `fusegrpo rollout` and `fusegrpo eval` on a generated repository, with the
//! scripted teacher and with a tiny random model.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A repository, tasks, a tiny model and a config in `dir`.
fn setup(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repos/acme__shop");
    std::fs::create_dir_all(repo.join("shop")).unwrap();
    std::fs::write(
        repo.join("shop/cart.py"),
        "class Cart:\n    def add_item(self, item):\n        if item.price < 0:\n            raise ValueError('negative price in cart')\n        self.items.append(item)\n",
    )
    .unwrap();
    std::fs::write(repo.join("shop/tax.py"), "def compute_tax(total):\n    return total * 0.2\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let task = |id: &str, text: &str, file: &str, func: &str| {
        serde_json::json!({"instance_id": id, "repo": "acme/shop", "base_commit": commit, "problem_statement": text,
                           "gold": {"files": [file], "functions": [format!("{file}:{func}")]}})
        .to_string()
    };
    std::fs::write(
        dir.join("tasks.jsonl"),
        [
            task("shop-1", "Adding an item fails with 'negative price in cart' for discounts; `add_item` should allow them.", "shop/cart.py", "Cart.add_item"),
            task("shop-2", "`compute_tax` uses a flat rate; it must depend on the region.", "shop/tax.py", "compute_tax"),
        ]
        .join("\n"),
    )
    .unwrap();
    fusegrpo_ok(&["init-tiny", "--out", dir.join("model").to_str().unwrap(), "--small-vocab", "1024", "--seed", "2"]);
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "name = \"e2e\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n[episode]\nmax_turns = 3\nmax_turn_tokens = 16\n[rollout]\ngroup = 2\n[sampling]\ntemperature = 1.0\nseed = 3\n",
    )
    .unwrap();
    cfg
}

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
