//! Entity names (DESIGN.md, "Entity names"): a file `a/b.py`, or a function
//! `a/b.py:Class.method` / `a/b.py:func`, or a class body `a/b.py:Class`.
//!
//! One type serves the tools (what a call surfaces), the answer parser (what
//! the model predicts) and the gold (what the patch changes), so the three
//! compare exactly.

use std::collections::BTreeSet;
use std::fmt;

/// A localization target at the file or the function level.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Entity {
    /// A repo-relative file path, `a/b.py`.
    File(String),
    /// A function, method or class body inside `file`: `name` is the dotted
    /// qualified name (`Class.method`, `func`, `Class`).
    Function {
        /// Repo-relative path of the file that holds it.
        file: String,
        /// Dotted qualified name inside the file.
        name: String,
    },
}

impl Entity {
    /// A file entity.
    pub fn file(path: impl Into<String>) -> Self {
        Entity::File(path.into())
    }

    /// A function entity `file:name`.
    pub fn function(file: impl Into<String>, name: impl Into<String>) -> Self {
        Entity::Function { file: file.into(), name: name.into() }
    }

    /// The file this entity lives in (itself for a file).
    pub fn file_path(&self) -> &str {
        match self {
            Entity::File(path) => path,
            Entity::Function { file, .. } => file,
        }
    }

    /// Whether this is a function-level entity.
    pub fn is_function(&self) -> bool {
        matches!(self, Entity::Function { .. })
    }

    /// Parses `path`, `path:Qualified.name` or `path::Qualified.name`; a
    /// name written with `::` as Rust and C++ do (`Stack::push`) is read
    /// dotted, as spans name it (`Stack.push`). Returns `None` for text that
    /// cannot be an entity (empty, whitespace inside, empty path or name, a
    /// stray `:` in the name).
    pub fn parse(text: &str) -> Option<Entity> {
        let text = text.trim();
        if text.is_empty() || text.chars().any(char::is_whitespace) {
            return None;
        }
        let Some(colon) = text.find(':') else {
            return Some(Entity::file(text.trim_start_matches("./")));
        };
        let file = text[..colon].trim_start_matches("./");
        let rest = &text[colon + 1..];
        let name = rest.strip_prefix(':').unwrap_or(rest).replace("::", ".");
        if file.is_empty() || name.is_empty() || name.contains(':') {
            return None;
        }
        Some(Entity::function(file, name))
    }
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::File(path) => write!(f, "{path}"),
            Entity::Function { file, name } => write!(f, "{file}:{name}"),
        }
    }
}

impl serde::Serialize for Entity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Entity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Entity::from_stored(&text).ok_or_else(|| serde::de::Error::custom(format!("not an entity: {text:?}")))
    }
}

impl Entity {
    /// Reads back what [`fmt::Display`] wrote (episode files, gold): a path
    /// may hold spaces or colons (a tool can surface `My Notebook.ipynb`),
    /// a name never holds a colon, a slash or a space. Stricter
    /// [`Entity::parse`] reads a model's answer.
    pub fn from_stored(text: &str) -> Option<Entity> {
        if text.is_empty() {
            return None;
        }
        match text.rfind(':') {
            Some(i) if i > 0 && i + 1 < text.len() && !text[i + 1..].contains(|c: char| c == '/' || c.is_whitespace()) => {
                Some(Entity::function(&text[..i], &text[i + 1..]))
            }
            _ => Some(Entity::file(text)),
        }
    }
}

/// The set of entities one tool call surfaced (sorted, deduplicated).
pub type EntitySet = BTreeSet<Entity>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        let cases = [
            ("a/b.py", Some(Entity::file("a/b.py"))),
            ("a/b.py:C.m", Some(Entity::function("a/b.py", "C.m"))),
            ("a/b.py::C.m", Some(Entity::function("a/b.py", "C.m"))),
            ("./a.py:f", Some(Entity::function("a.py", "f"))),
            ("  a.py  ", Some(Entity::file("a.py"))),
            ("src/lib.rs::Stack::push", Some(Entity::function("src/lib.rs", "Stack.push"))),
            ("src/geo.cpp:geo::Stack::push", Some(Entity::function("src/geo.cpp", "geo.Stack.push"))),
            ("a.py:C:m", None),
            ("a.py:", None),
            ("a.py::", None),
            (":f", None),
            ("two words", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(Entity::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["a/b.py", "a/b.py:C.m", "x.py:f"] {
            assert_eq!(Entity::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn stored_entities_with_spaces_and_colons_round_trip() {
        let cases = [
            Entity::file("docs/[Hands On] Notebook.ipynb"),
            Entity::function("my dir/a b.py", "C.m"),
            Entity::file("a:b/c.py"),
            Entity::function("a:b/c.py", "f"),
            Entity::file("x.py"),
        ];
        for e in cases {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<Entity>(&json).unwrap(), e, "{json}");
        }
        assert!(serde_json::from_str::<Entity>("\"\"").is_err());
    }
}
