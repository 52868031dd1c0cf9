//! Function spans from tree-sitter: which function, method or type body
//! each line of a source file belongs to (DESIGN.md, "Entity names").
//!
//! Rules, the same in every language: the innermost *named function or
//! type* owns a line, except that descent stops at the first function: a
//! nested function (or a closure, or a type inside a function) takes its
//! enclosing function's name ([`FileSpans::parse_nested`] also lists the
//! definitions inside functions, `outer.inner`, for answers that name
//! them). Lines of a type's body outside its methods
//! belong to the type. Module-level lines belong to no span (the file
//! only). Decorators and attributes belong to what they decorate. Only
//! definitions with a body are functions: a bodiless declaration (an
//! abstract or trait method, a C prototype) is a line of its type or file.
//!
//! Names are dotted, `Type.method`, `Outer.Inner.method`, whatever the
//! language writes (`::`, receivers, out-of-class definitions):
//! - Python (`python.rs`): `class` and `def`.
//! - Rust (`rust.rs`): `impl Trait for Type` and `impl Type` methods are
//!   `Type.method`; traits, structs, enums are types; inline `mod m` is a
//!   scope (`m.f`).
//! - Go (`go.rs`): `func (r *T) M()` is `T.M` although it is written at the
//!   top level; `type T struct/interface {..}` is the type `T`.
//! - JavaScript, TypeScript, TSX (`javascript.rs`, `typescript.rs`): classes
//!   and their methods (`C.m`), `function f`, and `const f = () => ..` /
//!   `function () ..` bound to a name; TS interfaces, enums and type aliases
//!   are types, `namespace N` a scope.
//! - Java (`java.rs`): classes, interfaces, enums, records (nested:
//!   `Outer.Inner.m`); methods and constructors.
//! - C (`c.rs`): function definitions, function-like macros; `struct`,
//!   `union`, `enum` bodies (and `typedef struct {..} T`) are types.
//! - C++ (`cpp.rs`): as C, plus classes, and namespaces as a scope
//!   (`ns.A.m`); `void A::B::f() {..}` out of its class is `A.B.f`;
//!   `template <..>` lines belong to what they introduce.
//!
//! Each language module maps its grammar's node kinds to roles (function,
//! type, naming scope, wrapper such as a decorator or `template <..>`,
//! other); `walk.rs` turns roles into spans the same way for all of them.
//! A `.h` is read as C++ (see [`Language::Cpp`]). Files in other languages
//! have file entities only.

mod c;
mod cpp;
mod go;
mod java;
mod javascript;
mod python;
mod rust;
mod typescript;
mod walk;

use walk::Rules;

/// A language whose function spans we can parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    /// Python (`.py`, `.pyi`), via tree-sitter-python.
    Python,
    /// Rust (`.rs`), via tree-sitter-rust.
    Rust,
    /// Go (`.go`), via tree-sitter-go.
    Go,
    /// Java (`.java`), via tree-sitter-java.
    Java,
    /// JavaScript with JSX (`.js`, `.mjs`, `.cjs`, `.jsx`), via tree-sitter-javascript.
    JavaScript,
    /// TypeScript (`.ts`, `.mts`, `.cts`), via tree-sitter-typescript.
    TypeScript,
    /// TypeScript with JSX (`.tsx`), via tree-sitter-typescript's TSX grammar.
    Tsx,
    /// C (`.c`), via tree-sitter-c.
    C,
    /// C++ (`.cc`, `.cpp`, `.cxx`, `.c++`, `.hpp`, `.hh`, `.hxx`, `.h++`,
    /// and `.h`), via tree-sitter-cpp. A `.h` may be either language; the
    /// C++ grammar extends the C one, so it reads C headers with the same
    /// names, while the C grammar would garble a C++ header's classes,
    /// namespaces and templates.
    Cpp,
}

impl Language {
    /// The language of a path, from its extension.
    pub fn from_path(path: &str) -> Option<Language> {
        let ext = path.rsplit_once('.').map(|(_, e)| e)?;
        match ext {
            "py" | "pyi" => Some(Language::Python),
            "rs" => Some(Language::Rust),
            "go" => Some(Language::Go),
            "java" => Some(Language::Java),
            "js" | "mjs" | "cjs" | "jsx" => Some(Language::JavaScript),
            "ts" | "mts" | "cts" => Some(Language::TypeScript),
            "tsx" => Some(Language::Tsx),
            "c" => Some(Language::C),
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "h" => Some(Language::Cpp),
            _ => None,
        }
    }

