//! A search index of one repository snapshot (issue 62): its files and
//! their entities (functions, classes, methods by qualified name, from the
//! tree-sitter spans of [`crate::spans`]), ranked for an issue by BM25F.
//!
//! - [`Index::build`]`(&Snapshot, &IndexConfig)`: two collections of
//!   documents, files and entities, each with four fields: **path** tokens,
//!   **names** (an entity's name and qualified name; a file's entities'
//!   names), **signature and docstring** (an entity's header lines and its
//!   docstring or the comment above it), **body** identifiers (an
//!   entity's own lines, a file's whole text). Identifiers are split
//!   (camelCase, snake_case, dotted) and lowercased ([`tokens`]).
//! - [`Query::from_issue`]: weighted terms (backticked code, code-like
//!   names, other words low), the paths and stack-trace frames the issue
//!   names, the tests it quotes ([`query`]).
//! - [`Index::search`] -> [`Hits`]: entities by BM25F plus their file's
//!   score; files by their own BM25F plus their best entity's; then the
//!   priors: a file the issue names (or a frame's file) is raised above the
//!   rest, a frame's function and a quoted test's subject are raised, and
//!   tests, docs, examples and benchmarks are lowered unless named.
//!   `Hits::ranking` (in [`crate::ranking`], which depends on this module
//!   and not the reverse) gives the grounded `Ranking`
//!   (at least ten files and functions) with an answer set for F1 (the
//!   first file, and the next ones within a score gap of it).
//! - [`IndexCache`]: built once per snapshot and kept, keyed by commit id
//!   (a working tree or plain folder by a hash of its contents).
//!
//! **Scorer: our own BM25F, not tantivy or the `bm25` crate.** BM25F
//! needs per-field length normalization and weights summed before the
//! saturation; tantivy scores fields as separate BM25 queries (a sum of
//! saturated scores, which lets a common term matched in four fields beat a
//! rare one), and the `bm25` crate has no fields. The whole scorer is an
//! inverted index of about 150 lines over term -> (document, four field
//! frequencies); a snapshot is indexed in memory in well under its load
//! time, and `rollout` takes no new dependency (and no ML framework).
//! Every run ranks the same way: scores accumulate in a fixed order (terms
//! sorted, postings in document order) and ties break by path and name.

mod cache;
pub mod query;
pub mod tokens;

pub use cache::{content_key, IndexCache};
pub use query::{Frame, Query};

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;

use crate::repo::Snapshot;
use crate::spans::SpanKind;
use tokens::{path_terms, text_terms, TermKind};

/// Why a search could not run.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The issue is longer than [`query::MAX_ISSUE_BYTES`].
    #[error("the query is too long: {bytes} bytes, at most {max}")]
    QueryTooLong { bytes: usize, max: usize },
    /// The issue holds NUL bytes.
    #[error("the query holds NUL bytes (binary data): give text")]
    BinaryQuery,
    /// Nothing in the issue is worth searching for.
    #[error("the query has nothing to search for: no name or word of three letters or more that is not a common word")]
    EmptyQuery,
}

/// Fields of a document.
const FIELDS: usize = 4;
const PATH: usize = 0;
const NAMES: usize = 1;
const SIGNATURE: usize = 2;
const BODY: usize = 3;

/// What is indexed.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexConfig {
    /// Text files above this size are left out (generated code, data).
    pub max_file_bytes: usize,
    /// Extensions of the non-code text files indexed (files only, no entities).
    pub text_extensions: Vec<String>,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            max_file_bytes: 512 << 10,
            text_extensions: ["md", "rst", "txt", "toml", "cfg", "ini", "yml", "yaml"].map(String::from).to_vec(),
        }
    }
}

