//! Go spans with tree-sitter-go.
//!
//! - Functions: `func f()`; methods `func (r *T) M()` and `func (s
//!   Stack[T]) M()` are `T.M` / `Stack.M` although Go writes them at the top
//!   level; `var f = func() {..}` with one name is the function `f`. Function
//!   literals and everything else inside a function take its name.
//! - Types: each `type T ...` spec (struct, interface, alias, inside a
//!   `type (..)` group too) is the type `T`; struct fields and interface
//!   method specs belong to it.
//! - Module level (`package`, imports, consts, vars, a group's `type (`
//!   line) belongs to the file.

use tree_sitter::Node;

use super::walk::{field_text, text, Role, Rules};

/// The Go rules.
pub(super) struct Go;

impl Rules for Go {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_go::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        let name = || field_text(node, "name", source).map(str::to_string);
        match node.kind() {
            "function_declaration" => name().map_or(Role::Other, Role::Function),
            "method_declaration" => match (receiver_type(node, source), name()) {
                (Some(receiver), Some(name)) => Role::Function(format!("{receiver}.{name}")),
                (None, Some(name)) => Role::Function(name),
                _ => Role::Other,
            },
            "type_spec" | "type_alias" => name().map_or(Role::Other, |name| Role::Type { name, body: None }),
            "var_spec" if is_func_literal(node) => name().map_or(Role::Other, Role::Function),
            _ => Role::Other,
        }
    }
}

/// `T` of a method's receiver `(r *T)`, `(T)`, `(s *Stack[K, V])`.
fn receiver_type(method: Node, source: &[u8]) -> Option<String> {
    let receiver = method.child_by_field_name("receiver")?;
    let mut cursor = receiver.walk();
    let param = receiver.named_children(&mut cursor).find(|n| n.kind() == "parameter_declaration")?;
    let mut ty = param.child_by_field_name("type")?;
    loop {
        match ty.kind() {
            "pointer_type" | "parenthesized_type" => ty = ty.named_child(0)?,
            "generic_type" => ty = ty.child_by_field_name("type")?,
            "qualified_type" => ty = ty.child_by_field_name("name")?,
            _ => return text(ty, source).map(str::to_string),
        }
    }
}

/// Whether a `var` spec binds one name to a function literal.
fn is_func_literal(spec: Node) -> bool {
    let mut cursor = spec.walk();
    let names = spec.children_by_field_name("name", &mut cursor).count();
    let value = spec.child_by_field_name("value");
    names == 1
        && value.is_some_and(|v| v.named_child_count() == 1 && v.named_child(0).is_some_and(|f| f.kind() == "func_literal"))
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.go");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (8, Some("Stack")), // a generic struct
            (11, None),
            (12, Some("Stack.Push")), // func (s *Stack[T]) Push: the receiver's type; a func literal in it
            (19, None),
            (20, Some("Stack.Len")), // value receiver
            (23, None),
            (24, Some("Shape")), // interface: its method specs
            (28, None),          // and the `type (` line of a group
            (30, Some("Point")), // each spec of the group
            (31, Some("ID")),    // an alias
            (32, None),
            (33, Some("Map")), // a generic function
            (40, None),
            (41, Some("handler")), // var handler = func(..) {..}
            (44, None),
        ];
        assert_owners(Language::Go, SAMPLE, &runs);
    }
}
