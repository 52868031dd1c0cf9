//! Rust spans with tree-sitter-rust.
//!
//! - Functions: `fn` items with a body (free functions, methods, trait
//!   default methods) and `macro_rules!` definitions. Closures and nested
//!   `fn`s take the enclosing function. Bodiless signatures (trait required
//!   methods, `extern` blocks) are lines of the enclosing type or the file.
//! - Types: `struct`, `enum`, `union`, `trait` (named by themselves) and
//!   `impl` blocks, named by the implementing type without generics or path:
//!   `impl<T> fmt::Display for a::Stack<T>` is `Stack`, so its methods are
//!   `Stack.fmt`. Lines of an impl or trait body outside its functions
//!   (associated types and consts) belong to the type.
//! - Scopes: an inline `mod m { .. }` prefixes its items (`m.f`, `m.T.f`);
//!   its other lines belong to the file.
//! - Outer attributes (`#[test]`, `#[derive(..)]`) belong to the item they
//!   precede; comments (doc comments included) do not.

use tree_sitter::Node;

use super::walk::{field_text, text, Role, Rules};

/// The Rust rules.
pub(super) struct Rust;

impl Rules for Rust {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_rust::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        let name = || field_text(node, "name", source).map(str::to_string);
        let body = node.child_by_field_name("body");
        match node.kind() {
            "function_item" if body.is_some() => name().map_or(Role::Other, Role::Function),
            "macro_definition" => name().map_or(Role::Other, Role::Function),
            "struct_item" | "enum_item" | "union_item" | "trait_item" => match name() {
                Some(name) => Role::Type { name, body },
                None => Role::Other,
            },
            "impl_item" => match node.child_by_field_name("type").and_then(|t| type_name(t, source)) {
                Some(name) => Role::Type { name, body },
                None => Role::Other,
            },
            "mod_item" => match (name(), body) {
                (Some(name), Some(body)) => Role::Scope { name, body },
                _ => Role::Other,
            },
            _ => Role::Other,
        }
    }

    fn attaches(&self, kind: &str) -> bool {
        kind == "attribute_item"
    }
}

/// The bare name of a type: `a::Stack<T>` -> `Stack`, `&'a T` -> `T`.
fn type_name(node: Node, source: &[u8]) -> Option<String> {
    let mut node = node;
    loop {
        match node.kind() {
            "generic_type" | "reference_type" | "pointer_type" => node = node.child_by_field_name("type")?,
            "scoped_type_identifier" => node = node.child_by_field_name("name")?,
            _ => return text(node, source).map(|t| t.split_whitespace().collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.rs");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (7, Some("Stack")), // #[derive] belongs to the struct; the doc comment does not
            (11, None),
            (12, Some("Stack")), // impl<T: Clone> Stack<T>: its const and blank lines
            (15, Some("Stack.push")), // closure and nested fn take the method
            (22, Some("Stack")),
            (23, None),
            (24, Some("Stack")), // impl fmt::Display for Stack<T>
            (25, Some("Stack.fmt")),
            (28, Some("Stack")),
            (29, None),
            (30, Some("Shape")), // the trait, its associated type and bodiless `fn area`
            (33, Some("Shape.double")),
            (36, Some("Shape")),
            (37, None),
            (38, Some("Kind")),
            (42, None),
            (43, Some("generic")),
            (46, None),
            (47, Some("square")), // macro_rules!
            (52, None),            // #[cfg(test)] mod tests {, use, blank: the file
            (57, Some("tests.pushes")),
            (61, None),
        ];
        assert_owners(Language::Rust, SAMPLE, &runs);
    }
}