/// Every signal of the search, with its weight (a run config's
/// `[search]`). Defaults were chosen on training repositories
/// (BENCHMARKS.md, "Search"), never on the held-out ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// BM25 saturation.
    pub k1: f32,
    /// Field weights: path, names, signature and docstring, body.
    pub field_weights: [f32; 4],
    /// Field length normalization (BM25's b) per field.
    pub field_b: [f32; 4],
    /// Query weight of identifiers in backticks and frames' functions.
    pub code_weight: f32,
    /// Query weight of code-like names (snake_case, CamelCase, dotted).
    pub identifier_weight: f32,
    /// Query weight of the other words.
    pub word_weight: f32,
    /// A part of a split identifier weighs this share of the whole.
    pub part_factor: f32,
    /// A file's score: its own plus this share of its best entity's.
    pub entity_to_file: f32,
    /// An entity's score: its own plus this share of its file's own.
    pub file_to_entity: f32,
    /// A file the issue names (or a stack frame's): its score plus this
    /// many times the best score of a file it does not name.
    pub named_file_boost: f32,
    /// A frame's function (or a quoted test's subject) in a file: its score times this.
    pub frame_function_boost: f32,
    /// Multiplier of tests (folders `tests`, `test_*` files), unless named.
    pub test_prior: f32,
    /// Multiplier of docs and other non-code text, unless named.
    pub doc_prior: f32,
    /// Multiplier of examples, benchmarks and scripts, unless named.
    pub example_prior: f32,
    /// Ranked files and functions at most.
    pub max_results: usize,
    /// The answer set: files scoring at least this share of the first's...
    pub answer_gap: f32,
    /// ... at most this many; and each answered file's best function when
    /// it scores at least `answer_gap` of the best function's.
    pub answer_files: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            k1: 1.2,
            field_weights: [2.5, 3.0, 1.5, 1.0],
            field_b: [0.3, 0.5, 0.6, 0.75],
            code_weight: 3.0,
            identifier_weight: 2.0,
            word_weight: 0.5,
            part_factor: 0.4,
            entity_to_file: 1.0,
            file_to_entity: 0.3,
            named_file_boost: 1.0,
            frame_function_boost: 2.0,
            test_prior: 0.3,
            doc_prior: 0.3,
            example_prior: 0.5,
            max_results: 20,
            answer_gap: 0.6,
            answer_files: 2,
        }
    }
}

impl SearchConfig {
    /// Whether every value is the default (a run config then leaves `[search]` out).
    pub fn is_default(&self) -> bool {
        self == &SearchConfig::default()
    }

    /// `(key, message)` of a value out of range.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let finite = |v: f32| v.is_finite() && v >= 0.0;
        if !(self.k1.is_finite() && self.k1 > 0.0) {
            return Err(("k1", format!("must be a number > 0, got {}", self.k1)));
        }
        if !self.field_weights.iter().all(|w| finite(*w)) || self.field_weights.iter().all(|w| *w == 0.0) {
            return Err(("field_weights", format!("must be 4 numbers >= 0, not all 0, got {:?}", self.field_weights)));
        }
        if !self.field_b.iter().all(|b| (0.0..=1.0).contains(b)) {
            return Err(("field_b", format!("must be 4 numbers in [0, 1], got {:?}", self.field_b)));
        }
        for (key, v) in [
            ("code_weight", self.code_weight),
            ("identifier_weight", self.identifier_weight),
            ("word_weight", self.word_weight),
            ("part_factor", self.part_factor),
            ("entity_to_file", self.entity_to_file),
            ("file_to_entity", self.file_to_entity),
            ("named_file_boost", self.named_file_boost),
            ("frame_function_boost", self.frame_function_boost),
            ("test_prior", self.test_prior),
            ("doc_prior", self.doc_prior),
            ("example_prior", self.example_prior),
        ] {
            if !finite(v) {
                return Err((key, format!("must be a number >= 0, got {v}")));
            }
        }
        if !(0.0..=1.0).contains(&self.answer_gap) {
            return Err(("answer_gap", format!("must be in [0, 1], got {}", self.answer_gap)));
        }
        if self.max_results == 0 || self.answer_files == 0 {
            return Err(("max_results", "max_results and answer_files must be at least 1".into()));
        }
        Ok(())
    }
}

/// A document's term frequencies per field.
type Tf = [u16; FIELDS];

/// One collection (files, or entities): documents, field lengths, postings.
#[derive(Debug, Default)]
struct Collection {
    lengths: Vec<[u32; FIELDS]>,
    postings: HashMap<String, Vec<(u32, Tf)>>,
    avg: [f32; FIELDS],
}

impl Collection {
    fn add(&mut self, terms: BTreeMap<String, Tf>) -> u32 {
        let id = self.lengths.len() as u32;
        let mut len = [0u32; FIELDS];
        for (term, tf) in terms {
            for f in 0..FIELDS {
                len[f] += u32::from(tf[f]);
            }
            self.postings.entry(term).or_default().push((id, tf));
        }
        self.lengths.push(len);
        id
    }

