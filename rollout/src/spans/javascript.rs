//! JavaScript spans with tree-sitter-javascript (JSX included); the rules
//! TypeScript shares ([`role`]).
//!
//! - Functions: `function f` and `function* f` declarations; a name bound
//!   to a function, `const f = () => ..` / `let f = function () ..`; class
//!   methods (getters and setters too) as `Class.m`; class fields holding a
//!   function, `onClick = () => ..`, as `Class.onClick`. Callbacks and
//!   nested functions inside a function take its name; a function-valued
//!   argument at the top level (`describe("x", () => ..)`) is no function,
//!   but functions declared inside it are.
//! - Types: `class C` declarations and `const C = class ..`; field lines
//!   and static blocks belong to the class.
//! - Scopes: an object literal bound to a name, `const api = { get() {..} }`,
//!   names its methods `api.get`; its other lines belong to the file.
//! - `export` (and decorators before it) belongs to what it exports;
//!   imports, top-level statements and other `const`s belong to the file.

use tree_sitter::Node;

use super::walk::{field_text, Role, Rules};

/// The JavaScript rules.
pub(super) struct JavaScript;

impl Rules for JavaScript {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_javascript::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        role(node, source)
    }

    fn attaches(&self, kind: &str) -> bool {
        kind == "decorator"
    }
}

/// Node kinds of a function value.
const FUNCTION_VALUES: &[&str] = &["arrow_function", "function_expression", "function", "generator_function"];

/// The roles JavaScript and TypeScript share.
pub(super) fn role<'t>(node: Node<'t>, source: &[u8]) -> Role<'t> {
    let name = |field: &str| field_text(node, field, source).map(str::to_string);
    match node.kind() {
        "function_declaration" | "generator_function_declaration" | "method_definition" => {
            name("name").map_or(Role::Other, Role::Function)
        }
        "class_declaration" => {
            name("name").map_or(Role::Other, |name| Role::Type { name, body: node.child_by_field_name("body") })
        }
        "export_statement" => node.child_by_field_name("declaration").map_or(Role::Other, Role::Wrapper),
        "variable_declarator" => bound_value(node, "name", source),
        "field_definition" => bound_value(node, "property", source),
        "public_field_definition" => bound_value(node, "name", source),
        _ => Role::Other,
    }
}

/// A name bound to a function (a function), to a class (a type) or to an
/// object literal (a scope for its methods).
fn bound_value<'t>(node: Node<'t>, name_field: &str, source: &[u8]) -> Role<'t> {
    let (Some(name), Some(value)) = (node.child_by_field_name(name_field), node.child_by_field_name("value")) else {
        return Role::Other;
    };
    let Some(name) = name.utf8_text(source).ok().map(str::to_string) else { return Role::Other };
    match value.kind() {
        kind if FUNCTION_VALUES.contains(&kind) => Role::Function(name),
        "class" => Role::Type { name, body: value.child_by_field_name("body") },
        "object" => Role::Scope { name, body: value },
        _ => Role::Other,
    }
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.js");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (6, Some("outer")), // export function, with a nested function
            (12, None),
            (13, Some("Stack")), // fields and blank lines of the class
            (17, Some("Stack.push")), // an arrow function inside
            (21, Some("Stack")),
            (22, Some("Stack.size")), // a getter
            (25, Some("Stack")),
            (26, Some("Stack.onClick")), // a field holding an arrow function
            (29, Some("Stack")),
            (30, None),
            (31, Some("arrow")), // const arrow = (x) => {..}
            (34, None),
            (35, Some("expr")), // const expr = function () {..}
            (38, None),
            (39, Some("numbers")), // function*
            (42, None),
            (43, Some("Queue")), // const Queue = class {..}
            (44, Some("Queue.take")),
            (45, Some("Queue")),
            (46, None),
            (47, Some("render")), // JSX in a .js file
            (50, None),
            (54, Some("api.get")), // a method of an object literal bound to a name
            (57, None),            // its other properties: the file
        ];
        assert_owners(Language::JavaScript, SAMPLE, &runs);
    }
}
