//! Where `git apply` puts each hunk of a patch. A published fix is often
//! made against a slightly different file than the commit it names: the
//! same lines, some lines further up or down. `git apply` takes such a hunk
//! at an offset (it looks for the hunk's exact old lines, starting at the
//! recorded line and going outward, one line down, one up, ...; no fuzz on
//! context lines by default); libgit2 takes a hunk only at its recorded line.
//!
//! [`place_hunks`] reads each hunk's position the way `git apply` does
//! (git's `apply.c`, `find_pos` and `match_fragment` with the default
//! options) and rewrites the hunk headers that are off, so that the patch
//! applies where git would apply it, at the recorded lines: a patch whose
//! hunks all sit where they say comes back byte for byte.

use std::collections::HashMap;

use thiserror::Error;

use super::gold::{GoldError, OldFiles};

/// Why a patch's hunks could not be placed.
#[derive(Debug, Error)]
pub enum PlaceError {
    /// A hunk's old lines are nowhere in the file (as `git apply` says:
    /// "patch failed").
    #[error("hunk {hunk} of {path} ({header}) matches no lines of the file, at any offset")]
    NoMatch {
        /// The file the hunk changes.
        path: String,
        /// 1-based number of the hunk within its file.
        hunk: usize,
        /// Its `@@ ... @@` line.
        header: String,
    },
    /// The patch text is not a unified diff git could read.
    #[error("patch line {line}: {message}")]
    Malformed {
        /// 1-based line of the patch text.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Reading a file of the base tree failed.
    #[error(transparent)]
    Old(#[from] GoldError),
}

/// `patch` with every hunk header moved to the line where `git apply` finds
/// the hunk in `base`'s files; unchanged when every hunk is where it says.
/// A file the base lacks (and is not created by the patch) is left as it is
/// for the caller's apply to refuse.
pub fn place_hunks(patch: &str, base: &dyn OldFiles) -> Result<String, PlaceError> {
    let lines: Vec<&str> = patch.split_inclusive('\n').collect();
    let mut headers: HashMap<usize, String> = HashMap::new();
    for section in read_sections(&lines)? {
        let image = match &section.old_path {
            None => Vec::new(),
            Some(path) => match base.old_file(path)? {
                Some(bytes) => bytes.split_inclusive(|b| *b == b'\n').map(|l| ImageLine { text: l.to_vec(), patched: false }).collect(),
                None => continue,
            },
        };
        place_section(&section, &lines, image, &mut headers)?;
    }
    if headers.is_empty() {
        return Ok(patch.to_string());
    }
    Ok(lines.iter().enumerate().map(|(i, l)| headers.get(&i).map_or(*l, String::as_str)).collect())
}

/// One file's part of the patch.
#[derive(Debug, Default)]
struct Section {
    /// The path whose old contents the hunks apply to (None: a new file).
    old_path: Option<String>,
    /// The display name for errors.
    name: String,
    hunks: Vec<Hunk>,
}

/// One hunk: its header line, ranges, old lines (preimage), new lines
/// (postimage), and the counts of context lines before the first change
/// and after the last.
#[derive(Debug)]
struct Hunk {
    header_at: usize,
    old_start: usize,
    new_start: usize,
    pre: Vec<Vec<u8>>,
    post: Vec<Vec<u8>>,
    trailing: usize,
}

/// A line of the file being patched; `patched` lines came from an earlier
/// hunk, and git lets no later hunk match them.
#[derive(Debug)]
struct ImageLine {
    text: Vec<u8>,
    patched: bool,
}

/// Places the hunks of one file in order (each applied to the image before
/// the next is looked for, as git does), recording moved headers.
fn place_section(section: &Section, lines: &[&str], mut image: Vec<ImageLine>, headers: &mut HashMap<usize, String>) -> Result<(), PlaceError> {
    for (n, hunk) in section.hunks.iter().enumerate() {
        let recorded = hunk.new_start.saturating_sub(1);
        // git: a hunk at the file's start must match there, one without
        // trailing context at its end.
        let match_beginning = hunk.old_start <= 1;
        let match_end = hunk.trailing == 0;
        let Some(at) = find_pos(&image, &hunk.pre, recorded, match_beginning, match_end) else {
            return Err(PlaceError::NoMatch { path: section.name.clone(), hunk: n + 1, header: lines[hunk.header_at].trim_end().to_string() });
        };
        if at != recorded {
            let shift = at as i64 - recorded as i64;
            headers.insert(hunk.header_at, shifted_header(lines[hunk.header_at], shift, hunk.header_at)?);
        }
        let post = hunk.post.iter().map(|t| ImageLine { text: t.clone(), patched: true });
        image.splice(at..at + hunk.pre.len(), post);
    }
    Ok(())
}

/// git's `find_pos`: the recorded line, then one below, one above, two
/// below, ... until a match or both ends are reached.
fn find_pos(image: &[ImageLine], pre: &[Vec<u8>], recorded: usize, match_beginning: bool, match_end: bool) -> Option<usize> {
    let nr = image.len();
    let line = if match_beginning {
        0
    } else if match_end {
        nr.checked_sub(pre.len()).unwrap_or(nr)
    } else {
        recorded
    }
    .min(nr);
    let (mut backwards, mut forwards, mut current) = (line, line, line);
    let mut i = 0usize;
    loop {
        if matches_at(image, pre, current, match_beginning, match_end) {
            return Some(current);
        }
        loop {
            if backwards == 0 && forwards == nr {
                return None;
            }
            if i & 1 == 1 {
                if backwards == 0 {
                    i += 1;
                    continue;
                }
                backwards -= 1;
                current = backwards;
            } else {
                if forwards == nr {
                    i += 1;
                    continue;
                }
                forwards += 1;
                current = forwards;
            }
            break;
        }
        i += 1;
    }
}

/// git's `match_fragment` with the default options: the old lines equal,
/// byte for byte, to unpatched lines of the image at `at`.
fn matches_at(image: &[ImageLine], pre: &[Vec<u8>], at: usize, match_beginning: bool, match_end: bool) -> bool {
    if at + pre.len() > image.len() || (match_end && at + pre.len() != image.len()) || (match_beginning && at != 0) {
        return false;
    }
    image[at..at + pre.len()].iter().zip(pre).all(|(line, want)| !line.patched && line.text == *want)
}

/// `@@ -a,b +c,d @@ rest` with `a` and `c` moved by `shift`.
fn shifted_header(header: &str, shift: i64, at: usize) -> Result<String, PlaceError> {
    let bad = || PlaceError::Malformed { line: at + 1, message: format!("bad hunk header {:?}", header.trim_end()) };
    let ranges = header.strip_prefix("@@ -").ok_or_else(bad)?;
    let (old, rest) = ranges.split_once(" +").ok_or_else(bad)?;
    let new_end = rest.find(' ').ok_or_else(bad)?;
    let (new, tail) = rest.split_at(new_end);
    let moved = |range: &str| -> Result<String, PlaceError> {
        let (start, len) = range.split_once(',').map_or((range, None), |(s, l)| (s, Some(l)));
        let start: i64 = start.parse().map_err(|_| bad())?;
        let start = start + shift;
        if start < 0 {
            return Err(bad());
        }
        Ok(len.map_or(start.to_string(), |l| format!("{start},{l}")))
    };
    Ok(format!("@@ -{} +{}{tail}", moved(old)?, moved(new)?))
}

/// Reads the patch's file sections and their hunks (git's rules: a
/// `diff --git` line or a `--- ` line after hunks starts a section; a hunk
/// body is as long as its header's counts say; `\ No newline at end of
/// file` takes the newline off the line before it).
fn read_sections(lines: &[&str]) -> Result<Vec<Section>, PlaceError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end_matches(['\n', '\r']);
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let path = rest.split_once(" b/").map_or(rest, |(a, _)| a);
            let path = path.strip_prefix("a/").unwrap_or(path).to_string();
            sections.push(Section { old_path: Some(path.clone()), name: path, hunks: Vec::new() });
        } else if let Some(path) = line.strip_prefix("--- ") {
            if sections.last().is_none_or(|s| !s.hunks.is_empty()) {
                sections.push(Section::default());
            }
            let section = sections.last_mut().expect("just ensured");
            let path = path.split('\t').next().unwrap_or(path).trim_end();
            if path == "/dev/null" {
                section.old_path = None;
            } else {
                let path = path.strip_prefix("a/").unwrap_or(path).to_string();
                section.name.clone_from(&path);
                section.old_path = Some(path);
            }
        } else if let Some(path) = line.strip_prefix("+++ ") {
            let path = path.split('\t').next().unwrap_or(path).trim_end();
            let section = current(&mut sections);
            if section.name.is_empty() && path != "/dev/null" {
                section.name = path.strip_prefix("b/").unwrap_or(path).to_string();
            }
        } else if line.starts_with("new file mode") {
            current(&mut sections).old_path = None;
        } else if let Some(path) = line.strip_prefix("rename from ").or_else(|| line.strip_prefix("copy from ")) {
            current(&mut sections).old_path = Some(path.to_string());
        } else if line.starts_with("@@ ") {
            let (hunk, next) = read_hunk(lines, i)?;
            current(&mut sections).hunks.push(hunk);
            i = next;
            continue;
        }
        i += 1;
    }
    Ok(sections)
}

