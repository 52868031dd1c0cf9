//! `fusegrpo serve` on a loopback port, driven by a plain HTTP client and by
//! the rollout crate's `HttpTeacher`, as a user would.

use e2e::{fusegrpo_bin, fusegrpo_ok};
use rollout::policy::{Policy, TurnOutput, TurnRequest};
use rollout::teacher::http::{HttpTeacher, HttpTeacherConfig};
use rollout::teacher::openai::qwen3_text_from_openai;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `fusegrpo serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `fusegrpo serve --port 0` on `model` and read its address.
fn serve(model: &std::path::Path) -> Server {
    let mut child = Command::new(fusegrpo_bin())
        .args([
            "serve",
            "--model",
            model.to_str().unwrap(),
            "--port",
            "0",
            "--default-max-tokens",
            "24",
        ])
        .env("FUSEGRPO_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fusegrpo serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let Some(url) = line
        .trim()
        .strip_prefix("listening on ")
        .map(str::to_string)
    else {
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let _ = child.kill();
        panic!("fusegrpo serve did not print its address; stdout {line:?}, stderr:\n{err}");
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    Server { child, url }
}

fn tiny_model(dir: &std::path::Path) {
    fusegrpo_ok(&[
        "init-tiny",
        "--out",
        dir.to_str().unwrap(),
        "--small-vocab",
        "2048",
        "--seed",
        "3",
    ]);
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "grep", "description": "Search file contents",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}},
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    ])
}

/// POST raw bytes; (status, parsed body).
fn post(url: &str, body: &str) -> (u16, Value) {
    let resp = match ureq::post(url)
        .set("Content-Type", "application/json")
        .timeout(Duration::from_secs(120))
        .send_string(body)
    {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let status = resp.status();
    assert_eq!(resp.header("content-type"), Some("application/json"));
    (
        status,
        serde_json::from_str(&resp.into_string().unwrap()).expect("JSON body"),
    )
}

#[test]
fn serve_answers_openai_chat_completions_with_tools() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_model(&model);
    let server = serve(&model);
    let chat = format!("{}/v1/chat/completions", server.url);

    let models: Value = ureq::get(&format!("{}/v1/models", server.url))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny");

    // A multi-turn conversation with an earlier call and its response, in
    // OpenAI's format (arguments as a JSON string, tool_call_id).
    let request = json!({
        "model": "tiny",
        "temperature": 0,
        "max_tokens": 16,
        "tools": tools(),
        "messages": [
            {"role": "system", "content": "You localize code."},
            {"role": "user", "content": "Where is Session.request defined?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": \"def request\"}"}}]},
            {"role": "tool", "tool_call_id": "call_x", "content": "requests/sessions.py:12:    def request(self):"},
        ]
    });
    let (status, first) = post(&chat, &request.to_string());
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "tiny");
    let choice = &first["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(
        ["stop", "length", "tool_calls"].contains(&finish),
        "{finish}"
    );
    let usage = &first["usage"];
    let (p, c, t) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
        usage["total_tokens"].as_u64().unwrap(),
    );
    assert!(
        p > 50,
        "the prompt declares tools and has four messages: {p} tokens"
    );
    assert!((1..=16).contains(&c), "{c}");
    assert_eq!(p + c, t);
    if finish == "length" {
        assert_eq!(c, 16);
    }
    if let Some(calls) = choice["message"]["tool_calls"].as_array() {
        for call in calls {
            assert_eq!(call["type"], "function");
            assert!(call["id"].is_string() && call["function"]["name"].is_string());
            serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap();
        }
    }

    // Greedy is deterministic: same request, same answer.
    let (_, second) = post(&chat, &request.to_string());
    assert_eq!(first["choices"], second["choices"]);
    assert_eq!(first["usage"], second["usage"]);
    // A seeded sampled request repeats too.
    let mut sampled = request.clone();
    sampled["temperature"] = json!(1.0);
    sampled["seed"] = json!(11);
    let (_, s1) = post(&chat, &sampled.to_string());
    let (_, s2) = post(&chat, &sampled.to_string());
    assert_eq!(s1["choices"], s2["choices"]);

    // The prompt is the chat template's rendering: declaring tools changes it.
    let mut no_tools = request.clone();
    no_tools.as_object_mut().unwrap().remove("tools");
    let (_, bare) = post(&chat, &no_tools.to_string());
    assert!(bare["usage"]["prompt_tokens"].as_u64().unwrap() < p);

    // Malformed input: a 400 with OpenAI's error body naming the field.
    let (status, err) = post(&chat, "{\"messages\": [");
    assert_eq!(status, 400);
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{err}"
    );
    let (status, err) = post(
        &chat,
        &json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).to_string(),
    );
    assert_eq!(
        (status, err["error"]["param"].as_str()),
        (400, Some("temperature")),
        "{err}"
    );
    let (status, err) = post(
        &chat,
        &json!({"messages": [{"role": "user"}, {"role": "robot", "content": ""}]}).to_string(),
    );
    assert_eq!(
        (status, err["error"]["param"].as_str()),
        (400, Some("messages[1].role")),
        "{err}"
    );
    let (status, err) = post(
        &chat,
        &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1_000_000})
            .to_string(),
    );
    assert_eq!(
        (status, err["error"]["param"].as_str()),
        (400, Some("max_tokens")),
        "{err}"
    );
    let (status, _) = post(&format!("{}/v1/nothing", server.url), "{}");
    assert_eq!(status, 404);

    // Still serving after the bad requests.
    let (status, again) = post(&chat, &request.to_string());
    assert_eq!(status, 200);
    assert_eq!(again["choices"], first["choices"]);
}

#[test]
fn http_teacher_drives_two_episodes_against_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_model(&model);
    let server = serve(&model);

    let mut config = HttpTeacherConfig::new(format!("{}/v1", server.url), "tiny");
    config.temperature = Some(0.0);
    config.max_tokens = Some(12);
    config.concurrency = 2;
    let mut teacher = HttpTeacher::new(config).unwrap();
    let tools: Vec<Value> = tools().as_array().unwrap().clone();
    let m0 = vec![
        json!({"role": "system", "content": "You localize code."}),
        json!({"role": "user", "content": "Fix the bug in parse()."}),
    ];
    // The second episode is one turn further on: an assistant call (arguments
    // as an object, as episodes keep them) and its tool response.
    let mut m1 = m0.clone();
    m1.push(json!({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "grep", "arguments": {"pattern": "def parse"}}}]}));
    m1.push(json!({"role": "tool", "content": "a.py:3:def parse(x):"}));
    let requests = [
        TurnRequest {
            episode: 0,
            tokens: &[],
            messages: &m0,
            tools: &tools,
            snapshot: None,
            max_new_tokens: 64,
        },
        TurnRequest {
            episode: 1,
            tokens: &[],
            messages: &m1,
            tools: &tools,
            snapshot: None,
            max_new_tokens: 64,
        },
    ];
    let first = teacher.next_turns(&requests).unwrap();
    assert_eq!(first.len(), 2);
    for out in &first {
        assert!(matches!(out, TurnOutput::Text(_)), "{out:?}");
    }
    // Greedy through HTTP is deterministic too.
    assert_eq!(teacher.next_turns(&requests).unwrap(), first);
    // Each text is the server's answer to the teacher's request body, in
    // Qwen3's format; the body carries the call ids and the JSON-string
    // arguments of OpenAI's format.
    for (req, out) in requests.iter().zip(&first) {
        let body = teacher.request_body(req).unwrap();
        let (status, resp) = post(teacher.url(), &body.to_string());
        assert_eq!(status, 200, "{resp}");
        let text = qwen3_text_from_openai(&resp["choices"][0]["message"]).unwrap();
        assert_eq!(out, &TurnOutput::Text(text));
    }
    let body = teacher.request_body(&requests[1]).unwrap();
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_0_0");
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"pattern\":\"def parse\"}"
    );
    assert_eq!(body["messages"][3]["tool_call_id"], "call_0_0");
    assert_eq!(body["max_tokens"], 12);
    assert!(teacher.name().contains(&server.url));

    // A dead endpoint: the error names it (no retries, to stay fast).
    drop(server);
    let mut config = HttpTeacherConfig::new("http://127.0.0.1:9/v1", "tiny");
    config.max_retries = 0;
    let err = HttpTeacher::new(config)
        .unwrap()
        .next_turns(&requests[..1])
        .unwrap_err();
    assert!(
        err.message
            .contains("http://127.0.0.1:9/v1/chat/completions"),
        "{err}"
    );
}

/// `fusegrpo rollout --policy http://...` against `fusegrpo serve`: the HTTP
/// teacher path end to end through the CLI, episodes written in full.
#[test]
fn rollout_command_drives_an_http_teacher() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = e2e::shop_world(tmp.path());
    let server = serve(&tmp.path().join("model"));
    let out = tmp.path().join("episodes.jsonl");
    fusegrpo_ok(&[
        "rollout", "--config", cfg.to_str().unwrap(), "--tasks", tmp.path().join("tasks.jsonl").to_str().unwrap(),
        "--out", out.to_str().unwrap(), "--policy", &server.url, "--teacher-model", "tiny",
    ]);
    let eps = e2e::read_jsonl(&out);
    assert_eq!(eps.len(), 4, "2 tasks x group 2");
    for e in &eps {
        assert!(e["stop_reason"].is_string());
        assert!(e["policy_tokens"].as_u64().unwrap() > 0, "the teacher's turns are in the sequence");
        assert!(!e["turns"][0]["text"].as_str().unwrap().is_empty());
    }
}

