//! Judges of a tournament's pairwise comparisons.
//!
//! - [`EvidenceJudge`]: no model; prefers the attempt whose answered entities
//!   were surfaced by more distinct tool calls.
//! - [`PolicyJudge`]: any [`Policy`] (the model being evaluated, an
//!   OpenAI-compatible endpoint) prompted with the issue and both summaries,
//!   answering "A" or "B". A malformed answer is asked again; a comparison
//!   still undecided after the retries, or whose policy failed, is decided by
//!   the evidence judge and counted as a fallback with its reason.

use super::summary::{transcript, AttemptSummary};
use crate::chat::{ChatRequest, ChatTokenizer};
use crate::episode::Episode;
use crate::policy::{Policy, TurnOutput, TurnRequest};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::cmp::Ordering;
use std::time::Instant;

/// A judge conversation and its tokens.
type Prompt = (Vec<Value>, Vec<u32>);

/// Episode keys of judge requests start here, far above any rollout's.
const JUDGE_KEYS: u64 = 1 << 62;

/// The judge's instructions (system turn).
pub const JUDGE_SYSTEM_PROMPT: &str = "You compare two attempts at finding the code a repository issue is about. \
Each attempt searched the repository with tools (grep, glob, read_file) and answered the files and functions to change. \
Decide which attempt's answer is more likely right, trusting answers the tools actually showed. \
Reply with a single letter: A or B.";

/// Which side won a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Side {
    A,
    B,
}

/// One pairwise comparison of a tournament.
#[derive(Debug, Clone, Copy)]
pub struct Comparison<'a> {
    pub issue: &'a str,
    pub a: &'a AttemptSummary,
    pub b: &'a AttemptSummary,
}

/// A judge's decision and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub winner: Side,
    /// Why the fallback decided, when the judge itself did not.
    pub fallback: Option<String>,
    /// Times the question was asked again after a malformed answer.
    pub retries: usize,
    /// Tokens the judge read and wrote for this comparison (0 for evidence).
    pub tokens: usize,
    pub seconds: f64,
}

/// Decides comparisons, a batch at a time (a model judge batches them).
pub trait Judge {
    fn name(&self) -> String;
    /// One verdict per comparison, in order.
    fn compare(&mut self, batch: &[Comparison<'_>]) -> Vec<Verdict>;

    /// Summaries of `episodes` (`issues[i]` is episode i's issue) written by
    /// the judge, each with the tokens it cost (`None` where writing failed);
    /// `None` for a judge that writes none.
    fn write_summaries(&mut self, _issues: &[&str], _episodes: &[Episode], _max_tokens: usize) -> Option<Vec<(Option<String>, usize)>> {
        None
    }
}

/// The summarizer's instructions (system turn).
pub const SUMMARY_SYSTEM_PROMPT: &str = "You summarize one attempt at finding the code a repository issue is about. In a few lines, say what the attempt searched for, which files and functions the tools showed, and how well the evidence supports its answer. Do not invent files.";

/// The judge without a model.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvidenceJudge;

impl EvidenceJudge {
    /// A's standing against B: an attempt that answered beats one that did
    /// not; then more distinct calls surfacing its answer, then a higher
    /// mean support per answered entity, then fewer answered entities
    /// (precision); a full tie goes to A.
    pub fn decide(a: &AttemptSummary, b: &AttemptSummary) -> Side {
        let key = |s: &AttemptSummary| (s.answered && !s.answer.is_empty(), s.evidence_calls, s.mean_support());
        let (ka, kb) = (key(a), key(b));
        let order = ka
            .0
            .cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.partial_cmp(&kb.2).unwrap_or(Ordering::Equal))
            .then(b.answer.len().cmp(&a.answer.len()));
        if order == Ordering::Less {
            Side::B
        } else {
            Side::A
        }
    }
}

impl Judge for EvidenceJudge {
    fn name(&self) -> String {
        "evidence".into()
    }