    fn finish(&mut self) {
        let n = self.lengths.len().max(1) as f32;
        for f in 0..FIELDS {
            self.avg[f] = (self.lengths.iter().map(|l| l[f] as f32).sum::<f32>() / n).max(1.0);
        }
    }

    /// BM25F score of every document for the weighted `terms`.
    fn scores(&self, terms: &BTreeMap<String, f32>, cfg: &SearchConfig) -> Vec<f32> {
        let n = self.lengths.len() as f32;
        let mut out = vec![0f32; self.lengths.len()];
        for (term, qw) in terms {
            let Some(list) = self.postings.get(term) else { continue };
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let len = &self.lengths[doc as usize];
                let mut x = 0f32;
                for f in 0..FIELDS {
                    if tf[f] > 0 {
                        let norm = 1.0 - cfg.field_b[f] + cfg.field_b[f] * len[f] as f32 / self.avg[f];
                        x += cfg.field_weights[f] * f32::from(tf[f]) / norm;
                    }
                }
                out[doc as usize] += qw * idf * x * (cfg.k1 + 1.0) / (cfg.k1 + x);
            }
        }
        out
    }

    fn heap_bytes(&self) -> usize {
        self.lengths.len() * std::mem::size_of::<[u32; FIELDS]>()
            + self.postings.iter().map(|(k, v)| k.len() + 48 + v.len() * std::mem::size_of::<(u32, Tf)>()).sum::<usize>()
    }
}

/// An indexed entity.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityDoc {
    /// Index of its file in [`Index::files`].
    pub file: u32,
    /// Qualified name (`Class.method`).
    pub name: String,
    pub kind: SpanKind,
    pub start_line: usize,
    pub end_line: usize,
}

/// Where a file sits: source, a test, docs, an example.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileRole {
    Source,
    Test,
    Doc,
    Example,
}

impl FileRole {
    /// The role of a repository path.
    pub fn of(path: &str) -> FileRole {
        let lower = path.to_ascii_lowercase();
        let name = lower.rsplit('/').next().unwrap_or(&lower);
        let dirs: Vec<&str> = lower.split('/').collect();
        let dirs = &dirs[..dirs.len() - 1];
        let stem = name.split('.').next().unwrap_or(name);
        if dirs.iter().any(|d| matches!(*d, "tests" | "test" | "testing" | "__tests__" | "spec") || d.starts_with("test_") || d.ends_with("_tests"))
            || stem.starts_with("test_")
            || stem.ends_with("_test")
            || stem.ends_with("_tests")
            || stem == "conftest"
            || name.contains(".test.")
            || name.contains(".spec.")
        {
            FileRole::Test
        } else if !crate::tasks::gold::is_code_path(path) || dirs.iter().any(|d| matches!(*d, "docs" | "doc")) {
            FileRole::Doc
        } else if dirs.iter().any(|d| matches!(*d, "examples" | "example" | "benchmarks" | "benchmark" | "bench" | "samples" | "scripts"))
        {
            FileRole::Example
        } else {
            FileRole::Source
        }
    }
}

/// The index of one snapshot.
#[derive(Debug)]
pub struct Index {
    /// Indexed file paths (document ids of the file collection), sorted.
    pub files: Vec<String>,
    /// Entities (document ids of the entity collection), by file then line.
    pub entities: Vec<EntityDoc>,
    file_docs: Collection,
    entity_docs: Collection,
    /// File name -> files with that name (to resolve named paths by suffix).
    by_name: HashMap<String, Vec<u32>>,
    /// First entity of each file (entities of file i: `first_entity[i]..first_entity[i + 1]`).
    first_entity: Vec<u32>,
}

/// One file's documents, made in parallel, merged in path order.
struct FileDocs {
    path: String,
    terms: BTreeMap<String, Tf>,
    entities: Vec<(EntityDoc, BTreeMap<String, Tf>)>,
}

fn bump(map: &mut BTreeMap<String, Tf>, field: usize, count: u16) -> impl FnMut(&str, TermKind) + '_ {
    move |t, _| {
        let e = map.entry(t.to_string()).or_insert([0; FIELDS]);
        e[field] = e[field].saturating_add(count);
    }
}

