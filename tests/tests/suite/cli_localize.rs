//! `fusegrpo localize` and `fusegrpo mcp` (issue 36) on a small repository:
//! the working tree as it is (uncommitted and untracked files seen, nothing
//! written), the same answer as `eval` on the same task, and the MCP server
//! spoken to in JSON-RPC over stdio, bad inputs answered as tool errors.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use e2e::{fusegrpo_bin, fusegrpo_fails, fusegrpo_ok, read_jsonl, shop_world};
use serde_json::{json, Value};

/// Every file under `.git` with its bytes, and `git status --porcelain`.
fn repo_state(repo: &Path) -> (BTreeMap<String, Vec<u8>>, String) {
    let mut files = BTreeMap::new();
    let mut stack = vec![repo.join(".git")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.insert(p.strip_prefix(repo).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    let status = Command::new("git").arg("-C").arg(repo).args(["status", "--porcelain"]).output().unwrap();
    (files, String::from_utf8(status.stdout).unwrap())
}

fn localize_json(cfg: &Path, repo: &Path, issue: &str, extra: &[&str]) -> Value {
    let issue_file = repo.parent().unwrap().join("issue.txt");
    std::fs::write(&issue_file, issue).unwrap();
    let mut args = vec!["localize", "--config", cfg.to_str().unwrap(), "--policy", "scripted", "--repo", repo.to_str().unwrap()];
    args.extend_from_slice(&["--issue", issue_file.to_str().unwrap(), "--json"]);
    args.extend_from_slice(extra);
    serde_json::from_str(&fusegrpo_ok(&args)).unwrap()
}

fn entities(v: &Value, key: &str) -> Vec<String> {
    v[key].as_array().unwrap().iter().map(|r| r["entity"].as_str().unwrap().to_string()).collect()
}

#[test]
fn localize_sees_uncommitted_edits_and_leaves_the_repository_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let tax = std::fs::read_to_string(repo.join("shop/tax.py")).unwrap();
    std::fs::write(repo.join("shop/tax.py"), format!("{tax}\ndef frobnicate_widget(total):\n    return total - 1\n")).unwrap();
    std::fs::write(repo.join("shop/extra.py"), "def quux_handler(order):\n    return order.id\n").unwrap();
    let before = repo_state(&repo);
    assert!(before.1.contains(" M shop/tax.py") && before.1.contains("?? shop/extra.py"), "{}", before.1);

    let edited = localize_json(&cfg, &repo, "Calling `frobnicate_widget` on a refund returns the wrong total.", &[]);
    assert!(entities(&edited, "functions").contains(&"shop/tax.py:frobnicate_widget".to_string()), "{edited}");
    assert_eq!(edited["answered"], 1);
    let ev = &edited["functions"][0]["evidence"];
    assert!(ev["tool"].is_string() && ev["line"].as_str().unwrap().contains("frobnicate_widget"), "{edited}");
    let untracked = localize_json(&cfg, &repo, "`quux_handler` raises for orders without an id.", &[]);
    assert!(entities(&untracked, "files").contains(&"shop/extra.py".to_string()), "{untracked}");
    // A revision is searched as committed: the edit is not there.
    let committed = localize_json(&cfg, &repo, "Calling `frobnicate_widget` on a refund returns the wrong total.", &["--rev", "HEAD"]);
    assert!(!entities(&committed, "functions").iter().any(|f| f.contains("frobnicate_widget")), "{committed}");

    // An issue over its token budget (a pasted log) is cut to its beginning
    // and its end, and the report says how many tokens were dropped (it
    // used to be refused).
    let long_text = format!("Calling `frobnicate_widget` on a refund returns the wrong total.\n{}", "The total is wrong after a refund. ".repeat(2000));
    let long = repo.parent().unwrap().join("long-issue.txt");
    std::fs::write(&long, &long_text).unwrap();
    let report = fusegrpo_ok(&["localize", "--config", cfg.to_str().unwrap(), "--policy", "scripted", "--repo", repo.to_str().unwrap(), "--issue", long.to_str().unwrap()]);
    assert!(report.starts_with("note: the issue is ") && report.contains("tokens of its middle were dropped"), "{report}");
    let cut = localize_json(&cfg, &repo, &long_text, &["--max-issue-tokens", "200"]);
    let c = &cut["issue_cut"];
    assert_eq!(c["max_issue_tokens"], 200, "{cut}");
    let (tokens, dropped) = (c["tokens"].as_u64().unwrap(), c["dropped_tokens"].as_u64().unwrap());
    assert!(tokens > 10_000 && dropped > tokens - 200 && dropped < tokens, "{c}");
    // Its beginning was searched.
    assert!(entities(&cut, "functions").contains(&"shop/tax.py:frobnicate_widget".to_string()), "{cut}");
    // One that fits is left alone, and says nothing.
    assert!(edited.get("issue_cut").is_none(), "{edited}");

    let after = repo_state(&repo);
    assert_eq!(before.1, after.1, "git status changed");
    assert_eq!(before.0.keys().collect::<Vec<_>>(), after.0.keys().collect::<Vec<_>>(), "files under .git changed");
    assert!(before.0 == after.0, "the bytes of a file under .git changed");
}

/// A folder that is not a git repository is searched as it is, its
/// `.gitignore` files honoured (it used to be refused: "not a git
/// repository"); a revision of it is refused, saying why.
#[test]
fn localize_searches_a_plain_folder_as_it_is_honouring_its_gitignore() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(plain.join("shop")).unwrap();
    std::fs::create_dir_all(plain.join("vendor")).unwrap();
    for f in ["shop/cart.py", "shop/tax.py"] {
        std::fs::copy(tmp.path().join("repos/acme__shop").join(f), plain.join(f)).unwrap();
    }
    std::fs::write(plain.join("shop/extra.py"), "def quux_handler(order):\n    return order.id\n").unwrap();
    std::fs::write(plain.join("vendor/junk.py"), "def zorblax_fn(x):\n    return x\n").unwrap();
    std::fs::write(plain.join(".gitignore"), "vendor/\n").unwrap();
    let found = localize_json(&cfg, &plain, "`quux_handler` raises for orders without an id.", &[]);
    assert!(entities(&found, "files").contains(&"shop/extra.py".to_string()), "{found}");
    let ignored = localize_json(&cfg, &plain, "`zorblax_fn` drops its argument.", &[]);
    let named: Vec<String> = entities(&ignored, "files").into_iter().chain(entities(&ignored, "functions")).collect();
    assert!(!named.iter().any(|e| e.contains("vendor")), "an ignored file was searched: {ignored}");
    let issue = tmp.path().join("issue.txt");
    let err = fusegrpo_fails(&["localize", "--config", cfg.to_str().unwrap(), "--policy", "scripted", "--repo", plain.to_str().unwrap(), "--issue", issue.to_str().unwrap(), "--rev", "HEAD"]);
    assert!(err.contains("is not a git repository but a plain folder") && err.contains("HEAD"), "{err}");
    let err = fusegrpo_fails(&["localize", "--config", cfg.to_str().unwrap(), "--policy", "scripted", "--repo", tmp.path().join("nowhere").to_str().unwrap(), "--issue", issue.to_str().unwrap()]);
    assert!(err.contains("does not exist"), "{err}");
}

