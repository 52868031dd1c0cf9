//! Repo-relative paths from untrusted text: the only way a tool argument
//! becomes a path. Nothing here touches the disk; the result can only name
//! something inside the snapshot's tree.

use thiserror::Error;

/// Why a path argument was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PathError {
    /// `/etc/passwd`, `C:\x`, `\\server`: absolute paths are never inside the tree.
    #[error("path '{0}' is absolute; use a path relative to the repository root")]
    Absolute(String),
    /// A `..` component would leave the tree.
    #[error("path '{0}' leaves the repository ('..' is not allowed)")]
    Escapes(String),
    /// NUL or other control characters.
    #[error("path '{0}' contains a control character")]
    ControlChar(String),
}

/// Normalizes a path argument to the snapshot's form: components joined by
/// `/`, no leading `./`, no empty or `.` components, no trailing slash. The
/// repository root is the empty string.
pub fn normalize(input: &str) -> Result<String, PathError> {
    let trimmed = input.trim();
    if trimmed.chars().any(char::is_control) {
        return Err(PathError::ControlChar(input.escape_debug().to_string()));
    }
    if is_absolute(trimmed) {
        return Err(PathError::Absolute(trimmed.to_string()));
    }
    let mut parts = Vec::new();
    for part in trimmed.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(PathError::Escapes(trimmed.to_string())),
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

fn is_absolute(path: &str) -> bool {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    path.starts_with('/') || path.starts_with('\\') || path.starts_with('~') || drive
}

/// Whether `path` is `dir` itself or lies under it (`dir` empty = root).
pub fn is_under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, Result<&str, ()>)] = &[
            ("a/b.py", Ok("a/b.py")),
            ("./a//b.py/", Ok("a/b.py")),
            (".", Ok("")),
            ("", Ok("")),
            ("a/./b", Ok("a/b")),
            ("../x", Err(())),
            ("a/../../x", Err(())),
            ("a/..", Err(())),
            ("/etc/passwd", Err(())),
            ("C:\\x", Err(())),
            ("~/x", Err(())),
            ("a\0b", Err(())),
        ];
        for (input, want) in cases {
            let got = normalize(input);
            match want {
                Ok(w) => assert_eq!(got.as_deref(), Ok(*w), "{input:?}"),
                Err(()) => assert!(got.is_err(), "{input:?} -> {got:?}"),
            }
        }
    }

    #[test]
    fn under() {
        assert!(is_under("a/b", ""));
        assert!(is_under("a/b", "a"));
        assert!(is_under("a", "a"));
        assert!(!is_under("ab/c", "a"));
    }
}
