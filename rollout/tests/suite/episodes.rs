//! Episodes end to end with the scripted teacher on a generated repository:
//! the state machine, token-in token-out with its loss mask, tool calls run
//! in parallel, the reward, and a replay through the chat template that
//! shows where (and why) the token sequences agree.

use crate::repo_builder;

use repo_builder::TempRepo;
use rollout::chat::{write_small_tokenizer, ChatRequest, ChatTokenizer};
use rollout::episode::driver::{run_episodes, run_episodes_until, Env, RolloutError};
use rollout::episode::prompt::tool_schemas;
use rollout::episode::{EpisodeConfig, Phase, StopReason};
use rollout::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use rollout::testutil::Recorder;
use rollout::reward::RewardConfig;
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const HTTP: &str = "\
import socket

POOL_SIZE = 10


class Adapter:
    def __init__(self, size=POOL_SIZE):
        self.size = size

    def send_request(self, request):
        if self.full():
            raise PoolFullError('connection pool is full, discarding connection')
        return socket.send(request)

    def full(self):
        return False


def helper():
    return 1
";

fn setup() -> (TempRepo, String, tempfile::TempDir, ChatTokenizer) {
    let repo = TempRepo::new("acme/webby");
    repo.file("webby/http.py", HTTP);
    repo.file("webby/util.py", "def slugify(text):\n    return text.lower()\n");
    repo.file("README.md", "webby: a tiny web client\n");
    let commit = repo.commit("initial");
    let tok_dir = tempfile::tempdir().unwrap();
    write_small_tokenizer(tok_dir.path(), 1500).unwrap();
    let tok = ChatTokenizer::from_dir(tok_dir.path()).unwrap();
    (repo, commit, tok_dir, tok)
}

fn task(commit: &str) -> Task {
    serde_json::from_value(json!({
        "instance_id": "acme__webby-1",
        "repo": "acme/webby",
        "base_commit": commit,
        "problem_statement": "Requests fail with 'connection pool is full, discarding connection' when `send_request` is called in a loop.",
        "gold": {"files": ["webby/http.py"], "functions": ["webby/http.py:Adapter.send_request"]}
    }))
    .unwrap()
}

#[test]
fn scripted_teacher_localizes_with_masked_tool_responses() {
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let mut done = 0;
    let eps = run_episodes(&mut ScriptedTeacher::default(), &env, &[task(&commit)], 2, &EpisodeConfig::default(), |_| done += 1).unwrap();
    assert_eq!((eps.len(), done), (2, 2));
    for ep in &eps {
        assert_eq!(ep.phase, Phase::Done(StopReason::Answer), "{:#?}", ep.turns);
        let s = ep.score.unwrap();
        assert_eq!((s.f1_file, s.f1_func), (1.0, 1.0), "answer {:?}", ep.answer);
        assert!(s.e > 0.0 && s.e <= 1.0);
        assert!(ep.turns[0].calls.len() >= 2, "parallel calls in the first turn");
        assert_eq!(ep.tokens.len(), ep.loss_mask.len());
        assert_eq!(ep.tokens.len(), ep.logprobs.len());
        // The masked-in tokens are exactly the assistant turns (+ <|im_end|>).
        let policy: Vec<u32> = ep.tokens.iter().zip(&ep.loss_mask).filter(|(_, &m)| m == 1).map(|(&t, _)| t).collect();
        let turns: String = ep.turns.iter().map(|t| t.text.clone() + "<|im_end|>").collect();
        assert_eq!(tok.decode(&policy).unwrap(), turns);
        // Tool responses never carry loss.
        let resp = tok.special().tool_response_start.expect("Qwen3's <tool_response> is one token");
        assert!(ep.tokens.iter().zip(&ep.loss_mask).all(|(&t, &m)| t != resp || m == 0));
        assert!(ep.tokens.contains(&resp));
    }
    assert_eq!(eps[0].tokens, eps[1].tokens, "the scripted teacher is deterministic");
}