    fn compare(&mut self, batch: &[Comparison<'_>]) -> Vec<Verdict> {
        batch
            .iter()
            .map(|c| Verdict { winner: Self::decide(c.a, c.b), fallback: None, retries: 0, tokens: 0, seconds: 0.0 })
            .collect()
    }
}

/// A judge that asks a policy.
pub struct PolicyJudge<'a> {
    policy: &'a mut dyn Policy,
    tokenizer: &'a ChatTokenizer,
    /// Times a malformed answer is asked again.
    pub retries: usize,
    /// New tokens per answer at most.
    pub max_tokens: usize,
    next_key: u64,
}

impl<'a> PolicyJudge<'a> {
    pub fn new(policy: &'a mut dyn Policy, tokenizer: &'a ChatTokenizer) -> PolicyJudge<'a> {
        PolicyJudge { policy, tokenizer, retries: 2, max_tokens: 16, next_key: JUDGE_KEYS }
    }
}

/// The judge's conversation for one comparison.
pub fn judge_messages(c: &Comparison<'_>) -> Vec<Value> {
    let user = format!(
        "Repository issue:\n\n{}\n\nAttempt A:\n{}\nAttempt B:\n{}\nWhich attempt's answer is right? Reply A or B.",
        c.issue,
        c.a.render(),
        c.b.render()
    );
    vec![json!({"role": "system", "content": JUDGE_SYSTEM_PROMPT}), json!({"role": "user", "content": user})]
}

/// Reads "A" or "B" from a judge's answer: the first word after any think
/// block, with punctuation and markdown around it ignored; "Attempt A" is
/// read as A. Anything else is malformed (None).
pub fn parse_verdict(text: &str) -> Option<Side> {
    let text = text.rsplit_once("</think>").map_or(text, |(_, after)| after);
    let cleaned: String = text.chars().map(|c| if c.is_alphanumeric() { c } else { ' ' }).collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let word = match words.first() {
        Some(w) if w.eq_ignore_ascii_case("attempt") => words.get(1)?.to_ascii_uppercase(),
        Some(w) => w.to_string(),
        None => return None,
    };
    match word.as_str() {
        "A" => Some(Side::A),
        "B" => Some(Side::B),
        _ => None,
    }
}

impl Judge for PolicyJudge<'_> {
    fn name(&self) -> String {
        format!("policy judge ({})", self.policy.name())
    }

    fn write_summaries(&mut self, issues: &[&str], episodes: &[Episode], max_tokens: usize) -> Option<Vec<(Option<String>, usize)>> {
        Some(self.write(issues, episodes, max_tokens))
    }

    fn compare(&mut self, batch: &[Comparison<'_>]) -> Vec<Verdict> {
        let t0 = Instant::now();
        let mut verdicts: Vec<Option<Verdict>> = vec![None; batch.len()];
        let mut cost = vec![(0usize, 0usize); batch.len()]; // (tokens, retries)
        let mut last: Vec<String> = vec![String::new(); batch.len()];
        let prompts: Vec<Result<Prompt, String>> = batch.iter().map(|c| self.prompt(c)).collect();
        let mut pending: Vec<usize> = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            match p {
                Ok(_) => pending.push(i),
                Err(e) => verdicts[i] = Some(fallback(&batch[i], format!("judge prompt: {e}"), 0, 0)),
            }
        }
        for round in 0..=self.retries {
            if pending.is_empty() {
                break;
            }
            let asked: Vec<&Prompt> = pending.iter().map(|&i| prompts[i].as_ref().expect("pending prompts rendered")).collect();
            let outputs = match self.ask(&asked, self.max_tokens) {
                Ok(o) if o.len() == pending.len() => o,
                Ok(o) => {
                    let why = format!("judge returned {} answers for {} questions", o.len(), pending.len());
                    for &i in &pending {
                        verdicts[i] = Some(fallback(&batch[i], why.clone(), cost[i].0, cost[i].1));
                    }
                    pending.clear();
                    break;
                }
                Err(e) => {
                    for &i in &pending {
                        verdicts[i] = Some(fallback(&batch[i], format!("judge failed: {e}"), cost[i].0, cost[i].1));
                    }
                    pending.clear();
                    break;
                }
            };
            let mut still = Vec::new();
            for (&i, out) in pending.iter().zip(outputs) {
                let (text, n) = self.text_of(out);
                let prompt_len = prompts[i].as_ref().map_or(0, |(_, t)| t.len());
                cost[i].0 += prompt_len + n;
                match parse_verdict(&text) {
                    Some(winner) => {
                        verdicts[i] = Some(Verdict { winner, fallback: None, retries: round, tokens: cost[i].0, seconds: 0.0 })
                    }
                    None => {
                        last[i] = text;
                        still.push(i);
                    }
                }
                cost[i].1 = round;
            }
            pending = still;
        }
        for &i in &pending {
            let shown: String = last[i].chars().take(40).collect();
            let why = format!("malformed answer after {} tries: {shown:?}", self.retries + 1);
            verdicts[i] = Some(fallback(&batch[i], why, cost[i].0, self.retries));
        }
        let each = t0.elapsed().as_secs_f64() / batch.len().max(1) as f64;
        verdicts
            .into_iter()
            .map(|v| {
                let mut v = v.expect("every comparison decided");
                v.seconds = each;
                v
            })
            .collect()
    }
}

