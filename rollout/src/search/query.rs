//! A query from an issue's text: weighted terms (identifiers in backticks,
//! code-like names, the rest of the words), the paths it names (file paths
//! and dotted module paths), the frames of its stack traces (file and
//! function) and the test names it quotes. Resolving paths against a
//! snapshot is the index's job ([`super::Index::search`]).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::tokens::{identifier_terms, TermKind};
use super::{SearchConfig, SearchError};

/// The longest issue a query is made of (bytes).
pub const MAX_ISSUE_BYTES: usize = 1 << 20;
/// Terms kept at most (the heaviest).
pub const MAX_QUERY_TERMS: usize = 400;

/// One stack-trace frame: a file as written and the function it was in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Frame {
    pub path: String,
    pub function: String,
}

/// What an issue asks the index for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    /// Term -> weight (the largest of its occurrences), sorted by term so
    /// that every run scores in the same order.
    pub terms: BTreeMap<String, f32>,
    /// Paths the issue names: `a/b.py` as written, and `pkg.mod` as
    /// `pkg/mod` (resolved against the snapshot's files by suffix).
    pub paths: Vec<String>,
    /// Stack-trace frames, in the order written.
    pub frames: Vec<Frame>,
    /// Names of the functions the quoted tests test (`test_parse_url` -> `parse_url`).
    pub tested: Vec<String>,
}

