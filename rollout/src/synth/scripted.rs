//! The scripted issue writer (no model): an issue built from what a user
//! could have seen of the function: its docstring or doc comment, its
//! string literals (messages, keys) and the distinctive names it uses,
//! around the instruction's topic. It never writes the file's path or the
//! function's own name.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use rand::{Rng, SeedableRng};
use regex::Regex;

use super::instructions::topic;
use super::writer::{IssueRequest, IssueWriter};

/// The scripted writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScriptedIssueWriter;

impl IssueWriter for ScriptedIssueWriter {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn write(&self, request: &IssueRequest<'_>) -> Result<String, String> {
        Ok(scripted_issue(request))
    }
}

static IDENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[A-Za-z_][A-Za-z0-9_]*\b").expect("valid regex"));
static STRING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""([^"\\\n{}%]{5,70})"|'([^'\\\n{}%]{5,70})'"#).expect("valid regex"));
static DOC_COMMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*(?:///?|#|/\*\*?|\*)\s?(.*)$").expect("valid regex"));

/// Words too common in code to point anywhere.
const KEYWORDS: &[&str] = &[
    "self", "return", "None", "True", "False", "lambda", "async", "await", "yield", "import", "class", "while", "break",
    "continue", "raise", "except", "finally", "assert", "global", "nonlocal", "String", "usize", "isize", "Option",
    "Result", "Some", "Vec", "impl", "struct", "match", "const", "static", "unsafe", "where", "func", "package",
    "interface", "string", "error", "default", "switch", "select", "defer", "range", "function", "typeof", "undefined",
    "public", "private", "protected", "final", "static", "void", "boolean", "double", "float", "unsigned", "sizeof",
    "isinstance", "kwargs", "args", "len", "str", "int", "dict", "list", "tuple", "print", "super", "this", "new",
];

/// The issue text of one request (deterministic in the request's seed).
pub fn scripted_issue(request: &IssueRequest<'_>) -> String {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(request.seed);
    let own: Vec<&str> = request.function.split('.').collect();
    let doc = doc_summary(request.code);
    let literals = literals(request.code, request.path);
    let names = names(request.code, &own);
    let topic = topic(request.instruction);
    let mut parts = Vec::new();
    let openings = [
        format!("Something seems off with {topic}."),
        format!("I think there is a bug around {topic}."),
        format!("Unexpected behaviour that looks related to {topic}."),
    ];
    parts.push(openings[rng.random_range(0..openings.len())].clone());
    if let Some(doc) = doc {
        parts.push(format!("The code that is documented as \"{doc}\" does not do what it says in my case."));
    }
    match literals.as_slice() {
        [] => {}
        [one] => parts.push(format!("I see \"{one}\" involved when it goes wrong.")),
        [one, two, ..] => parts.push(format!("I see \"{one}\" and \"{two}\" involved when it goes wrong.")),
    }
    if !names.is_empty() {
        let listed: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        parts.push(format!("It seems to involve {}.", listed.join(", ")));
    }
    if parts.len() == 1 {
        parts.push("It happens every time with the default settings and I could not find a workaround.".into());
    }
    let closings = ["Expected it to just work.", "This used to work for me before.", "Could someone take a look?"];
    parts.push(closings[rng.random_range(0..closings.len())].to_string());
    parts.join(" ").replace(request.path, "the module")
}

/// The first sentence of a docstring or of the doc comment above the
/// function, if it has enough words.
fn doc_summary(code: &str) -> Option<String> {
    let lines: Vec<&str> = code.lines().collect();
    let mut text = String::new();
    if let Some(i) = lines.iter().position(|l| l.contains("\"\"\"") || l.contains("'''")) {
        let quote = if lines[i].contains("\"\"\"") { "\"\"\"" } else { "'''" };
        let after = lines[i].split_once(quote).map_or("", |(_, a)| a);
        text.push_str(after.split(quote).next().unwrap_or(""));
        for l in &lines[i + 1..] {
            if text.trim().is_empty() {
                text.push_str(l.split(quote).next().unwrap_or(""));
            }
            if l.contains(quote) || !text.trim().is_empty() {
                break;
            }
        }
    } else {
        for l in lines.iter().take_while(|l| DOC_COMMENT.is_match(l) || l.trim().starts_with("#[")) {
            if let Some(c) = DOC_COMMENT.captures(l) {
                text.push(' ');
                text.push_str(c[1].trim().trim_end_matches("*/"));
            }
        }
    }
    let sentence = text.trim().split(". ").next().unwrap_or("").trim().trim_end_matches('.').replace('"', "'");
    (sentence.split_whitespace().count() >= 3 && sentence.len() <= 120).then_some(sentence)
}

/// Up to two string literals that read like messages or keys, longest first.
fn literals(code: &str, path: &str) -> Vec<String> {
    let mut found: Vec<String> = STRING
        .captures_iter(code)
        .filter_map(|c| c.get(1).or_else(|| c.get(2)).map(|m| m.as_str().trim().to_string()))
        .filter(|s| s.chars().filter(|c| c.is_alphabetic()).count() >= 4 && !s.contains(path) && !s.contains("\"\""))
        .collect();
    found.sort_by(|a, b| b.contains(' ').cmp(&a.contains(' ')).then(b.len().cmp(&a.len())).then(a.cmp(b)));
    found.dedup();
    found.truncate(2);
    found
}

/// Up to three distinctive names the body uses (snake_case or CamelCase,
/// not the function's own name parts), most used first.
fn names(code: &str, own: &[&str]) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in IDENT.find_iter(code) {
        let w = m.as_str();
        let snake = w.contains('_') && w.trim_matches('_').contains('_');
        let camel = w.chars().next().is_some_and(char::is_uppercase) && w.chars().skip(1).any(char::is_lowercase) && w.chars().skip(1).any(char::is_uppercase);
        let lower_camel = w.chars().next().is_some_and(char::is_lowercase) && w.chars().any(char::is_uppercase);
        if w.len() < 5 || !(snake || camel || lower_camel) || KEYWORDS.contains(&w) || own.iter().any(|o| o.eq_ignore_ascii_case(w)) {
            continue;
        }
        *counts.entry(w).or_default() += 1;
    }
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.len().cmp(&a.0.len())).then(a.0.cmp(b.0)));
    v.into_iter().take(3).map(|(w, _)| w.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(path: &'a str, function: &'a str, code: &'a str) -> IssueRequest<'a> {
        IssueRequest { repo: "o/r", commit: "c", path, function, code, instruction: "Fix an issue related to caching.", seed: 7 }
    }

    #[test]
    fn python_issue_uses_doc_literals_and_names_but_not_the_function() {
        let code = "    def rebuild_auth(self, prepared_request, response):\n        \"\"\"When being redirected we may want to strip authentication from the\n        request to avoid leaking credentials.\"\"\"\n        headers = prepared_request.headers\n        if 'Authorization' in headers and self.should_strip_auth(response.request.url, url):\n            del headers['Authorization']\n        new_auth = get_netrc_auth(url) if self.trust_env else None\n";
        let text = scripted_issue(&request("requests/sessions.py", "SessionRedirectMixin.rebuild_auth", code));
        assert!(text.contains("caching"), "{text}");
        assert!(text.contains("When being redirected we may want to strip authentication from the"), "{text}");
        assert!(text.contains("\"Authorization\""), "{text}");
        assert!(text.contains("`prepared_request`"), "{text}");
        assert!(!text.contains("rebuild_auth") && !text.contains("requests/sessions.py"), "{text}");
        assert_eq!(text, scripted_issue(&request("requests/sessions.py", "SessionRedirectMixin.rebuild_auth", code)), "deterministic");
    }

    #[test]
    fn rust_doc_comments_are_read() {
        let code = "/// Pushes a value onto the stack and grows it.\n#[inline]\npub fn push(&mut self, value: T) {\n    self.items.push(value);\n    self.high_water = self.high_water.max(self.items.len());\n}\n";
        let text = scripted_issue(&request("src/stack.rs", "Stack.push", code));
        assert!(text.contains("Pushes a value onto the stack and grows it"), "{text}");
        assert!(text.contains("`high_water`"), "{text}");
    }

    #[test]
    fn a_function_with_nothing_to_say_still_gets_a_usable_issue() {
        let text = scripted_issue(&request("a.py", "f", "def f(x):\n    y = x\n    z = y\n    return z\n"));
        assert!(super::super::writer::check_issue(&text, "a.py").is_ok(), "{text}");
    }
}