impl PolicyJudge<'_> {
    /// The policy's summaries of `episodes`, one request each, in one batch.
    fn write(&mut self, issues: &[&str], episodes: &[Episode], max_tokens: usize) -> Vec<(Option<String>, usize)> {
        let prompts: Vec<Option<Prompt>> = issues
            .iter()
            .zip(episodes)
            .map(|(issue, e)| {
                let user = format!("Repository issue:\n\n{issue}\n\nThe attempt:\n{}\nSummarize it.", transcript(e));
                self.render(vec![json!({"role": "system", "content": SUMMARY_SYSTEM_PROMPT}), json!({"role": "user", "content": user})]).ok()
            })
            .collect();
        let live: Vec<usize> = (0..prompts.len()).filter(|&i| prompts[i].is_some()).collect();
        let asked: Vec<&Prompt> = live.iter().map(|&i| prompts[i].as_ref().expect("live prompts rendered")).collect();
        let outputs = self.ask(&asked, max_tokens);
        let mut out = vec![(None, 0); prompts.len()];
        if let Ok(outputs) = outputs {
            for (&i, o) in live.iter().zip(outputs) {
                let (text, n) = self.text_of(o);
                let prompt_len = prompts[i].as_ref().map_or(0, |(_, t)| t.len());
                let text = text.rsplit_once("</think>").map_or(text.as_str(), |(_, a)| a).trim().to_string();
                out[i] = ((!text.is_empty()).then_some(text), prompt_len + n);
            }
        }
        out
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn prompt(&self, c: &Comparison<'_>) -> Result<Prompt, String> {
        self.render(judge_messages(c))
    }

    /// A conversation and its tokens up to the assistant's turn (no tools, no thinking).
    fn render(&self, messages: Vec<Value>) -> Result<Prompt, String> {
        let req = ChatRequest { messages: messages.clone(), tools: None, add_generation_prompt: true, enable_thinking: Some(false) };
        let (_, ids) = self.tokenizer.render_ids(&req).map_err(|e| e.to_string())?;
        Ok((messages, ids))
    }

    /// One turn of the policy for each prompt, as one batch under fresh
    /// episode keys, released afterwards.
    fn ask(&mut self, prompts: &[&Prompt], max_tokens: usize) -> Result<Vec<TurnOutput>, crate::policy::PolicyError> {
        let keys: Vec<u64> = prompts.iter().map(|_| self.key()).collect();
        let requests: Vec<TurnRequest<'_>> = prompts
            .iter()
            .zip(&keys)
            .map(|(&(messages, tokens), &key)| TurnRequest { episode: key, tokens, messages, tools: &[], snapshot: None, max_new_tokens: max_tokens })
            .collect();
        let outputs = self.policy.next_turns(&requests);
        for key in &keys {
            self.policy.finish(*key);
        }
        outputs
    }

    /// The answer's text and its token count.
    fn text_of(&self, out: TurnOutput) -> (String, usize) {
        match out {
            TurnOutput::Text(t) => {
                let n = self.tokenizer.encode(&t).map_or(0, |ids| ids.len());
                (t, n)
            }
            TurnOutput::Tokens { ids, .. } => {
                let text = self.tokenizer.decode(&ids).unwrap_or_default();
                let text = text.split(self.tokenizer.end_of_turn_text()).next().unwrap_or("").to_string();
                (text, ids.len())
            }
        }
    }
}

