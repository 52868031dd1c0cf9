//! The walk every language shares: a grammar's [`Rules`] say what each node
//! is ([`Role`]); the walk turns that into [`Span`]s with qualified names.

use tree_sitter::{Node, Parser};

use super::{Span, SpanKind};

/// What a syntax node is, for spans.
pub(super) enum Role<'t> {
    /// A function or method definition with a body: a span named `name`
    /// (which may itself be dotted, as Go's `T.M` or C++'s `A.B.f`);
    /// descent stops, so everything nested in it takes its name.
    Function(String),
    /// A type (class, struct, trait, impl block, interface, enum): a span;
    /// `body`, when given, is scanned with `name.` as the prefix.
    Type {
        /// The type's (possibly dotted) name.
        name: String,
        /// The node whose children are the members.
        body: Option<Node<'t>>,
    },
    /// A naming scope without a span (C++ namespace, Rust inline `mod`, TS
    /// namespace): `body` is scanned with `name.` as the prefix; its own
    /// lines outside definitions stay at the file level.
    Scope {
        /// The scope's (possibly dotted) name.
        name: String,
        /// The node whose children are the scope's items.
        body: Node<'t>,
    },
    /// A wrapper around one definition (decorators, `template <..>`,
    /// `export`): `inner` is classified in its place and its span starts
    /// where the wrapper starts.
    Wrapper(Node<'t>),
    /// Anything else: its children are scanned with the same prefix.
    Other,
}

/// One grammar's mapping from node kinds to roles.
pub(super) trait Rules {
    /// The tree-sitter grammar.
    fn language(&self) -> tree_sitter::Language;

    /// What `node` is; `source` is the file's bytes (for names).
    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t>;

    /// Whether a node of this kind, as a sibling just before a definition,
    /// belongs to it (Rust `#[attr]`, TS decorators in a class body).
    fn attaches(&self, _kind: &str) -> bool {
        false
    }
}

/// Owning spans of `source` under `rules`, and with `nested` the
/// definitions inside functions too (their bodies walked: slower, so only
/// when asked) (iterative walk: no recursion depth limit on deeply nested
/// code; tree-sitter recovers from errors).
pub(super) fn spans(rules: &dyn Rules, source: &[u8], nested: bool) -> (Vec<Span>, Vec<Span>) {
    let mut parser = Parser::new();
    if parser.set_language(&rules.language()).is_err() {
        return (Vec::new(), Vec::new());
    }
    let Some(tree) = parser.parse(source, None) else {
        return (Vec::new(), Vec::new());
    };
    let mut walk = Walk { rules, source, out: Vec::new(), nested: Vec::new(), into_functions: nested, stack: vec![(tree.root_node(), String::new(), false)] };
    while let Some((node, prefix, inside)) = walk.stack.pop() {
        walk.scan_children(node, &prefix, inside);
    }
    (walk.out, walk.nested)
}

struct Walk<'r, 't> {
    rules: &'r dyn Rules,
    source: &'r [u8],
    out: Vec<Span>,
    /// Definitions inside a function (they own no line: their function does).
    nested: Vec<Span>,
    /// Whether function bodies are walked for `nested`.
    into_functions: bool,
    /// (node whose children are still to scan, qualified prefix such as
    /// "A.B.", whether it is inside a function)
    stack: Vec<(Node<'t>, String, bool)>,
}

impl<'t> Walk<'_, 't> {
    fn scan_children(&mut self, node: Node<'t>, prefix: &str, inside: bool) {
        let mut cursor = node.walk();
        let mut attached: Option<usize> = None;
        for child in node.named_children(&mut cursor) {
            if self.rules.attaches(child.kind()) {
                attached.get_or_insert(child.start_position().row + 1);
                continue;
            }
            self.visit(child, prefix, attached.take(), inside);
        }
    }

    /// Classifies `node`; `start` overrides its first line (a wrapper's or
    /// attached siblings' start). Inside a function, definitions go to
    /// `nested`, named through the function (`outer.inner`).
    fn visit(&mut self, node: Node<'t>, prefix: &str, start: Option<usize>, inside: bool) {
        let mut node = node;
        let mut start = start;
        loop {
            match self.rules.role(node, self.source) {
                Role::Wrapper(inner) => {
                    start.get_or_insert(node.start_position().row + 1);
                    node = inner;
                }
                Role::Function(name) => {
                    let qualified = format!("{prefix}{name}");
                    // Its body is scanned for nested definitions only, when asked.
                    if self.into_functions {
                        self.stack.push((node, format!("{qualified}."), true));
                    }
                    return self.push(node, qualified, SpanKind::Function, start, inside);
                }
                Role::Type { name, body } => {
                    let qualified = format!("{prefix}{name}");
                    if let Some(body) = body {
                        self.stack.push((body, format!("{qualified}."), inside));
                    }
                    return self.push(node, qualified, SpanKind::Type, start, inside);
                }
                Role::Scope { name, body } => return self.stack.push((body, format!("{prefix}{name}."), inside)),
                Role::Other => return self.stack.push((node, prefix.to_string(), inside)),
            }
        }
    }

    fn push(&mut self, node: Node, name: String, kind: SpanKind, start: Option<usize>, inside: bool) {
        let own = node.start_position().row + 1;
        let span = Span { name, kind, start_line: start.map_or(own, |s| s.min(own)), end_line: end_line(node) };
        if inside {
            self.nested.push(span);
        } else {
            self.out.push(span);
        }
    }
}

/// 1-based last line; a node ending at column 0 ends on the previous line.
pub(super) fn end_line(node: Node) -> usize {
    let end = node.end_position();
    let start = node.start_position();
    if end.column == 0 && end.row > start.row {
        end.row
    } else {
        end.row + 1
    }
}

/// The text of `node`'s field `field`.
pub(super) fn field_text<'s>(node: Node, field: &str, source: &'s [u8]) -> Option<&'s str> {
    node.child_by_field_name(field).and_then(|n| n.utf8_text(source).ok())
}

/// The text of `node`.
pub(super) fn text<'s>(node: Node, source: &'s [u8]) -> Option<&'s str> {
    node.utf8_text(source).ok()
}
