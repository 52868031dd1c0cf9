//! Python spans with tree-sitter-python.

use tree_sitter::{Node, Parser};

use super::{Span, SpanKind};

/// Owning spans of a Python source (iterative walk: no recursion depth limit).
pub(super) fn spans(source: &[u8]) -> Vec<Span> {
    let mut parser = Parser::new();
    if parser.set_language(&tree_sitter_python::LANGUAGE.into()).is_err() {
        return Vec::new();
    }
    let Some(tree) = parser.parse(source, None) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // (node to scan children of, qualified prefix such as "A.B.")
    let mut stack: Vec<(Node, String)> = vec![(tree.root_node(), String::new())];
    while let Some((node, prefix)) = stack.pop() {
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            visit(child, &prefix, source, &mut out, &mut stack);
        }
    }
    out
}

fn visit<'t>(
    node: Node<'t>,
    prefix: &str,
    source: &[u8],
    out: &mut Vec<Span>,
    stack: &mut Vec<(Node<'t>, String)>,
) {
    let (def, outer) = match node.kind() {
        "decorated_definition" => match node.child_by_field_name("definition") {
            Some(def) => (def, node),
            None => return stack.push((node, prefix.to_string())),
        },
        _ => (node, node),
    };
    let kind = match def.kind() {
        "function_definition" => SpanKind::Function,
        "class_definition" => SpanKind::Class,
        _ => return stack.push((node, prefix.to_string())),
    };
    let Some(name) = def.child_by_field_name("name").and_then(|n| n.utf8_text(source).ok()) else {
        return;
    };
    let qualified = format!("{prefix}{name}");
    out.push(Span {
        name: qualified.clone(),
        kind,
        start_line: outer.start_position().row + 1,
        end_line: end_line(outer),
    });
    if kind == SpanKind::Class {
        if let Some(body) = def.child_by_field_name("body") {
            stack.push((body, format!("{qualified}.")));
        }
    }
}

/// 1-based last line; a node ending at column 0 ends on the previous line.
fn end_line(node: Node) -> usize {
    let end = node.end_position();
    let start = node.start_position();
    if end.column == 0 && end.row > start.row {
        end.row
    } else {
        end.row + 1
    }
}
