//! C spans with tree-sitter-c; the declarator and name helpers C++ shares.
//!
//! - Functions: function definitions, named by the identifier inside their
//!   declarator (`char *name_of(..)`, `int (*pick(int))(int)` are `name_of`
//!   and `pick`), and function-like macros `#define F(x) ..` (all their
//!   continued lines). Prototypes are no functions: their lines belong to
//!   the file.
//! - Types: `struct`, `union` and `enum` with a body, by their tag, and
//!   `typedef struct { .. } T` by the typedef name; member lines belong to
//!   the type.
//! - Includes, object-like macros, globals and prototypes belong to the
//!   file; definitions inside `#if`/`#ifdef` blocks are still found.

use tree_sitter::Node;

use super::walk::{field_text, text, Role, Rules};

/// The C rules.
pub(super) struct C;

impl Rules for C {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_c::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        match node.kind() {
            "struct_specifier" | "union_specifier" | "enum_specifier" => tagged_type(node, source, false),
            _ => shared_role(node, source),
        }
    }
}

/// The roles of C constructs that C++ has too (functions, macros, typedefs).
pub(super) fn shared_role<'t>(node: Node<'t>, source: &[u8]) -> Role<'t> {
    match node.kind() {
        "function_definition" => function_name(node, source).map_or(Role::Other, Role::Function),
        "preproc_function_def" => field_text(node, "name", source).map_or(Role::Other, |n| Role::Function(n.to_string())),
        "type_definition" => typedef_of_anonymous(node, source).map_or(Role::Other, |name| Role::Type { name, body: None }),
        _ => Role::Other,
    }
}

/// A `struct`/`union`/`enum`/`class` specifier with a body and a tag is a
/// type; `scan_body` says whether its members can hold functions (C++).
pub(super) fn tagged_type<'t>(node: Node<'t>, source: &[u8], scan_body: bool) -> Role<'t> {
    let Some(body) = node.child_by_field_name("body") else { return Role::Other };
    match node.child_by_field_name("name").and_then(|n| text(n, source)) {
        Some(name) => Role::Type { name: normalize(name), body: scan_body.then_some(body) },
        None => Role::Other,
    }
}

/// `typedef struct { .. } T;` (no tag): the type `T`. With a tag, the
/// specifier itself is the type (found by the walk).
fn typedef_of_anonymous(node: Node, source: &[u8]) -> Option<String> {
    let ty = node.child_by_field_name("type")?;
    let tagless = ty.child_by_field_name("name").is_none() && ty.child_by_field_name("body").is_some();
    if !tagless {
        return None;
    }
    field_text(node, "declarator", source).map(normalize)
}

/// The name inside a function definition's declarator, through pointers,
/// references and parentheses: `*f(..)`, `(*pick(int))(int)`, `A::B::f(..)`.
pub(super) fn function_name(definition: Node, source: &[u8]) -> Option<String> {
    let mut node = definition.child_by_field_name("declarator")?;
    let mut in_function = false;
    loop {
        match node.kind() {
            "function_declarator" => {
                in_function = true;
                node = node.child_by_field_name("declarator")?;
            }
            "pointer_declarator" | "reference_declarator" | "parenthesized_declarator" | "attributed_declarator" => {
                let mut cursor = node.walk();
                let last = node.named_children(&mut cursor).last();
                node = node.child_by_field_name("declarator").or(last)?;
            }
            "operator_cast" => return text(node, source).map(|t| normalize(t.split('(').next().unwrap_or(t))),
            _ => return if in_function { text(node, source).map(normalize) } else { None },
        }
    }
}

/// A C/C++ name in dotted form: `A<T>::B::f` -> `A.B.f`, `operator ==` ->
/// `operator==` (template arguments dropped, `::` as `.`, spaces only
/// between two word characters).
pub(super) fn normalize(name: &str) -> String {
    let (path, operator) = match name.find("operator") {
        Some(at) => name.split_at(at),
        None => (name, ""),
    };
    let mut depth = 0usize;
    let mut stripped = String::new();
    for ch in path.chars() {
        match ch {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => stripped.push(ch),
            _ => {}
        }
    }
    stripped.push_str(operator);
    let dotted = collapse_spaces(&stripped).replace("::", ".");
    dotted.trim_start_matches('.').to_string()
}

fn collapse_spaces(text: &str) -> String {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut pending_space = false;
    for ch in text.chars() {
        if ch.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && out.chars().last().is_some_and(word) && word(ch) {
            out.push(' ');
        }
        pending_space = false;
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize;
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.c");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (5, Some("SQUARE")), // a function-like macro and its continued line
            (7, None),
            (8, Some("point")), // struct members
            (12, None),
            (13, Some("size2")), // typedef struct { .. } size2;
            (17, None),
            (18, Some("color")),
            (19, None), // and a prototype
            (22, Some("helper")), // the definition, brace on its own line
            (26, None),
            (27, Some("name_of")), // returns a pointer
            (35, None),
            (36, Some("pick")), // returns a function pointer
            (39, None),
            (40, Some("main")),
            (45, None), // #ifdef: the file
            (47, Some("debug_dump")), // a definition inside it
            (50, None),
        ];
        assert_owners(Language::C, SAMPLE, &runs);
    }

    #[test]
    fn names_are_dotted() {
        let cases = [
            ("geo::Stack<T>::push", "geo.Stack.push"),
            ("::global", "global"),
            ("A::operator <<", "A.operator<<"),
            ("A::operator<", "A.operator<"),
            ("Map<K, std::pair<K, V>>::~Map", "Map.~Map"),
            ("operator unsigned  int", "operator unsigned int"),
        ];
        for (name, want) in cases {
            assert_eq!(normalize(name), want, "{name}");
        }
    }
}
