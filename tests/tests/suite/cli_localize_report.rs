//! What `fusegrpo localize` and `fusegrpo mcp` tell a user is true (issue
//! 65): the search counted apart from the model's attempts, no empty
//! answer hiding that nothing was found, evidence inside the function it
//! points at, who named what, the search policies without the model
//! folder, MCP arguments refused in words and progress per model turn.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::{fusegrpo, fusegrpo_bin, git, s, shop_world};
use serde_json::{json, Value};

/// `localize` with `args` after the config and the repository; stdout and stderr.
fn localize(cfg: &Path, repo: &Path, issue: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec!["localize", "--config", s(cfg), "--repo", s(repo), "--issue", s(issue)];
    all.extend_from_slice(args);
    let out = fusegrpo(&all);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "localize {args:?} failed:\n{stderr}");
    (stdout, stderr)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Under `combined` (the default), an issue the index search cannot read
/// (nothing to search for) leaves the model's attempts alone, said in the
/// output and the JSON (the whole call used to fail); `--policy search`
/// still refuses it.
#[test]
fn combined_goes_on_with_the_model_when_the_search_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = write(tmp.path(), "issue.txt", "it is not ok, so be it. is it? no.");
    let (text, progress) = localize(&cfg, &repo, &issue, &["--attempts", "2"]);
    assert!(progress.contains("the index search did not run: the query has nothing to search for"), "{progress}");
    assert!(text.contains("note: the index search did not run (the query has nothing to search for"), "{text}");
    assert!(text.contains("ranked: the model's 2 attempt(s) alone"), "{text}");
    let (json, _) = localize(&cfg, &repo, &issue, &["--attempts", "2", "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(v["search_error"].as_str().is_some_and(|e| e.contains("nothing to search for")), "{v}");
    assert_eq!(v["cost"]["attempts"], 2, "{v}");
    let out = fusegrpo(&["localize", "--config", s(&cfg), "--repo", s(&repo), "--issue", s(&issue), "--policy", "search"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("nothing to search for"));
}

/// Item 1: `--attempts 3` is the model's 3 attempts, the search counted
/// apart (it used to say "attempt 1 of 4" and "cost: 4 attempt(s)").
#[test]
fn localize_counts_the_search_apart_from_the_model_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = write(tmp.path(), "issue.txt", "`compute_tax` uses a flat rate; it must depend on the region.");
    let (text, progress) = localize(&cfg, &repo, &issue, &["--attempts", "3"]);
    assert!(progress.contains("model attempt 1 of 3 done") && progress.contains("model attempt 3 of 3 done"), "{progress}");
    assert!(!progress.contains("of 4"), "{progress}");
    assert!(progress.contains("the index search done"), "{progress}");
    assert!(text.contains("cost: the index search + 3 model attempt(s)"), "{text}");
    // The search's file is said to be the search's, not an attempt's vote.
    assert!(text.contains("shop/tax.py  (the index search"), "{text}");
    assert!(!text.contains("of 4 attempts"), "{text}");
    let (json, _) = localize(&cfg, &repo, &issue, &["--attempts", "3", "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["cost"]["attempts"], 3, "{v}");
    let first = &v["files"][0];
    assert_eq!((first["entity"].as_str(), first["search"].as_bool()), (Some("shop/tax.py"), Some(true)), "{v}");
    // Votes count the model's attempts only (a tiny random model names nothing).
    assert!(first["votes"].as_u64().unwrap() <= 3, "{v}");
    // The search alone and the scripted search alone: no model attempt.
    for policy in ["search", "scripted"] {
        let (text, _) = localize(&cfg, &repo, &issue, &["--policy", policy, "--attempts", "4"]);
        let who = if policy == "search" { "cost: the index search," } else { "cost: the scripted search," };
        assert!(text.contains(who) && !text.contains("attempts"), "{policy}: {text}");
    }
}

/// Item 2: a long issue under the default policy whose words the index
/// does not hold, and whose model attempts answer only what is not in the
/// repository, used to print no file and no line saying so (`"files": []`
/// in the JSON, and `answered` above 0). It says so now, through
/// `localize` and MCP.
#[test]
fn an_empty_or_ungrounded_answer_to_a_long_issue_never_hides_that_nothing_was_found() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let long = "The zebra quantum flux overheats on Tuesdays. ".repeat(300);
    let issue = write(tmp.path(), "long.txt", &long);
    // Turns long enough for the tiny random model to end some with its
    // end-of-turn token: an "answer" of noise.
    let sets = ["--attempts", "8", "--set", "episode.max_turn_tokens=600", "--set", "episode.max_total_tokens=4000"];
    let (json, _) = localize(&cfg, &repo, &issue, &[&sets[..], &["--json"]].concat());
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(v["issue_cut"]["dropped_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(v["answered"].as_u64().unwrap() > 0 && v["files"].as_array().unwrap().is_empty(), "the case of the issue: {v}");
    let (text, _) = localize(&cfg, &repo, &issue, &sets);
    assert!(text.contains("the index search ranked no file, and no model answer named a file of the repository"), "{text}");

    // The same through MCP, its config holding those settings.
    let toml = std::fs::read_to_string(&cfg).unwrap().replace("max_turn_tokens = 16", "max_turn_tokens = 600\nmax_total_tokens = 4000");
    let long_cfg = write(tmp.path(), "long-turns.toml", &toml);
    let mut mcp = Mcp::start(&long_cfg, &repo, "combined");
    mcp.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "localize", "arguments": {"issue": long, "attempts": 8}}}));
    let r = mcp.reply(5);
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    let structured = &r["result"]["structuredContent"];
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(structured["answered"].as_u64().unwrap() > 0 && structured["files"].as_array().unwrap().is_empty(), "the case of the issue: {r}");
    assert!(text.contains("tokens of its middle were dropped"), "{text}");
    assert!(text.starts_with("the localizer's answers named no file of the repository"), "{text}");
    assert!(text.contains("no model answer named a file of the repository"), "{text}");
}