fn current(sections: &mut Vec<Section>) -> &mut Section {
    if sections.is_empty() {
        sections.push(Section::default());
    }
    sections.last_mut().expect("just pushed")
}

/// The hunk whose header is `lines[at]`, and the index of the line after it.
fn read_hunk(lines: &[&str], at: usize) -> Result<(Hunk, usize), PlaceError> {
    let bad = |line: usize, message: String| PlaceError::Malformed { line: line + 1, message };
    let header = lines[at].trim_end_matches(['\n', '\r']);
    let ranges = header.strip_prefix("@@ -").and_then(|h| h.split(" @@").next());
    let parsed = ranges.and_then(|r| {
        let (old, new) = r.split_once(" +")?;
        Some((range(old)?, range(new)?))
    });
    let Some(((old_start, mut old_left), (new_start, mut new_left))) = parsed else {
        return Err(bad(at, format!("bad hunk header {header:?}")));
    };
    let mut hunk = Hunk { header_at: at, old_start, new_start, pre: Vec::new(), post: Vec::new(), trailing: 0 };
    let mut i = at + 1;
    // Which images the last body line went to (old, new).
    let mut last = (false, false);
    while i < lines.len() && (old_left > 0 || new_left > 0 || lines[i].starts_with('\\')) {
        let line = lines[i];
        let text = line.get(1..).unwrap_or("").as_bytes().to_vec();
        match line.as_bytes()[0] {
            b' ' | b'\n' => {
                let text = if line == "\n" { b"\n".to_vec() } else { text };
                (old_left, new_left) = (old_left.saturating_sub(1), new_left.saturating_sub(1));
                hunk.pre.push(text.clone());
                hunk.post.push(text);
                hunk.trailing += 1;
                last = (true, true);
            }
            b'-' => {
                old_left = old_left.saturating_sub(1);
                hunk.pre.push(text);
                hunk.trailing = 0;
                last = (true, false);
            }
            b'+' => {
                new_left = new_left.saturating_sub(1);
                hunk.post.push(text);
                hunk.trailing = 0;
                last = (false, true);
            }
            b'\\' => {
                // "\ No newline at end of file": the line before has none.
                for (went, image) in [(last.0, &mut hunk.pre), (last.1, &mut hunk.post)] {
                    if let Some(prev) = image.last_mut().filter(|_| went) {
                        if prev.last() == Some(&b'\n') {
                            prev.pop();
                        }
                    }
                }
                last = (false, false);
            }
            _ => return Err(bad(i, format!("unexpected line in hunk: {:?}", line.trim_end()))),
        }
        i += 1;
    }
    if old_left > 0 || new_left > 0 {
        return Err(bad(at, format!("hunk {header:?} ends before its counts")));
    }
    Ok((hunk, i))
}

