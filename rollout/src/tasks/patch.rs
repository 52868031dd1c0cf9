//! A small unified-diff reader (git's `diff --git` output, SWE-bench patches).

use thiserror::Error;

/// A patch that cannot be read.
#[derive(Debug, Error, PartialEq)]
#[error("patch line {line}: {message}")]
pub struct PatchError {
    /// 1-based line of the patch text.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// One line of a hunk body.
#[derive(Clone, Debug, PartialEq)]
pub enum HunkLine {
    /// ` text`: in both files.
    Context(String),
    /// `-text`: only in the old file.
    Removed(String),
    /// `+text`: only in the new file.
    Added(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Clone, Debug, PartialEq)]
pub struct Hunk {
    /// First old line (for an empty old range: the line after which it inserts).
    pub old_start: usize,
    /// Old lines covered.
    pub old_len: usize,
    /// Body lines in order.
    pub lines: Vec<HunkLine>,
}

/// The changes to one file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FilePatch {
    /// Path before (None: the file is created).
    pub old_path: Option<String>,
    /// Path after (None: the file is deleted).
    pub new_path: Option<String>,
    /// Hunks in order (none for a binary or mode-only change).
    pub hunks: Vec<Hunk>,
}

impl FilePatch {
    /// The path to report: the old path, or the new one for a created file.
    pub fn path(&self) -> &str {
        self.old_path.as_deref().or(self.new_path.as_deref()).unwrap_or("")
    }

