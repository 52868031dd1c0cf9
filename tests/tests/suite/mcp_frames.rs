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
        let mut mcp = Mcp { stdin: child.stdin.take(), child, lines, stderr: Some(stderr), unclaimed: Vec::new() };
        mcp.send(json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
        assert_eq!(mcp.reply(&json!("init"), Duration::from_secs(60))["result"]["serverInfo"]["name"], "fusegrpo");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
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
