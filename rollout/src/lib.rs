//! `rollout`: everything an episode touches except the model.
//!
//! - [`chat`]: Qwen3's chat template rendered with minijinja, the tokenizer,
//!   and the token-level chat format (special tokens, tool-call blocks).
//! - [`repo`]: [`repo::SnapshotStore::open`]`(repos_dir).get(repo, commit)` ->
//!   `Arc<`[`repo::Snapshot`]`>`, a commit's tree read from git objects once.
//! - [`tools`]: [`tools::ToolRunner::run`]`(&Snapshot, &ToolCall)` ->
//!   [`tools::ToolResult`] `{ output, entities, error }` for grep/glob/read_file;
//!   `run_turn` runs one turn's calls in parallel, results in call order.
//! - [`toolcall`]: [`toolcall::parse_tool_calls`]`(text)` ->
//!   `Vec<Result<ToolCall, ToolCallError>>` from `<tool_call>` blocks.
//! - [`entities`]: [`entities::Entity`] (`a/b.py`, `a/b.py:Class.method`).
//! - [`spans`]: [`spans::FileSpans`], tree-sitter function spans (Python, Rust, Go,
//!   JavaScript, TypeScript/TSX, Java, C, C++).
//! - [`search`]: [`search::IndexCache::get`]`(&Snapshot)` -> an index of the
//!   snapshot's files and entities (BM25F); [`ranking::search_snapshot`]`(cache,
//!   snapshot, issue, cfg)` -> hits and a grounded [`ranking::Ranking`].
//! - [`efficiency`]: [`efficiency::efficiency`]`(&[EntitySet])` -> e.
//! - [`answer`]: [`answer::parse_answer`]`(text)` -> [`answer::Answer`], set F1.
//! - [`reward`]: [`reward::score`]`(&Answer, &Gold, &RewardConfig, e)` ->
//!   [`reward::Score`] (F1_file, F1_func, F1, e, R).
//! - [`tasks`]: [`tasks::Task`] JSONL rows, [`tasks::gold::derive_gold`] from a
//!   patch, [`tasks::history::tasks_from_history`], synthetic tasks
//!   ([`synth::synthesize`]: random functions, an issue written about each; above
//!   tasks, episodes and teachers, since it runs episodes to verify them).
//! - [`practice`]: [`practice::generate`]`(repos_dir, &PracticeConfig)`, a
//!   seeded Python repository with an issue-like history to make tasks from.
//!
//! - [`policy::Policy`]: what writes assistant turns (token ids in, token
//!   ids + log-probs or text out); [`episode`]: the episode state machine
//!   and [`episode::driver::run_episodes`], token-in token-out with a loss mask.
//!
//! - [`scaling`]: test-time scaling, [`scaling::evaluate`]: N attempts per
//!   task, then first / entity vote / Recursive Tournament Voting (with the
//!   evidence judge or any policy as judge) and Parallel-Distill-Refine, each
//!   row with its cost.
//!
//! This crate has no ML framework in it: it speaks token ids, so it can drive
//! our own model, an HTTP teacher or a scripted policy.

pub mod answer;
pub mod chat;
pub mod efficiency;
pub mod engine;
pub mod entities;
pub mod http;
pub mod grounding;
pub mod localization;
pub mod episode;
pub mod policy;
pub mod practice;
pub mod ranking;
pub mod repo;
pub mod reward;
pub mod scaling;
pub mod search;
pub mod spans;
pub mod synth;
pub mod tasks;
/// Test helpers (a stub HTTP server, a recording policy) for the tests of
/// this and the other crates: only with the `testutil` feature, which their
/// dev-dependencies turn on.
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
pub mod teacher;
pub mod toolcall;
pub mod tools;