/// The lines (1-based) of `text`, as byte slices.
fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split(|&b| b == b'\n').collect()
}

/// An entity's header (its lines up to the one that opens its body) and
/// docstring (a string right after the header, or comments right above).
fn signature_lines<'a>(all: &[&'a [u8]], start: usize, end: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut i = start;
    // Comments right above (Rust `///`, Go/Java/C `//`, `#`, `*`).
    let mut j = start.saturating_sub(1);
    let mut above = 0;
    while j >= 1 && above < 10 {
        let l = all.get(j - 1).map_or(&b""[..], |l| l.trim_ascii());
        if l.starts_with(b"//") || l.starts_with(b"#") || l.starts_with(b"*") || l.starts_with(b"/*") {
            out.push(all[j - 1]);
            above += 1;
            j -= 1;
        } else {
            break;
        }
    }
    while i <= end && i <= all.len() {
        let l = all[i - 1];
        out.push(l);
        let t = l.trim_ascii_end();
        i += 1;
        if t.ends_with(b":") || t.ends_with(b"{") || i - start >= 6 {
            break;
        }
    }
    // A Python docstring.
    let next = all.get(i - 1).map(|l| l.trim_ascii());
    if let Some(first) = next.filter(|l| [&b"\"\"\""[..], b"'''", b"r\"\"\"", b"u\"\"\""].iter().any(|q| l.starts_with(q))) {
        out.push(first);
        let closed_here = first.len() > 4 && (first.ends_with(b"\"\"\"") || first.ends_with(b"'''"));
        let mut k = i;
        while !closed_here && k < end.min(all.len()) && k - i < 40 {
            let l = all[k];
            out.push(l);
            k += 1;
            let t = l.trim_ascii_end();
            if t.ends_with(b"\"\"\"") || t.ends_with(b"'''") {
                break;
            }
        }
    }
    out
}

fn file_docs(path: &str, text: &[u8], spans: Option<&crate::spans::FileSpans>) -> FileDocs {
    let mut terms = BTreeMap::new();
    let mut path_map = BTreeMap::new();
    path_terms(path, &mut bump(&mut path_map, PATH, 1));
    for (t, tf) in &path_map {
        terms.insert(t.clone(), *tf);
    }
    text_terms(text, &mut bump(&mut terms, BODY, 1));
    let mut entities = Vec::new();
    if let Some(spans) = spans.filter(|s| !s.spans.is_empty()) {
        let all = lines(text);
        // Owner of each line: spans come parents first, so children overwrite.
        let mut owner: Vec<Option<usize>> = vec![None; all.len() + 1];
        for (i, s) in spans.spans.iter().enumerate() {
            for slot in owner.iter_mut().take(s.end_line.min(all.len()) + 1).skip(s.start_line) {
                *slot = Some(i);
            }
        }
        let mut bodies: Vec<BTreeMap<String, Tf>> = vec![BTreeMap::new(); spans.spans.len()];
        for (line, o) in owner.iter().enumerate().skip(1) {
            if let Some(i) = o {
                text_terms(all[line - 1], &mut bump(&mut bodies[*i], BODY, 1));
            }
        }
        for (s, mut m) in spans.spans.iter().zip(bodies) {
            for (t, tf) in &path_map {
                m.entry(t.clone()).or_insert([0; FIELDS])[PATH] = tf[PATH];
            }
            let leaf = s.name.rsplit('.').next().unwrap_or(&s.name);
            // The leaf name counts twice, the enclosing names once.
            tokens::identifier_terms(leaf, &mut bump(&mut m, NAMES, 1));
            for part in s.name.split('.') {
                tokens::identifier_terms(part, &mut bump(&mut m, NAMES, 1));
            }
            for l in signature_lines(&all, s.start_line, s.end_line) {
                text_terms(l, &mut bump(&mut m, SIGNATURE, 1));
            }
            tokens::identifier_terms(leaf, &mut bump(&mut terms, NAMES, 1));
            entities.push((
                EntityDoc { file: 0, name: s.name.clone(), kind: s.kind, start_line: s.start_line, end_line: s.end_line },
                m,
            ));
        }
    }
    FileDocs { path: path.to_string(), terms, entities }
}