    /// This language's rules for the shared walk.
    fn rules(self) -> &'static dyn Rules {
        match self {
            Language::Python => &python::Python,
            Language::Rust => &rust::Rust,
            Language::Go => &go::Go,
            Language::Java => &java::Java,
            Language::JavaScript => &javascript::JavaScript,
            Language::TypeScript => &typescript::TypeScript { tsx: false },
            Language::Tsx => &typescript::TypeScript { tsx: true },
            Language::C => &c::C,
            Language::Cpp => &cpp::Cpp,
        }
    }
}

/// What kind of definition a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A function or method (descent stops here).
    Function,
    /// A class, struct, trait, impl block, interface or enum (its body
    /// lines outside methods belong to it).
    Type,
}

/// One definition's line range (1-based, inclusive) and qualified name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Dotted qualified name: `Type.method`, `func`, `Outer.Inner`.
    pub name: String,
    /// Function or type.
    pub kind: SpanKind,
    /// First line (the first decorator or attribute, if any).
    pub start_line: usize,
    /// Last line.
    pub end_line: usize,
}

/// All owning spans of one file, in source order, and the definitions
/// nested in its functions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSpans {
    /// Spans in order of their start line; they nest but never cross.
    pub spans: Vec<Span>,
    /// Functions and types defined inside a function, in order of their
    /// start line, named through it (`outer.inner`, `A.m.helper`): they
    /// own no line (their enclosing function does, in gold and rewards),
    /// but an answer may name them ([`FileSpans::find`]). Only
    /// [`FileSpans::parse_nested`] fills it (walking every function's body
    /// made the index search of one repository 10-20% slower, so it is not
    /// done for every file).
    pub nested: Vec<Span>,
}

impl FileSpans {
    /// Parses `source` (tree-sitter recovers from syntax errors); no
    /// nested definitions.
    pub fn parse(language: Language, source: &[u8]) -> FileSpans {
        FileSpans::parse_with(language, source, false)
    }

    /// [`FileSpans::parse`] with the definitions nested in functions.
    pub fn parse_nested(language: Language, source: &[u8]) -> FileSpans {
        FileSpans::parse_with(language, source, true)
    }

    fn parse_with(language: Language, source: &[u8], nested: bool) -> FileSpans {
        let (mut spans, mut nested) = walk::spans(language.rules(), source, nested);
        for list in [&mut spans, &mut nested] {
            list.sort_by_key(|s| (s.start_line, std::cmp::Reverse(s.end_line)));
        }
        FileSpans { spans, nested }
    }

    /// The definition an answer names by `name`: a span of that qualified
    /// name; else a nested definition by its full name (`outer.inner`), or
    /// by the part of it after any enclosing functions' names (`inner`;
    /// `helper` or `m.helper` of `A.m.helper`) when exactly one nested
    /// definition is named so. `Err(n)`: none (0), or `n` nested ones that
    /// all answer to it.
    pub fn find(&self, name: &str) -> Result<&Span, usize> {
        if let Some(s) = self.spans.iter().find(|s| s.name == name) {
            return Ok(s);
        }
        if let Some(s) = self.nested.iter().find(|s| s.name == name) {
            return Ok(s);
        }
        let suffix = format!(".{name}");
        let mut matches = self.nested.iter().filter(|s| s.name.ends_with(&suffix));
        match (matches.next(), matches.count()) {
            (Some(s), 0) => Ok(s),
            (None, _) => Err(0),
            (Some(_), more) => Err(more + 1),
        }
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

    /// The qualified names of all spans (functions and types).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.spans.iter().map(|s| s.name.as_str())
    }
}

