//! Files a run writes: JSON lines and bytes written atomically (through a
//! `.partial` sibling renamed into place), rows streamed as they finish,
//! the tokenizer files a checkpoint carries, and the check that a
//! command's outputs are none of its inputs ([`check_outputs`]).

use crate::error::{Context, Result};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Refuses, before any work, an output that is (or resolves to, through
/// symlinks, `./` or `..` spellings and hard links) one of the command's
/// inputs or another of its outputs. Each path comes with the argument that
/// gave it (`--tasks`), and the error names both arguments.
pub fn check_outputs(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<()> {
    for (i, (out_flag, out)) in outputs.iter().enumerate() {
        for (in_flag, input) in inputs {
            if same_file(out, input) {
                crate::error::bail!(
                    "{out_flag} {} is the input {in_flag} {}: writing it would destroy the input; nothing was done (choose another {out_flag})",
                    out.display(),
                    input.display()
                );
            }
        }
        for (other_flag, other) in &outputs[..i] {
            if same_file(out, other) {
                crate::error::bail!(
                    "{out_flag} {} is also {other_flag} {}: one output would replace the other; nothing was done (give them different paths)",
                    out.display(),
                    other.display()
                );
            }
        }
    }
    Ok(())
}

/// Refuses, before any work, an output `out` (of argument `out_flag`) that
/// is an existing file inside the folder `dir` a command reads (`--repo`,
/// searched as it is): writing it would replace one of the files searched.
/// A new file there is allowed.
pub fn check_not_inside(out_flag: &str, out: &Path, dir_flag: &str, dir: &Path) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if let (Some(o), Some(d)) = (resolved(out), resolved(dir)) {
        if o != d && o.starts_with(&d) {
            crate::error::bail!(
                "{out_flag} {} is a file inside the input {dir_flag} {}: writing it would destroy the input; nothing was done (choose another {out_flag})",
                out.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Whether `a` and `b` name the same file or folder (existing or not).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        if (x.dev(), x.ino()) == (y.dev(), y.ino()) {
            return true;
        }
    }
    matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// `path` made absolute with every symlink of its longest existing prefix
/// resolved, and the rest (not there yet) appended with `.` and `..`
/// folded. None when the working folder cannot be read.
fn resolved(path: &Path) -> Option<PathBuf> {
    let abs = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let parts: Vec<Component> = abs.components().collect();
    for cut in (1..=parts.len()).rev() {
        let Ok(mut out) = std::fs::canonicalize(parts[..cut].iter().collect::<PathBuf>()) else { continue };
        for part in &parts[cut..] {
            match part {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => out.push(name),
                _ => {}
            }
        }
        return Some(out);
    }
    Some(abs)
}

/// Copy `tokenizer.json` and `tokenizer_config.json` from `from` into `to`.
/// A missing file is an error naming it when `required` (init-tiny's
/// `--tokenizer`), and skipped otherwise (a checkpoint of a model saved
/// without one).
pub fn copy_tokenizer(from: &Path, to: &Path, required: bool) -> Result<()> {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let src = from.join(f);
        if required || src.exists() {
            std::fs::copy(&src, to.join(f)).with_context(|| format!("copying {} into {}", src.display(), to.display()))?;
        }
    }
    Ok(())
}

/// Put `template`'s text in `dir/tokenizer_config.json` as its `chat_template`,
/// so a checkpoint trained with `[model] chat_template` carries it.
pub fn set_chat_template(dir: &Path, template: &Path) -> Result<()> {
    let path = dir.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut config: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let src = std::fs::read_to_string(template).with_context(|| format!("reading the chat template {}", template.display()))?;
    config["chat_template"] = src.into();
    write_atomic(&path, (serde_json::to_string_pretty(&config)? + "\n").as_bytes())
}

/// Write one JSON value per line, atomically: into `path.partial`, then
/// renamed over `path`, so a failure (or a run with nothing to write that
/// fails before) never leaves `path` emptied or half-written.
pub fn write_json_lines<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    write_through_partial(path, |w| {
        for row in rows {
            serde_json::to_writer(&mut *w, row)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}

/// `bytes` into `path` through a temporary sibling renamed into place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_through_partial(path, |w| Ok(w.write_all(bytes)?))
}

/// `write` streams into `path.partial` (buffered), which is then renamed
/// over `path`: a failure leaves `path` as it was, and no `.partial`.
fn write_through_partial(path: &Path, write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<()>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = Partial::new(PathBuf::from(tmp));
    let file = std::fs::File::create(tmp.path()).with_context(|| format!("creating {}", tmp.path().display()))?;
    let mut w = std::io::BufWriter::new(file);
    write(&mut w).and_then(|_| Ok(w.flush()?)).with_context(|| format!("writing {}", tmp.path().display()))?;
    drop(w);
    tmp.commit(path)
}

/// A temporary file or folder (`X.partial`) that becomes `X` by
/// [`Partial::commit`], and is removed when dropped uncommitted: a write that
/// fails midway (a full disk, an error) leaves nothing behind.
pub struct Partial {
    path: PathBuf,
    committed: bool,
}

impl Partial {
    /// Guards `path`, which the caller creates.
    pub fn new(path: PathBuf) -> Partial {
        Partial { path, committed: false }
    }

    /// The temporary path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames it over `to` (on failure it is removed).
    pub fn commit(mut self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to).with_context(|| format!("renaming {} to {}", self.path.display(), to.display()))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let removed = if self.path.is_dir() { std::fs::remove_dir_all(&self.path) } else { std::fs::remove_file(&self.path) };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove a partial output")
            }
            _ => {}
        }
    }
}

/// Rows of an output written as they finish, `{"row": i, ...}` lines in
/// `<path>.partial`: [`write_json_lines`] to `path` later replaces that file
/// with the ordered rows, so a run stopped midway leaves its finished rows
/// there and `path` untouched.
pub struct RowStream {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl RowStream {
    pub fn create(path: &Path) -> Result<RowStream> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let path = std::path::PathBuf::from(partial);
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(RowStream { file, path })
    }

    pub fn write(&mut self, row: usize, mut value: serde_json::Value) -> Result<()> {
        value["row"] = row.into();
        writeln!(self.file, "{value}").and_then(|_| self.file.flush()).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Refuses, before any work, an output file `path` (of argument `flag`)
/// that could not be written at the end: `path` a folder, or the folder
/// that holds it (or the nearest one that exists, when the writer creates
/// the rest) not a writable folder (a probe file is created there and
/// removed).
pub fn check_writable(flag: &str, path: &Path) -> Result<()> {
    crate::error::ensure!(!path.is_dir(), "{flag} {} is a folder: give a file path; nothing was run", path.display());
    let mut dir = path;
    loop {
        dir = dir.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if dir.exists() || dir == Path::new(".") {
            break;
        }
    }
    crate::error::ensure!(dir.is_dir(), "{flag} {}: {} is not a folder; nothing was run", path.display(), dir.display());
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let probe = dir.join(format!(".{name}.probe-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(|| format!("{flag} {}: cannot write into {}; nothing was run", path.display(), dir.display()))?;
    std::fs::remove_file(&probe).with_context(|| format!("removing {}", probe.display()))
}