#[test]
fn replay_through_the_chat_template_agrees_except_past_empty_think_blocks() {
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let mut rec = Recorder(ScriptedTeacher::default(), Vec::new());
    let ep = run_episodes(&mut rec, &env, &[task(&commit)], 1, &EpisodeConfig::default(), |_| {}).unwrap().remove(0);
    let mut messages = rec.1;
    // The full conversation: the messages the policy saw before its last
    // turn, plus that last turn (the answer).
    messages.push(json!({"role": "assistant", "content": ep.turns.last().unwrap().text}));
    let req = ChatRequest { messages, tools: Some(tool_schemas(&Default::default())), add_generation_prompt: false, enable_thinking: Some(false) };
    let (_, rendered) = tok.render_ids(&req).unwrap();
    // Why they differ: every assistant turn was generated after an
    // `enable_thinking=False` prompt, so our sequence holds an empty
    // `<think>\n\n</think>\n\n` before each turn; the template keeps that
    // block only on the last assistant turn (Qwen3 drops past reasoning),
    // and it ends the conversation with "<|im_end|>\n" where generation
    // stopped at <|im_end|>. Everything else must agree token for token.
    let think = tok.encode("<think>\n\n</think>\n\n").unwrap();
    let mut ours = ep.tokens.clone();
    let starts: Vec<usize> = (0..ours.len()).filter(|&i| ours[i..].starts_with(&think)).collect();
    assert_eq!(starts.len(), ep.turns.len(), "one empty think block per turn");
    for &i in starts[..starts.len() - 1].iter().rev() {
        ours.drain(i..i + think.len());
    }
    let mut theirs = rendered.clone();
    assert_eq!(theirs.pop(), tok.encode("\n").unwrap().last().copied());
    if ours != theirs {
        let at = ours.iter().zip(&theirs).position(|(a, b)| a != b).unwrap_or(ours.len().min(theirs.len()));
        panic!(
            "diverge at token {at}: ours {:?} vs template {:?}",
            tok.decode(&ours[at.saturating_sub(5)..(at + 10).min(ours.len())]).unwrap(),
            tok.decode(&theirs[at.saturating_sub(5)..(at + 10).min(theirs.len())]).unwrap()
        );
    }
    println!("replay: {} tokens identical after removing {} past empty think blocks", ours.len(), starts.len() - 1);
}

/// A policy that writes fixed turns, to drive the state machine's edges.
struct Script(Vec<&'static str>);
impl Policy for Script {
    fn name(&self) -> String {
        "script".into()
    }
    fn next_turns(&mut self, r: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        let turn = r[0].messages.iter().filter(|m| m["role"] == "assistant").count();
        Ok(r.iter().map(|_| TurnOutput::Text(self.0[turn.min(self.0.len() - 1)].to_string())).collect())
    }
}

#[test]
fn malformed_calls_cost_a_call_and_limits_stop_episodes() {
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let run = |script: Vec<&'static str>, cfg: EpisodeConfig| {
        run_episodes(&mut Script(script), &env, &[task(&commit)], 1, &cfg, |_| {}).unwrap().remove(0)
    };
    // A malformed block gets an error response and the episode continues.
    let ep = run(
        vec!["<tool_call>\n{not json}\n</tool_call>\n<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"send_request\"}}\n</tool_call>", "webby/http.py"],
        EpisodeConfig::default(),
    );
    assert_eq!(ep.stop_reason(), Some(StopReason::Answer));
    assert!(ep.turns[0].calls[0].error && ep.turns[0].calls[0].output.starts_with("Error:"));
    assert!(!ep.turns[0].calls[1].error);
    let s = ep.score.unwrap();
    assert_eq!(s.f1_file, 1.0);
    assert_eq!(s.e, 0.5, "the malformed call gains nothing: e = (0 + 1) / 2");
    // ... or ends it, when configured so.
    let cfg = EpisodeConfig { malformed_calls: rollout::episode::MalformedCalls::End, ..Default::default() };
    let ep = run(vec!["<tool_call>\n[1, 2]\n</tool_call>"], cfg);
    assert_eq!(ep.stop_reason(), Some(StopReason::Malformed));
    assert_eq!(ep.score.unwrap().reward, 0.0);
    // Calling tools forever stops at max_turns.
    let cfg = EpisodeConfig { max_turns: 3, ..Default::default() };
    let ep = run(vec!["<tool_call>\n{\"name\": \"glob\", \"arguments\": {\"pattern\": \"**/*.py\"}}\n</tool_call>"], cfg);
    assert_eq!((ep.stop_reason(), ep.turns.len()), (Some(StopReason::MaxTurns), 3));
    // A context too small for the tool responses stops with ContextFull.
    let prompt = rollout::episode::driver::prompt_tokens(&tok, &task(&commit), &EpisodeConfig::default(), &Default::default()).unwrap().1.len();
    let cfg = EpisodeConfig { max_total_tokens: prompt + 40, ..Default::default() };
    let ep = run(vec!["<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"webby/http.py\"}}\n</tool_call>"], cfg);
    assert_eq!(ep.stop_reason(), Some(StopReason::ContextFull));
}

/// A policy that plays another with a bound on running episodes, and
/// records the most turns it was asked for at once.
struct Bounded {
    inner: ScriptedTeacher,
    max: Option<usize>,
    most: usize,
}
impl Policy for Bounded {
    fn name(&self) -> String {
        "bounded".into()
    }
    fn next_turns(&mut self, r: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        self.most = self.most.max(r.len());
        self.inner.next_turns(r)
    }
    fn max_live(&self) -> Option<usize> {
        self.max
    }
}