static BACKTICK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`{1,3}([^`]{1,400})`{1,3}").expect("valid regex"));
static IDENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*").expect("valid regex"));
static FILE_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:[\w.\-]+/)*[\w\-]+\.(?:py|pyi|pyx|rs|go|java|js|jsx|mjs|ts|tsx|c|h|cc|cpp|hpp|rb|php|md|rst|txt|toml|cfg|ini|yml|yaml|json)\b")
        .expect("valid regex")
});
static PY_FRAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"File "([^"\n]{1,300})", line \d+, in ([\w<>]+)"#).expect("valid regex"));
/// pytest's short frames: `path/to/file.py:123: in function`.
static PYTEST_FRAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"([\w./\-]+\.py):\d+: in (\w+)").expect("valid regex"));
static TEST_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\btest_(\w{3,})").expect("valid regex"));

/// Words that say nothing about where code lives.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out", "has",
    "his", "how", "its", "may", "new", "now", "old", "see", "two", "who", "did", "get", "got", "let", "put", "too", "use",
    "that", "this", "with", "from", "have", "when", "should", "would", "there", "which", "where", "what", "will", "into",
    "then", "than", "they", "them", "their", "about", "because", "instead", "without", "using", "after", "before",
    "could", "does", "doesn", "like", "also", "just", "only", "some", "other", "these", "those", "here", "been", "being",
    "were", "more", "most", "such", "very", "each", "same", "while", "expected", "actual", "behavior", "behaviour",
    "issue", "problem", "bug", "error", "example", "following", "seems", "seem", "currently", "however", "something",
    "thing", "things", "way", "want", "need", "needs", "make", "makes", "made", "work", "works", "working", "case",
    "cases", "code", "line", "lines", "please", "thanks", "thank", "hello", "hi", "version", "python", "import",
    "return", "returns", "true", "false", "none", "null", "self", "def", "class", "print", "if", "else", "in", "is",
    "it", "of", "on", "or", "to", "be", "as", "at", "by", "an", "we", "do", "so", "no", "my", "me", "up", "i",
    "description", "reproduce", "steps", "result", "results", "output", "input", "correct", "correctly", "wrong",
    "incorrect", "incorrectly", "properly", "still", "even", "again", "first", "second", "call", "called", "calling",
    "value", "values", "function", "method", "file", "files", "raise", "raises", "raised", "exception", "traceback",
    "recent", "last", "most", "run", "running", "test", "tests", "fails", "fail", "failed", "failing",
];

fn is_stopword(w: &str) -> bool {
    STOPWORDS.contains(&w)
}

/// Whether a name reads as code: snake_case, camelCase/CamelCase, dotted,
/// or letters and digits mixed.
fn code_like(name: &str) -> bool {
    let has_lower = name.chars().any(|c| c.is_ascii_lowercase());
    let inner_upper = name.chars().skip(1).any(|c| c.is_ascii_uppercase());
    name.contains('_') || name.contains('.') || (inner_upper && has_lower) || (name.chars().any(|c| c.is_ascii_digit()) && has_lower)
}

impl Query {
    /// The query of `issue` under `cfg`'s weights. Refused: an issue over
    /// [`MAX_ISSUE_BYTES`], one with NUL bytes (binary), and one with
    /// nothing to search for (no word of 2 letters that is not a stopword).
    pub fn from_issue(issue: &str, cfg: &SearchConfig) -> Result<Query, SearchError> {
        if issue.len() > MAX_ISSUE_BYTES {
            return Err(SearchError::QueryTooLong { bytes: issue.len(), max: MAX_ISSUE_BYTES });
        }
        if issue.contains('\0') {
            return Err(SearchError::BinaryQuery);
        }
        let mut q = Query::default();
        let add = |q: &mut Query, name: &str, weight: f32| {
            identifier_terms(name, &mut |t, kind| {
                let w = match kind {
                    TermKind::Whole => weight,
                    TermKind::Part => weight * cfg.part_factor,
                };
                let e = q.terms.entry(t.to_string()).or_insert(0.0);
                *e = e.max(w);
            });
        };
        // Plain words first (lowest weight), so that a code name's weight wins.
        for m in IDENT.find_iter(issue) {
            for word in m.as_str().split('.') {
                let lower = word.to_lowercase();
                if word.len() < 3 || is_stopword(&lower) {
                    continue;
                }
                let w = if code_like(word) || code_like(m.as_str()) { cfg.identifier_weight } else { cfg.word_weight };
                add(&mut q, word, w);
            }
        }
        for c in BACKTICK.captures_iter(issue) {
            for m in IDENT.find_iter(&c[1]) {
                for word in m.as_str().split('.') {
                    if word.len() >= 3 && !is_stopword(&word.to_lowercase()) {
                        add(&mut q, word, cfg.code_weight);
                    }
                }
            }
        }
        for c in TEST_NAME.captures_iter(issue) {
            let name = c[1].to_string();
            add(&mut q, &name, cfg.identifier_weight);
            if !q.tested.contains(&name) {
                q.tested.push(name);
            }
        }
        for re in [&*PY_FRAME, &*PYTEST_FRAME] {
            for c in re.captures_iter(issue) {
                let frame = Frame { path: c[1].replace('\\', "/"), function: c[2].to_string() };
                if !frame.function.starts_with('<') {
                    add(&mut q, &frame.function, cfg.code_weight);
                }
                if !q.frames.contains(&frame) {
                    q.frames.push(frame);
                }
            }
        }
        for m in FILE_PATH.find_iter(issue) {
            let p = m.as_str().trim_start_matches("./").to_string();
            if !q.paths.contains(&p) {
                q.paths.push(p);
            }
        }
        // Dotted names (`pkg.module.attr`): module paths to try.
        for m in IDENT.find_iter(issue) {
            let s = m.as_str();
            if s.matches('.').count() >= 1 && !FILE_PATH.is_match(s) {
                let p = s.replace('.', "/");
                if !q.paths.contains(&p) {
                    q.paths.push(p);
                }
            }
        }
        if q.terms.is_empty() && q.paths.is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        if q.terms.len() > MAX_QUERY_TERMS {
            let mut v: Vec<(String, f32)> = std::mem::take(&mut q.terms).into_iter().collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v.truncate(MAX_QUERY_TERMS);
            q.terms = v.into_iter().collect();
        }
        q.paths.truncate(64);
        q.frames.truncate(64);
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_paths_frames_and_tests() {
        let cfg = SearchConfig::default();
        let issue = "`Session.merge_environment` drops cookies (see src/requests/sessions.py and requests.utils).\n\
            Traceback (most recent call last):\n  File \"/usr/lib/site-packages/requests/models.py\", line 12, in prepare_body\n\
            test_parse_header_links fails";
        let q = Query::from_issue(issue, &cfg).unwrap();
        assert_eq!(q.terms["mergeenvironment"], cfg.code_weight);
        assert_eq!(q.terms["merge"], cfg.code_weight * cfg.part_factor);
        assert_eq!(q.terms["cookies"], cfg.word_weight);
        assert_eq!(q.terms["preparebody"], cfg.code_weight, "a frame's function");
        assert!(!q.terms.contains_key("the") && !q.terms.contains_key("fails"));
        assert!(q.paths.contains(&"src/requests/sessions.py".to_string()), "{:?}", q.paths);
        assert!(q.paths.contains(&"requests/utils".to_string()), "{:?}", q.paths);
        assert_eq!(q.frames, [Frame { path: "/usr/lib/site-packages/requests/models.py".into(), function: "prepare_body".into() }]);
        assert_eq!(q.tested, ["parse_header_links"]);
    }

    #[test]
    fn hostile_issues_are_refused_clearly() {
        let cfg = SearchConfig::default();
        assert!(matches!(Query::from_issue("", &cfg), Err(SearchError::EmptyQuery)));
        assert!(matches!(Query::from_issue("the and of ??? !!! ...", &cfg), Err(SearchError::EmptyQuery)));
        assert!(matches!(Query::from_issue("abc\0def", &cfg), Err(SearchError::BinaryQuery)));
        let huge = "word ".repeat(MAX_ISSUE_BYTES / 4);
        let e = Query::from_issue(&huge, &cfg).unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
        // Regex syntax is only text here.
        let q = Query::from_issue(r"(a+)+$ [^\w]* .*? \ `foo(bar|baz)*`", &cfg).unwrap();
        assert!(q.terms.contains_key("foo") && q.terms.contains_key("bar"), "{:?}", q.terms);
        // Many distinct words: capped.
        let many: String = (0..5000).map(|i| format!("word{i}x ")).collect();
        assert_eq!(Query::from_issue(&many, &cfg).unwrap().terms.len(), MAX_QUERY_TERMS);
    }
}