/// The evidence judge's decision, counted as a fallback for `why`.
fn fallback(c: &Comparison<'_>, why: String, tokens: usize, retries: usize) -> Verdict {
    Verdict { winner: EvidenceJudge::decide(c.a, c.b), fallback: Some(why), retries, tokens, seconds: 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{write_small_tokenizer, SMALL_VOCAB_MIN};
    use crate::policy::PolicyError;
    use std::collections::BTreeMap;

    fn summary(evidence_calls: usize) -> AttemptSummary {
        AttemptSummary {
            attempt: 0,
            turns: 2,
            calls: Vec::new(),
            surfaced: BTreeMap::new(),
            answer: vec!["a.py".into()],
            support: BTreeMap::from([("a.py".to_string(), evidence_calls)]),
            evidence_calls,
            answered: true,
            written: None,
            written_tokens: 0,
        }
    }

    /// Answers each request with the next of `replies` (cycling); `Err` for "!fail".
    struct Scripted {
        replies: Vec<&'static str>,
        asked: usize,
        finished: Vec<u64>,
    }

    impl Policy for Scripted {
        fn name(&self) -> String {
            "scripted judge".into()
        }
        fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
            let mut out = Vec::new();
            for r in requests {
                assert!(r.tools.is_empty(), "a judge declares no tools");
                let asked = r.messages[1]["content"].as_str().unwrap();
                assert!(asked.contains("Attempt B:") || asked.contains("The attempt:"), "{asked}");
                let reply = self.replies[self.asked % self.replies.len()];
                self.asked += 1;
                if reply == "!fail" {
                    return Err(PolicyError { policy: "scripted judge".into(), message: "connection refused".into() });
                }
                out.push(TurnOutput::Text(reply.into()));
            }
            Ok(out)
        }
        fn finish(&mut self, episode: u64) {
            self.finished.push(episode);
        }
    }

    fn judge_with(replies: Vec<&'static str>, batch: &[Comparison<'_>]) -> (Vec<Verdict>, usize, Vec<u64>) {
        let dir = tempfile::tempdir().unwrap();
        write_small_tokenizer(dir.path(), SMALL_VOCAB_MIN).unwrap();
        let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
        let mut p = Scripted { replies, asked: 0, finished: Vec::new() };
        let verdicts = PolicyJudge::new(&mut p, &tok).compare(batch);
        (verdicts, p.asked, p.finished)
    }

    #[test]
    fn a_policy_judge_decides_retries_and_falls_back_counted() {
        let (weak, strong) = (summary(1), summary(3));
        let one = [Comparison { issue: "bug", a: &strong, b: &weak }];
        // Obeys the judge even against the evidence.
        let (v, asked, finished) = judge_with(vec!["B"], &one);
        assert_eq!((v[0].winner, v[0].fallback.clone(), v[0].retries, asked), (Side::B, None, 0, 1));
        assert!(v[0].tokens > 20, "prompt and answer tokens counted: {}", v[0].tokens);
        assert_eq!(finished.len(), 1);
        assert!(finished[0] > JUDGE_KEYS, "judge keys stay clear of episode keys");
        // Nonsense, then an answer: one retry.
        let (v, asked, _) = judge_with(vec!["maybe", "A"], &one);
        assert_eq!((v[0].winner, v[0].fallback.is_none(), v[0].retries, asked), (Side::A, true, 1, 2));
        // Nonsense every time: asked 1 + 2 retries, then the evidence decides (A has more).
        let swapped = [Comparison { issue: "bug", a: &weak, b: &strong }];
        let (v, asked, _) = judge_with(vec!["I think both"], &swapped);
        assert_eq!((v[0].winner, asked), (Side::B, 3));
        let why = v[0].fallback.clone().unwrap();
        assert!(why.contains("malformed answer after 3 tries") && why.contains("I think both"), "{why}");
        // A failing judge: every comparison of the batch falls back, named.
        let two = [one[0], swapped[0]];
        let (v, _, _) = judge_with(vec!["!fail"], &two);
        assert_eq!(v.iter().map(|x| x.winner).collect::<Vec<_>>(), vec![Side::A, Side::B]);
        assert!(v.iter().all(|x| x.fallback.as_deref().is_some_and(|w| w.contains("connection refused"))), "{v:?}");
    }

    #[test]
    fn a_policy_judge_writes_summaries_that_keep_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        write_small_tokenizer(dir.path(), SMALL_VOCAB_MIN).unwrap();
        let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
        let episode: Episode = serde_json::from_value(serde_json::json!({
            "task_id": "t", "sample": 0, "tokens": [1, 2], "loss_mask": [0, 1], "logprobs": [0.0, 0.0], "prompt_tokens": 1,
            "turns": [{"text": "<tool_call>{\"name\": \"grep\"}</tool_call>", "tokens": 5, "calls": [
                {"name": "grep", "arguments": {"pattern": "add_item"}, "output": "a.py:3:def add_item", "entities": ["a.py", "a.py:add_item"], "error": false}],
                "response_tokens": 3, "generate_seconds": 0.0, "tools_seconds": 0.0},
                {"text": "a.py:add_item", "tokens": 4, "calls": [], "response_tokens": 0, "generate_seconds": 0.0, "tools_seconds": 0.0}],
            "phase": {"done": "answer"}, "answer": ["a.py:add_item"], "score": null, "seconds": 0.0
        }))
        .unwrap();
        let mut p = Scripted { replies: vec!["It grepped add_item and read a.py."], asked: 0, finished: Vec::new() };
        let written = PolicyJudge::new(&mut p, &tok).write_summaries(&["bug in add_item"], std::slice::from_ref(&episode), 32).unwrap();
        let (text, tokens) = &written[0];
        assert_eq!(text.as_deref(), Some("It grepped add_item and read a.py."));
        assert!(*tokens > 20, "prompt (with the transcript) and answer counted: {tokens}");
        let mut s = AttemptSummary::of(&episode, 0);
        s.written = text.clone();
        let shown = s.render();
        assert!(shown.contains("It grepped add_item") && shown.contains("- a.py:add_item (shown by 1 call)"), "{shown}");
        assert!(!shown.contains("Calls:"), "the written summary replaces the calls: {shown}");
        let own = AttemptSummary::of(&episode, 0).render();
        assert!(own.contains("Calls: grep pattern=\"add_item\""), "{own}");
        assert!(transcript(&episode).contains("Tool output:\na.py:3:def add_item"));
        // The evidence judge writes none.
        assert!(EvidenceJudge.write_summaries(&["x"], std::slice::from_ref(&episode), 8).is_none());
    }

    #[test]
    fn evidence_prefers_answers_more_calls_surfaced() {
        let (weak, strong) = (summary(1), summary(3));
        assert_eq!(EvidenceJudge::decide(&weak, &strong), Side::B);
        assert_eq!(EvidenceJudge::decide(&strong, &weak), Side::A);
        assert_eq!(EvidenceJudge::decide(&weak, &weak), Side::A, "a tie goes to A");
        let mut silent = summary(5);
        silent.answered = false;
        assert_eq!(EvidenceJudge::decide(&silent, &weak), Side::B, "an answer beats none");
        let mut wide = summary(1);
        wide.answer.push("b.py".into());
        assert_eq!(EvidenceJudge::decide(&wide, &weak), Side::B, "equal evidence: fewer entities");
    }

    #[test]
    fn verdicts_are_read_strictly() {
        assert_eq!(parse_verdict("A"), Some(Side::A));
        assert_eq!(parse_verdict(" **B**."), Some(Side::B));
        assert_eq!(parse_verdict("Attempt b is better"), Some(Side::B));
        assert_eq!(parse_verdict("<think>A or B?</think>\nA"), Some(Side::A));
        assert_eq!(parse_verdict("a better answer is B"), None);
        assert_eq!(parse_verdict("Both"), None);
        assert_eq!(parse_verdict(""), None);
        assert_eq!(parse_verdict("<tool_call>{\"name\": \"grep\"}</tool_call>"), None);
    }
}
