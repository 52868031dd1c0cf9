//! Grounded answers (issue 56): whether a file or function that a policy
//! named is in the searched snapshot. A file is grounded when the snapshot
//! holds that path (at that revision, or in that work tree); a function or
//! class when its file is grounded and the file's tree-sitter spans
//! ([`crate::spans`]) hold that dotted qualified name (`Class.method`,
//! `func`, `Class`): the same names the gold is made of. A function
//! defined inside another is grounded too, named through it
//! (`outer.inner`), also when the answer names it by its own name
//! (`inner`, where only one nested definition is so named); it is reported
//! by its full name ([`resolve`]). What is not grounded is left out of
//! every ranking and listed apart.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::entities::Entity;
use crate::repo::Snapshot;
use crate::spans::{FileSpans, Language, Span};

/// Why a named entity is not in the repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ungrounded {
    /// No file at that path.
    NoFile,
    /// The file is there, but no function or class of that qualified name
    /// (or the file is in no language whose spans are parsed).
    NoFunction,
    /// Several functions nested in different functions of that file answer
    /// to that name: it needs its enclosing function's (`outer.inner`).
    Ambiguous,
}

impl fmt::Display for Ungrounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ungrounded::NoFile => "no such file",
            Ungrounded::NoFunction => "no such function or class in that file",
            Ungrounded::Ambiguous => "several nested functions of that name in that file: name it through its enclosing function, outer.inner",
        })
    }
}

/// Checks `entity` against `snapshot`: `Ok` when it is there.
pub fn check(snapshot: &Snapshot, entity: &Entity) -> Result<(), Ungrounded> {
    resolve(snapshot, entity).map(|_| ())
}

/// `entity` as it is in `snapshot`: a file as named; a function by its
/// full qualified name (a nested one named by its own name comes back
/// named through its enclosing function, `outer.inner`), with its lines.
pub fn resolve(snapshot: &Snapshot, entity: &Entity) -> Result<(Entity, Option<(usize, usize)>), Ungrounded> {
    let Some(file) = snapshot.file(entity.file_path()) else {
        return Err(Ungrounded::NoFile);
    };
    match entity {
        Entity::File(_) => Ok((entity.clone(), None)),
        Entity::Function { file: path, name } => {
            let Some(spans) = file.spans() else { return Err(Ungrounded::NoFunction) };
            let found = |span: &Span| (Entity::function(path.clone(), span.name.clone()), Some((span.start_line, span.end_line)));
            if let Some(span) = spans.spans.iter().find(|s| s.name == *name) {
                return Ok(found(span));
            }
            // A name no span has: the file parsed again, its functions'
            // bodies too, for a nested definition (rare, so not kept).
            let (Some(language), Some(text)) = (Language::from_path(path), file.text()) else { return Err(Ungrounded::NoFunction) };
            match FileSpans::parse_nested(language, text).find(name) {
                Ok(span) => Ok(found(span)),
                Err(n) if n > 1 => Err(Ungrounded::Ambiguous),
                Err(_) => Err(Ungrounded::NoFunction),
            }
        }
    }
}

/// An entity a policy named that is not in the repository, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotInRepository {
    /// `path` or `path:Qualified.name`, as named.
    pub entity: String,
    pub why: Ungrounded,
}

/// The entities of `named` (stored entity strings) split into those in
/// `snapshot`, in their order, by their full names ([`resolve`]), and
/// those not.
pub fn split(snapshot: &Snapshot, named: &[String]) -> (Vec<String>, Vec<NotInRepository>) {
    let mut grounded = Vec::new();
    let mut apart = Vec::new();
    for text in named {
        let Some(entity) = Entity::from_stored(text) else { continue };
        match resolve(snapshot, &entity) {
            Ok((found, _)) => grounded.push(found.to_string()),
            Err(why) => apart.push(NotInRepository { entity: text.clone(), why }),
        }
    }
    (grounded, apart)
}

