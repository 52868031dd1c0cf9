//! `fusegrpo engine vllm` with a stand-in for vLLM (a Python script that
//! records its arguments and environment and answers `/health`): the flags
//! and environment the engine needs reach it, the command prints the URL
//! and the config lines once `/health` answers, and SIGTERM stops the child
//! with it. A vLLM that exits early or a missing executable is an error.
//! A model that ties its embeddings and LM head is served from an untied
//! view (vLLM's in-place weight reload keeps a tied head's old tensor).

use e2e::fusegrpo_bin;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAKE_VLLM: &str = r#"#!/usr/bin/env python3
import http.server, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_VLLM_LOG"], "w") as f:
    json.dump({"args": args, "dev": os.environ.get("VLLM_SERVER_DEV_MODE"),
               "lora": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
               "kv": os.environ.get("VLLM_CPU_KVCACHE_SPACE"), "pid": os.getpid()}, f)
if os.environ.get("FAKE_VLLM_FAIL"):
    sys.exit(3)
port = int(args[args.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// A safetensors file holding one f32 tensor.
fn write_safetensors(path: &std::path::Path, name: &str, shape: [usize; 2], values: &[f32]) {
    let header = serde_json::json!({ name: {"dtype": "F32", "shape": shape, "data_offsets": [0, values.len() * 4]} }).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for v in values {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn engine_vllm_starts_waits_for_health_and_stops_with_its_child() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("vllm");
    std::fs::write(&fake, FAKE_VLLM).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), r#"{"model_type": "llama", "tie_word_embeddings": true}"#).unwrap();
    let embeddings = [0.5f32, -1.0, 2.0, 0.25, 3.0, -0.125];
    write_safetensors(&model.join("model.safetensors"), "model.embed_tokens.weight", [3, 2], &embeddings);
    std::fs::write(model.join("tokenizer.json"), "{}").unwrap();
    let home = tmp.path().join("home");
    let log = tmp.path().join("fake.json");
    let port = free_port().to_string();
    let args = ["engine", "vllm", "--model", model.to_str().unwrap(), "--vllm", fake.to_str().unwrap(), "--port", &port, "--served-model-name", "smol", "--adapter-rank", "16", "--", "--enforce-eager"];

    let mut child = Command::new(fusegrpo_bin()).args(args).env("HOME", &home).env("FAKE_VLLM_LOG", &log).env_remove("VLLM_CPU_KVCACHE_SPACE").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains(&format!("at http://127.0.0.1:{port}")) && first.contains("\"smol\""), "{first}");
    let mut rest = String::new();
    for _ in 0..5 {
        out.read_line(&mut rest).unwrap();
    }
    assert!(rest.contains("engine = \"vllm\"") && rest.contains(&format!("url = \"http://127.0.0.1:{port}\"")) && rest.contains("served_model = \"smol\""), "{rest}");

    let seen: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
    let argv: Vec<&str> = seen["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    // The tied model is served from its untied view: links to its files,
    // the head as a weight of its own equal to the embeddings.
    assert_eq!(argv[0], "serve");
    let view = std::path::Path::new(argv[1]);
    assert!(view.starts_with(home.join(".cache/fusegrpo/vllm-untied")), "{argv:?}");
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(view.join("config.json")).unwrap()).unwrap();
    assert_eq!((cfg["tie_word_embeddings"].as_bool(), cfg["model_type"].as_str()), (Some(false), Some("llama")));
    assert_eq!(std::fs::read_link(view.join("tokenizer.json")).unwrap(), model.join("tokenizer.json"));
    let head = std::fs::read(view.join("lm_head.safetensors")).unwrap();
    let n = u64::from_le_bytes(head[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&head[8..8 + n]).unwrap();
    assert_eq!(header["lm_head.weight"]["shape"], serde_json::json!([3, 2]), "{header}");
    let values: Vec<f32> = head[8 + n..].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(values, embeddings);
    assert!(!argv.contains(&"--no-enable-chunked-prefill"), "not a CPU build: {argv:?}");
    for pair in [["--served-model-name", "smol"], ["--logprobs-mode", "processed_logprobs"], ["--dtype", "float32"], ["--max-lora-rank", "16"]] {
        assert!(argv.windows(2).any(|w| w == pair), "{pair:?} in {argv:?}");
    }
    assert!(argv.contains(&"--enable-lora") && argv.last() == Some(&"--enforce-eager"), "{argv:?}");
    assert_eq!((seen["dev"].as_str(), seen["lora"].as_str(), seen["kv"].as_str()), (Some("1"), Some("1"), Some("2")));

    // SIGTERM to the command stops the child too.
    let fake_pid = seen["pid"].as_i64().unwrap() as i32;
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the command did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = unsafe { libc::kill(fake_pid, 0) };
        alive != 0
    });
    assert!(gone, "the vLLM stand-in (pid {fake_pid}) is still running");

    // A vLLM that exits before it is ready, and one that is not there.
    let out = Command::new(fusegrpo_bin()).args(args).env("HOME", &home).env("FAKE_VLLM_LOG", &log).env("FAKE_VLLM_FAIL", "1").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("vLLM exited before it was ready") && err.contains("exit status: 3"), "{err}");
    let missing = tmp.path().join("no-vllm");
    let mut args2 = args.to_vec();
    args2[5] = missing.to_str().unwrap();
    let out = Command::new(fusegrpo_bin()).args(&args2).env("HOME", &home).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is vLLM installed?") && err.contains("no-vllm"), "{err}");
}
