//! `--verify`: a second rollout that sees only the issue text (the scripted
//! localizer, or an HTTP policy, with the tools) localizes, and the recall
//! of the gold function among its answer is kept with the task. The loop
//! is text-only (messages in, text out), so it needs no tokenizer: the
//! policies it drives read messages.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::answer::parse_answer;
use crate::episode::driver::assistant_message;
use crate::episode::prompt::{opening_messages, tool_schemas};
use crate::policy::{Policy, TurnOutput, TurnRequest};
use crate::repo::Snapshot;
use crate::reward::Gold;
use crate::toolcall::parse_tool_calls;
use crate::tools::ToolRunner;

/// How long a verifying episode may run.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyConfig {
    /// Assistant turns at most (the scripted localizer answers at its third).
    pub max_turns: usize,
    /// New tokens per turn asked of an HTTP policy.
    pub max_turn_tokens: usize,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig { max_turns: 4, max_turn_tokens: 1024 }
    }
}

/// What a verifying episode found.
#[derive(Clone, Debug, PartialEq)]
pub struct Recall {
    /// Share of the gold functions among the answer's functions.
    pub functions: f64,
    /// Share of the gold files among the answer's files.
    pub files: f64,
}

/// Recall of `gold` in an answer text (gold levels that are empty count 1).
pub fn recall(answer_text: &str, gold: &Gold) -> Recall {
    let answer = parse_answer(answer_text);
    let share = |got: &std::collections::BTreeSet<String>, want: &std::collections::BTreeSet<String>| {
        if want.is_empty() {
            1.0
        } else {
            want.iter().filter(|w| got.contains(*w)).count() as f64 / want.len() as f64
        }
    };
    Recall { functions: share(&answer.functions, &gold.functions), files: share(&answer.files, &gold.files) }
}

/// A live verifying episode.
struct Live {
    messages: Vec<Value>,
    outcome: Option<Result<Recall, String>>,
}

/// One verifying episode per (issue text, gold), all on `snapshot`, turns
/// batched across episodes. An episode whose policy call fails gets that
/// error; the others go on. An episode that runs out of turns without
/// answering has recall 0.
pub fn verify(policy: &mut dyn Policy, snapshot: &Arc<Snapshot>, tools: &ToolRunner, items: &[(String, Gold)], config: &VerifyConfig) -> Vec<Result<Recall, String>> {
    let mut live: Vec<Live> = items.iter().map(|(issue, _)| Live { messages: opening_messages(issue, &tools.config), outcome: None }).collect();
    let schemas = tool_schemas(&tools.config);
    for turn in 0..config.max_turns {
        let active: Vec<usize> = (0..live.len()).filter(|&i| live[i].outcome.is_none()).collect();
        if active.is_empty() {
            break;
        }
        let outputs = next_turns(policy, &live, &active, &schemas, snapshot, config.max_turn_tokens);
        for (&i, output) in active.iter().zip(outputs) {
            let text = match output {
                Ok(TurnOutput::Text(text)) => text,
                Ok(TurnOutput::Tokens { .. }) => {
                    live[i].outcome = Some(Err("the policy returned tokens; verify needs a text policy".into()));
                    continue;
                }
                Err(message) => {
                    live[i].outcome = Some(Err(message));
                    continue;
                }
            };
            let calls = parse_tool_calls(&text);
            live[i].messages.push(assistant_message(&text, &calls));
            if calls.is_empty() {
                live[i].outcome = Some(Ok(recall(&text, &items[i].1)));
            } else if turn + 1 == config.max_turns {
                live[i].outcome = Some(Ok(Recall { functions: 0.0, files: 0.0 }));
            } else {
                for result in tools.run_turn(snapshot, &calls) {
                    live[i].messages.push(json!({"role": "tool", "content": result.output}));
                }
            }
        }
    }
    live.into_iter().map(|l| l.outcome.unwrap_or(Ok(Recall { functions: 0.0, files: 0.0 }))).collect()
}

/// The next turn of each active episode: one batch, or (when the batch
/// fails) one request at a time, so a failure stays with its episode.
fn next_turns(policy: &mut dyn Policy, live: &[Live], active: &[usize], tools: &[Value], snapshot: &Snapshot, max_new_tokens: usize) -> Vec<Result<TurnOutput, String>> {
    let request = |i: usize| TurnRequest { episode: i as u64, tokens: &[], messages: &live[i].messages, tools, snapshot: Some(snapshot), max_new_tokens };
    let requests: Vec<TurnRequest<'_>> = active.iter().map(|&i| request(i)).collect();
    match policy.next_turns(&requests) {
        Ok(outputs) if outputs.len() == requests.len() => outputs.into_iter().map(Ok).collect(),
        _ => requests
            .iter()
            .map(|r| match policy.next_turns(std::slice::from_ref(r)) {
                Ok(mut one) if one.len() == 1 => Ok(one.remove(0)),
                Ok(_) => Err(format!("policy {}: wrong number of turns", policy.name())),
                Err(e) => Err(e.to_string()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_gold_among_the_answer() {
        let gold = Gold::from_strings(["a/b.py:C.m"]);
        let r = recall("a/b.py\na/b.py:C.m\nx.py:f", &gold);
        assert_eq!((r.functions, r.files), (1.0, 1.0));
        let r = recall("a/b.py:C.other", &gold);
        assert_eq!((r.functions, r.files), (0.0, 1.0));
        let r = recall("", &gold);
        assert_eq!((r.functions, r.files), (0.0, 0.0));
    }
}