/// What the index of a snapshot is made of, before [`Collection::finish`].
impl Index {
    /// Indexes `snapshot`: every text file of a parsed language (with its
    /// entities) and of `cfg.text_extensions` (file only), up to
    /// `cfg.max_file_bytes`. Files are read in parallel.
    pub fn build(snapshot: &Snapshot, cfg: &IndexConfig) -> Index {
        let docs: Vec<FileDocs> = snapshot
            .files()
            .par_iter()
            .filter_map(|f| {
                let text = f.text()?;
                if text.len() > cfg.max_file_bytes {
                    return None;
                }
                let ext = f.path.rsplit_once('.').map_or("", |(_, e)| e);
                let code = crate::spans::Language::from_path(&f.path).is_some();
                if !code && !crate::tasks::gold::is_code_path(&f.path) && !cfg.text_extensions.iter().any(|e| e == ext) {
                    return None;
                }
                Some(file_docs(&f.path, text, if code { f.spans().map(|s| s.as_ref()) } else { None }))
            })
            .collect();
        let mut index = Index {
            files: Vec::with_capacity(docs.len()),
            entities: Vec::new(),
            file_docs: Collection::default(),
            entity_docs: Collection::default(),
            by_name: HashMap::new(),
            first_entity: Vec::with_capacity(docs.len() + 1),
        };
        for d in docs {
            let id = index.file_docs.add(d.terms);
            let name = d.path.rsplit('/').next().unwrap_or(&d.path).to_string();
            index.by_name.entry(name).or_default().push(id);
            index.files.push(d.path);
            index.first_entity.push(index.entities.len() as u32);
            for (mut e, terms) in d.entities {
                e.file = id;
                index.entity_docs.add(terms);
                index.entities.push(e);
            }
        }
        index.first_entity.push(index.entities.len() as u32);
        index.file_docs.finish();
        index.entity_docs.finish();
        index
    }

    /// Approximate heap bytes of the index (paths, names and postings).
    pub fn heap_bytes(&self) -> usize {
        self.files.iter().map(|f| f.len() + 24).sum::<usize>()
            + self.entities.iter().map(|e| e.name.len() + std::mem::size_of::<EntityDoc>()).sum::<usize>()
            + self.file_docs.heap_bytes()
            + self.entity_docs.heap_bytes()
    }

