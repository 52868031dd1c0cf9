//! What writes a synthetic issue: the request a writer gets (the function's
//! code, its path, one vague instruction) and the check every issue text
//! passes before it becomes a task.

/// One function to write an issue about.
#[derive(Clone, Debug)]
pub struct IssueRequest<'a> {
    /// `owner/name`.
    pub repo: &'a str,
    /// The full commit id.
    pub commit: &'a str,
    /// The function's file (the writer sees it; the issue must not name it).
    pub path: &'a str,
    /// The dotted function name.
    pub function: &'a str,
    /// The function's lines, with the comment lines just above it.
    pub code: &'a str,
    /// The vague instruction ([`super::instructions::INSTRUCTIONS`]).
    pub instruction: &'a str,
    /// A per-task seed (phrasing choices, an HTTP request's seed).
    pub seed: u64,
}

/// Writes an issue text the way a user reports a symptom.
pub trait IssueWriter: Sync {
    /// A short name for logs and the task's `synth.writer`.
    fn name(&self) -> String;

    /// Requests to run at once (an HTTP writer's parallelism).
    fn concurrency(&self) -> usize {
        1
    }

    /// The issue text, or why there is none (the message is the cause; the
    /// caller adds the repository, commit and function).
    fn write(&self, request: &IssueRequest<'_>) -> Result<String, String>;
}

/// Shortest issue text accepted (characters, after trimming).
pub const MIN_ISSUE_CHARS: usize = 40;
/// Fewest words of letters an issue text must have.
pub const MIN_ISSUE_WORDS: usize = 6;

/// Least share of letters, spaces and punctuation in an issue text.
pub const MIN_PROSE_SHARE: f64 = 0.7;

/// The issue text to keep, or why it is unusable: empty or too short, too
/// few words, chat markup, garbled (invalid or control characters, too
/// little prose), or naming the gold file's path. A thinking
/// block is dropped first.
pub fn check_issue(text: &str, path: &str) -> Result<String, String> {
    let text = text.rsplit_once("</think>").map_or(text, |(_, after)| after).trim();
    if text.is_empty() {
        return Err("unusable issue text: empty".into());
    }
    let chars = text.chars().count();
    if chars < MIN_ISSUE_CHARS {
        return Err(format!("unusable issue text: {chars} characters (at least {MIN_ISSUE_CHARS}): {text:?}"));
    }
    let words = text.split_whitespace().filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2).count();
    if words < MIN_ISSUE_WORDS {
        return Err(format!("unusable issue text: {words} words (at least {MIN_ISSUE_WORDS}): {}", excerpt(text)));
    }
    if text.contains("<tool_call>") || text.contains("<tool_response>") || text.contains("<|") {
        return Err(format!("unusable issue text: chat markup in it: {}", excerpt(text)));
    }
    let garbled = text.chars().filter(|&c| c == '\u{fffd}' || (c.is_control() && !matches!(c, '\n' | '\r' | '\t'))).count();
    let prose = text.chars().filter(|c| c.is_alphanumeric() || c.is_whitespace() || "_.,;:!?'\"()-`/".contains(*c)).count();
    if garbled > 0 || (prose as f64) < MIN_PROSE_SHARE * chars as f64 {
        return Err(format!("unusable issue text: garbled ({garbled} invalid characters, {prose} of {chars} letters, spaces or punctuation): {}", excerpt(text)));
    }
    if text.contains(path) {
        return Err(format!("unusable issue text: it names the gold path {path}"));
    }
    Ok(text.to_string())
}

fn excerpt(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{:?}...", &s[..i]),
        None => format!("{s:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_texts_are_named() {
        assert!(check_issue("", "a.py").unwrap_err().contains("empty"));
        assert!(check_issue("  \n ", "a.py").unwrap_err().contains("empty"));
        assert!(check_issue("<think>x</think>", "a.py").unwrap_err().contains("empty"));
        assert!(check_issue("short text", "a.py").unwrap_err().contains("characters"));
        assert!(check_issue("%%%% ???? 1234 5678 //// .... ,,,, ;;;; ==== ++++ ----", "a.py").unwrap_err().contains("words"));
        let leak = "The session in requests/sessions.py drops the cookies I set on redirects.";
        assert!(check_issue(leak, "requests/sessions.py").unwrap_err().contains("gold path"));
        assert!(check_issue("the quick brown fox jumps \u{fffd}\u{1b} over the lazy dog again and again", "a.py").unwrap_err().contains("garbled"));
        assert!(check_issue("x=1;y=2;z=3;{[()]}#$%^&*==>>{}{}{}[][]<><>++**// alpha beta gamma delta epsilon zeta", "a.py").unwrap_err().contains("garbled"));
        assert!(check_issue("the quick brown fox <|repo_name|> jumps over the lazy dog", "a.py").unwrap_err().contains("markup"));
        let ok = "<think>\nhm\n</think>\n\nCookies set on a session are dropped after a redirect to another host.";
        assert_eq!(check_issue(ok, "requests/sessions.py").unwrap(), "Cookies set on a session are dropped after a redirect to another host.");
    }
}