/// `fusegrpo synth --teacher http://...` against `fusegrpo serve`: K scored
/// trajectories per task from a real OpenAI-compatible endpoint on loopback.
#[test]
fn synth_command_scores_trajectories_from_an_http_teacher() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = e2e::shop_world(tmp.path());
    let server = serve(&tmp.path().join("model"));
    let out = tmp.path().join("traj.jsonl");
    fusegrpo_ok(&[
        "synth", "--config", cfg.to_str().unwrap(), "--tasks", tmp.path().join("tasks.jsonl").to_str().unwrap(),
        "--teacher", &server.url, "--teacher-model", "tiny", "--samples", "3", "--out", out.to_str().unwrap(),
        "--requests-per-second", "200",
    ]);
    let rows = e2e::read_jsonl(&out);
    assert_eq!(rows.len(), 6, "2 tasks x 3 samples");
    for r in &rows {
        for key in ["f1_file", "f1_func", "e", "reward"] {
            assert!(r["score"][key].is_number(), "score.{key}: {r}");
        }
        assert!(r["calls_per_turn"].is_number());
        assert!(r["policy_tokens"].as_u64().unwrap() > 0, "the teacher's turns are in the sequence");
    }
    assert!(!tmp.path().join("traj.jsonl.partial").exists());
}