#[test]
fn no_more_than_max_live_episodes_run_at_once_in_whole_groups() {
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let tasks = vec![task(&commit); 3];
    let run = |max: Option<usize>| {
        let mut p = Bounded { inner: ScriptedTeacher::varied(7), max, most: 0 };
        let mut order = Vec::new();
        let eps = run_episodes(&mut p, &env, &tasks, 2, &EpisodeConfig::default(), |e| order.push(e.sample)).unwrap();
        (eps, p.most, order)
    };
    let (all, most, _) = run(None);
    assert_eq!(most, 6, "unbounded: every episode asks at once");
    // 3 rounds down to one group of 2; 1 still runs a whole group.
    for (max, expect) in [(3, 2), (1, 2), (4, 4)] {
        let (bounded, most, order) = run(Some(max));
        assert_eq!(most, expect, "max_live {max}");
        assert_eq!(order.len(), 6, "every episode ends once");
        assert_eq!(bounded.len(), all.len());
        for (a, b) in all.iter().zip(&bounded) {
            assert_eq!((&a.task_id, a.sample), (&b.task_id, b.sample), "task order, then sample order");
            assert_eq!(a.tokens, b.tokens, "the same episode whatever runs beside it");
            assert!(b.score.is_some());
        }
    }
    assert!(all.iter().any(|e| e.tokens != all[0].tokens), "the samples differ, so the comparison above means something");
}

/// A policy that plays the scripted teacher, counting the turns asked of
/// it and the episodes it was told ended, and cancels the run (through
/// the flag the driver gives it) after some turns.
struct Counting {
    inner: ScriptedTeacher,
    turns: usize,
    /// Set after this many turns, if any.
    cancel_after: Option<usize>,
    flag: Option<Arc<AtomicBool>>,
    finished: Vec<u64>,
}
impl Policy for Counting {
    fn name(&self) -> String {
        "counting".into()
    }
    fn next_turns(&mut self, r: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        self.turns += 1;
        if self.cancel_after == Some(self.turns) {
            self.flag.as_ref().expect("the driver installs its flag").store(true, Ordering::Relaxed);
        }
        self.inner.next_turns(r)
    }
    fn finish(&mut self, episode: u64) {
        self.finished.push(episode);
    }
    fn interrupt_on(&mut self, flag: Option<Arc<AtomicBool>>) {
        self.flag = flag;
    }
}

/// A run cancelled after its first turn asks the policy for no further
/// turn, releases every unfinished episode, and says it was cancelled
/// (the MCP server stops a localization so; issue 52).
#[test]
fn a_cancelled_run_stops_at_the_next_turn_boundary() {
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let (tools, reward) = (ToolRunner::default(), RewardConfig::default());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let cancel = Arc::new(AtomicBool::new(false));
    let mut p = Counting { inner: ScriptedTeacher::default(), turns: 0, cancel_after: Some(1), flag: None, finished: Vec::new() };
    let mut ended = 0;
    let r = run_episodes_until(&mut p, &env, &[task(&commit)], 2, &EpisodeConfig::default(), &cancel, |_| ended += 1);
    assert!(matches!(r, Err(RolloutError::Cancelled { turns: 2 })), "{:?}", r.map(|e| e.len()));
    assert_eq!((p.turns, ended), (1, 0), "one turn asked, no episode ended");
    assert_eq!(p.finished, vec![0, 1], "both episodes released");
    assert!(p.flag.is_none(), "the flag is taken back");
    // Never cancelled: the same run ends as run_episodes does.
    let mut p = Counting { inner: ScriptedTeacher::default(), turns: 0, cancel_after: None, flag: None, finished: Vec::new() };
    let eps = run_episodes_until(&mut p, &env, &[task(&commit)], 2, &EpisodeConfig::default(), &Arc::new(AtomicBool::new(false)), |_| {}).unwrap();
    assert!(eps.iter().all(|e| e.stop_reason() == Some(StopReason::Answer)));
}

