//! Llama 3's chat format: turns open with `<|start_header_id|>` and close
//! with `<|eot_id|>`, tool responses are `ipython` turns. The small Llama 3
//! tokenizer (Llama 3.1's header tokens, `configs/llama3-tools.jinja`)
//! renders as transformers does (golden fixtures by
//! `scripts/make_chat_fixtures.py --llama3`), its turn markers and stop ids
//! come from the template, and a scripted episode's tokens are the template's
//! rendering of its conversation, token in, token out.

use crate::chat_template::{check_fixtures, load_fixtures_in};
use crate::repo_builder::TempRepo;

use rollout::chat::{write_small_tokenizer_in, ChatRequest, ChatTokenizer, SmallChatFormat};
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::prompt::tool_schemas;
use rollout::episode::{EpisodeConfig, Phase, StopReason};
use rollout::testutil::Recorder;
use rollout::reward::RewardConfig;
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;
use serde_json::json;
use std::path::Path;

/// The vocabulary the fixtures were rendered with (`fusegrpo init-tiny
/// --small-vocab 1500 --chat-format llama3`).
const VOCAB: usize = 1500;

fn llama3() -> (tempfile::TempDir, ChatTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    write_small_tokenizer_in(dir.path(), VOCAB, &[], SmallChatFormat::Llama3).unwrap();
    let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
    (dir, tok)
}

#[test]
fn llama3_renders_like_transformers() {
    let (_dir, tok) = llama3();
    let fixtures = load_fixtures_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat-llama3"));
    check_fixtures(&tok, &fixtures);
}

#[test]
fn llama3_turn_markers_and_stop_ids_come_from_the_template() {
    let (dir, tok) = llama3();
    let id = |t: &str| tok.token_id(t).unwrap();
    let s = tok.special();
    assert_eq!((s.turn_start, s.end_of_turn), (id("<|start_header_id|>"), id("<|eot_id|>")));
    assert_eq!(tok.end_of_turn_text(), "<|eot_id|>");
    // eos_token is <|eot_id|> (listed once), then the end of the document.
    assert_eq!(tok.stop_ids(), &[id("<|eot_id|>"), id("<|end_of_text|>")]);
    assert_eq!((s.tool_call_start, s.think_start), (None, None), "plain text in this vocabulary");
    let layout = tok.response_layout(Some(false)).unwrap();
    assert_eq!(layout.prefix, "<|start_header_id|>ipython<|end_header_id|>\n\n");
    assert_eq!(layout.between, "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n");
    assert_eq!(layout.suffix, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");

    // A ChatML template over this vocabulary: its markers are not tokens here.
    let chatml = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/chatml-tools.jinja");
    let e = ChatTokenizer::from_dir_with_template(dir.path(), Some(&chatml)).unwrap_err().to_string();
    assert!(e.contains("assistant header") && e.contains("<|im_start|>assistant"), "{e}");
    // A template that closes no turn with a special token.
    let plain = dir.path().join("plain.jinja");
    std::fs::write(
        &plain,
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}\n\n{% endfor %}\
         {% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    )
    .unwrap();
    let e = ChatTokenizer::from_dir_with_template(dir.path(), Some(&plain)).unwrap_err().to_string();
    assert!(e.contains("does not close an assistant turn"), "{e}");
}

#[test]
fn llama3_scripted_episode_replays_through_the_template_token_for_token() {
    let repo = TempRepo::new("acme/shop");
    repo.file(
        "shop/pricing.py",
        "def compute_discount(price, rate):\n    if rate > 1:\n        raise ValueError('discount rate above 100%')\n    return price * (1 - rate)\n\n\ndef total(items):\n    return sum(items)\n",
    );
    let commit = repo.commit("init");
    let task: Task = serde_json::from_value(json!({
        "instance_id": "acme__shop-1", "repo": "acme/shop", "base_commit": commit,
        "problem_statement": "Checkout crashes with 'discount rate above 100%' when `compute_discount` gets a rate of 1.5.",
        "gold": {"files": ["shop/pricing.py"], "functions": ["shop/pricing.py:compute_discount"]}
    }))
    .unwrap();
    let (_dir, tok) = llama3();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let mut rec = Recorder(ScriptedTeacher::default(), Vec::new());
    let ep = run_episodes(&mut rec, &env, &[task], 1, &EpisodeConfig::default(), |_| {}).unwrap().remove(0);
    assert_eq!(ep.phase, Phase::Done(StopReason::Answer), "{:#?}", ep.turns);
    let score = ep.score.unwrap();
    assert_eq!((score.f1_file, score.f1_func), (1.0, 1.0), "answer {:?}", ep.answer);
    assert!(ep.turns[0].calls.len() >= 2, "parallel calls");
    // The loss covers the assistant turns, each closed by <|eot_id|>.
    let policy: Vec<u32> = ep.tokens.iter().zip(&ep.loss_mask).filter(|(_, &m)| m == 1).map(|(&t, _)| t).collect();
    let turns: String = ep.turns.iter().map(|t| t.text.clone() + "<|eot_id|>").collect();
    assert_eq!(tok.decode(&policy).unwrap(), turns);

    let mut messages = rec.1;
    messages.push(json!({"role": "assistant", "content": ep.turns.last().unwrap().text}));
    let req = ChatRequest { messages, tools: Some(tool_schemas(&Default::default())), add_generation_prompt: false, enable_thinking: Some(false) };
    let (_, rendered) = tok.render_ids(&req).unwrap();
    // Llama 3 writes nothing after <|eot_id|>: the two agree to the last token.
    if ep.tokens != rendered {
        let at = ep.tokens.iter().zip(&rendered).position(|(a, b)| a != b).unwrap_or(ep.tokens.len().min(rendered.len()));
        panic!(
            "diverge at token {at} (ours {}, template {}): ours {:?} vs template {:?}",
            ep.tokens.len(),
            rendered.len(),
            tok.decode(&ep.tokens[at.saturating_sub(5)..(at + 10).min(ep.tokens.len())]).unwrap(),
            tok.decode(&rendered[at.saturating_sub(5)..(at + 10).min(rendered.len())]).unwrap()
        );
    }
    assert_eq!(ep.tokens[0], tok.token_id("<|begin_of_text|>").unwrap(), "the template's bos_token opens the prompt");
    println!("Llama 3 replay: {} tokens, {} turns, identical to the template's rendering", ep.tokens.len(), ep.turns.len());
}