/// `tasks synth` with `fusegrpo serve` (a tiny random model) as the issue
/// writer and as the verifying localizer: the plumbing works end to end and
/// the gibberish is handled: every function is either a task or a counted
/// failure naming it, never a crash.
#[test]
fn tasks_synth_against_serve_counts_unusable_issues() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    tiny_model(&model);
    let base = crate::cli_synth::world(tmp.path());
    let server = serve(&model);
    let repos = tmp.path().join("repos");
    let out = tmp.path().join("t.jsonl");
    let run = |teacher: &str, localizer: &str| {
        Command::new(fusegrpo_bin())
            .args(["tasks", "synth", "--repos-dir", repos.to_str().unwrap(), "--repo", "acme/mixed", "--commit", &base, "--count", "3"])
            .args(["--teacher", teacher, "--verify", "--localizer", localizer, "--max-tokens", "24", "--max-retries", "0", "--out", out.to_str().unwrap()])
            .env("FUSEGRPO_LOG", "warn")
            .output()
            .unwrap()
    };
    let r = run(&server.url, "scripted");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let failed = err.lines().filter(|l| l.starts_with("synth: failed: acme/mixed at ")).count();
    if r.status.success() {
        let v: Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(v["tasks"].as_u64().unwrap() + v["failed"].as_u64().unwrap(), 3, "{v}");
        assert_eq!(v["failed"].as_u64().unwrap() as usize, failed);
    } else {
        assert_eq!(failed, 3, "{err}");
        assert!(err.contains("no task made (3 functions drawn, 3 failed"), "{err}");
        assert!(!out.exists());
    }
    // The served model as the localizer: its turns are read, recall is kept.
    let r = run("scripted", &server.url);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!((v["tasks"].as_u64(), v["recall"]["count"].as_u64()), (Some(3), Some(3)), "{v}");
}