/// Several attempts under a greedy config sample at `[localize]
/// attempts_temperature` (they used to be one episode four times), and the
/// cost gives the call's wall seconds, not the attempts' seconds summed.
#[test]
fn attempts_under_a_greedy_config_differ_and_the_cost_is_wall_time() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = tmp.path().join("issue.txt");
    std::fs::write(&issue, "`compute_tax` uses a flat rate; it must depend on the region.").unwrap();
    let out = tmp.path().join("attempts.jsonl");
    let base = ["localize", "--config", cfg.to_str().unwrap(), "--set", "sampling.temperature=0", "--repo", repo.to_str().unwrap(), "--issue", issue.to_str().unwrap(), "--json"];
    let mut args = base.to_vec();
    // The model's attempts alone (the default, combined, adds the scripted search's episode).
    args.extend_from_slice(&["--policy", "model", "--attempts", "4", "--out", out.to_str().unwrap()]);
    let started = std::time::Instant::now();
    let loc: Value = serde_json::from_str(&fusegrpo_ok(&args)).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(loc["temperature"], 0.7, "{loc}");
    let episodes = read_jsonl(&out);
    assert_eq!(episodes.len(), 4);
    let tokens: Vec<&Value> = episodes.iter().map(|e| &e["tokens"]).collect();
    let distinct = tokens.iter().enumerate().filter(|(i, t)| !tokens[..*i].contains(t)).count();
    assert!(distinct >= 2, "4 attempts, {distinct} distinct episode(s)");
    let seconds: Vec<f64> = episodes.iter().map(|e| e["seconds"].as_f64().unwrap()).collect();
    let cost = &loc["cost"];
    let (wall, summed) = (cost["seconds"].as_f64().unwrap(), cost["attempt_seconds"].as_f64().unwrap());
    assert!((summed - seconds.iter().sum::<f64>()).abs() < 1e-6, "{cost}");
    assert!(wall >= seconds.iter().cloned().fold(0.0, f64::max) && wall <= elapsed, "wall {wall} s, attempts {seconds:?}, the command took {elapsed} s");
    assert!(wall < summed, "the attempts ran together: {cost}");
    // One attempt stays greedy; an explicit temperature 0 for several is refused, saying why.
    let mut one = base.to_vec();
    one.extend_from_slice(&["--out", out.to_str().unwrap()]);
    let greedy: Value = serde_json::from_str(&fusegrpo_ok(&one)).unwrap();
    assert_eq!(greedy["temperature"], 0.0, "{greedy}");
    let mut refused = base.to_vec();
    refused.extend_from_slice(&["--attempts", "4", "--temperature", "0"]);
    let err = fusegrpo_fails(&refused);
    assert!(err.contains("would be the same episode 4 times"), "{err}");
}

