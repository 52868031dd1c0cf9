//! Gold from a patch (DESIGN.md, "Gold from a patch"): the changed files, and
//! the innermost function (old file) of every removed line and of every
//! added line's insertion point.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::patch::{parse_patch, FilePatch, PatchError};
use crate::entities::Entity;
use crate::repo::{FileKind, Snapshot};
use crate::reward::Gold;
use crate::spans::{FileSpans, Language};

/// Facts about a patch that filters act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoldFlag {
    /// The patch creates a file.
    AddsFile,
    /// The new code defines a function or class name the old file lacks.
    AddsFunction,
    /// The patch touches a file that is not source code (docs, config, data).
    NonCodeFile,
    /// No function-level gold (only module-level or unparsed changes).
    NoFunctions,
    /// No gold at all (an empty patch).
    EmptyGold,
}

/// Gold and the flags of one patch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoldReport {
    /// Files and functions.
    pub gold: Gold,
    /// Which filter facts hold.
    pub flags: BTreeSet<GoldFlag>,
}

/// Why gold could not be derived.
#[derive(Debug, Error)]
pub enum GoldError {
    /// The patch text is malformed.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// The patch modifies a file the base tree lacks.
    #[error("patch modifies '{0}', which is not in the base tree")]
    MissingFile(String),
    /// Reading the old file failed.
    #[error("reading old '{path}': {message}")]
    Read {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
}

/// Where the old (base) file contents come from.
pub trait OldFiles {
    /// The contents of `path` at the base, or None when absent.
    fn old_file(&self, path: &str) -> Result<Option<Vec<u8>>, GoldError>;
}

impl OldFiles for Snapshot {
    fn old_file(&self, path: &str) -> Result<Option<Vec<u8>>, GoldError> {
        Ok(self.file(path).map(|f| match &f.kind {
            FileKind::Text(bytes) => bytes.clone(),
            _ => Vec::new(),
        }))
    }
}

/// Extensions counted as source code (parsed or not) by [`GoldFlag::NonCodeFile`].
pub const CODE_EXTENSIONS: &[&str] = &[
    "py", "pyi", "pyx", "rs", "go", "java", "kt", "scala", "js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts", "c",
    "h", "cc", "cpp", "cxx", "c++", "hpp", "hh", "hxx", "h++", "cs", "rb", "php", "swift", "m", "sh",
];

/// Whether `path` looks like source code.
pub fn is_code_path(path: &str) -> bool {
    path.rsplit_once('.').is_some_and(|(_, ext)| CODE_EXTENSIONS.contains(&ext))
}

/// Derives gold from `patch` against the base files.
pub fn derive_gold(patch: &str, base: &dyn OldFiles) -> Result<GoldReport, GoldError> {
    let mut report = GoldReport::default();
    for file in parse_patch(patch)? {
        let path = file.path().to_string();
        if path.is_empty() {
            continue;
        }
        report.gold.files.insert(path.clone());
        if !is_code_path(&path) {
            report.flags.insert(GoldFlag::NonCodeFile);
        }
        if file.old_path.is_none() {
            report.flags.insert(GoldFlag::AddsFile);
            continue;
        }
        let old = base.old_file(&path)?.ok_or_else(|| GoldError::MissingFile(path.clone()))?;
        file_gold(&file, &path, &old, &mut report);
    }
    if report.gold.files.is_empty() {
        report.flags.insert(GoldFlag::EmptyGold);
    }
    if report.gold.functions.is_empty() {
        report.flags.insert(GoldFlag::NoFunctions);
    }
    Ok(report)
}

fn file_gold(file: &FilePatch, path: &str, old: &[u8], report: &mut GoldReport) {
    let Some(language) = Language::from_path(path) else { return };
    let old_spans = FileSpans::parse(language, old);
    for line in file.touched_old_lines() {
        if let Some(owner) = old_spans.owner(line) {
            report.gold.insert(&Entity::function(path, owner));
        }
    }
    if file.new_path.is_some() {
        let new_text = file.apply(&String::from_utf8_lossy(old));
        let new_spans = FileSpans::parse(language, new_text.as_bytes());
        let old_names: HashSet<&str> = old_spans.names().collect();
        if new_spans.names().any(|n| !old_names.contains(n)) {
            report.flags.insert(GoldFlag::AddsFunction);
        }
    }
}
