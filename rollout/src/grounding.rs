//! Grounded answers (issue 56): whether a file or function that a policy
//! named is in the searched snapshot. A file is grounded when the snapshot
//! holds that path (at that revision, or in that work tree); a function or
//! class when its file is grounded and the file's tree-sitter spans
//! ([`crate::spans`]) hold that dotted qualified name (`Class.method`,
//! `func`, `Class`): the same names the gold is made of. What is not
//! grounded is left out of every ranking and listed apart.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::entities::Entity;
use crate::repo::Snapshot;

/// Why a named entity is not in the repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ungrounded {
    /// No file at that path.
    NoFile,
    /// The file is there, but no function or class of that qualified name
    /// (or the file is in no language whose spans are parsed).
    NoFunction,
}

impl fmt::Display for Ungrounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ungrounded::NoFile => "no such file",
            Ungrounded::NoFunction => "no such function or class in that file",
        })
    }
}

/// Checks `entity` against `snapshot`: `Ok` when it is there.
pub fn check(snapshot: &Snapshot, entity: &Entity) -> Result<(), Ungrounded> {
    let Some(file) = snapshot.file(entity.file_path()) else {
        return Err(Ungrounded::NoFile);
    };
    match entity {
        Entity::File(_) => Ok(()),
        Entity::Function { name, .. } => match file.spans() {
            Some(spans) if spans.names().any(|n| n == name) => Ok(()),
            _ => Err(Ungrounded::NoFunction),
        },
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
/// `snapshot`, in their order, and those not.
pub fn split(snapshot: &Snapshot, named: &[String]) -> (Vec<String>, Vec<NotInRepository>) {
    let mut grounded = Vec::new();
    let mut apart = Vec::new();
    for text in named {
        let Some(entity) = Entity::from_stored(text) else { continue };
        match check(snapshot, &entity) {
            Ok(()) => grounded.push(text.clone()),
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
