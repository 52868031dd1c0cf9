//! Terms of code and text: identifiers split at `_`, `.` and camelCase
//! boundaries, lowercased. An identifier with several parts also gives its
//! whole (lowercased, without separators), so that an exact name match
//! counts (and is rare, so weighs more) beside the matches of its parts.

/// The parts of one identifier, lowercased: `parseHTTPResponse_v2` ->
/// `parse`, `http`, `response`, `v2`; `a.b_c` -> `a`, `b`, `c`. Parts of
/// one character are kept (the caller filters).
pub fn split_identifier(ident: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for chunk in ident.split(['_', '.', '-', '/']) {
        let chars: Vec<char> = chunk.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            // aB, or the B of ABc (an acronym followed by a word); digits stay attached.
            let boundary = (prev.is_lowercase() && cur.is_uppercase()) || (prev.is_uppercase() && cur.is_uppercase() && next_lower);
            if boundary {
                parts.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        if start < chars.len() {
            parts.push(chars[start..].iter().collect::<String>().to_lowercase());
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// The index terms of one identifier: its whole (lowercased, separators
/// dropped) when it has several parts, then its parts; terms of fewer than
/// 2 characters and plain numbers are left out.
pub fn identifier_terms(ident: &str, out: &mut dyn FnMut(&str, TermKind)) {
    let parts = split_identifier(ident);
    let keep = |t: &str| t.len() >= 2 && !t.bytes().all(|b| b.is_ascii_digit());
    if parts.len() > 1 {
        let whole: String = parts.concat();
        if keep(&whole) {
            out(&whole, TermKind::Whole);
        }
        for p in &parts {
            if keep(p) {
                out(p, TermKind::Part);
            }
        }
    } else if let Some(p) = parts.first() {
        if keep(p) {
            out(p, TermKind::Whole);
        }
    }
}

/// Whether a term is an identifier's whole or one of its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TermKind {
    /// The identifier itself (a one-part identifier is its own whole).
    Whole,
    /// One part of a several-part identifier.
    Part,
}

/// Every identifier (`[A-Za-z_][A-Za-z0-9_]*`) of `text`, in order; bytes
/// that are not ASCII end an identifier (so invalid UTF-8 is harmless).
pub fn identifiers(text: &[u8]) -> impl Iterator<Item = &str> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < text.len() && !(text[i].is_ascii_alphabetic() || text[i] == b'_') {
            i += 1;
        }
        if i >= text.len() {
            return None;
        }
        let start = i;
        while i < text.len() && (text[i].is_ascii_alphanumeric() || text[i] == b'_') {
            i += 1;
        }
        // ASCII only: always valid UTF-8.
        std::str::from_utf8(&text[start..i]).ok()
    })
}

/// Every term of `text` (each identifier's [`identifier_terms`]).
pub fn text_terms(text: &[u8], out: &mut dyn FnMut(&str, TermKind)) {
    for ident in identifiers(text) {
        identifier_terms(ident, out);
    }
}

/// The terms of a repository path: its folders and its file name without
/// the extension, each split as an identifier (`src/httpClient/url_parse.py`
/// -> `src`, `httpclient`, `http`, `client`, `urlparse`, `url`, `parse`).
pub fn path_terms(path: &str, out: &mut dyn FnMut(&str, TermKind)) {
    let stem = match path.rsplit_once('.') {
        Some((s, _)) if !s.ends_with('/') && !s.is_empty() => s,
        _ => path,
    };
    for component in stem.split('/') {
        for ident in identifiers(component.as_bytes()) {
            identifier_terms(ident, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(f: impl Fn(&mut dyn FnMut(&str, TermKind))) -> Vec<String> {
        let mut v = Vec::new();
        f(&mut |t, _| v.push(t.to_string()));
        v
    }

    #[test]
    fn identifiers_split_at_case_underscores_and_dots() {
        assert_eq!(split_identifier("parseHTTPResponse_v2"), ["parse", "http", "response", "v2"]);
        assert_eq!(split_identifier("prepare_content_length"), ["prepare", "content", "length"]);
        assert_eq!(split_identifier("PreparedRequest"), ["prepared", "request"]);
        assert_eq!(split_identifier("requests.sessions.Session"), ["requests", "sessions", "session"]);
        assert_eq!(split_identifier("__init__"), ["init"]);
        assert_eq!(split_identifier("XMLParser"), ["xml", "parser"]);
        assert_eq!(split_identifier("utf8"), ["utf8"]);
        assert_eq!(
            terms(|o| identifier_terms("getUserName", o)),
            ["getusername", "get", "user", "name"],
            "the whole first, then the parts"
        );
        assert_eq!(terms(|o| identifier_terms("x", o)), Vec::<String>::new());
        assert_eq!(terms(|o| identifier_terms("a_b", o)), ["ab"], "one-letter parts dropped, the whole kept");
    }

    #[test]
    fn text_and_path_terms() {
        assert_eq!(terms(|o| text_terms(b"def f(self, max_len=3):\xff\xfe x", o)), ["def", "self", "maxlen", "max", "len"]);
        assert_eq!(terms(|o| path_terms("src/httpClient/url_parse.py", o)), ["src", "httpclient", "http", "client", "urlparse", "url", "parse"]);
        assert_eq!(terms(|o| path_terms("Makefile", o)), ["makefile"]);
    }
}
