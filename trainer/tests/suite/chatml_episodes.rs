//! Episodes in a vocabulary without Qwen3's tool and thinking tokens: the
//! tokenizer imported from the tiny GGUF (ChatML's three special tokens only,
//! as SmolLM2's) with `configs/chatml-tools.jinja` as its chat template. The
//! tool-response layout is probed from the template, `<tool_call>` spans
//! several tokens, the scripted teacher localizes, and the episode's tokens
//! are exactly the template's rendering of its conversation (token in, token
//! out, no Qwen3 layout written by hand); a model policy rolls out too.

use crate::common;

use candle_core::{DType, Device};
use rand::SeedableRng;
use rollout::chat::{ChatRequest, ChatTokenizer};
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::prompt::tool_schemas;
use rollout::episode::{EpisodeConfig, Phase, StopReason};
use rollout::testutil::Recorder;
use rollout::repo::SnapshotStore;
use rollout::reward::RewardConfig;
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;
use std::path::{Path, PathBuf};
use std::process::Command;
use trainer::model_policy::{ModelPolicy, RolloutLimits};
use lm::sampling::SamplerConfig;

fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/chatml-tools.jinja")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

struct World {
    dir: tempfile::TempDir,
    store: SnapshotStore,
    tok: ChatTokenizer,
    task: Task,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    lm::gguf::import(&common::fixture_dir("gguf_llama").join("tiny-llama.gguf"), &model, DType::F32).unwrap();
    let tok = ChatTokenizer::from_dir_with_template(&model, Some(&template())).unwrap();
    let repo = dir.path().join("repos/acme__shop");
    std::fs::create_dir_all(repo.join("shop")).unwrap();
    std::fs::write(
        repo.join("shop/pricing.py"),
        "def compute_discount(price, rate):\n    if rate > 1:\n        raise ValueError('discount rate above 100%')\n    return price * (1 - rate)\n\n\ndef total(items):\n    return sum(items)\n",
    )
    .unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["-c", "user.name=t", "-c", "user.email=t@t", "add", "."]);
    git(&repo, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let task: Task = serde_json::from_value(serde_json::json!({
        "instance_id": "acme__shop-1", "repo": "acme/shop", "base_commit": commit,
        "problem_statement": "Checkout crashes with 'discount rate above 100%' when `compute_discount` gets a rate of 1.5.",
        "gold": {"files": ["shop/pricing.py"], "functions": ["shop/pricing.py:compute_discount"]}
    }))
    .unwrap();
    World { store: SnapshotStore::open(dir.path().join("repos")), dir, tok, task }
}

#[test]
fn the_tool_response_layout_comes_from_the_template_and_markers_span_tokens() {
    let w = world();
    let s = w.tok.special();
    assert_eq!((s.tool_call_start, s.tool_response_start, s.think_start), (None, None, None));
    assert!(w.tok.encode("<tool_call>").unwrap().len() > 1, "<tool_call> is plain text here");
    let layout = w.tok.response_layout(Some(false)).unwrap();
    assert_eq!(layout.prefix, "\n<|im_start|>user\n<tool_response>\n");
    assert_eq!(layout.between, "\n</tool_response>\n<tool_response>\n");
    assert_eq!(layout.suffix, "\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(w.tok.response_layout(Some(true)).unwrap(), layout, "the template has no thinking switch");
}

#[test]
fn scripted_episodes_replay_through_the_template_token_for_token() {
    let w = world();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &w.tok, store: &w.store, tools: &tools, reward: &reward };
    let mut rec = Recorder(ScriptedTeacher::default(), Vec::new());
    let ep = run_episodes(&mut rec, &env, std::slice::from_ref(&w.task), 1, &EpisodeConfig::default(), |_| {}).unwrap().remove(0);
    assert_eq!(ep.phase, Phase::Done(StopReason::Answer), "{:#?}", ep.turns);
    let score = ep.score.unwrap();
    assert_eq!((score.f1_file, score.f1_func), (1.0, 1.0), "answer {:?}", ep.answer);
    assert!(ep.turns[0].calls.len() >= 2, "parallel calls parsed from multi-token markers");

    let mut messages = rec.1;
    messages.push(serde_json::json!({"role": "assistant", "content": ep.turns.last().unwrap().text}));
    let req = ChatRequest { messages, tools: Some(tool_schemas(&Default::default())), add_generation_prompt: false, enable_thinking: Some(false) };
    let (_, mut rendered) = w.tok.render_ids(&req).unwrap();
    // Generation stopped at <|im_end|>; the template ends the turn with a newline.
    assert_eq!(rendered.pop(), w.tok.encode("\n").unwrap().last().copied());
    if ep.tokens != rendered {
        let at = ep.tokens.iter().zip(&rendered).position(|(a, b)| a != b).unwrap_or(ep.tokens.len().min(rendered.len()));
        panic!(
            "diverge at token {at}: ours {:?} vs template {:?}",
            w.tok.decode(&ep.tokens[at.saturating_sub(5)..(at + 10).min(ep.tokens.len())]).unwrap(),
            w.tok.decode(&rendered[at.saturating_sub(5)..(at + 10).min(rendered.len())]).unwrap()
        );
    }
    println!("ChatML replay: {} tokens, {} turns, identical to the template's rendering", ep.tokens.len(), ep.turns.len());
}

#[test]
fn the_imported_llama_rolls_out_as_a_policy() {
    let w = world();
    let model_dir = w.dir.path().join("model");
    let cfg = lm::ModelConfig::from_file(&model_dir.join("config.json")).unwrap();
    let weights = lm::weights::load_weights(&model_dir, &cfg, DType::F32, &Device::Cpu).unwrap();
    let model = lm::CausalLm::new(&cfg, &weights).unwrap();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &w.tok, store: &w.store, tools: &tools, reward: &reward };
    let stop = w.tok.stop_ids().to_vec();
    let cfg = EpisodeConfig { max_turns: 2, max_turn_tokens: 24, ..EpisodeConfig::default() };
    let sampler = SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: 0 };
    let rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let mut policy = ModelPolicy::new(&model, sampler, rng, stop, RolloutLimits::batch_tokens(4096));
    let eps = run_episodes(&mut policy, &env, std::slice::from_ref(&w.task), 2, &cfg, |_| {}).unwrap();
    for ep in &eps {
        assert!(matches!(ep.phase, Phase::Done(_)));
        assert_eq!(ep.tokens.len(), ep.loss_mask.len());
        let generated = ep.loss_mask.iter().filter(|&&m| m == 1).count();
        assert!(generated > 0, "the policy wrote tokens");
        println!("imported Llama policy: {} tokens ({generated} generated), {:?}", ep.tokens.len(), ep.phase);
    }
}