/// Item 4: a function's evidence is a line inside the function (it used to
/// be the first line naming it: here the module docstring).
#[test]
fn evidence_for_a_function_lies_inside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__io");
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    std::fs::write(
        repo.join("pkg/io.py"),
        "\"\"\"Helpers for output. Call dump() to write an object.\"\"\"\nimport json\n\n\ndef load(text):\n    return json.loads(text)\n\n\ndef dump(obj):\n    return json.dumps(obj)\n",
    )
    .unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    let issue = write(tmp.path(), "issue.txt", "`dump` writes invalid output for sets.");
    let (json, _) = localize(&cfg, &repo, &issue, &["--policy", "scripted", "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    let f = v["functions"].as_array().unwrap().iter().find(|f| f["entity"] == "pkg/io.py:dump").unwrap_or_else(|| panic!("{v}"));
    assert_eq!(f["evidence"]["line"], "pkg/io.py:9:def dump(obj):", "{v}");
}

/// A repository `acme__nest` in `dir` of functions nested in functions
/// (`pkg/encoder.py` as in Python's json.encoder; `pkg/enc.py` with two
/// nested functions of one name).
fn nest_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repos/acme__nest");
    std::fs::create_dir_all(repo.join("pkg")).unwrap();
    std::fs::write(
        repo.join("pkg/encoder.py"),
        "import re\n\nESCAPE = re.compile(r\"[\\x00-\\x1f]\")\n\n\ndef py_encode_basestring(s):\n    def replace(match):\n        return ESCAPE_DCT_zz[match.group(0)]\n    return ESCAPE.sub(replace, s)\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("pkg/enc.py"),
        "def encode_a(s):\n    def _escape(m):\n        return m.replace(\"zq_marker\", \"\")\n    return _escape(s)\n\n\ndef encode_b(s):\n    def _escape(m):\n        return m.strip(\"zq_marker\")\n    return _escape(s)\n",
    )
    .unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    repo
}

/// Item 3: a function nested in another (`replace` in
/// `py_encode_basestring`, as in json.encoder) was refused as "no such
/// function"; it is grounded by the name written and reported through its
/// enclosing function, the report saying how it is named.
#[test]
fn a_nested_function_is_grounded_and_named_through_its_enclosing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = nest_repo(tmp.path());
    let issue = write(tmp.path(), "issue.txt", "The `ESCAPE_DCT_zz` lookup raises KeyError for some characters.");
    let (json, _) = localize(&cfg, &repo, &issue, &["--policy", "scripted", "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    let f = &v["functions"][0];
    assert_eq!(f["entity"], "pkg/encoder.py:py_encode_basestring.replace", "{v}");
    assert_eq!(f["nested"], true, "{v}");
    assert_eq!(f["evidence"]["line"], "pkg/encoder.py:8:        return ESCAPE_DCT_zz[match.group(0)]", "{v}");
    assert!(v["not_in_repository"].as_array().unwrap().is_empty(), "{v}");
    let (text, _) = localize(&cfg, &repo, &issue, &["--policy", "scripted"]);
    assert!(text.contains("(a function defined inside another is named through it: outer.inner)"), "{text}");
}

/// Item 5: what the scripted search names that is not in the repository
/// (here a nested name two functions share) is said to be the scripted
/// search's: no model ran (it said "named by the model").
#[test]
fn not_in_the_repository_says_who_named_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = nest_repo(tmp.path());
    let issue = write(tmp.path(), "issue.txt", "The `zq_marker` text is not removed.");
    let (text, _) = localize(&cfg, &repo, &issue, &["--policy", "scripted"]);
    assert!(text.contains("named by the scripted search, not in the repository (left out of the ranking):\n  pkg/enc.py:_escape (several nested functions"), "{text}");
    assert!(!text.contains("named by the model"), "{text}");
    // The model's own: said to be the model's.
    let shop = tmp.path().join("repos/acme__shop");
    let long = write(tmp.path(), "long.txt", &"The zebra quantum flux overheats on Tuesdays. ".repeat(300));
    let (text, _) = localize(&cfg, &shop, &long, &["--attempts", "8", "--set", "episode.max_turn_tokens=600", "--set", "episode.max_total_tokens=4000"]);
    assert!(text.contains("named by the model, not in the repository"), "{text}");
}