#[test]
fn localize_answers_as_eval_does_on_the_same_task() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let tasks = read_jsonl(&tmp.path().join("tasks.jsonl"));
    let one = tmp.path().join("one.jsonl");
    std::fs::write(&one, format!("{}\n", tasks[0])).unwrap();
    let out = tmp.path().join("eval.jsonl");
    fusegrpo_ok(&["eval", "--config", cfg.to_str().unwrap(), "--tasks", one.to_str().unwrap(), "--policy", "scripted", "--group", "1", "--out", out.to_str().unwrap()]);
    let episode = &read_jsonl(&out)[0];
    let mut eval_answer: Vec<String> = episode["answer"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    let repo = tmp.path().join("repos/acme__shop");
    let loc = localize_json(&cfg, &repo, tasks[0]["problem_statement"].as_str().unwrap(), &["--rev", tasks[0]["base_commit"].as_str().unwrap()]);
    let mut ours: Vec<String> = entities(&loc, "files").into_iter().chain(entities(&loc, "functions")).collect();
    // The answer lists functions; their files count as named.
    for f in eval_answer.clone() {
        if let Some((file, _)) = f.split_once(':') {
            eval_answer.push(file.to_string());
        }
    }
    eval_answer.sort();
    eval_answer.dedup();
    ours.sort();
    assert_eq!(ours, eval_answer, "localize {loc}\neval {episode}");
    assert_eq!(loc["cost"]["turns"].as_u64().unwrap() as usize, episode["turns"].as_array().unwrap().len());
}

#[test]
fn mcp_speaks_json_rpc_over_stdio_and_survives_bad_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let mut child = Command::new(fusegrpo_bin())
        .args(["mcp", "--config", cfg.to_str().unwrap(), "--policy", "scripted", "--repo", repo.to_str().unwrap()])
        .env("FUSEGRPO_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    let mut next_for = |id: u64| -> Value {
        loop {
            let line = lines.next().expect("the server closed stdout").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {line:?}: {e}"));
            if v["id"] == id {
                return v;
            }
        }
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
    let init = next_for(1);
    assert_eq!(init["result"]["serverInfo"]["name"], "fusegrpo");
    // The config declares no `search` tool: the model's tools are named as it has them.
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(instructions.contains("(grep, glob and read_file, read-only)") && !instructions.contains("the index search, grep"), "{instructions}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = next_for(2);
    let tools: Vec<String> = listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    for t in ["localize", "grep", "glob", "read_file"] {
        assert!(tools.contains(&t.to_string()), "{tools:?}");
    }
    // `localize` declares the schema of its structured content, and says
    // what it is worth and costs (no declared schema before).
    let localize = listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "localize").unwrap().clone();
    let schema = localize["outputSchema"].clone();
    assert_eq!(schema["type"], "object", "{localize}");
    for key in ["files", "functions", "answered", "cost"] {
        assert!(schema["properties"][key].is_object() && schema["required"].as_array().unwrap().contains(&json!(key)), "{key}: {schema}");
    }
    let description = localize["description"].as_str().unwrap();
    assert!(description.contains("file F1") && description.contains("hint to verify") && description.contains(" s per attempt"), "{description}");
    assert!(description.contains("searches it with grep, glob and read_file and names") && !description.contains("the index search, grep"), "{description}");
    let call = |id: u64, name: &str, arguments: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let good = json!({"issue": "Adding an item fails with 'negative price in cart' for discounts; `add_item` should allow them."});
    let bad = [
        (json!({"issue": "  "}), "issue is empty"),
        (json!({"issue": "x", "repo": tmp.path().join("nowhere").to_str().unwrap()}), "does not exist"),
        (json!({"issue": "x", "rev": "no-such-rev"}), "no-such-rev"),
        (json!({"issue": "x", "attempts": 0}), "argument `attempts`: expected a whole number from 1 to 64"),
        (json!({"issue": "x", "attempts": 2, "temperature": 0.0}), "same episode 2 times"),
        (json!({"issue": "x", "temperature": -1.0}), "must be a number >= 0"),
        (json!({"issue": "x", "policy": "best"}), "expected model, scripted or combined"),
        (json!({"issue": "x", "policy": "combined"}), "started with --policy scripted and has no model loaded"),
    ];
    let mut id = 10;
    for (arguments, needle) in bad {
        send(call(id, "localize", arguments));
        let r = next_for(id);
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains(needle), "{r}");
        send(call(id + 1, "localize", good.clone()));
        let r = next_for(id + 1);
        assert_eq!(r["result"]["isError"], false, "{r}");
        let files = &r["result"]["structuredContent"]["files"];
        assert_eq!(files[0]["entity"], "shop/cart.py", "{r}");
        for key in r["result"]["structuredContent"].as_object().unwrap().keys() {
            assert!(schema["properties"][key].is_object(), "{key} is not in the output schema {schema}");
        }
        id += 2;
    }
    // A long issue is cut, not refused, and the result says so (it used to be a tool error).
    let long = format!("Adding an item fails with 'negative price in cart'; `add_item` should allow discounts.\n{}", "The total is wrong after a refund. ".repeat(2000));
    send(call(id, "localize", json!({"issue": long, "max_issue_tokens": 300})));
    let r = next_for(id);
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("tokens of its middle were dropped"), "{r}");
    let cut = &r["result"]["structuredContent"]["issue_cut"];
    assert!(cut["dropped_tokens"].as_u64().unwrap() > 0 && cut["max_issue_tokens"] == 300, "{r}");
    assert_eq!(r["result"]["structuredContent"]["files"][0]["entity"], "shop/cart.py", "{r}");
    id += 1;
    send(call(id, "read_file", json!({"path": "shop/tax.py"})));
    assert!(next_for(id)["result"]["content"][0]["text"].as_str().unwrap().contains("compute_tax"));
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "the server exits cleanly when the client closes stdin");
}

