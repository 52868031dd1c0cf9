//! `fusegrpo mcp` under malformed, hostile and impatient clients (issue
//! 52): every malformed frame answered with its JSON-RPC error, a seeded
//! fuzz of frames that leaves no id unanswered and the server serving,
//! long arguments refused without being echoed, and cancelled
//! localizations that stop.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use e2e::{fusegrpo_bin, shop_world};
use serde_json::{json, Value};

/// A running `fusegrpo mcp` after the handshake; stdout and stderr are read
/// on threads (so neither pipe fills), stdout's lines parsed.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    /// Replies read while waiting for another.
    unclaimed: Vec<Value>,
}

impl Mcp {
    fn start(cfg: &Path, repo: &Path, policy: &str) -> Mcp {
        let mut mcp = Mcp::spawn(cfg, repo, policy);
        mcp.handshake();
        mcp
    }

    fn handshake(&mut self) {
        self.send(json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
        assert_eq!(self.reply(&json!("init"), Duration::from_secs(60))["result"]["serverInfo"]["name"], "fusegrpo");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// The server started, before any frame.
    fn spawn(cfg: &Path, repo: &Path, policy: &str) -> Mcp {
        let mut child = Command::new(fusegrpo_bin())
            .args(["mcp", "--config", cfg.to_str().unwrap(), "--policy", policy, "--repo", repo.to_str().unwrap()])
            .env("FUSEGRPO_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Mcp { stdin: child.stdin.take(), child, lines, stderr: Some(stderr), unclaimed: Vec::new() }
    }

    fn send_raw(&mut self, frame: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(frame).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    /// The next stdout line as JSON, or `None` after `wait`.
    fn next(&mut self, wait: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(wait).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {line:?}: {e}")))
    }

    /// The reply to `id`, waiting at most `wait`.
    fn reply(&mut self, id: &Value, wait: Duration) -> Value {
        let deadline = Instant::now() + wait;
        if let Some(i) = self.unclaimed.iter().position(|r| &r["id"] == id) {
            return self.unclaimed.remove(i);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Some(r) if &r["id"] == id => return r,
                Some(r) => self.unclaimed.push(r),
                None => panic!("no reply to id {id} within {wait:?}; other replies: {:?}", self.unclaimed),
            }
        }
    }

    fn call(id: Value, tool: &str, arguments: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    }

    /// Closes stdin; the exit status (the server must exit within 30 s)
    /// and stderr.
    fn finish(mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the server did not exit after stdin closed");
            std::thread::sleep(Duration::from_millis(50));
        };
        (status, self.stderr.take().unwrap().join().unwrap())
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error reply: {reply}"))
}

/// Each malformed frame of issue 52 gets its JSON-RPC error (they got no
/// reply at all, or -32601 for a tools/call without params), with the
/// frame's id where it can be read, and a log line; the server goes on.
#[test]
fn mcp_answers_every_malformed_frame_with_its_json_rpc_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    let frames: Vec<(&[u8], Value, i64)> = vec![
        (br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"\ud800"}}}"#, json!(7), -32700),
        (b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{\"name\":\"grep\",\"arguments\":{\"pattern\":\"\xff\"}}}", json!(10), -32700),
        (br#"{"jsonrpc":"2.0","id":11,"method":"tools/list""#, json!(11), -32700),
        (br#"{"jsonrpc":"2.0","id":"twelve","method":"tools/list"} and more"#, json!("twelve"), -32700),
        (br#"[{"jsonrpc":"2.0","id":13,"method":"tools/list"}]"#, json!(13), -32600),
        (br#"{"jsonrpc":"1.0","id":14,"method":"tools/list"}"#, json!(14), -32600),
        (br#"{"jsonrpc":"2.0","id":15}"#, json!(15), -32600),
        (br#"{"jsonrpc":"2.0","id":9,"method":"tools/call"}"#, json!(9), -32602),
        (br#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"grep","arguments":["x"]}}"#, json!(16), -32602),
        (br#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"arguments":{"pattern":"x"}}}"#, json!(17), -32602),
    ];
    mcp.send_raw(b"hello");
    let r = mcp.next(Duration::from_secs(10)).expect("a reply to a line that is not JSON");
    assert_eq!((r["id"].clone(), code(&r)), (Value::Null, -32700), "{r}");
    for (frame, id, expected) in &frames {
        mcp.send_raw(frame);
        let r = mcp.reply(id, Duration::from_secs(10));
        assert_eq!(code(&r), *expected, "{}: {r}", String::from_utf8_lossy(frame));
        assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
    }
    mcp.send(json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}));
    assert!(mcp.reply(&json!(8), Duration::from_secs(10))["result"]["tools"].is_array());
    let (status, stderr) = mcp.finish();
    assert!(status.success(), "{stderr}");
    let refused = stderr.lines().filter(|l| l.contains("refused")).count();
    assert_eq!(refused, frames.len() + 1, "one log line per refused frame:\n{stderr}");
}

/// A 10 MB `path` is refused by its length and the cap, not echoed (the
/// reply carried the whole path back); `repo` and `rev` likewise.
#[test]
fn mcp_refuses_over_long_arguments_without_echoing_them() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    let long = "a/".repeat(5 << 20);
    let cases = [
        ("read_file", json!({"path": long})),
        ("grep", json!({"pattern": "x", "path": long})),
        ("glob", json!({"pattern": "*", "rev": long})),
        ("localize", json!({"issue": "x", "repo": long})),
    ];
    for (i, (tool, arguments)) in cases.into_iter().enumerate() {
        mcp.send(Mcp::call(json!(i), tool, arguments));
        let r = mcp.reply(&json!(i), Duration::from_secs(30));
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
        assert_eq!(r["result"]["isError"], true, "{tool}: {}", &text[..text.len().min(300)]);
        assert!(r.to_string().len() < 1000, "{tool}: a reply of {} bytes", r.to_string().len());
        assert!(text.contains("10485760 bytes long; arguments are capped at 4096 bytes"), "{tool}: {text}");
    }
    mcp.send(Mcp::call(json!("ok"), "read_file", json!({"path": "shop/tax.py"})));
    assert!(mcp.reply(&json!("ok"), Duration::from_secs(30))["result"]["content"][0]["text"].as_str().unwrap().contains("compute_tax"));
}

/// splitmix64: the fuzz's seeded draws.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    /// A byte that is not a newline (which would split the frame).
    fn byte(&mut self) -> u8 {
        match self.next() as u8 {
            b'\n' => b'?',
            b => b,
        }
    }
}

/// A request whose `"id"` comes first, so that whatever breaks after it,
/// the id can still be read.
fn with_id(id: &Value, rest: &str) -> Vec<u8> {
    format!("{{\"id\":{id},{rest}").into_bytes()
}

/// One fuzz frame and the ids it carries (each must get one reply).
fn fuzz_frame(d: &mut Draw, next_id: &mut u64) -> (Vec<u8>, Vec<Value>) {
    let mut id = || {
        *next_id += 1;
        if (*next_id).is_multiple_of(3) {
            json!(format!("s-{next_id}"))
        } else {
            json!(*next_id)
        }
    };
    let patterns = ["compute_tax", "(", "[a-", "a{99999}", ".*", "\\\\d+", "x|y", "\\\\u{10FFFF}"];
    let paths = ["shop/tax.py", "../../etc/passwd", "/etc/passwd", "shop", "nope.py", "shop/\\u0000x", ""];
    let call = |name: &str, args: &str| format!(r#""jsonrpc":"2.0","method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#);
    let good = |d: &mut Draw| -> String {
        match d.below(5) {
            0 => r#""jsonrpc":"2.0","method":"tools/list"}"#.to_string(),
            1 => r#""jsonrpc":"2.0","method":"ping"}"#.to_string(),
            2 => call("grep", &format!(r#"{{"pattern":"{}"}}"#, d.pick(&patterns))),
            3 => call("read_file", &format!(r#"{{"path":"{}","start_line":{}}}"#, d.pick(&paths), d.below(5))),
            _ => call("glob", &format!(r#"{{"pattern":"{}"}}"#, d.pick(&["**/*.py", "[", "*", "{a,b"]))),
        }
    };
    match d.below(16) {
        0..=2 => {
            let i = id();
            (with_id(&i, &good(d)), vec![i])
        }
        3 => {
            let i = id();
            let mut f = with_id(&i, &good(d));
            let prefix = format!("{{\"id\":{i},").len();
            f.truncate(prefix + d.below(f.len() - prefix));
            (f, vec![i])
        }
        4 | 5 => {
            let i = id();
            let mut f = with_id(&i, &good(d));
            let prefix = format!("{{\"id\":{i},").len();
            for _ in 0..=d.below(3) {
                let at = prefix + d.below(f.len() - prefix);
                f[at] = d.byte();
            }
            (f, vec![i])
        }
        6 => {
            let i = id();
            let bad = d.pick(&["\\ud800", "\\udfff x", "\u{0}", "\\u12"]).to_string();
            (with_id(&i, &call("grep", &format!(r#"{{"pattern":"a{bad}"}}"#))), vec![i])
        }
        7 => {
            let i = id();
            let mut f = with_id(&i, &call("read_file", r#"{"path":"shop/@"}"#));
            let at = f.iter().position(|&b| b == b'@').unwrap();
            f[at] = *d.pick(&[0xff, 0xc3, 0x80, 0xed]);
            (f, vec![i])
        }
        8 => {
            let i = id();
            let v = d.pick(&["\"1.0\"", "2.0", "null", "\"2.0 \""]).to_string();
            (with_id(&i, &format!(r#""jsonrpc":{v},"method":"tools/list"}}"#)), vec![i])
        }
        9 => {
            let i = id();
            let params = d.pick(&["", r#","params":null"#, r#","params":7"#, r#","params":{"arguments":{}}"#, r#","params":{"name":5}"#, r#","params":{"name":"grep","arguments":"x"}"#, r#","params":{"name":"grep","arguments":[]}"#]);
            (with_id(&i, &format!(r#""jsonrpc":"2.0","method":"tools/call"{params}}}"#)), vec![i])
        }
        10 => {
            let ids: Vec<Value> = (0..=d.below(3)).map(|_| id()).collect();
            let members: Vec<String> = ids.iter().map(|i| String::from_utf8(with_id(i, &good(d))).unwrap()).collect();
            (format!("[{}]", members.join(",")).into_bytes(), ids)
        }
        11 => {
            let i = id();
            let method = d.pick(&["tools/frobnicate", "", "notifications/initialized", "initialize", "resources/list", "tools/list\u{0}"]).to_string();
            let params = d.pick(&["", r#","params":{}"#, r#","params":5"#, r#","params":[1,2]"#]).to_string();
            (with_id(&i, &format!(r#""jsonrpc":"2.0","method":"{method}"{params}}}"#)), vec![i])
        }
        12 => {
            let i = id();
            let mut f = with_id(&i, &good(d));
            f.extend_from_slice(d.pick(&[" x", "}", ",", "{}", "\u{0}"]).as_bytes());
            (f, vec![i])
        }
        13 => {
            let i = id();
            let depth = 100 + d.below(400);
            (with_id(&i, &format!(r#""jsonrpc":"2.0","method":"tools/list","params":{{"x":{}{}}}}}"#, "[".repeat(depth), "]".repeat(depth))), vec![i])
        }
        14 => {
            let n = d.below(200);
            ((0..n).map(|_| d.byte()).collect(), Vec::new())
        }
        _ => {
            let f = d.pick(&[
                r#"{"jsonrpc":"2.0","method":"notifications/frobnicated"}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never-sent"}}"#,
                r#"{"jsonrpc":"2.0","method":"$/lsp"}"#,
                r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#,
                "   ",
                "",
            ]);
            (f.as_bytes().to_vec(), Vec::new())
        }
    }
}

/// The acceptance fuzz of issue 52: 300 seeded random and malformed frames
/// after the handshake. Every frame with an id gets exactly one reply,
/// nothing hangs (all within a time bound), stdout stays JSON-RPC, and the
/// server still answers `tools/list` after it and exits cleanly.
#[test]
fn mcp_frame_fuzz_leaves_no_id_unanswered() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    let seed = std::env::var("FUSEGRPO_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(52);
    let mut d = Draw(seed);
    let mut next_id = 1000;
    let mut expected: Vec<Value> = Vec::new();
    let t0 = Instant::now();
    for _ in 0..300 {
        let (frame, ids) = fuzz_frame(&mut d, &mut next_id);
        mcp.send_raw(&frame);
        expected.extend(ids);
    }
    mcp.send(json!({"jsonrpc": "2.0", "id": "final", "method": "tools/list"}));
    expected.push(json!("final"));
    let deadline = t0 + Duration::from_secs(60);
    let mut answered: Vec<Value> = Vec::new();
    let mut unanswered = expected.len();
    while unanswered > 0 {
        let Some(r) = mcp.next(deadline.saturating_duration_since(Instant::now())) else { break };
        assert_eq!(r["jsonrpc"], "2.0", "{r}");
        assert!(r.get("result").is_some() != r.get("error").is_some(), "a result or an error: {r}");
        if r["id"] == "final" {
            assert!(r["result"]["tools"].as_array().is_some_and(|t| t.len() == 4), "{r}");
        }
        if !r["id"].is_null() {
            if expected.contains(&r["id"]) && !answered.contains(&r["id"]) {
                unanswered -= 1;
            }
            answered.push(r["id"].clone());
        }
    }
    let missing: Vec<&Value> = expected.iter().filter(|e| !answered.contains(e)).collect();
    assert!(missing.is_empty(), "seed {seed}: no reply to ids {missing:?} of {} within the bound", expected.len());
    let mut sorted: Vec<String> = answered.iter().map(Value::to_string).collect();
    sorted.sort();
    let n = sorted.len();
    sorted.dedup();
    assert_eq!(sorted.len(), n, "seed {seed}: an id answered twice");
    println!("seed {seed}: {} ids answered in {:.2?}", answered.len(), t0.elapsed());
    let (status, stderr) = mcp.finish();
    assert!(status.success(), "{stderr}");
}

/// A `localize` call the client cancels stops (issue 52: the next call
/// waited 22.6 s): a running one before the model's next token, a queued
/// one never starts, neither is answered, and the call queued after them
/// is answered in a small part of the time an uncancelled call takes.
#[test]
fn mcp_cancelled_localize_stops_and_the_next_call_does_not_wait() {
    let tmp = tempfile::tempdir().unwrap();
    shop_world(tmp.path());
    // Greedy, the tiny model never ends a turn: each attempt runs to
    // max_turn_tokens. (Several greedy attempts sample at [localize]
    // attempts_temperature, or are refused as one episode repeated: the
    // calls ask for 1e-6, greedy in all but name.)
    let cfg = tmp.path().join("slow.toml");
    std::fs::write(
        &cfg,
        "name = \"slow\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n[episode]\nmax_turns = 2\nmax_turn_tokens = 8000\nmax_total_tokens = 16000\n[sampling]\ntemperature = 0.0\nseed = 3\n",
    )
    .unwrap();
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "model");
    let issue = "`compute_tax` uses a flat rate; it must depend on the region.";
    let wait = Duration::from_secs(300);
    let t0 = Instant::now();
    mcp.send(Mcp::call(json!(1), "localize", json!({"issue": issue, "attempts": 4, "temperature": 1e-6})));
    let r = mcp.reply(&json!(1), wait);
    let full = t0.elapsed();
    assert_eq!(r["result"]["structuredContent"]["cost"]["policy_tokens"], 32000, "{r}");
    mcp.send(Mcp::call(json!(2), "localize", json!({"issue": issue, "attempts": 4, "temperature": 1e-6})));
    mcp.send(Mcp::call(json!(3), "localize", json!({"issue": issue, "attempts": 4, "temperature": 1e-6})));
    std::thread::sleep(full / 8);
    for id in [3, 2] {
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "test"}}));
    }
    // A call the worker answers at once (its revision does not exist), once
    // its turn in the queue comes.
    let t1 = Instant::now();
    mcp.send(Mcp::call(json!(4), "localize", json!({"issue": issue, "rev": "no-such-rev"})));
    let r = mcp.reply(&json!(4), wait);
    let next = t1.elapsed();
    println!("an uncancelled call took {full:.2?}; the call queued after two cancelled ones was answered in {next:.2?}");
    assert!(r["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("no-such-rev")), "{r}");
    assert!(next < full / 2, "the call after the cancelled ones waited {next:?}; an uncancelled call takes {full:?}");
    mcp.send(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    mcp.reply(&json!(5), Duration::from_secs(30));
    assert!(mcp.unclaimed.iter().all(|r| r["id"] != 2 && r["id"] != 3), "a cancelled call is not answered: {:?}", mcp.unclaimed);
}

/// Issue 66 D14: a notification or a response before `initialize` is
/// dropped, and the server waits on for its handshake (it exited).
#[test]
fn mcp_waits_out_notifications_and_responses_before_initialize() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::spawn(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}));
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    mcp.handshake();
    let reply = {
        mcp.send(Mcp::call(json!(5), "glob", json!({"pattern": "**/*.py"})));
        mcp.reply(&json!(5), Duration::from_secs(60))
    };
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("shop/cart.py"), "{reply}");
}

/// Issue 66 D16: two requests in flight with one id: the second is refused
/// with -32600 (it got no reply); once answered, the id may be used again.
#[test]
fn mcp_refuses_a_request_whose_id_is_in_flight() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    let first = Mcp::call(json!(7), "grep", json!({"pattern": "def"})).to_string();
    let second = Mcp::call(json!(7), "grep", json!({"pattern": "return"})).to_string();
    mcp.send_raw(format!("{first}\n{second}").as_bytes());
    let a = mcp.reply(&json!(7), Duration::from_secs(60));
    let b = mcp.reply(&json!(7), Duration::from_secs(60));
    let (ok, refused) = if a.get("error").is_some() { (b, a) } else { (a, b) };
    assert_eq!(code(&refused), -32600, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("in flight"), "{refused}");
    assert!(ok["result"]["content"][0]["text"].as_str().unwrap().contains("def "), "{ok}");
    // Answered: the id is free again.
    mcp.send(Mcp::call(json!(7), "glob", json!({"pattern": "**/*.py"})));
    assert!(mcp.reply(&json!(7), Duration::from_secs(60)).get("result").is_some());
    // Strings too.
    let first = Mcp::call(json!("x"), "grep", json!({"pattern": "def"})).to_string();
    mcp.send_raw(format!("{first}\n{first}").as_bytes());
    let replies = [mcp.reply(&json!("x"), Duration::from_secs(60)), mcp.reply(&json!("x"), Duration::from_secs(60))];
    assert_eq!(replies.iter().filter(|r| r.get("error").is_some()).count(), 1, "{replies:?}");
}

/// Issue 66 D15 and D7: a 2 MB `issue` is refused by its length (it cost
/// ~2 GB); eight greps at once on one large folder share one snapshot
/// (they loaded eight: 3.4 GB on a 373 MB folder).
#[test]
fn mcp_bounds_a_huge_issue_and_concurrent_tool_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let big = tmp.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    let line = "x = 1  # filler text filler text filler text filler text\n";
    let blob = format!("def big():\n{}", line.repeat((3 << 20) / line.len()));
    for i in 0..30 {
        std::fs::write(big.join(format!("b{i:02}.py")), &blob).unwrap();
    }
    let mut mcp = Mcp::start(&cfg, &big, "scripted");
    let pid = mcp.child.id();
    mcp.send(Mcp::call(json!(1), "localize", json!({"issue": "shop ".repeat(400_000), "policy": "scripted"})));
    let r = mcp.reply(&json!(1), Duration::from_secs(60));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("capped at 1048576 bytes"), "{r}");
    let frames: Vec<String> = (10..18).map(|i| Mcp::call(json!(i), "grep", json!({"pattern": "zzz_no_such_name"})).to_string()).collect();
    mcp.send_raw(frames.join("\n").as_bytes());
    for i in 10..18 {
        let r = mcp.reply(&json!(i), Duration::from_secs(120));
        assert_eq!(r["result"]["content"][0]["text"], "No matches found.\n", "{r}");
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak_kb: f64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches("kB").trim().parse().unwrap();
    println!("8 greps at once on a 90 MB folder: peak RSS {:.0} MB", peak_kb / 1024.0);
    assert!(peak_kb / 1024.0 < 400.0, "peak RSS {:.0} MB: the greps did not share their snapshot", peak_kb / 1024.0);
}

/// Issue 65 item 10: every tool declares itself read-only, `attempts` its
/// range 1-64, an unknown argument is refused naming it, and a server
/// started without --repo searches the folder it started in.
#[test]
fn mcp_tools_declare_their_annotations_and_refuse_unknown_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let mut mcp = Mcp::start(&cfg, &tmp.path().join("repos/acme__shop"), "scripted");
    mcp.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let tools = mcp.reply(&json!(1), Duration::from_secs(60));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 4);
    for t in &tools {
        assert_eq!(t["annotations"]["readOnlyHint"], true, "{t}");
        assert_eq!(t["annotations"]["destructiveHint"], false, "{t}");
    }
    let localize = tools.iter().find(|t| t["name"] == "localize").unwrap();
    let attempts = &localize["inputSchema"]["properties"]["attempts"];
    assert_eq!((attempts["minimum"].as_u64(), attempts["maximum"].as_u64()), (Some(1), Some(64)), "{attempts}");
    mcp.send(Mcp::call(json!(2), "grep", json!({"pattern": "def", "patern": "x"})));
    let r = mcp.reply(&json!(2), Duration::from_secs(60));
    let text = r.to_string();
    assert!(text.contains("patern"), "an unknown argument is named: {r}");
    assert!(r.get("error").is_some() || r["result"]["isError"] == true, "{r}");
    // No --repo: the folder the server starts in.
    let shop = tmp.path().join("repos/acme__shop");
    let mut child = Command::new(fusegrpo_bin())
        .args(["mcp", "--config", cfg.to_str().unwrap(), "--policy", "scripted"])
        .current_dir(&shop)
        .env("FUSEGRPO_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for f in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"glob","arguments":{"pattern":"**/*.py"}}}"#,
    ] {
        writeln!(stdin, "{f}").unwrap();
    }
    std::thread::sleep(Duration::from_secs(3));
    drop(stdin);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let _ = child.wait();
    assert!(out.lines().any(|l| l.contains("\"id\":3") && l.contains("shop/cart.py")), "{out}");
}
