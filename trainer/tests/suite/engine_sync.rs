//! GRPO's weight sync to a vLLM server (`trainer::grpo::engine`), against
//! a stand-in server that checks what it is sent and answers the probe
//! with log-probs it is given: each sync writes a loadable folder and has
//! the server load it (whole model: pause, reload_weights, resume; LoRA: a
//! new adapter name), removes the folder before; a server whose log-probs
//! are not the trainer's fails the check, naming the fix.

use crate::common::{self, load};
use candle_core::{DType, Device};
use rollout::engine::vllm::{VllmConfig, VllmEngine};
use rollout::http::Retry;
use rollout::testutil::{StubReply, StubServer};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use lm::logprobs::score_sequence;
use lm::lora::peft;
use trainer::grpo::engine_sync::{EngineSync, Upload};
use lm::CausalLm;

/// A vLLM stand-in: the dev and LoRA endpoints answer OK after checking the
/// folder they name holds `expect_file`, and then serve `next` (when set);
/// `prompt_logprobs` requests get `served` (one per token after the first).
/// Every request is logged.
fn server(served: Arc<Mutex<Vec<f32>>>, next: Arc<Mutex<Option<Vec<f32>>>>, expect_file: &'static str) -> StubServer {
    StubServer::start(move |r| {
        let body = r.json();
        let load = |dir: &str| {
            assert!(std::path::Path::new(dir).join(expect_file).is_file(), "{dir} lacks {expect_file}");
            if let Some(lp) = next.lock().unwrap().take() {
                *served.lock().unwrap() = lp;
            }
        };
        match r.what.as_str() {
            "POST /collective_rpc" => {
                load(body["kwargs"]["weights_path"].as_str().unwrap());
                StubReply::json(200, &json!({"results": [null]}))
            }
            "POST /v1/load_lora_adapter" => {
                load(body["lora_path"].as_str().unwrap());
                StubReply::text(200, "Success")
            }
            "POST /v1/completions" => {
                let prompt: Vec<u64> = body["prompt"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
                let lp = served.lock().unwrap().clone();
                let mut rows = vec![Value::Null];
                for (t, l) in prompt.iter().skip(1).zip(lp) {
                    rows.push(json!({ t.to_string(): {"logprob": l, "rank": 1} }));
                }
                StubReply::json(200, &json!({"choices": [{"text": "", "token_ids": [1], "prompt_logprobs": rows, "logprobs": {"token_logprobs": [-1.0]}}]}))
            }
            _ => StubReply::json(200, &json!({"status": "ok"})),
        }
    })
}

fn engine(url: &str) -> VllmEngine {
    VllmEngine::new(VllmConfig {
        url: url.into(),
        served_model: "tiny".into(),
        temperature: 1.0,
        top_p: 1.0,
        seed: 0,
        stop_token_ids: vec![0],
        max_concurrency: 2,
        timeout: Duration::from_secs(10),
        retry: Retry { max_retries: 0, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(1) },
    })
    .unwrap()
}

fn ours(model: &CausalLm, probe: &[u32]) -> Vec<f32> {
    score_sequence(model, probe).unwrap().into_iter().skip(1).map(Option::unwrap).collect()
}

#[test]
fn whole_model_sync_writes_a_folder_the_server_reloads_and_the_probe_checks_it() {
    let (cfg, weights) = load("llama_tied_rope3");
    let model = CausalLm::new(&cfg, &weights).unwrap();
    let probe: Vec<u32> = (1..20).collect();
    let served = Arc::new(Mutex::new(ours(&model, &probe)));
    let next = Arc::new(Mutex::new(None));
    let srv = server(served.clone(), next.clone(), "model.safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let mut sync = EngineSync::new(engine(&srv.url), tmp.path().join("w"), probe.clone(), 1e-4, 7);
    assert_eq!(sync.synced_step(), None);
    let s = sync.sync(0, Upload::Model(&cfg, &weights), &model).unwrap();
    assert!(s.probe_mean < 1e-6 && s.seconds > 0.0 && s.probe_moved < 1e-6, "{s:?}");
    assert!(tmp.path().join("w/step_00000000/config.json").is_file());
    // A tied head is also written as a weight of its own (vLLM serves the
    // model untied: its in-place reload keeps a tied head's old tensor).
    assert!(cfg.tie_word_embeddings);
    let head = lm::weights::load_tensor(&tmp.path().join("w/step_00000000"), "lm_head.weight");
    assert!(head.is_err(), "model.safetensors alone has no lm_head.weight");
    let head = candle_core::safetensors::load(tmp.path().join("w/step_00000000/lm_head.safetensors"), &Device::Cpu).unwrap();
    let diff = (head["lm_head.weight"].clone() - weights["model.embed_tokens.weight"].clone()).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
    assert_eq!(diff, 0.0);
    let what: Vec<String> = srv.requests().iter().map(|r| r.what.clone()).collect();
    // First a /resume (a run killed mid-sync leaves the server paused).
    assert_eq!(what, ["POST /resume", "POST /v1/completions", "POST /pause?mode=wait&clear_cache=true", "POST /collective_rpc", "POST /resume", "POST /v1/completions"]);
    // Other weights: the server takes them on reload, and the probe moved.
    let mut moved = weights.clone();
    let name = moved.keys().find(|k| k.contains("mlp.down_proj")).unwrap().clone();
    moved.insert(name.clone(), (moved[&name].clone() * 1.5).unwrap());
    let model2 = CausalLm::new(&cfg, &moved).unwrap();
    *next.lock().unwrap() = Some(ours(&model2, &probe));
    let s = sync.sync(1, Upload::Model(&cfg, &moved), &model2).unwrap();
    assert!(s.probe_moved > 1e-4 && s.probe_mean < 1e-6, "{s:?}");
    assert_eq!(sync.synced_step(), Some(1));
    assert!(!tmp.path().join("w/step_00000000").exists(), "the previous folder is removed");
    assert!(tmp.path().join("w/step_00000001/model.safetensors").is_file());
    assert!(sync.check().unwrap().0 < 1e-6);
    // The server now answers with other weights' log-probs (restarted, or
    // it ignored the reload): the check fails, naming what to do.
    served.lock().unwrap().iter_mut().for_each(|l| *l -= 0.01);
    let e = sync.check().unwrap_err().to_string();
    assert!(e.contains("does not serve the weights being trained") && e.contains("Resume the run"), "{e}");
    let e = sync.sync(2, Upload::Model(&cfg, &moved), &model2).unwrap_err().to_string();
    assert!(e.contains("probe_tolerance = 0.0001"), "{e}");
}

#[test]
fn lora_sync_loads_each_adapter_under_its_step_name() {
    let case = "llama_tied_rope3";
    let (cfg, weights) = load(case);
    let adapter = peft::load(&common::fixture_dir("lora").join(case), &cfg, Some(&common::fixture_dir(case)), DType::F32, &Device::Cpu).unwrap();
    let model = CausalLm::new(&cfg, &weights).unwrap().with_adapter(&adapter).unwrap();
    let base = CausalLm::new(&cfg, &weights).unwrap();
    let probe: Vec<u32> = (3..30).collect();
    let served = Arc::new(Mutex::new(ours(&base, &probe)));
    let srv = server(served.clone(), Arc::new(Mutex::new(None)), "adapter_model.safetensors");
    let tmp = tempfile::tempdir().unwrap();
    let mut sync = EngineSync::new(engine(&srv.url), tmp.path().join("w"), probe.clone(), 1e-4, 7);
    // Before the first adapter: the server must serve the run's base.
    sync.check_base(&base).unwrap();
    let e = sync.check_base(&model).unwrap_err().to_string();
    assert!(e.contains("another model than this LoRA run's base") && e.contains("--adapter-rank"), "{e}");
    *served.lock().unwrap() = ours(&model, &probe);
    sync.sync(3, Upload::Adapter(&adapter), &model).unwrap();
    sync.sync(4, Upload::Adapter(&adapter), &model).unwrap();
    let loads: Vec<String> = srv.requests().iter().filter(|r| r.what == "POST /v1/load_lora_adapter").map(|r| r.json()["lora_name"].as_str().unwrap().to_string()).collect();
    assert_eq!(loads.len(), 2);
    assert!(loads[0].starts_with("fusegrpo-") && loads[0].ends_with("-step-3") && loads[1].ends_with("-step-4"), "{loads:?}");
    assert_eq!(loads[0].trim_end_matches("-step-3"), loads[1].trim_end_matches("-step-4"), "one run, one prefix");
    assert_eq!(sync.engine.model(), loads[1]);
    // The saved adapter loads back as PEFT's layout with the same tensors.
    let back = peft::load(&tmp.path().join("w/step_00000004"), &cfg, None, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(back.tensors.len(), adapter.tensors.len());
    // Each step seeds its requests differently.
    sync.seed_step(4);
    let a = sync.engine.config().seed;
    sync.seed_step(5);
    assert_ne!(a, sync.engine.config().seed);
}

/// A trainer killed between a reload's `/pause` and `/resume` leaves the
/// server paused, where every request waits for the whole timeout (seen in
/// scripts/test-vllm.sh: a run SIGKILLed after a checkpoint, during the
/// next step's sync, and its resume hung). GRPO's engine with whole-model
/// syncs therefore sends `/resume` before anything else; a LoRA run's (the
/// server needs no dev endpoints) does not.
#[test]
fn the_training_engine_resumes_a_paused_server_before_its_first_request() {
    let tmp = tempfile::tempdir().unwrap();
    let model_dir = tmp.path().join("model");
    let spec = crate::tiny::TinySpec {
        tokenizer: crate::tiny::TinyTokenizer::Small { ids: 512, corpus: None, format: rollout::chat::SmallChatFormat::Qwen3 },
        seed: 1,
        hidden_size: 32,
        intermediate_size: 64,
        layers: 1,
        heads: 2,
        kv_heads: 1,
        head_dim: 16,
        tied: true,
        shards: 1,
        architecture: lm::config::Architecture::Qwen3,
        llama3_rope: false,
    };
    crate::tiny::write_tiny(&model_dir, &spec).unwrap();
    for (lora, resumes) in [("", true), ("[lora]\nr = 4\n", false)] {
        let stub = StubServer::start(|_| StubReply::json(200, &json!({"status": "ok"})));
        let text = format!(
            "name = \"t\"\n[model]\npath = \"{}\"\n[env]\nrepos_dir = \"r\"\n[rollout]\nengine = \"vllm\"\n[rollout.vllm]\nurl = \"{}\"\nserved_model = \"tiny\"\nmax_retries = 0\n{lora}",
            model_dir.display(),
            stub.url
        );
        let cfg: trainer::run_config::RunConfig = toml::from_str(&text).unwrap();
        let tok = cfg.chat_tokenizer(&model_dir).unwrap();
        // The stand-in answers nothing useful, so the checks after fail;
        // what matters is what was asked first.
        let _ = trainer::episodes::vllm::training_engine(&cfg, &tok, &tmp.path().join("run"));
        let what: Vec<String> = stub.requests().into_iter().map(|r| r.what).collect();
        assert!(!what.is_empty(), "no request");
        assert_eq!(what[0] == "POST /resume", resumes, "lora {lora:?}: {what:?}");
        assert_eq!(what.iter().filter(|w| *w == "POST /resume").count(), usize::from(resumes), "{what:?}");
    }
}