    /// Files whose path is `written` or ends with `/written` (at most
    /// `max`: a name many files share says nothing).
    fn resolve(&self, written: &str, max: usize) -> Vec<u32> {
        let written = written.trim_start_matches('/');
        let name = written.rsplit('/').next().unwrap_or(written);
        let Some(ids) = self.by_name.get(name) else { return Vec::new() };
        let found: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| {
                let p = &self.files[i as usize];
                p == written || p.ends_with(&format!("/{written}"))
            })
            .collect();
        if found.len() > max {
            Vec::new()
        } else {
            found
        }
    }

    /// A path as the issue wrote it -> the files it names: the longest
    /// suffix of it (of two components at least, or the whole) that some
    /// file's path ends with; a module path `a/b` tries `a/b.py`,
    /// `a/b/__init__.py`, and `a.py` (for `module.attribute`).
    fn named_files(&self, written: &str) -> Vec<u32> {
        let comps: Vec<&str> = written.split('/').filter(|c| !c.is_empty() && *c != "." && *c != "..").collect();
        let has_ext = comps.last().is_some_and(|c| c.contains('.'));
        let candidates: Vec<String> = if has_ext {
            (0..comps.len()).filter(|&i| i == 0 || comps.len() - i >= 2).map(|i| comps[i..].join("/")).collect()
        } else {
            let mut v = Vec::new();
            for end in (1..=comps.len()).rev() {
                if end < comps.len().saturating_sub(1) {
                    break;
                }
                let m = comps[..end].join("/");
                if end >= 2 || comps.len() == 1 {
                    v.push(format!("{m}.py"));
                    v.push(format!("{m}/__init__.py"));
                }
            }
            v
        };
        for c in candidates {
            let found = self.resolve(&c, 3);
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// The entities of file `id`.
    fn entities_of(&self, id: u32) -> std::ops::Range<usize> {
        self.first_entity[id as usize] as usize..self.first_entity[id as usize + 1] as usize
    }

    /// Ranks files and entities for `query` (see the module doc).
    pub fn search(&self, query: &Query, cfg: &SearchConfig) -> Hits {
        let file_own = self.file_docs.scores(&query.terms, cfg);
        let mut entity = self.entity_docs.scores(&query.terms, cfg);
        // Named files and frames' files.
        let mut named = vec![false; self.files.len()];
        for p in &query.paths {
            for id in self.named_files(p) {
                named[id as usize] = true;
            }
        }
        let mut boosted_names: Vec<(Option<Vec<u32>>, &str)> = Vec::new();
        for fr in &query.frames {
            let ids = self.named_files(&fr.path);
            for &id in &ids {
                named[id as usize] = true;
            }
            boosted_names.push(((!ids.is_empty()).then_some(ids), fr.function.as_str()));
        }
        for t in &query.tested {
            boosted_names.push((None, t.as_str()));
        }
        for (files, name) in &boosted_names {
            for (i, e) in self.entities.iter().enumerate() {
                let leaf = e.name.rsplit('.').next().unwrap_or(&e.name);
                if leaf == *name && files.as_ref().is_none_or(|ids| ids.contains(&e.file)) {
                    entity[i] *= cfg.frame_function_boost;
                }
            }
        }
        let prior = |id: u32| -> f32 {
            if named[id as usize] {
                return 1.0;
            }
            match FileRole::of(&self.files[id as usize]) {
                FileRole::Source => 1.0,
                FileRole::Test => cfg.test_prior,
                FileRole::Doc => cfg.doc_prior,
                FileRole::Example => cfg.example_prior,
            }
        };
        let mut file_score: Vec<f32> = (0..self.files.len() as u32)
            .map(|id| {
                let best = self.entities_of(id).map(|i| entity[i]).fold(0f32, f32::max);
                (file_own[id as usize] + cfg.entity_to_file * best) * prior(id)
            })
            .collect();
        let unnamed_best = file_score.iter().zip(&named).filter(|(_, n)| !**n).map(|(s, _)| *s).fold(0f32, f32::max);
        for (s, n) in file_score.iter_mut().zip(&named) {
            if *n {
                *s += cfg.named_file_boost * unnamed_best.max(1e-3);
            }
        }
        let entity_score: Vec<f32> = self
            .entities
            .iter()
            .zip(&entity)
            .map(|(e, s)| {
                let own = (s + cfg.file_to_entity * file_own[e.file as usize]) * prior(e.file);
                if named[e.file as usize] {
                    own + cfg.named_file_boost * 0.5 * unnamed_best.max(1e-3) * (*s > 0.0) as u8 as f32
                } else {
                    own
                }
            })
            .collect();
        let top = |scores: &[f32]| -> Vec<(usize, f32)> {
            let mut v: Vec<(usize, f32)> = scores.iter().copied().enumerate().filter(|(_, s)| *s > 0.0).collect();
            // Ties: by document order (path, then line): the same every run.
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v.truncate(cfg.max_results.max(1));
            v
        };
        Hits {
            files: top(&file_score).into_iter().map(|(i, s)| FileHit { path: self.files[i].clone(), score: s }).collect(),
            entities: top(&entity_score)
                .into_iter()
                .map(|(i, s)| {
                    let e = &self.entities[i];
                    EntityHit {
                        path: self.files[e.file as usize].clone(),
                        name: e.name.clone(),
                        start_line: e.start_line,
                        end_line: e.end_line,
                        score: s,
                    }
                })
                .collect(),
        }
    }
}

/// A ranked file.
#[derive(Clone, Debug, PartialEq)]
pub struct FileHit {
    pub path: String,
    pub score: f32,
}

/// A ranked entity, with its line span.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityHit {
    pub path: String,
    pub name: String,
    pub start_line: usize,
    pub end_line: usize,
    pub score: f32,
}

impl EntityHit {
    /// `path:Qualified.name`.
    pub fn entity(&self) -> String {
        format!("{}:{}", self.path, self.name)
    }
}

/// What [`Index::search`] found, best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hits {
    pub files: Vec<FileHit>,
    pub entities: Vec<EntityHit>,
}

/// What a search of one snapshot found for one issue.
pub fn search_hits(cache: &IndexCache, snapshot: &Snapshot, issue: &str, cfg: &SearchConfig) -> Result<Hits, SearchError> {
    let query = Query::from_issue(issue, cfg)?;
    Ok(cache.get(snapshot).search(&query, cfg))
}

#[cfg(test)]
mod tests;
