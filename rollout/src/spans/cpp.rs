//! C++ spans with tree-sitter-cpp (`.h` too: see [`super::Language::Cpp`]):
//! the C rules ([`super::c`]) plus
//!
//! - Types: `class`, `struct` and `union` with a body (their member
//!   functions, nested types and member lines: `Stack.push`,
//!   `Stack.Node.next`), and `enum`/`enum class`. Member declarations
//!   without a body belong to the class.
//! - Functions: definitions in or out of their class; out of it the
//!   qualified name is dotted, `bool Stack<T>::empty() const` is
//!   `Stack.empty`, `A::~A` is `A.~A`; operators keep their symbol
//!   (`Point.operator==`). Lambdas and local classes take the function.
//! - Scopes: `namespace geo { .. }` (and `namespace a::b`) prefix what is
//!   inside (`geo.Stack.push`); an anonymous namespace or `extern "C"`
//!   adds nothing. Namespace-level lines belong to the file.
//! - `template <..>` lines belong to what they introduce.

use tree_sitter::Node;

use super::c::{normalize, shared_role, tagged_type};
use super::walk::{text, Role, Rules};

/// The C++ rules.
pub(super) struct Cpp;

impl Rules for Cpp {
    fn language(&self) -> tree_sitter::Language {
        tree_sitter_cpp::LANGUAGE.into()
    }

    fn role<'t>(&self, node: Node<'t>, source: &[u8]) -> Role<'t> {
        match node.kind() {
            "class_specifier" | "struct_specifier" | "union_specifier" => tagged_type(node, source, true),
            "enum_specifier" => tagged_type(node, source, false),
            "namespace_definition" => {
                let name = node.child_by_field_name("name").and_then(|n| text(n, source));
                match (name, node.child_by_field_name("body")) {
                    (Some(name), Some(body)) => Role::Scope { name: normalize(name), body },
                    _ => Role::Other,
                }
            }
            "template_declaration" => templated(node).map_or(Role::Other, Role::Wrapper),
            _ => shared_role(node, source),
        }
    }
}

/// What a `template <..>` introduces: its last named child other than the
/// parameter list and a requires clause.
fn templated(node: Node) -> Option<Node> {
    let mut cursor = node.walk();
    let introduced = node
        .named_children(&mut cursor)
        .filter(|n| !matches!(n.kind(), "template_parameter_list" | "requires_clause" | "comment"))
        .last();
    introduced
}

#[cfg(test)]
mod tests {
    use crate::spans::{assert_owners, Language};

    const SAMPLE: &str = include_str!("../../tests/fixtures/spans/sample.cpp");

    #[test]
    fn every_line_has_its_owner() {
        let runs = [
            (1, None), // includes, `namespace geo {`, a namespace-level constant
            (8, Some("geo.Stack")), // from `template <typename T>`: access specifiers, a using
            (13, Some("geo.Stack.push")), // a lambda inside
            (17, Some("geo.Stack")), // a member declared without a body
            (20, Some("geo.Stack.Node")), // a nested struct
            (22, Some("geo.Stack.Node.next")),
            (23, Some("geo.Stack.Node")),
            (24, Some("geo.Stack")),
            (28, None),
            (29, Some("geo.Stack.empty")), // template <..> bool Stack<T>::empty() const, out of class
            (33, None), // `namespace detail {`
            (35, Some("geo.detail.helper")),
            (36, None), // a prototype, closing braces
            (41, Some("Point")),
            (43, Some("Point.Point")), // constructor with an initializer list
            (44, Some("Point.~Point")),
            (45, Some("Point.operator==")),
            (48, Some("Point")),
            (49, None),
            (50, Some("geo.detail.twice")), // defined out of its namespace
            (51, None),
            (52, Some("main")),
        ];
        assert_owners(Language::Cpp, SAMPLE, &runs);
    }

    #[test]
    fn c_headers_read_as_cpp() {
        let header = "#ifndef P_H\n#define P_H\nstruct p {\n  int x;\n};\nint area(struct p *q);\n\
                      static inline int twice(int a) {\n  return 2 * a;\n}\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#endif\n";
        let runs = [(1, None), (3, Some("p")), (6, None), (7, Some("twice")), (10, Some("MAX")), (11, None)];
        assert_eq!(Language::from_path("include/p.h"), Some(Language::Cpp));
        assert_owners(Language::Cpp, header, &runs);
    }
}
