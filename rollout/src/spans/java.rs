//! Java spans with tree-sitter-java.
//!
//! - Types: classes, interfaces, enums, records and annotation types, nested
//!   ones as `Outer.Inner`; fields, initializer blocks, enum constants and
//!   abstract or interface method declarations (no body) belong to the type.
//! - Functions: methods and constructors with a body (a constructor is
//!   `Type.Type`); lambdas, local and anonymous classes inside them take the
//!   method. An anonymous class in a field initializer is not a type: its
//!   methods are the enclosing type's (`Outer.run`).
//! - `package` and imports belong to the file.

use tree_sitter::Node;

use super::walk::{field_text, Role, Rules};

/// The Java rules.
pub(super) struct Java;

impl Rules for Java {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_java::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        let name = || field_text(node, "name", source).map(str::to_string);
        let body = node.child_by_field_name("body");
        match node.kind() {
            "class_declaration"
            | "interface_declaration"
            | "enum_declaration"
            | "record_declaration"
            | "annotation_type_declaration" => name().map_or(Role::Other, |name| Role::Type { name, body }),
            "method_declaration" | "constructor_declaration" | "compact_constructor_declaration" if body.is_some() => {
                name().map_or(Role::Other, Role::Function)
            }
            _ => Role::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/Sample.java");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (6, Some("Box")), // the @annotation, the class line, its fields
            (10, Some("Box.Box")), // the constructor
            (13, Some("Box")),
            (14, Some("Box.map")), // a generic method; its lambda and local class
            (21, Some("Box")),
            (22, Some("Box.Entry")), // a nested static class
            (24, Some("Box.Entry.key")),
            (27, Some("Box.Entry")),
            (28, Some("Box")),
            (29, Some("Box.Mode")), // a nested enum: constants, field
            (34, Some("Box.Mode.label")),
            (37, Some("Box.Mode")),
            (38, Some("Box")),
            (39, None),
            (40, Some("Shape")), // an interface and its abstract method
            (42, Some("Shape.twice")), // a default method
            (45, Some("Shape")),
        ];
        assert_owners(Language::Java, SAMPLE, &runs);
    }
}
