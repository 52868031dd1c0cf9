//! The module graph of a crate read from its sources, and its cycles: the
//! check that configs, algorithms and the application depend one way.
//!
//! Each file is a module (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`),
//! walked from a crate root's `mod` declarations. Module `m` depends on
//! module `n` when `m` names `n` or an item of `n`: in a `use`, or inline as
//! `crate::..`, `super::..`, `self::..` or `child::..`. A `pub use` is a
//! re-export, no dependency: a path through it resolves to where the item
//! lives (`crate::Result` -> `error`). A module naming one of its ancestors
//! is no dependency either: a parent holds what its children share (its
//! types, its dispatch), so `a -> a::x` with `a::x` using `a`'s types is the
//! usual shape, not a cycle; siblings and other subtrees must be one way. Two graphs are checked: the files',
//! and the top-level modules' (`grpo`, `train`, ...: a file of `a` naming
//! `b` is `a -> b`). Inline `mod x { .. }` blocks (unit tests) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, `[]` for the crate root.
pub type ModPath = Vec<String>;

/// One crate's modules and what each depends on.
#[derive(Debug, Default)]
pub struct Graph {
    /// Module -> its file.
    pub files: BTreeMap<ModPath, PathBuf>,
    /// Module -> the modules it depends on (never itself or an ancestor).
    pub edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

/// What a module's source names (comments and string literals ignored).
struct Source {
    /// Declared child modules (`mod x;`), with their `#[path]` if any.
    children: Vec<(String, Option<String>)>,
    /// `pub use` re-exports: item name -> the path it names.
    reexports: Vec<(String, Vec<String>)>,
    /// Every other path: `use` trees expanded, and inline paths.
    paths: Vec<Vec<String>>,
}

/// The module graph of the crate whose root file is `root` (`src/lib.rs` or
/// `src/main.rs`).
pub fn crate_graph(root: &Path) -> Result<Graph, String> {
    let mut sources: BTreeMap<ModPath, Source> = BTreeMap::new();
    let mut graph = Graph::default();
    let mut todo = vec![(Vec::new(), root.to_path_buf())];
    while let Some((module, file)) = todo.pop() {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let src = parse(&text);
        let dir = if module.is_empty() || file.file_name().is_some_and(|n| n == "mod.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for (child, attr) in &src.children {
            let mut path = module.clone();
            path.push(child.clone());
            let candidates = match attr {
                // `#[path]` is relative to the declaring file's folder.
                Some(p) => vec![file.parent().unwrap().join(p)],
                None => vec![dir.join(format!("{child}.rs")), dir.join(child).join("mod.rs")],
            };
            let Some(f) = candidates.into_iter().find(|f| f.exists()) else { continue };
            todo.push((path, f));
        }
        graph.files.insert(module.clone(), file);
        sources.insert(module, src);
    }
    let modules: BTreeSet<ModPath> = sources.keys().cloned().collect();
    for (module, src) in &sources {
        let mut deps = BTreeSet::new();
        for path in &src.paths {
            if let Some(target) = resolve(&sources, &modules, module, path, 0) {
                // A module may use what its ancestors hold for their children.
                if !module.starts_with(&target) {
                    deps.insert(target);
                }
            }
        }
        graph.edges.insert(module.clone(), deps);
    }
    Ok(graph)
}

/// The module (deepest file) that `path`, written in `from`, names; `None`
/// for another crate's path or a local name.
fn resolve(sources: &BTreeMap<ModPath, Source>, modules: &BTreeSet<ModPath>, from: &ModPath, path: &[String], depth: usize) -> Option<ModPath> {
    let first = path.first()?;
    let (mut at, rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (from.clone(), &path[1..]),
        "super" => {
            let mut at = from.clone();
            let mut i = 0;
            while path.get(i).is_some_and(|s| s == "super") {
                at.pop();
                i += 1;
            }
            (at, &path[i..])
        }
        name if sources.get(from).is_some_and(|s| s.children.iter().any(|(c, _)| c == name)) => (from.clone(), path),
        _ => return None,
    };
    for (i, seg) in rest.iter().enumerate() {
        let mut next = at.clone();
        next.push(seg.clone());
        if modules.contains(&next) {
            at = next;
            continue;
        }
        // An item re-exported by `at`: where it lives.
        if depth < 8 {
            if let Some((_, target)) = sources[&at].reexports.iter().find(|(name, _)| name == seg) {
                let mut through = target.clone();
                through.extend(rest[i + 1..].iter().cloned());
                if let Some(t) = resolve(sources, modules, &at, &through, depth + 1) {
                    return Some(t);
                }
            }
        }
        break;
    }
    Some(at)
}

/// The graph of the top-level modules: `a -> b` when a file of `a` depends
/// on a file of `b` (the crate root's own file is `""`).
pub fn top_level(graph: &Graph) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &ModPath| m.first().cloned().unwrap_or_default();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, deps) in &graph.edges {
        let entry = out.entry(top(m)).or_default();
        entry.extend(deps.iter().map(top).filter(|d| *d != top(m)));
    }
    out
}