/// The repository's root (configs/, models/).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Item 6: with the shipped config and no base model fetched, `search` and
/// `scripted` run (they read the tokenizer shipped beside the adapter), and
/// the model's absence is an error that says how to fetch it.
#[test]
fn the_search_policies_need_no_model_folder_and_a_missing_model_says_how_to_fetch_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    e2e::shop_repo(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = write(tmp.path(), "issue.txt", "`compute_tax` uses a flat rate; it must depend on the region.");
    let cfg = root().join("configs/smollm2-real.toml");
    let run = |policy: &str| {
        Command::new(fusegrpo_bin())
            .args(["localize", "--config", s(&cfg), "--policy", policy, "--repo", s(&repo), "--issue", s(&issue), "--json"])
            .env("HOME", &home)
            .env("HF_HUB_OFFLINE", "1")
            .env("FUSEGRPO_LOG", "warn")
            .output()
            .unwrap()
    };
    for policy in ["search", "scripted"] {
        let out = run(policy);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--policy {policy} without the model folder: {err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["files"][0]["entity"], "shop/tax.py", "{policy}: {v}");
    }
    let out = run("model");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("scripts/fetch-smollm2.sh") && !err.contains("panicked"), "{err}");
}

/// A running `fusegrpo mcp` after the handshake.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// Every frame read so far (notifications included).
    seen: Vec<Value>,
}

impl Mcp {
    fn start(cfg: &Path, repo: &Path, policy: &str) -> Mcp {
        let mut child = Command::new(fusegrpo_bin())
            .args(["mcp", "--config", s(cfg), "--policy", policy, "--repo", s(repo)])
            .env("FUSEGRPO_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = Mcp { child, stdin, lines, seen: Vec::new() };
        mcp.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
        mcp.reply(0);
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
    }

    fn reply(&mut self, id: u64) -> Value {
        loop {
            let line = self.lines.next().expect("the server closed stdout").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            self.seen.push(v.clone());
            if v["id"] == id {
                return v;
            }
        }
    }

    /// The progress messages of token `token` seen so far.
    fn progress(&self, token: u64) -> Vec<(f64, f64, String)> {
        self.seen
            .iter()
            .filter(|v| v["method"] == "notifications/progress" && v["params"]["progressToken"] == token)
            .map(|v| {
                let p = &v["params"];
                (p["progress"].as_f64().unwrap(), p["total"].as_f64().unwrap_or(0.0), p["message"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Item 10: a wrong argument type is a tool error naming the argument and
/// what it takes (it leaked serde's "expected usize").
#[test]
fn mcp_names_a_wrong_argument_and_what_it_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let mut mcp = Mcp::start(&cfg, &repo, "combined");
    let call = |id: u64, tool: &str, arguments: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    for (id, tool, arguments, needle) in [
        (1, "localize", json!({"issue": "x", "attempts": "two"}), "argument `attempts`: expected a whole number from 1 to 64"),
        (2, "localize", json!({"issue": "x", "attempts": 65}), "argument `attempts`: expected a whole number from 1 to 64"),
        (3, "localize", json!({"issue": ["x"]}), "argument `issue`: expected a string, got a list"),
        (4, "read_file", json!({"path": "shop/tax.py", "start_line": "one"}), "argument `start_line`: expected a whole number"),
    ] {
        mcp.send(call(id, tool, arguments));
        let r = mcp.reply(id);
        let text = r.to_string();
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(r["result"]["content"][0]["text"].as_str().unwrap_or_default().starts_with(needle), "{r}");
        assert!(!text.contains("usize") && !text.contains("u64") && !text.contains("deserialize"), "{r}");
    }
}

/// Item 10: progress comes per model turn (it came only as an attempt
/// ended), and counts the model's attempts (`attempts: 2` said "attempt 1
/// of 3").
#[test]
fn mcp_reports_progress_per_model_turn_counting_the_model_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let mut mcp = Mcp::start(&cfg, &repo, "combined");
    mcp.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "localize", "arguments": {"issue": "`compute_tax` uses a flat rate.", "attempts": 2}, "_meta": {"progressToken": 7}}}));
    let r = mcp.reply(9);
    assert_eq!(r["result"]["isError"], false, "{r}");
    let progress = mcp.progress(7);
    let messages: Vec<&str> = progress.iter().map(|p| p.2.as_str()).collect();
    assert!(messages.iter().any(|m| m.starts_with("model turn 1 ")), "a notification per model turn: {messages:?}");
    assert!(messages.contains(&"model attempt 1 of 2 done") && messages.contains(&"model attempt 2 of 2 done"), "{messages:?}");
    assert!(!messages.iter().any(|m| m.contains("of 3")), "{messages:?}");
    assert!(progress.windows(2).all(|w| w[0].0 < w[1].0 && w[1].0 <= w[1].1), "progress rises, within its total: {progress:?}");
}
