//! Function spans from tree-sitter: which function, method or class body
//! each line of a source file belongs to (DESIGN.md, "Entity names").
//!
//! Rules: the innermost *named function or class* owns a line, except that
//! descent stops at the first function: a nested function (or a class
//! inside a function) takes its enclosing function's name. Class body lines
//! outside methods belong to the class. Module-level lines belong to no
//! span (the file only). Decorators belong to what they decorate.

mod python;

/// A language whose function spans we can parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    /// Python (`.py`, `.pyi`), via tree-sitter-python.
    Python,
}

impl Language {
    /// The language of a path, from its extension.
    pub fn from_path(path: &str) -> Option<Language> {
        let ext = path.rsplit_once('.').map(|(_, e)| e)?;
        match ext {
            "py" | "pyi" => Some(Language::Python),
            _ => None,
        }
    }
}

/// What kind of definition a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A function or method (descent stops here).
    Function,
    /// A class (its body lines outside methods belong to it).
    Class,
}

/// One definition's line range (1-based, inclusive) and qualified name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Dotted qualified name: `Class.method`, `func`, `Outer.Inner`.
    pub name: String,
    /// Function or class.
    pub kind: SpanKind,
    /// First line (the first decorator, if any).
    pub start_line: usize,
    /// Last line.
    pub end_line: usize,
}

/// All owning spans of one file, in source order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSpans {
    /// Spans in order of their start line; they nest but never cross.
    pub spans: Vec<Span>,
}

impl FileSpans {
    /// Parses `source` (tree-sitter recovers from syntax errors).
    pub fn parse(language: Language, source: &[u8]) -> FileSpans {
        let mut spans = match language {
            Language::Python => python::spans(source),
        };
        spans.sort_by_key(|s| (s.start_line, std::cmp::Reverse(s.end_line)));
        FileSpans { spans }
    }

    /// The qualified name that owns `line` (innermost span containing it).
    pub fn owner(&self, line: usize) -> Option<&str> {
        self.spans
            .iter()
            .filter(|s| s.start_line <= line && line <= s.end_line)
            .min_by_key(|s| s.end_line - s.start_line)
            .map(|s| s.name.as_str())
    }

    /// Every owning name of some line in `start..=end`, sorted.
    pub fn owners_in(&self, start: usize, end: usize) -> Vec<&str> {
        let last = self.spans.iter().map(|s| s.end_line).max().unwrap_or(0);
        let mut names: Vec<&str> = (start..=end.min(last)).filter_map(|l| self.owner(l)).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The qualified names of all spans (functions and classes).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.spans.iter().map(|s| s.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "\
import os
X = 1

@decorator
def top(a):
    def inner():
        return a
    return inner

class A:
    attr = 1

    def m(self):
        class Local:
            pass
        return 1

    class B:
        y = 2
        def n(self):
            pass

if X:
    def guarded():
        pass
";

    #[test]
    fn python_owners() {
        let spans = FileSpans::parse(Language::Python, SRC.as_bytes());
        let cases = [
            (1, None),
            (2, None),
            (4, Some("top")),
            (5, Some("top")),
            (7, Some("top")),
            (9, None),
            (10, Some("A")),
            (11, Some("A")),
            (12, Some("A")),
            (13, Some("A.m")),
            (15, Some("A.m")),
            (18, Some("A.B")),
            (19, Some("A.B")),
            (21, Some("A.B.n")),
            (23, None),
            (24, Some("guarded")),
            (25, Some("guarded")),
        ];
        for (line, want) in cases {
            assert_eq!(spans.owner(line), want, "line {line}");
        }
    }

    #[test]
    fn owners_in_range() {
        let spans = FileSpans::parse(Language::Python, SRC.as_bytes());
        assert_eq!(spans.owners_in(10, 13), vec!["A", "A.m"]);
        assert_eq!(spans.owners_in(13, 16), vec!["A.m"]);
        assert_eq!(spans.owners_in(1, 3), Vec::<&str>::new());
    }

    #[test]
    fn garbage_does_not_panic() {
        let spans = FileSpans::parse(Language::Python, b"def (:\n\xff\xfe class\n  def x(:");
        let _ = spans.owner(1);
    }
}
