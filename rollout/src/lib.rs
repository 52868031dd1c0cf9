//! `rollout`: everything an episode touches except the model.
//!
//! - [`chat`]: Qwen3's chat template rendered with minijinja, the tokenizer,
//!   and the token-level chat format (special tokens, tool-call blocks).
//!
//! This crate has no ML framework in it: it speaks token ids, so it can drive
//! our own model, an HTTP teacher or a scripted policy.

pub mod chat;