/// The cycles of a graph: its strongly connected components of more than
/// one node, each sorted.
pub fn cycles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Tarjan's algorithm, iterative enough for a crate's depth.
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on: BTreeSet<N>,
        next: usize,
        out: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(n: &N, edges: &BTreeMap<N, BTreeSet<N>>, s: &mut State<N>) {
        s.index.insert(n.clone(), s.next);
        s.low.insert(n.clone(), s.next);
        s.next += 1;
        s.stack.push(n.clone());
        s.on.insert(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if !s.index.contains_key(m) {
                visit(m, edges, s);
                let l = s.low[m].min(s.low[n]);
                s.low.insert(n.clone(), l);
            } else if s.on.contains(m) {
                let l = s.index[m].min(s.low[n]);
                s.low.insert(n.clone(), l);
            }
        }
        if s.low[n] == s.index[n] {
            let mut scc = Vec::new();
            loop {
                let m = s.stack.pop().unwrap();
                s.on.remove(&m);
                let done = &m == n;
                scc.push(m);
                if done {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State { index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), next: 0, out: Vec::new() };
    for n in edges.keys() {
        if !s.index.contains_key(n) {
            visit(n, edges, &mut s);
        }
    }
    s.out.sort();
    s.out
}

/// `a::b`, or `crate` for the root.
pub fn display(m: &ModPath) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

fn parse(text: &str) -> Source {
    let code = blank_comments_and_strings(text);
    let mut children = Vec::new();
    let mut reexports = Vec::new();
    let mut paths = Vec::new();
    let mut inline = String::with_capacity(code.len());
    // Statements: `mod x;`, `use ...;` and `pub use ...;` are taken out,
    // inline `mod x { .. }` blocks (tests) are left out; the rest is
    // searched for inline paths.
    let mut at = 0;
    while at < code.len() {
        let Some(pos) = find_keyword(&code[at..]).map(|k| Keyword { start: at + k.start, body: at + k.body, kind: k.kind }) else {
            inline.push_str(&code[at..]);
            break;
        };
        inline.push_str(&code[at..pos.start]);
        match pos.kind {
            Kind::Mod => {
                let end = code[pos.body..].find([';', '{']).map_or(code.len(), |e| pos.body + e);
                if code[end..].starts_with(';') {
                    let name = code[pos.body..end].trim().to_string();
                    children.push((name, path_attribute(&text[..pos.start])));
                    at = end + 1;
                } else {
                    at = matching_brace(&code, end) + 1;
                }
            }
            Kind::Use { public } => {
                let end = code[pos.body..].find(';').map_or(code.len(), |e| pos.body + e);
                for (alias, path) in expand_use(&code[pos.body..end]) {
                    let local = path.first().is_some_and(|s| s == "crate" || s == "super" || s == "self" || children.iter().any(|(c, _)| c == s));
                    if public && local {
                        reexports.push((alias, path));
                    } else if !public {
                        paths.push(path);
                    }
                }
                at = end + 1;
            }
        }
    }
    paths.extend(inline_paths(&inline));
    Source { children, reexports, paths }
}

/// `#[path = "x.rs"]` on the line(s) right before a `mod` statement.
fn path_attribute(before: &str) -> Option<String> {
    let attrs: Vec<&str> = before.lines().rev().skip(1).take_while(|l| l.trim_start().starts_with("#[")).collect();
    let first = before.lines().last().filter(|l| l.trim_start().starts_with("#["));
    first.into_iter().chain(attrs).find_map(|l| {
        let l = l.trim();
        let rest = l.strip_prefix("#[path")?.trim_start().strip_prefix('=')?.trim_start().strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    })
}

/// The index of the `}` that closes the `{` at `open`.
fn matching_brace(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Every `a::b..` path in `code` (not preceded by `::` or a word character).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut paths = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = i == 0 || !(word(bytes[i - 1]) || bytes[i - 1] == b':');
        if !(starts && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')) {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut segs = Vec::new();
        loop {
            let s = j;
            while j < bytes.len() && word(bytes[j]) {
                j += 1;
            }
            segs.push(code[s..j].to_string());
            if code[j..].starts_with("::") && code[j + 2..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            paths.push(segs);
        }
        i = j.max(i + 1);
    }
    paths
}

enum Kind {
    Mod,
    Use { public: bool },
}

struct Keyword {
    start: usize,
    body: usize,
    kind: Kind,
}

/// The next `mod x`/`use ..` statement at the start of a line (with any
/// visibility in front).
fn find_keyword(s: &str) -> Option<Keyword> {
    let mut offset = 0;
    for line in s.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let (public, after) = match trimmed.strip_prefix("pub") {
            Some(r) if r.starts_with(' ') || r.starts_with('(') => {
                let r = r.trim_start();
                let r = if r.starts_with('(') { r[r.find(')').map_or(0, |p| p + 1)..].trim_start() } else { r };
                (true, r)
            }
            _ => (false, trimmed),
        };
        let kind = if after.starts_with("mod ") {
            Some(Kind::Mod)
        } else if after.starts_with("use ") {
            Some(Kind::Use { public })
        } else {
            None
        };
        if let Some(kind) = kind {
            let body = offset + indent + (trimmed.len() - after.len()) + 4;
            return Some(Keyword { start: offset, body, kind });
        }
        offset += line.len();
    }
    None
}

/// `a::{b, c::{d, e as f}, g::*}` -> `(name, path)` per leaf (`*` and
/// `self` leaves name their module).
fn expand_use(tree: &str) -> Vec<(String, Vec<String>)> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace() || *c == ' ').collect();
    let mut out = Vec::new();
    expand(tree.trim(), &[], &mut out);
    out
}