/// Asserts the owner of every line of `source`. `runs` lists (first line,
/// owner); each owner holds until the next run's first line, the last one
/// to the end of the file, so the table covers every line. All mismatches
/// are reported at once.
#[cfg(test)]
fn assert_owners(language: Language, source: &str, runs: &[(usize, Option<&str>)]) {
    let spans = FileSpans::parse(language, source.as_bytes());
    let lines = source.lines().count();
    assert_eq!(runs.first().map(|r| r.0), Some(1), "the table starts at line 1");
    let mut wrong = Vec::new();
    for (i, &(first, want)) in runs.iter().enumerate() {
        let end = runs.get(i + 1).map_or(lines, |next| next.0 - 1);
        assert!(first <= end && end <= lines, "run at line {first} is empty or past the end ({lines} lines)");
        for line in first..=end {
            let got = spans.owner(line);
            if got != want {
                wrong.push(format!("line {line}: got {got:?}, want {want:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{language:?}:\n{}\nspans: {:#?}", wrong.join("\n"), spans.spans);
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

    /// Issue 65: definitions inside a function are listed apart, named
    /// through it, and own no line (the owners above are unchanged); a
    /// nested one is found by its own name when no other shares it.
    #[test]
    fn nested_definitions_are_listed_apart() {
        assert!(FileSpans::parse(Language::Python, SRC.as_bytes()).nested.is_empty());
        let spans = FileSpans::parse_nested(Language::Python, SRC.as_bytes());
        assert_eq!(spans.spans, FileSpans::parse(Language::Python, SRC.as_bytes()).spans);
        let nested: Vec<(&str, usize, usize)> = spans.nested.iter().map(|s| (s.name.as_str(), s.start_line, s.end_line)).collect();
        assert_eq!(nested, vec![("top.inner", 6, 7), ("A.m.Local", 14, 15)]);
        assert!(!spans.names().any(|n| n.contains("inner") || n.contains("Local")));
        assert_eq!(spans.find("inner").map(|s| s.name.as_str()), Ok("top.inner"));
        assert_eq!(spans.find("m.Local").map(|s| s.name.as_str()), Ok("A.m.Local"));
        assert_eq!(spans.find("A.m").map(|s| s.name.as_str()), Ok("A.m"));
        assert_eq!(spans.find("m").map(|s| s.name.as_str()), Err(0), "a method by its bare name stays unknown");
        let rust = "fn outer() {\n    fn helper() {}\n    let c = || 1;\n    helper();\n}\nimpl S {\n    fn m(&self) {\n        fn helper() {}\n    }\n}\n";
        let spans = FileSpans::parse_nested(Language::Rust, rust.as_bytes());
        let names: Vec<&str> = spans.nested.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["outer.helper", "S.m.helper"]);
        assert_eq!(spans.find("helper").map(|s| s.name.as_str()), Err(2));
        assert_eq!(spans.owner(2), Some("outer"));
    }

    #[test]
    fn owners_in_range() {
        let spans = FileSpans::parse(Language::Python, SRC.as_bytes());
        assert_eq!(spans.owners_in(10, 13), vec!["A", "A.m"]);
        assert_eq!(spans.owners_in(13, 16), vec!["A.m"]);
        assert_eq!(spans.owners_in(1, 3), Vec::<&str>::new());
    }

    #[test]
    fn languages_from_extensions() {
        let cases = [
            ("a/b.py", Some(Language::Python)),
            ("b.pyi", Some(Language::Python)),
            ("src/lib.rs", Some(Language::Rust)),
            ("cmd/main.go", Some(Language::Go)),
            ("src/A.java", Some(Language::Java)),
            ("web/app.js", Some(Language::JavaScript)),
            ("web/app.mjs", Some(Language::JavaScript)),
            ("web/View.jsx", Some(Language::JavaScript)),
            ("web/app.ts", Some(Language::TypeScript)),
            ("web/types.d.ts", Some(Language::TypeScript)),
            ("web/View.tsx", Some(Language::Tsx)),
            ("src/main.c", Some(Language::C)),
            ("include/a.h", Some(Language::Cpp)),
            ("src/a.cc", Some(Language::Cpp)),
            ("src/a.cpp", Some(Language::Cpp)),
            ("src/a.cxx", Some(Language::Cpp)),
            ("include/a.hpp", Some(Language::Cpp)),
            ("include/a.hh", Some(Language::Cpp)),
            ("README.md", None),
            ("Makefile", None),
            ("x.pyc", None),
        ];
        for (path, want) in cases {
            assert_eq!(Language::from_path(path), want, "{path}");
            // Every parsed language counts as code for the gold filters.
            assert!(want.is_none() || crate::tasks::gold::is_code_path(path), "{path}");
        }
    }

    #[test]
    fn garbage_does_not_panic() {
        let spans = FileSpans::parse(Language::Python, b"def (:\n\xff\xfe class\n  def x(:");
        let _ = spans.owner(1);
        let garbage: &[&[u8]] = &[
            b"fn (:\n\xff\xfe impl {{ struct\n func (",
            b"class A { void m( { template <",
            b"}}}}\n#define F(x \\\n",
            b"",
        ];
        let all = [
            Language::Python,
            Language::Rust,
            Language::Go,
            Language::Java,
            Language::JavaScript,
            Language::TypeScript,
            Language::Tsx,
            Language::C,
            Language::Cpp,
        ];
        for language in all {
            for source in garbage {
                let spans = FileSpans::parse(language, source);
                let _ = spans.owners_in(1, 5);
            }
        }
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        // Types nested 2,000 deep: the walk keeps its own stack.
        let depth = 2000;
        let source = format!("{}int x;\n{}", "struct S {\n".repeat(depth), "};\n".repeat(depth));
        let spans = FileSpans::parse(Language::Cpp, source.as_bytes());
        assert_eq!(spans.spans.len(), depth);
        let owner = spans.owner(depth + 1).unwrap_or_default();
        assert_eq!(owner, vec!["S"; depth].join("."), "the field's owner");
    }
}
