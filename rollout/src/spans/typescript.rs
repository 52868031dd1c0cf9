//! TypeScript and TSX spans with tree-sitter-typescript: the JavaScript
//! rules ([`super::javascript`]) plus
//!
//! - Types: abstract classes, `interface`s, `enum`s and `type` aliases;
//!   property and method signatures, abstract methods and overload
//!   signatures (no body) belong to the enclosing type or the file.
//! - Scopes: `namespace N { .. }` / `module N { .. }` prefix their items
//!   (`N.f`); their other lines belong to the file. `declare module "x"`
//!   is no scope.
//! - Decorators on class members (`@logged`) belong to the member.

use tree_sitter::Node;

use super::javascript;
use super::walk::{field_text, Role, Rules};

/// The TypeScript rules; `tsx` picks the grammar with JSX.
pub(super) struct TypeScript {
    /// TSX (`.tsx`) rather than plain TypeScript.
    pub(super) tsx: bool,
}

impl Rules for TypeScript {
    fn language(&self) -> tree_sitter::Language {
        if self.tsx {
            tree_sitter_typescript::LANGUAGE_TSX.into()
        } else {
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into()
        }
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        let name = || field_text(node, "name", source).map(str::to_string);
        match node.kind() {
            "abstract_class_declaration" => {
                name().map_or(Role::Other, |name| Role::Type { name, body: node.child_by_field_name("body") })
            }
            "interface_declaration" | "enum_declaration" | "type_alias_declaration" => {
                name().map_or(Role::Other, |name| Role::Type { name, body: None })
            }
            "internal_module" | "module" => match (node.child_by_field_name("name"), node.child_by_field_name("body")) {
                (Some(n), Some(body)) if n.kind() != "string" => {
                    name().map_or(Role::Other, |name| Role::Scope { name, body })
                }
                _ => Role::Other,
            },
            _ => javascript::role(node, source),
        }
    }

    fn attaches(&self, kind: &str) -> bool {
        kind == "decorator"
    }
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.ts");
    const SAMPLE_TSX: &str = include_str!("../../tests/fixtures/spans/sample.tsx");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None),
            (4, Some("Shape")), // an exported interface and its signatures
            (8, None),
            (9, Some("Pair")), // a generic type alias
            (13, None),
            (14, Some("Color")), // an enum
            (18, None),
            (19, Some("Base")), // abstract generic class: a field, an abstract method
            (24, Some("Base.describe")), // from its decorator; an arrow function inside
            (29, Some("Base")),
            (30, Some("Base.constructor")),
            (33, Some("Base")),
            (34, None), // `namespace Geometry {` and its const: the file
            (38, Some("Geometry.distance")),
            (41, None), // and overload signatures
            (45, Some("overload")), // the implementation
            (48, None),
            (49, Some("identity")), // a generic arrow function
        ];
        assert_owners(Language::TypeScript, SAMPLE, &runs);
    }

    #[test]
    fn every_tsx_line_has_its_owner() {
        let runs = [
            (1, None),
            (3, Some("Props")),
            (6, None),
            (7, Some("Header")), // a component with a callback
            (11, None),
            (12, Some("Panel")),
            (15, Some("Panel.render")), // multi-line JSX
            (22, Some("Panel")),
            (23, None),
            (24, Some("Footer")), // generic arrow component
        ];
        assert_owners(Language::Tsx, SAMPLE_TSX, &runs);
    }
}
