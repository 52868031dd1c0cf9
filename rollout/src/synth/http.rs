//! An issue writer behind an OpenAI-compatible endpoint (a hosted model,
//! vLLM, `fusegrpo serve`): one chat completion per function, no tools,
//! with the HTTP teacher's retries, pacing and parallelism.

use serde_json::{json, Value};

use super::writer::{IssueRequest, IssueWriter};
use crate::policy::TurnRequest;
use crate::teacher::http::{HttpTeacher, HttpTeacherConfig, HttpTeacherError};

/// The system prompt of an issue-writing request.
pub const WRITER_PROMPT: &str = "You write GitHub issues the way a user of a project reports a problem. \
You are shown one function of the project and a vague instruction about what is wrong with it. \
Describe the symptom a user would observe, in a few sentences: what they did, what they expected, what happened. \
Do not name the file path. Do not name the function unless a user of the project would know it. \
Do not propose a fix and do not show the code. Answer with the issue text only.";

/// Writes issues with an HTTP teacher.
#[derive(Debug)]
pub struct HttpIssueWriter {
    teacher: HttpTeacher,
    concurrency: usize,
    max_tokens: usize,
}

impl HttpIssueWriter {
    /// A writer over `config` (its endpoint, model, retries, concurrency);
    /// each issue asks for at most `max_tokens` tokens.
    pub fn new(config: HttpTeacherConfig, max_tokens: usize) -> Result<Self, HttpTeacherError> {
        let concurrency = config.concurrency;
        Ok(HttpIssueWriter { teacher: HttpTeacher::new(config)?, concurrency, max_tokens })
    }
}

/// The conversation asking for one issue.
pub fn writer_messages(request: &IssueRequest<'_>) -> Vec<Value> {
    let user = format!(
        "Repository: {}\nFile: {}\nFunction: {}\nInstruction: {}\n\n```\n{}\n```\n\nWrite the issue.",
        request.repo, request.path, request.function, request.instruction, request.code
    );
    vec![json!({"role": "system", "content": WRITER_PROMPT}), json!({"role": "user", "content": user})]
}

impl IssueWriter for HttpIssueWriter {
    fn name(&self) -> String {
        format!("http:{}", self.teacher.url())
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }

    fn write(&self, request: &IssueRequest<'_>) -> Result<String, String> {
        let messages = writer_messages(request);
        let turn = TurnRequest { episode: request.seed, tokens: &[], messages: &messages, tools: &[], snapshot: None, max_new_tokens: self.max_tokens };
        self.teacher.turn(&turn).map_err(|e| e.to_string())
    }
}