/// `search` on (issue 62, item 4c): declared to the model, named in the
/// system prompt; off, the prompt is the three-tool one, unchanged.
#[test]
fn the_search_tool_is_declared_only_when_on() {
    use rollout::episode::prompt::{opening_messages, SYSTEM_PROMPT};
    use rollout::tools::ToolConfig;
    let off = ToolConfig::default();
    let on = ToolConfig { search: true, ..Default::default() };
    let names = |c: &ToolConfig| tool_schemas(c).iter().map(|s| s["function"]["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(names(&off), ["grep", "glob", "read_file"]);
    assert_eq!(names(&on), ["grep", "glob", "read_file", "search"]);
    assert_eq!(opening_messages("x", &off)[0]["content"], SYSTEM_PROMPT);
    assert!(opening_messages("x", &on)[0]["content"].as_str().unwrap().contains("search, grep, glob and read_file"));
    let (_repo, commit, _tok_dir, tok) = setup();
    let cfg = EpisodeConfig::default();
    let (_, with) = rollout::episode::driver::prompt_tokens(&tok, &task(&commit), &cfg, &on).unwrap();
    let (_, without) = rollout::episode::driver::prompt_tokens(&tok, &task(&commit), &cfg, &off).unwrap();
    assert!(tok.decode(&with).unwrap().contains("\"name\": \"search\""));
    assert!(!tok.decode(&without).unwrap().contains("\"name\": \"search\""));
}

/// A policy that answers in tokens, as a model does: its first turn calls
/// `search`, its second answers the file `search` ranked first.
struct TokenSearcher<'t>(&'t ChatTokenizer);
impl Policy for TokenSearcher<'_> {
    fn name(&self) -> String {
        "token-searcher".into()
    }
    fn next_turns(&mut self, r: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        Ok(r.iter()
            .map(|r| {
                let tool = r.messages.iter().rev().find(|m| m["role"] == "tool").and_then(|m| m["content"].as_str());
                let text = match tool {
                    None => "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"send_request pool full\"}}\n</tool_call>".to_string(),
                    Some(out) => out.lines().next().and_then(|l| l.rsplit_once(' ')).map_or("", |(p, _)| p).to_string(),
                };
                let mut ids = self.0.encode(&text).unwrap();
                ids.push(self.0.special().end_of_turn);
                let n = ids.len();
                TurnOutput::Tokens { ids, logprobs: vec![-0.5; n] }
            })
            .collect())
    }
}

#[test]
fn an_episode_uses_search_through_a_token_policy_and_the_guided_teacher() {
    use rollout::teacher::guided::{Guide, GuidedTeacher};
    use rollout::tools::ToolConfig;
    let (repo, commit, _tok_dir, tok) = setup();
    let store = repo.store();
    let reward = RewardConfig::default();
    let tools = ToolRunner::new(ToolConfig { search: true, ..Default::default() });
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &reward };
    let ep = run_episodes(&mut TokenSearcher(&tok), &env, &[task(&commit)], 1, &EpisodeConfig::default(), |_| {}).unwrap().remove(0);
    assert_eq!(ep.stop_reason(), Some(StopReason::Answer), "{:#?}", ep.turns);
    let call = &ep.turns[0].calls[0];
    assert!(!call.error && call.output.starts_with("webby/http.py "), "{}", call.output);
    assert!(call.output.contains("  Adapter.send_request 10-13 "), "{}", call.output);
    assert_eq!(ep.score.unwrap().f1_file, 1.0);
    assert_eq!(ep.score.unwrap().e, 1.0, "search surfaced the gold file: the call counts as useful");

    // The guided teacher calls `search` when it is declared, reads what it
    // ranked first and answers from that.
    let mut guided = GuidedTeacher::new(ScriptedTeacher::default(), Guide::default());
    let eps = run_episodes(&mut guided, &env, &[task(&commit)], 2, &EpisodeConfig::default(), |_| {}).unwrap();
    for ep in &eps {
        assert_eq!(ep.stop_reason(), Some(StopReason::Answer), "{:#?}", ep.turns);
        assert_eq!(ep.turns[0].calls[0].name.as_deref(), Some("search"), "{:#?}", ep.turns[0]);
        assert!(ep.turns[0].calls.len() >= 2, "search and a grep in parallel");
        assert!(ep.turns[1].calls.iter().all(|c| c.name.as_deref() == Some("read_file")) && ep.turns[1].calls.len() >= 2, "{:#?}", ep.turns[1]);
        let s = ep.score.unwrap();
        assert_eq!((s.f1_file, s.f1_func), (1.0, 1.0), "answer {:?}", ep.answer);
    }
    assert_eq!(eps[0].tokens, eps[1].tokens, "deterministic");

    // With the three tools only, it asks the index privately: the same
    // answer, through grep and read_file.
    let three = ToolRunner::default();
    let env = Env { tokenizer: &tok, store: &store, tools: &three, reward: &reward };
    let ep = run_episodes(&mut guided, &env, &[task(&commit)], 1, &EpisodeConfig::default(), |_| {}).unwrap().remove(0);
    assert!(ep.turns.iter().flat_map(|t| &t.calls).all(|c| c.name.as_deref() != Some("search")));
    let reads: Vec<&str> = ep.turns[1].calls.iter().filter(|c| c.name.as_deref() == Some("read_file")).filter_map(|c| c.arguments.as_ref()?["path"].as_str()).collect();
    assert_eq!(reads.first(), Some(&"webby/http.py"), "{:#?}", ep.turns[1]);
    let s = ep.score.unwrap();
    assert_eq!((s.f1_file, s.f1_func), (1.0, 1.0), "answer {:?}", ep.answer);
}
