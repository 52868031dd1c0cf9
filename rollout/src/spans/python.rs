//! Python spans with tree-sitter-python.
//!
//! Functions: `def` (async too). Types: `class`; its body is scanned for
//! methods and nested classes (`Outer.Inner.method`). Decorators belong to
//! what they decorate (`decorated_definition` wraps it). Module level
//! (imports, globals, `if` blocks) belongs to the file, but a `def` inside
//! a module-level `if`/`try` is still a function.

use tree_sitter::Node;

use super::walk::{field_text, Role, Rules};

/// The Python rules.
pub(super) struct Python;

impl Rules for Python {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_python::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        let name = || field_text(node, "name", source).map(str::to_string);
        match node.kind() {
            "decorated_definition" => node.child_by_field_name("definition").map_or(Role::Other, Role::Wrapper),
            "function_definition" => name().map_or(Role::Other, Role::Function),
            "class_definition" => match name() {
                Some(name) => Role::Type { name, body: node.child_by_field_name("body") },
                None => Role::Other,
            },
            _ => Role::Other,
        }
    }
}