    /// Old line numbers the patch touches: every removed line, and for every
    /// added line the old line just before its insertion point (None when it
    /// inserts before line 1).
    pub fn touched_old_lines(&self) -> Vec<usize> {
        let mut touched = Vec::new();
        for hunk in &self.hunks {
            let mut next = if hunk.old_len == 0 { hunk.old_start + 1 } else { hunk.old_start };
            for line in &hunk.lines {
                match line {
                    HunkLine::Context(_) => next += 1,
                    HunkLine::Removed(_) => {
                        touched.push(next);
                        next += 1;
                    }
                    HunkLine::Added(_) if next > 1 => touched.push(next - 1),
                    HunkLine::Added(_) => {}
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// The new file's text from the old one (hunks applied in order).
    pub fn apply(&self, old: &str) -> String {
        let old_lines: Vec<&str> = old.lines().collect();
        let mut out: Vec<&str> = Vec::new();
        let mut cursor = 0usize; // old lines consumed
        for hunk in &self.hunks {
            let start = if hunk.old_len == 0 { hunk.old_start } else { hunk.old_start.saturating_sub(1) };
            while cursor < start.min(old_lines.len()) {
                out.push(old_lines[cursor]);
                cursor += 1;
            }
            for line in &hunk.lines {
                match line {
                    HunkLine::Context(text) => {
                        out.push(text);
                        cursor += 1;
                    }
                    HunkLine::Removed(_) => cursor += 1,
                    HunkLine::Added(text) => out.push(text),
                }
            }
        }
        out.extend(old_lines.iter().skip(cursor));
        let mut text = out.join("\n");
        text.push('\n');
        text
    }
}

/// Reads every file section of a unified diff.
pub fn parse_patch(text: &str) -> Result<Vec<FilePatch>, PatchError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut files: Vec<FilePatch> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            files.push(FilePatch { old_path: git_header_path(rest), new_path: git_header_path(rest), hunks: Vec::new() });
        } else if let Some(path) = line.strip_prefix("--- ") {
            current(&mut files).old_path = side_path(path, "a/");
        } else if let Some(path) = line.strip_prefix("+++ ") {
            current(&mut files).new_path = side_path(path, "b/");
        } else if line.starts_with("new file mode") {
            current(&mut files).old_path = None;
        } else if line.starts_with("deleted file mode") {
            current(&mut files).new_path = None;
        } else if line.starts_with("@@") {
            let (hunk, next) = read_hunk(&lines, i)?;
            current(&mut files).hunks.push(hunk);
            i = next;
            continue;
        }
        i += 1;
    }
    Ok(files)
}

fn current(files: &mut Vec<FilePatch>) -> &mut FilePatch {
    if files.is_empty() {
        files.push(FilePatch::default());
    }
    files.last_mut().expect("just pushed")
}

/// `a/x b/x` -> `x` (only when both sides agree; renames use ---/+++).
fn git_header_path(rest: &str) -> Option<String> {
    let half = rest.len() / 2;
    let (a, b) = (rest.get(..half)?, rest.get(half + 1..)?);
    let (a, b) = (a.strip_prefix("a/")?, b.strip_prefix("b/")?);
    (a == b).then(|| a.to_string())
}

fn side_path(text: &str, prefix: &str) -> Option<String> {
    let path = text.split('\t').next().unwrap_or(text).trim_end();
    if path == "/dev/null" {
        return None;
    }
    Some(path.strip_prefix(prefix).unwrap_or(path).to_string())
}

/// Reads the hunk whose header is at `lines[at]`; returns it and the next line index.
fn read_hunk(lines: &[&str], at: usize) -> Result<(Hunk, usize), PatchError> {
    let error = |message: &str| PatchError { line: at + 1, message: message.to_string() };
    let header = lines[at];
    let ranges = header.strip_prefix("@@ ").and_then(|h| h.split(" @@").next()).ok_or_else(|| error("bad hunk header"))?;
    let (old, new) = ranges.split_once(' ').ok_or_else(|| error("bad hunk header"))?;
    let (old_start, old_len) = parse_range(old.strip_prefix('-')).ok_or_else(|| error("bad old range"))?;
    let (_, new_len) = parse_range(new.strip_prefix('+')).ok_or_else(|| error("bad new range"))?;
    let (mut old_left, mut new_left) = (old_len, new_len);
    let mut body = Vec::new();
    let mut i = at + 1;
    while (old_left > 0 || new_left > 0) && i < lines.len() {
        let line = lines[i];
        let (kind, text) = line.split_at(line.len().min(1));
        match kind {
            " " | "" => {
                body.push(HunkLine::Context(text.to_string()));
                old_left = old_left.saturating_sub(1);
                new_left = new_left.saturating_sub(1);
            }
            "-" => {
                body.push(HunkLine::Removed(text.to_string()));
                old_left = old_left.saturating_sub(1);
            }
            "+" => {
                body.push(HunkLine::Added(text.to_string()));
                new_left = new_left.saturating_sub(1);
            }
            "\\" => {}
            _ => return Err(PatchError { line: i + 1, message: format!("unexpected line in hunk: {line:?}") }),
        }
        i += 1;
    }
    while i < lines.len() && lines[i].starts_with('\\') {
        i += 1;
    }
    Ok((Hunk { old_start, old_len, lines: body }, i))
}

fn parse_range(text: Option<&str>) -> Option<(usize, usize)> {
    let text = text?;
    match text.split_once(',') {
        Some((start, len)) => Some((start.parse().ok()?, len.parse().ok()?)),
        None => Some((text.parse().ok()?, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -2,3 +2,4 @@ def f():
     a = 1
-    b = 2
+    b = 3
+    c = 4
     return a
diff --git a/new.py b/new.py
new file mode 100644
--- /dev/null
+++ b/new.py
@@ -0,0 +1 @@
+x = 1
";

    #[test]
    fn reads_files_and_lines() {
        let files = parse_patch(PATCH).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].path(), "m.py");
        // old: 2 `a = 1`, 3 `b = 2` (removed), adds after old line 3.
        assert_eq!(files[0].touched_old_lines(), vec![3]);
        assert_eq!(files[1].old_path, None);
        assert_eq!(files[1].path(), "new.py");
        let old = "def f():\n    a = 1\n    b = 2\n    return a\n";
        assert_eq!(files[0].apply(old), "def f():\n    a = 1\n    b = 3\n    c = 4\n    return a\n");
    }

    #[test]
    fn insertion_only_hunk() {
        let patch = "--- a/x\n+++ b/x\n@@ -3,0 +4,1 @@\n+new\n";
        let files = parse_patch(patch).unwrap();
        assert_eq!(files[0].touched_old_lines(), vec![3]);
        assert_eq!(files[0].apply("1\n2\n3\n4\n"), "1\n2\n3\nnew\n4\n");
    }
}