fn expand(tree: &str, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    let tree = tree.trim().trim_start_matches("::");
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open].trim_end_matches("::").split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
        let mut p = prefix.to_vec();
        p.extend(head);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..i], &p, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &p, out);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut p = prefix.to_vec();
    p.extend(path.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()));
    if p.last().is_some_and(|s| s == "*" || s == "self") {
        p.pop();
    }
    let name = alias.unwrap_or_else(|| p.last().cloned().unwrap_or_default());
    out.push((name, p));
}

/// Comments and the contents of string and char literals as spaces (byte
/// offsets kept).
fn blank_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for x in &mut out[from..to] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            // A raw string r"..", r#".."#.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            let end = text[start..].find(&close).map_or(b.len(), |p| start + p + close.len());
            blank(&mut out, start, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j.min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal ('x', '\n'); lifetimes are left alone.
            let end = b[i + 1..].iter().skip(1).position(|&c| c == b'\'').map_or(b.len(), |p| i + 2 + p + 1);
            blank(&mut out, i + 1, end.saturating_sub(1).max(i + 1));
            i = end;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Each crate root of the workspace at `root`: `<member>/src/lib.rs` and
/// `<member>/src/main.rs`.
pub fn workspace_roots(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else { return out };
    let mut members: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.join("Cargo.toml").exists()).collect();
    members.sort();
    for m in members {
        for f in ["src/lib.rs", "src/main.rs"] {
            if m.join(f).exists() {
                out.push(m.join(f));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("module-graph-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn finds_a_cycle_through_use_inline_paths_and_reexports() {
        let d = temp("cycle");
        write(&d, &[
            ("src/lib.rs", "pub mod a;\npub mod b;\npub mod error;\npub use error::Result;\n"),
            ("src/error.rs", "pub type Result<T> = std::result::Result<T, ()>;\n"),
            ("src/a/mod.rs", "pub mod x;\npub use x::Thing;\nuse crate::Result;\npub struct Shared;\nfn d() { x::f() }\n"),
            ("src/a/x.rs", "// crate::b is named in a comment only\nuse super::Shared;\npub struct Thing;\npub fn f() { let _ = crate::b::g(); }\n"),
            ("src/b.rs", "use crate::a::{Thing as T, x};\npub fn g() {}\nconst S: &str = \"crate::error\";\n"),
        ]);
        let g = crate_graph(&d.join("src/lib.rs")).unwrap();
        let m = |s: &str| -> ModPath { s.split("::").filter(|x| !x.is_empty()).map(str::to_string).collect() };
        // `crate::Result` resolves through the root's re-export to `error`;
        // `x::f()` is `a`'s use of its child.
        assert_eq!(g.edges[&m("a")], [m("a::x"), m("error")].into_iter().collect());
        // `Thing` through `a`'s re-export is `a::x`; the string names nothing.
        assert_eq!(g.edges[&m("b")], [m("a::x")].into_iter().collect());
        // `super::Shared` is the parent's: no edge back to `a`.
        assert_eq!(g.edges[&m("a::x")], [m("b")].into_iter().collect());
        assert_eq!(cycles(&g.edges), vec![vec![m("a::x"), m("b")]]);
        assert_eq!(cycles(&top_level(&g)), vec![vec!["a".to_string(), "b".to_string()]]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_one_way_crate_has_no_cycle() {
        let d = temp("dag");
        write(&d, &[
            ("src/lib.rs", "pub mod a;\npub mod b;\n"),
            ("src/a.rs", "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::b::g;\n}\n"),
            ("src/b.rs", "use super::a;\npub fn g() { a::f(); self::h(); }\nfn h() {}\n"),
        ]);
        let g = crate_graph(&d.join("src/lib.rs")).unwrap();
        // An inline test module of `a` naming `b` is left out.
        assert!(cycles(&g.edges).is_empty(), "{:?}", g.edges);
        write(&d, &[("src/a.rs", "pub fn f() {}\nfn k() { crate::b::g() }\n")]);
        let g = crate_graph(&d.join("src/lib.rs")).unwrap();
        assert_eq!(cycles(&g.edges).len(), 1, "{:?}", g.edges);
        let _ = std::fs::remove_dir_all(&d);
    }
}
