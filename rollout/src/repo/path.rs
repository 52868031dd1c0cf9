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

/// `path` as the tools print it: as it is, unless it holds a control
/// character (a newline could pose as another line of the output), a `"`
/// or a `\`; then quoted as git quotes such paths (`"x\nreal.py"`: C-style
/// escapes, other control bytes in octal).
pub fn quote(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        return path.into();
    }
    let mut out = String::with_capacity(path.len() + 8);
    out.push('"');
    for c in path.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\{b:03o}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out.into()
}

#[cfg(test)]
mod quote_tests {
    use super::quote;

    #[test]
    fn paths_that_could_forge_a_line_are_quoted_as_git_quotes_them() {
        assert_eq!(quote("src/a.py"), "src/a.py");
        assert_eq!(quote("naïve/é.py"), "naïve/é.py");
        assert_eq!(quote("x\nreal.py:1:def injected(): # PWNED"), "\"x\\nreal.py:1:def injected(): # PWNED\"");
        assert_eq!(quote("a\"b\\c\td\x01"), "\"a\\\"b\\\\c\\td\\001\"");
        assert!(!quote("x\ny").contains('\n'));
    }
}