/// An episode that ends without an answer is no error: the server says so
/// and returns what the tools surfaced (a tiny random model never answers).
#[test]
fn mcp_says_when_the_localizer_ends_without_an_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let mut child = Command::new(fusegrpo_bin())
        .args(["mcp", "--config", cfg.to_str().unwrap(), "--policy", "model", "--repo", repo.to_str().unwrap()])
        .env("FUSEGRPO_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for v in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "localize", "arguments": {"issue": "`compute_tax` uses a flat rate; it must depend on the region."}}}),
    ] {
        writeln!(stdin, "{v}").unwrap();
    }
    let reply = loop {
        let v: Value = serde_json::from_str(&lines.next().expect("a reply").unwrap()).unwrap();
        if v["id"] == 2 {
            break v;
        }
    };
    let result = &reply["result"];
    assert_eq!(result["isError"], false, "{reply}");
    assert_eq!(result["structuredContent"]["answered"], 0, "{reply}");
    assert!(result["content"][0]["text"].as_str().unwrap().contains("ended without an answer"), "{reply}");
    assert!(result["structuredContent"]["cost"]["turns"].as_u64().unwrap() >= 1, "{reply}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// The default (`--policy combined`) runs the index search beside the
/// model: with a tiny random model that never answers, the ranking is the
/// search's (it used to be empty: the model alone), every reported entity
/// in the repository. `--policy search` alone finds the gold function
/// first, with no model loaded.
#[test]
fn localize_by_default_combines_the_index_search_with_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = "`compute_tax` uses a flat rate; it must depend on the region.";
    let issue_file = tmp.path().join("issue.txt");
    std::fs::write(&issue_file, issue).unwrap();
    let run = |policy: Option<&str>| -> Value {
        let mut args = vec!["localize", "--config", cfg.to_str().unwrap(), "--repo", repo.to_str().unwrap(), "--issue", issue_file.to_str().unwrap(), "--json"];
        if let Some(p) = policy {
            args.extend_from_slice(&["--policy", p]);
        }
        serde_json::from_str(&fusegrpo_ok(&args)).unwrap()
    };
    let searched = run(Some("search"));
    assert_eq!(searched["policy"], "search", "{searched}");
    assert_eq!(entities(&searched, "files")[0], "shop/tax.py", "{searched}");
    assert_eq!(entities(&searched, "functions")[0], "shop/tax.py:compute_tax", "{searched}");
    let combined = run(None);
    assert_eq!(combined["policy"], "combined", "{combined}");
    assert_eq!(combined["cost"]["attempts"], 1, "the model's attempt: {combined}");
    let n = entities(&searched, "files").len();
    assert_eq!(entities(&combined, "files")[..n], entities(&searched, "files")[..], "{combined}\n{searched}");
    assert_eq!(combined["grounded_rate"], 1.0, "{combined}");
    let text = fusegrpo_ok(&["localize", "--config", cfg.to_str().unwrap(), "--repo", repo.to_str().unwrap(), "--issue", issue_file.to_str().unwrap()]);
    assert!(text.contains("the index search first, then the model's 1 attempt(s)"), "{text}");
}