/// Tournaments judged by `fusegrpo serve` (a real HTTP judge on loopback):
/// the scripted policy's 3 attempts per task (an odd field: a bye), every
/// comparison asked over HTTP with its tokens counted, each decided by the
/// judge or by the counted fallback (a tiny random model rarely says A or
/// B), and the same brackets and verdicts on a second run.
#[test]
fn tournament_with_serve_as_the_judge() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = e2e::shop_world(tmp.path());
    let server = serve(&tmp.path().join("model"));
    let run = |name: &str| {
        let dir = tmp.path().join(name);
        let table = fusegrpo_ok(&[
            "eval", "--config", cfg.to_str().unwrap(), "--tasks", tmp.path().join("tasks.jsonl").to_str().unwrap(),
            "--policy", "scripted", "--attempts", "3", "--select", "tournament", "--judge", &server.url,
            "--judge-model", "tiny", "--out-dir", dir.to_str().unwrap(),
        ]);
        (table, e2e::read_jsonl(&dir.join("selection.jsonl")))
    };
    let (table, sel) = run("one");
    assert!(table.contains("tournament"), "{table}");
    let at3: Vec<&Value> = sel.iter().filter(|s| s["attempts"] == 3).collect();
    assert_eq!(at3.len(), 2, "2 tasks");
    for s in &at3 {
        let t = &s["tournament"];
        assert_eq!(t["matches"].as_array().unwrap().len(), 2, "3 attempts: 2 matches");
        assert_eq!(t["byes"].as_array().unwrap().len(), 1, "one bye in the first round");
        assert!(t["judge_tokens"].as_u64().unwrap() > 50, "prompts and answers counted: {t}");
        assert!(s["cost"]["judge_tokens"].as_u64().unwrap() > 50);
        let fallbacks = t["matches"].as_array().unwrap().iter().filter(|m| m["fallback"].is_string()).count();
        assert_eq!(s["cost"]["fallbacks"].as_u64().unwrap() as usize, fallbacks);
        for m in t["matches"].as_array().unwrap() {
            if let Some(why) = m["fallback"].as_str() {
                assert!(why.contains("malformed answer after 3 tries"), "{why}");
                assert_eq!(m["retries"], 2);
            }
        }
    }
    let (_, again) = run("two");
    let brackets = |v: &[Value]| v.iter().map(|s| (s["chosen"].clone(), s["tournament"]["matches"].clone())).collect::<Vec<_>>();
    assert_eq!(brackets(&again), brackets(&sel), "greedy judge, fixed seed: same verdicts");

    // --summaries judge: the judge is asked for each attempt's summary from
    // its transcript; the tokens count, the answer stays the episode's. (The
    // tiny random model's reply is often empty text, which leaves that
    // attempt with the summary made from its episode.)
    let dir = tmp.path().join("written");
    fusegrpo_ok(&[
        "eval", "--config", cfg.to_str().unwrap(), "--tasks", tmp.path().join("tasks.jsonl").to_str().unwrap(),
        "--policy", "scripted", "--attempts", "2", "--select", "tournament", "--judge", &server.url,
        "--judge-model", "tiny", "--summaries", "judge", "--summary-max-tokens", "12", "--out-dir", dir.to_str().unwrap(),
    ]);
    let sums = e2e::read_jsonl(&dir.join("summaries.jsonl"));
    assert_eq!(sums.len(), 4, "2 tasks x 2 attempts");
    let attempts = e2e::read_jsonl(&dir.join("attempts.jsonl"));
    for (s, a) in sums.iter().zip(&attempts) {
        assert!(s["written"].is_null() || s["written"].as_str().is_some_and(|w| !w.is_empty()), "{s}");
        assert!(s["written_tokens"].as_u64().unwrap() > 50, "the request's tokens are counted: {s}");
        let listed = s["answer"].as_array().unwrap();
        assert!(a["answer"].as_array().unwrap().iter().all(|e| listed.contains(e)), "the answer is the episode's: {s} vs {}", a["answer"]);
    }
    let sel = e2e::read_jsonl(&dir.join("selection.jsonl"));
    let at2 = sel.iter().find(|s| s["attempts"] == 2).unwrap();
    let both: u64 = sums.iter().filter(|s| s["attempt"].as_u64().unwrap() < 2).take(2).map(|s| s["written_tokens"].as_u64().unwrap()).sum();
    assert_eq!(at2["cost"]["summary_tokens"].as_u64().unwrap(), both, "{at2}");
}