/// Share of `named` entities that are grounded (1 when nothing was named).
pub fn rate(grounded: usize, named: usize) -> f64 {
    if named == 0 {
        1.0
    } else {
        grounded as f64 / named as f64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::repo::{FileEntry, FileKind};

    /// `a.py` (a class with a method, a function), `README.md`.
    pub(crate) fn snapshot() -> Snapshot {
        let py = "class Session:\n    def send(self):\n        return 1\n\ndef helper():\n    pass\n";
        Snapshot::new(
            "o/r".into(),
            "c".into(),
            vec![
                FileEntry::new("pkg/a.py".into(), FileKind::Text(py.as_bytes().to_vec())),
                FileEntry::new("README.md".into(), FileKind::Text(b"# r\n".to_vec())),
            ],
        )
    }

    #[test]
    fn files_functions_and_methods_by_qualified_name() {
        let s = snapshot();
        let ok = |t: &str| check(&s, &Entity::from_stored(t).unwrap());
        assert_eq!(ok("pkg/a.py"), Ok(()));
        assert_eq!(ok("README.md"), Ok(()));
        assert_eq!(ok("pkg/a.py:Session"), Ok(()));
        assert_eq!(ok("pkg/a.py:Session.send"), Ok(()));
        assert_eq!(ok("pkg/a.py:helper"), Ok(()));
        // A made-up path, a made-up function, a method by its bare name, an
        // expression, a "function" of a file with no spans.
        assert_eq!(ok("pkg/b.py"), Err(Ungrounded::NoFile));
        assert_eq!(ok("pkg/b.py:helper"), Err(Ungrounded::NoFile));
        assert_eq!(ok("pkg/a.py:bridge"), Err(Ungrounded::NoFunction));
        assert_eq!(ok("pkg/a.py:send"), Err(Ungrounded::NoFunction));
        assert_eq!(ok("pkg/a.py:lines.splitlines()"), Err(Ungrounded::NoFunction));
        assert_eq!(ok("README.md:intro"), Err(Ungrounded::NoFunction));
    }

    /// Issue 65: a function nested in another is grounded by the name a
    /// user writes (its own, or through its enclosing function) and
    /// reported through its enclosing function; in Python and in Rust.
    #[test]
    fn nested_functions_are_grounded_by_their_own_name() {
        let py = "def py_encode_basestring(s):\n    def replace(match):\n        return match.group(0)\n    return replace(s)\n\n\
                  class Enc:\n    def iterencode(self, o):\n        def _iterencode_dict(d):\n            return d\n        def _inner(x):\n            return x\n        return _iterencode_dict(o)\n\n\
                  def other():\n    def _inner(y):\n        return y\n    return _inner\n";
        let rs = "pub fn encode(s: &str) -> String {\n    fn replace(m: &str) -> String {\n        m.to_string()\n    }\n    replace(s)\n}\n";
        let s = Snapshot::new(
            "o/r".into(),
            "c".into(),
            vec![
                FileEntry::new("json/encoder.py".into(), FileKind::Text(py.as_bytes().to_vec())),
                FileEntry::new("src/enc.rs".into(), FileKind::Text(rs.as_bytes().to_vec())),
            ],
        );
        let found = |t: &str| resolve(&s, &Entity::from_stored(t).unwrap()).map(|(e, lines)| (e.to_string(), lines));
        let want = |t: &str, a: usize, b: usize| Ok((t.to_string(), Some((a, b))));
        assert_eq!(found("json/encoder.py:replace"), want("json/encoder.py:py_encode_basestring.replace", 2, 3));
        assert_eq!(found("json/encoder.py:py_encode_basestring.replace"), want("json/encoder.py:py_encode_basestring.replace", 2, 3));
        assert_eq!(found("json/encoder.py:_iterencode_dict"), want("json/encoder.py:Enc.iterencode._iterencode_dict", 8, 9));
        assert_eq!(found("json/encoder.py:iterencode._iterencode_dict"), want("json/encoder.py:Enc.iterencode._iterencode_dict", 8, 9));
        assert_eq!(found("json/encoder.py:py_encode_basestring"), want("json/encoder.py:py_encode_basestring", 1, 4));
        // Two nested `_inner`: the bare name is ambiguous, the full ones are not.
        assert_eq!(found("json/encoder.py:_inner"), Err(Ungrounded::Ambiguous));
        assert_eq!(found("json/encoder.py:other._inner"), want("json/encoder.py:other._inner", 15, 16));
        assert_eq!(found("json/encoder.py:nowhere"), Err(Ungrounded::NoFunction));
        // Rust: a function item inside a function.
        assert_eq!(found("src/enc.rs:replace"), want("src/enc.rs:encode.replace", 2, 4));
        assert_eq!(found("src/enc.rs:encode"), want("src/enc.rs:encode", 1, 6));
        // The split reports the full name.
        let (grounded, apart) = split(&s, &["json/encoder.py:replace".to_string(), "json/encoder.py:_inner".to_string()]);
        assert_eq!(grounded, vec!["json/encoder.py:py_encode_basestring.replace"]);
        assert_eq!(apart, vec![NotInRepository { entity: "json/encoder.py:_inner".into(), why: Ungrounded::Ambiguous }]);
    }

    #[test]
    fn split_keeps_order_and_lists_the_rest_apart() {
        let s = snapshot();
        let named: Vec<String> = ["pkg/a.py:bridge", "pkg/a.py", "nowhere.py", "pkg/a.py:helper"].map(String::from).to_vec();
        let (grounded, apart) = split(&s, &named);
        assert_eq!(grounded, vec!["pkg/a.py", "pkg/a.py:helper"]);
        assert_eq!(
            apart,
            vec![
                NotInRepository { entity: "pkg/a.py:bridge".into(), why: Ungrounded::NoFunction },
                NotInRepository { entity: "nowhere.py".into(), why: Ungrounded::NoFile },
            ]
        );
        assert_eq!(rate(grounded.len(), named.len()), 0.5);
        assert_eq!(rate(0, 0), 1.0);
    }
}