/// `start[,len]` (len 1 when absent).
fn range(text: &str) -> Option<(usize, usize)> {
    match text.split_once(',') {
        Some((start, len)) => Some((start.parse().ok()?, len.parse().ok()?)),
        None => Some((text.parse().ok()?, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Old files from a map.
    struct Files(Vec<(&'static str, String)>);

    impl OldFiles for Files {
        fn old_file(&self, path: &str) -> Result<Option<Vec<u8>>, GoldError> {
            Ok(self.0.iter().find(|(p, _)| *p == path).map(|(_, t)| t.clone().into_bytes()))
        }
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    fn headers(patch: &str) -> Vec<&str> {
        patch.lines().filter(|l| l.starts_with("@@")).collect()
    }

    #[test]
    fn a_hunk_where_it_says_leaves_the_patch_byte_for_byte() {
        let patch = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@ ctx\n line 4\n-line 5\n+five\n line 6\n";
        let files = Files(vec![("f", numbered(10))]);
        assert_eq!(place_hunks(patch, &files).unwrap(), patch);
    }

    #[test]
    fn hunks_off_by_some_lines_move_to_where_they_match() {
        // Recorded at 4 and 14; the file has 5 more lines before each.
        let patch = "--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n line 9\n-line 10\n+ten\n line 11\n@@ -14,3 +14,4 @@ tail\n line 19\n-line 20\n+twenty\n+twenty bis\n line 21\n";
        let files = Files(vec![("f", numbered(30))]);
        let placed = place_hunks(patch, &files).unwrap();
        assert_eq!(headers(&placed), ["@@ -9,3 +9,3 @@", "@@ -19,3 +19,4 @@ tail"]);
        // Bodies untouched.
        assert_eq!(placed.replace("-9,3 +9,3", "-4,3 +4,3").replace("-19,3 +19,4", "-14,3 +14,4"), patch);
    }

    #[test]
    fn the_search_goes_outward_one_down_then_one_up() {
        // "x", "z" at 0-based lines 7-8 and 11-12.
        let mut file: Vec<String> = (1..=20).map(|i| format!("l{i}\n")).collect();
        (file[7], file[8], file[11], file[12]) = ("x\n".into(), "z\n".into(), "x\n".into(), "z\n".into());
        let files = Files(vec![("f", file.concat())]);
        let at = |recorded: usize| {
            let patch = format!("--- a/f\n+++ b/f\n@@ -{recorded},2 +{recorded},2 @@\n-x\n+y\n z\n");
            headers(&place_hunks(&patch, &files).unwrap())[0].to_string()
        };
        // From 0-based 9: 9, 10, 8, 11 (both are two away: the one below first).
        assert_eq!(at(10), "@@ -12,2 +12,2 @@");
        // From 8: 8, 9, 7.
        assert_eq!(at(9), "@@ -8,2 +8,2 @@");
        // From 10: 10, 11.
        assert_eq!(at(11), "@@ -12,2 +12,2 @@");
        assert_eq!(at(8), "@@ -8,2 +8,2 @@", "where it says");
        // Without trailing context a hunk must match at the end: none does.
        let patch = "--- a/f\n+++ b/f\n@@ -8,1 +8,1 @@\n-x\n+y\n";
        assert!(matches!(place_hunks(patch, &files), Err(PlaceError::NoMatch { hunk: 1, .. })));
    }

    #[test]
    fn a_hunk_without_trailing_context_matches_only_at_the_end() {
        let files = Files(vec![("f", "a\nb\nc\na\nb\n".into())]);
        let patch = "--- a/f\n+++ b/f\n@@ -2,2 +2,3 @@\n a\n b\n+c\n";
        assert_eq!(headers(&place_hunks(patch, &files).unwrap()), ["@@ -4,2 +4,3 @@"]);
    }

    #[test]
    fn a_later_hunk_does_not_match_lines_an_earlier_one_wrote() {
        // Hunk 1 writes "line 14".."line 16" at 0-based 3..6; hunk 2 looks
        // for them from 6 and finds the file's own, at 15 (after hunk 1).
        let files = Files(vec![("f", numbered(20))]);
        let patch = "--- a/f\n+++ b/f\n@@ -3,3 +3,5 @@\n line 3\n-line 4\n+line 14\n+line 15\n+line 16\n line 5\n\
                     @@ -5,3 +7,3 @@\n line 14\n-line 15\n+fifteen\n line 16\n";
        assert_eq!(headers(&place_hunks(patch, &files).unwrap()), ["@@ -3,3 +3,5 @@", "@@ -14,3 +16,3 @@"]);
    }

    #[test]
    fn context_that_is_nowhere_is_refused_naming_file_and_hunk() {
        let files = Files(vec![("pkg/f.py", numbered(30))]);
        let patch = "diff --git a/pkg/f.py b/pkg/f.py\n--- a/pkg/f.py\n+++ b/pkg/f.py\n@@ -4,3 +4,3 @@ def g():\n line 9\n-line 10\n+ten\n line 12\n";
        let err = place_hunks(patch, &files).unwrap_err();
        assert_eq!(err.to_string(), "hunk 1 of pkg/f.py (@@ -4,3 +4,3 @@ def g():) matches no lines of the file, at any offset");
    }

    #[test]
    fn no_newline_at_end_of_file_is_part_of_the_line() {
        let files = Files(vec![("f", "a\nb\nc\nd\ne".into())]);
        let patch = "--- a/f\n+++ b/f\n@@ -4,2 +4,2 @@\n d\n-e\n\\ No newline at end of file\n+E\n\\ No newline at end of file\n";
        assert_eq!(place_hunks(patch, &files).unwrap(), patch);
        let moved = patch.replace("-4,2 +4,2", "-2,2 +2,2");
        assert_eq!(headers(&place_hunks(&moved, &files).unwrap()), ["@@ -4,2 +4,2 @@"]);
        // A hunk at line 1 must match at the start.
        let first = patch.replace("-4,2 +4,2", "-1,2 +1,2");
        assert!(matches!(place_hunks(&first, &files), Err(PlaceError::NoMatch { .. })));
        // With a newline the file's last line is another line.
        let files = Files(vec![("f", "a\nb\nc\nd\ne\n".into())]);
        assert!(matches!(place_hunks(patch, &files), Err(PlaceError::NoMatch { .. })));
    }

    #[test]
    fn new_and_absent_files() {
        let files = Files(vec![]);
        let patch = "diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1,2 @@\n+a\n+b\n";
        assert_eq!(place_hunks(patch, &files).unwrap(), patch);
        let patch = "--- a/gone\n+++ b/gone\n@@ -4,1 +4,1 @@\n-a\n+b\n";
        assert_eq!(place_hunks(patch, &files).unwrap(), patch, "left for the apply to refuse");
    }

    #[test]
    fn a_short_hunk_is_malformed() {
        let files = Files(vec![("f", numbered(5))]);
        let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n line 1\n-line 2\n";
        assert!(matches!(place_hunks(patch, &files), Err(PlaceError::Malformed { line: 3, .. })));
    }
}