/// A client that hangs up during a long completion stops its generation
/// (issue 52: the next request waited 14.8 s for tokens nobody would
/// read): the next request is answered in a small part of the time the
/// whole completion takes, and the log says where generation stopped.
#[test]
fn serve_stops_generating_for_a_client_that_hung_up() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let mut server = serve(&model);
    let url = format!("{}/v1/chat/completions", server.url);
    // Greedy, this model never writes a stop token: it runs to max_tokens.
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 16000}).to_string();
    let t0 = std::time::Instant::now();
    let (status, whole) = post(&url, &body);
    let full = t0.elapsed();
    assert_eq!((status, whole["usage"]["completion_tokens"].as_u64()), (200, Some(16000)), "{whole}");
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut client = std::net::TcpStream::connect(&addr).unwrap();
    write!(client, "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    std::thread::sleep(full / 8);
    drop(client);
    let t1 = std::time::Instant::now();
    let health = ureq::get(&format!("{}/health", server.url)).timeout(Duration::from_secs(120)).call().unwrap();
    let next = t1.elapsed();
    println!("whole completion {full:.2?}; the request after a hang-up answered in {next:.2?}");
    assert_eq!(health.status(), 200);
    assert!(next < full / 3, "the request after a hang-up waited {next:?} (the whole completion takes {full:?})");
    let _ = server.child.kill();
    let _ = server.child.wait();
    let mut err = String::new();
    server.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("status=499") && err.contains("the client closed the connection; generation stopped after"), "{err}");
}

/// One raw HTTP exchange on a fresh connection: `request` is written
/// (then the sending side shut down when `half_close`), and the response
/// read up to the end of its body (its Content-Length, or the close).
fn exchange(addr: &str, request: &[u8], half_close: bool) -> (u16, String, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request).unwrap();
    if half_close {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    read_response(&mut s)
}

/// (status, head, body) of the next response on `s`.
fn read_response(s: &mut std::net::TcpStream) -> (u16, String, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_string();
            if head.starts_with("HTTP/1.1 100") {
                got.drain(..end + 4);
                continue;
            }
            let length = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()));
            let body_start = end + 4;
            if length.is_some_and(|n| got.len() >= body_start + n) {
                let body = String::from_utf8_lossy(&got[body_start..body_start + length.unwrap()]).to_string();
                let status = head[9..12].parse().unwrap();
                return (status, head, body);
            }
            if length.is_none() {
                // Close-delimited: read to the end.
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let status = head[9..12].parse().unwrap();
                return (status, head, String::from_utf8_lossy(&got[body_start..]).to_string());
            }
        }
        match s.read(&mut buf) {
            Ok(0) => panic!("the connection ended before a whole response: {:?}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the response: {e} after {:?}", String::from_utf8_lossy(&got)),
        }
    }
}

