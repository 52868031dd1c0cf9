//! Which functions of a tree become synthetic tasks: every function span
//! (not types) of a parsed file that is not a test, not generated and not
//! trivial, drawn at random with the caller's seed.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::repo::Snapshot;
use crate::spans::SpanKind;

/// Bounds on what counts as a real function.
#[derive(Clone, Debug, PartialEq)]
pub struct PickConfig {
    /// Fewer non-blank lines (signature included) is a one-liner: skipped.
    pub min_lines: usize,
    /// More lines is skipped too (a teacher prompt of reasonable size).
    pub max_lines: usize,
}

impl Default for PickConfig {
    fn default() -> Self {
        PickConfig { min_lines: 4, max_lines: 300 }
    }
}

/// One function that can become a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Repo-relative file path.
    pub path: String,
    /// Dotted qualified name (`Class.method`).
    pub name: String,
    /// First line (1-based, inclusive).
    pub start_line: usize,
    /// Last line.
    pub end_line: usize,
}

impl Candidate {
    /// The function entity, `path:name`.
    pub fn entity(&self) -> String {
        format!("{}:{}", self.path, self.name)
    }
}

/// Every candidate function of the snapshot, in path then line order; a
/// name defined twice in one file (`@overload` stubs, a redefinition) is
/// one candidate, its first definition: a task's id and gold are its
/// entity `path:name`, so two would be two tasks with one id.
pub fn candidates(snapshot: &Snapshot, config: &PickConfig) -> Vec<Candidate> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for file in snapshot.files() {
        let (Some(text), Some(spans)) = (file.text(), file.spans()) else { continue };
        if is_test_path(&file.path) || is_generated(&file.path, text) {
            continue;
        }
        let lines: Vec<&str> = std::str::from_utf8(text).map_or_else(|_| Vec::new(), |t| t.lines().collect());
        for span in spans.spans.iter().filter(|s| s.kind == SpanKind::Function) {
            let body = lines.get(span.start_line.saturating_sub(1)..span.end_line.min(lines.len())).unwrap_or(&[]);
            if is_test_function(&span.name, body) || !is_substantial(body, config) || !seen.insert((file.path.as_str(), span.name.as_str())) {
                continue;
            }
            out.push(Candidate { path: file.path.clone(), name: span.name.clone(), start_line: span.start_line, end_line: span.end_line });
        }
    }
    out
}

/// `count` candidates drawn without replacement (all of them, shuffled, when
/// there are fewer); the same seed gives the same draw.
pub fn draw(candidates: &[Candidate], count: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<Candidate> {
    let mut picked: Vec<Candidate> = candidates.to_vec();
    picked.shuffle(rng);
    picked.truncate(count);
    picked
}

/// The RNG of a synthesis run.
pub fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Test files by the usual conventions of each language.
pub fn is_test_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let dirs = &lower[..lower.len() - name.len()];
    let stem = name.split('.').next().unwrap_or(name);
    dirs.split('/').any(|d| matches!(d, "test" | "tests" | "testing" | "__tests__" | "spec" | "testdata"))
        || stem.starts_with("test_")
        || stem.ends_with("_test")
        || stem.ends_with("_tests")
        || stem == "conftest"
        || name.contains(".test.")
        || name.contains(".spec.")
        || (name.ends_with(".java") && (stem.ends_with("test") || stem.ends_with("tests")))
}

/// Generated files: by name, by vendored folder, or by the marker a
/// generator writes in the first lines.
pub fn is_generated(path: &str, text: &[u8]) -> bool {
    let lower = path.to_ascii_lowercase();
    let by_name = ["_pb2.py", "_pb2_grpc.py", ".pb.go", ".pb.cc", ".pb.h", ".min.js", "_generated.", ".generated."]
        .iter()
        .any(|s| lower.contains(s));
    let vendored = lower.split('/').any(|d| matches!(d, "vendor" | "node_modules" | "third_party" | "generated" | "gen"));
    let head = String::from_utf8_lossy(&text[..text.len().min(2000)]).to_ascii_lowercase();
    by_name || vendored || head.contains("code generated") || head.contains("@generated") || head.contains("do not edit")
}

/// Test functions: `test_*` / `Test*` names, Rust's `#[test]`, a `tests` module.
fn is_test_function(name: &str, body: &[&str]) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    let last = parts.last().copied().unwrap_or(name);
    let attr = body.iter().take(4).any(|l| {
        let t = l.trim();
        t.starts_with("#[test]") || t.starts_with("#[tokio::test") || t.starts_with("@Test") || t.starts_with("@pytest")
    });
    attr || last.starts_with("test_")
        || go_style(last, "Test")
        || go_style(last, "Benchmark")
        || parts.iter().any(|p| matches!(*p, "tests" | "test"))
}

/// `TestParse`, `Test_parse` (Go's convention), not `Tester`.
fn go_style(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).and_then(|r| r.chars().next()).is_some_and(|c| c.is_uppercase() || c == '_')
}

/// Enough real lines: non-blank ones at least `min_lines`, all at most `max_lines`.
fn is_substantial(body: &[&str], config: &PickConfig) -> bool {
    let real = body.iter().filter(|l| {
        let t = l.trim();
        !t.is_empty() && !matches!(t, "}" | "};" | "{" | ")" | "end")
    });
    real.count() >= config.min_lines && body.len() <= config.max_lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_and_generated_paths() {
        for p in ["tests/test_api.py", "pkg/api_test.go", "src/a.test.ts", "web/__tests__/x.js", "src/test/java/ATest.java", "conftest.py"] {
            assert!(is_test_path(p), "{p}");
        }
        for p in ["requests/models.py", "src/lib.rs", "cmd/main.go", "src/contest.py", "latest/x.py"] {
            assert!(!is_test_path(p), "{p}");
        }
        assert!(is_generated("api/x_pb2.py", b""));
        assert!(is_generated("a/b.go", b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage b\n"));
        assert!(is_generated("vendor/lib/a.go", b"package a"));
        assert!(!is_generated("src/a.rs", b"fn main() {}\n"));
    }

    #[test]
    fn trivial_and_test_functions() {
        let c = PickConfig::default();
        assert!(!is_substantial(&["def f():", "    return 1"], &c));
        assert!(!is_substantial(&["fn f() {", "    1", "}"], &c));
        assert!(is_substantial(&["def f(x):", "    y = x", "    z = y", "    return z"], &c));
        assert!(is_test_function("test_parse", &[]));
        assert!(is_test_function("TestParse", &[]));
        assert!(is_test_function("tests.parses", &[]));
        assert!(is_test_function("parses", &["#[test]", "fn parses() {"]));
        assert!(!is_test_function("Tester.run", &[]));
        assert!(!is_test_function("Session.request", &["def request(self):"]));
    }
}
