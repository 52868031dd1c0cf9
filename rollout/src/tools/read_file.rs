//! `read_file(path, start_line?, end_line?)`: numbered lines of a text file.

use super::args::Args;
use super::output::{clip, Output};
use super::{ToolConfig, ToolError, ToolResult};
use crate::entities::{Entity, EntitySet};
use crate::repo::{path, FileEntry, FileKind, Snapshot};

/// The contents of a text file, or the error that explains why not.
pub(super) fn require_text(file: &FileEntry) -> Result<&[u8], ToolError> {
    let path = file.path.clone();
    match &file.kind {
        FileKind::Text(bytes) => Ok(bytes),
        FileKind::Binary { size } => Err(ToolError::Binary { path, size: *size }),
        FileKind::TooLarge { size } => Err(ToolError::TooLarge { path, size: *size }),
        FileKind::Symlink { target } => Err(ToolError::Symlink { outside: outside(&path, target), path, target: target.clone() }),
        FileKind::Submodule { commit } => Err(ToolError::Submodule { path, commit: commit.clone() }),
        FileKind::Missing => Err(ToolError::Missing { path }),
    }
}

/// ", out of the repository" when the link at `link` (a repository path)
/// points out of it (an absolute target, or more `..` than folders above
/// it), else "".
pub(super) fn outside(link: &str, target: &str) -> &'static str {
    let mut depth = link.split('/').count() as i64 - 1;
    let leaves = target.starts_with('/')
        || target.split('/').any(|c| {
            match c {
                ".." => depth -= 1,
                "" | "." => {}
                _ => depth += 1,
            }
            depth < 0
        });
    if leaves { ", out of the repository" } else { "" }
}

/// The link on the way to `path` (a folder of it that is a symbolic link
/// in the snapshot), with the error that names it.
pub(super) fn beneath_link(snapshot: &Snapshot, path: &str) -> Option<ToolError> {
    let mut end = 0;
    while let Some(i) = path[end..].find('/') {
        end += i;
        if let Some(FileKind::Symlink { target }) = snapshot.file(&path[..end]).map(|f| &f.kind) {
            let link = &path[..end];
            return Some(ToolError::BeneathSymlink { path: path.to_string(), link: link.to_string(), target: target.clone(), outside: outside(link, target) });
        }
        end += 1;
    }
    None
}

/// The `read_file` tool.
pub(super) fn run(snapshot: &Snapshot, args: &Args, config: &ToolConfig) -> Result<ToolResult, ToolError> {
    args.only(&["path", "start_line", "end_line"])?;
    let path = path::normalize(args.required_string("path")?)?;
    let start = args.line("start_line")?.unwrap_or(1);
    let end = args.line("end_line")?;
    let Some(file) = snapshot.file(&path) else {
        if snapshot.is_dir(&path) {
            return Err(ToolError::IsDirectory(if path.is_empty() { ".".into() } else { path }));
        }
        return Err(beneath_link(snapshot, &path).unwrap_or(ToolError::NotFound(path)));
    };
    let bytes = require_text(file)?;
    let lines: Vec<&[u8]> = split_lines(bytes);
    let out_of_range = |end| ToolError::LineOutOfRange { path: path.clone(), start, end, lines: lines.len() };
    if lines.is_empty() && start == 1 && end.is_none() {
        let entities = EntitySet::from([Entity::file(&path)]);
        return Ok(ToolResult { output: "(empty file)\n".into(), entities, error: false });
    }
    if let Some(end) = end.filter(|&e| e < start) {
        return Err(ToolError::LineRangeReversed { start, end });
    }
    if start > lines.len() {
        return Err(out_of_range(end.unwrap_or(start)));
    }
    let end = end.unwrap_or(usize::MAX).min(lines.len());
    Ok(render(file, &lines, start, end, config))
}

/// Lines without their terminators; a final newline adds no empty line.
fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.split(|b| *b == b'\n').collect()
}

fn render(file: &FileEntry, lines: &[&[u8]], start: usize, end: usize, config: &ToolConfig) -> ToolResult {
    let mut out = Output::new(config.max_output_bytes);
    let mut last = start - 1;
    for number in start..=end.min(start + config.max_read_lines - 1) {
        let text = String::from_utf8_lossy(lines[number - 1]);
        let text = text.trim_end_matches('\r');
        if !out.push(&format!("{number}\t{}", clip(text, config.max_line_chars))) {
            break;
        }
        last = number;
    }
    let note = (last < end).then(|| {
        format!(
            "[truncated: showed lines {start}-{last} of {}; call read_file with start_line={} to continue]",
            lines.len(),
            last + 1
        )
    });
    let mut entities = EntitySet::from([Entity::file(&file.path)]);
    if let Some(spans) = file.spans() {
        for name in spans.owners_in(start, last) {
            entities.insert(Entity::function(&file.path, name));
        }
    }
    ToolResult { output: out.finish(note), entities, error: false }
}