fn post_request(version: &str, extra: &str, body: &str) -> Vec<u8> {
    format!("POST /v1/chat/completions {version}\r\nHost: x\r\n{extra}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The kernel's peak resident memory of process `pid` (VmHWM), in MB.
fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches("kB").trim().parse().unwrap();
    kb / 1024.0
}

/// The defects a probe of `serve` found (issue 66, D1-D4), over real
/// sockets: a huge declared Content-Length is a 413 and the server stays;
/// `Connection: close`, HTTP/1.0 and a client that half-closes its sending
/// side get their completion (not a 499); a 30 MB body is refused cheaply;
/// a client stalled mid-body, or after `Expect: 100-continue`, holds
/// nobody else up.
#[test]
fn serve_survives_what_one_client_can_send() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let server = serve(&model);
    let addr = server.url.trim_start_matches("http://").to_string();
    let pid = server.child.id();
    let short = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}).to_string();

    // D1: a declared length far over the cap, and a short body.
    let (status, _, body) = exchange(&addr, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n{}", true);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("100000000000 bytes"), "{body}");
    let (status, _, body) = exchange(&addr, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000000\r\n\r\n{}", false);
    assert_eq!(status, 413, "{body}");

    // D2: closing clients get their completion.
    for (what, request, half) in [
        ("Connection: close", post_request("HTTP/1.1", "Connection: close\r\n", &short), false),
        ("HTTP/1.0", post_request("HTTP/1.0", "", &short), false),
        ("a half-close", post_request("HTTP/1.1", "", &short), true),
        ("HTTP/1.0 and a half-close", post_request("HTTP/1.0", "", &short), true),
    ] {
        let (status, _, body) = exchange(&addr, &request, half);
        assert_eq!(status, 200, "{what}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 8, "{what}: {body}");
    }
    // A long completion for a client that half-closed: it is still there
    // (the probe writes succeed), so it gets the whole completion.
    let long = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6000, "temperature": 0}).to_string();
    let (status, head, body) = exchange(&addr, &post_request("HTTP/1.1", "", &long), true);
    assert_eq!(status, 200, "{head}\n{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON after the probe's spaces");
    assert_eq!(v["usage"]["completion_tokens"], 6000, "{body}");

    // D3: a 30 MB prompt that can never fit is refused cheaply.
    let before = peak_rss_mb(pid);
    let big = json!({"messages": [{"role": "user", "content": "x ".repeat(15 << 20)}], "max_tokens": 1}).to_string();
    let t = std::time::Instant::now();
    let (status, _, body) = exchange(&addr, &post_request("HTTP/1.1", "Connection: close\r\n", &big), false);
    let secs = t.elapsed().as_secs_f64();
    let after = peak_rss_mb(pid);
    println!("30 MB body: {status} in {secs:.2} s; peak RSS {before:.0} MB before, {after:.0} MB after");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("the prompt is more than"), "{body}");
    assert!(after < 1024.0, "a 30 MB body took the server's peak RSS to {after:.0} MB (was 12.5 GB before the fix)");
    assert!(secs < 20.0, "refusing a 30 MB body took {secs:.1} s");

    // D4: stalled clients (a body that stops; 100-continue and no body;
    // a chunked body that stops) while another is answered.
    use std::io::Write;
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    stalled.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{").unwrap();
    let after_continue = json!({"messages": [{"role": "user", "content": "h"}], "max_tokens": 1}).to_string();
    let mut expecting = std::net::TcpStream::connect(&addr).unwrap();
    write!(expecting, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n", after_continue.len()).unwrap();
    let mut chunked = std::net::TcpStream::connect(&addr).unwrap();
    chunked.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n{\"mess").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    let (status, _, body) = exchange(&addr, &post_request("HTTP/1.1", "Connection: close\r\n", &short), false);
    let waited = t.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(waited < Duration::from_secs(2), "a request beside three stalled clients waited {waited:?}");
    // The 100-continue client was told to go on, and its request is answered once it sends.
    expecting.write_all(after_continue.as_bytes()).unwrap();
    expecting.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (status, _, body) = read_response(&mut expecting);
    assert_eq!(status, 200, "{body}");
    // Still serving.
    let (status, _, _) = exchange(&addr, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false);
    assert_eq!(status, 200);
    drop((stalled, chunked));
}
