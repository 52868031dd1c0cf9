//! How cuDNN's fused attention (feature `cudnn`, `cudnn.rs`) sees one call,
//! in plain Rust so that the CPU tests check it: which backend runs
//! ([`Backend`], carried with the model in [`Settings`]), our
//! [`Visibility`] as cuDNN's sequences ([`sequences`]: per (row, segment)
//! one run of queries and the run of keys it sees, bottom-right causal),
//! the token-major strides cuDNN reads and writes ([`Layouts`]), the
//! sequences' lengths and ragged offsets ([`Ragged`], packed 16-byte
//! aligned), the graph-cache key ([`GraphKey`]) with its length buckets,
//! and where `libcudnn.so.9` is looked for ([`library_candidates`]).
//!
//! cuDNN's view: a "batch" of `n` sequences, sequence `i` with `seq_q[i]`
//! queries and `seq_kv[i]` keys, its first query and key at element
//! offsets `q_off[i]`, `k_off[i]` (INT64 ragged offsets, `n + 1` entries,
//! the last and the padding sequences' the past-the-end of the data) of
//! tensors `[n, heads, bucket, d]` with token-major strides (head `d`,
//! token `heads * d`: THD); query `a` of a sequence sees keys `0 ..= a +
//! seq_kv - seq_q` (causal, bottom-right aligned: a KV prefix in front of
//! the queries). Padding queries (ours see every key; their output is
//! never used) are in no sequence: cuDNN leaves their output and gradients
//! at the zeros they start as.

use super::Visibility;
use std::path::{Path, PathBuf};

/// Which attention runs on CUDA (`[model] attention`): a value carried
/// with the model to every call ([`Settings`]), never read from a global.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// cuDNN where it takes the call, else the fused kernel (logged once per
    /// reason). The default.
    #[default]
    Auto,
    /// cuDNN or an error saying why it declined (for benchmarks).
    Cudnn,
    /// The fused kernel (`kernels/cuda/attention.cu`), never cuDNN.
    Kernel,
}

/// The environment variable that overrides `[model] attention` (read once,
/// by the binary's `main`, never by a library).
pub const BACKEND_ENV: &str = "FUSEGRPO_ATTENTION";

impl Backend {
    /// Every value, as configs and flags spell it.
    pub const NAMES: [&'static str; 3] = ["auto", "cudnn", "kernel"];

    /// Parses a value of [`BACKEND_ENV`] (unset or empty: none), naming the
    /// variable in the error.
    pub fn parse_env(value: Option<&str>) -> Result<Option<Backend>, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| format!("{BACKEND_ENV}={v:?}: expected \"auto\", \"cudnn\" or \"kernel\"")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cudnn => "cudnn",
            Backend::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s.trim() {
            "auto" => Ok(Backend::Auto),
            "cudnn" => Ok(Backend::Cudnn),
            "kernel" => Ok(Backend::Kernel),
            other => Err(format!("{other:?}: expected one of \"auto\", \"cudnn\", \"kernel\"")),
        }
    }
}

/// How attention runs on CUDA, carried with the model to each call
/// (`lm`'s `ModelConfig::attention`, from `[model] attention` and
/// `attention_deterministic`): which backend, and whether cuDNN's backward
/// is the deterministic one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Settings {
    pub backend: Backend,
    /// cuDNN's deterministic backward (bitwise reruns). On Hopper with
    /// cuDNN older than 9.25 it takes a workspace quadratic in the sequence
    /// (`slots * heads * max_q * max_kv * 2` bytes: 16 GiB for one 16K row
    /// at 32 heads); in Auto a backward over `workspace_budget` declines
    /// cuDNN for the call (the fused kernel runs, which is deterministic).
    pub deterministic: bool,
    /// The most workspace (bytes) cuDNN's backward may take before Auto
    /// declines cuDNN for the call at the forward (`[model]
    /// attention_workspace_mib`; [`WORKSPACE_BUDGET`] by default). It is
    /// also the cap cuDNN >= 9.25 keeps the deterministic backward's dP
    /// workspace under (set once, by the process's first cuDNN forward).
    /// The memory planner counts it where cuDNN may run.
    pub workspace_budget: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { backend: Backend::Auto, deterministic: true, workspace_budget: WORKSPACE_BUDGET }
    }
}

/// The default of [`Settings::workspace_budget`]: 4 GiB.
pub const WORKSPACE_BUDGET: u64 = 4 << 30;

/// One cuDNN sequence: queries `q_start .. q_start + q_len` of row `row`
/// and the keys `k_start .. k_start + k_len` they see, query `a` seeing
/// keys `k_start ..= k_start + a + k_len - q_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequence {
    pub row: usize,
    pub q_start: usize,
    pub q_len: usize,
    pub k_start: usize,
    pub k_len: usize,
}

/// A run of consecutive slots of one segment with consecutive positions.
#[derive(Debug, Clone, Copy)]
struct Run {
    segment: u32,
    start: usize,
    len: usize,
    first_pos: i64,
}

/// The non-padding slots of one row as runs, or why they are not runs
/// (a segment split in two, positions that skip or repeat).
fn runs(positions: &[i64], segments: Option<&[u32]>, what: &str, row: usize) -> Result<Vec<Run>, String> {
    let mut out: Vec<Run> = Vec::new();
    for (i, &p) in positions.iter().enumerate() {
        if p < 0 {
            continue;
        }
        let segment = segments.map_or(0, |s| s[i]);
        match out.last_mut() {
            Some(r) if r.segment == segment && r.start + r.len == i && r.first_pos + r.len as i64 == p => r.len += 1,
            _ => {
                if out.iter().any(|r| r.segment == segment) {
                    return Err(format!(
                        "row {row}: the {what} of segment {segment} are not one run of consecutive slots and positions (slot {i}, position {p})"
                    ));
                }
                out.push(Run { segment, start: i, len: 1, first_pos: p });
            }
        }
    }
    Ok(out)
}

/// Our visibility as cuDNN's sequences (row-major, in slot order), or why
/// cuDNN's causal masks cannot express it (then the fused kernel runs).
pub fn sequences(vis: &Visibility) -> Result<Vec<Sequence>, String> {
    let (t, s) = (vis.queries, vis.keys);
    let mut out = Vec::new();
    for row in 0..vis.batch {
        let segs = |v: &Vec<u32>, n: usize| v[row * n..(row + 1) * n].to_vec();
        let (qseg, kseg) = match &vis.segments {
            Some((q, k)) => (Some(segs(q, t)), Some(segs(k, s))),
            None => (None, None),
        };
        let queries = runs(&vis.query_positions[row * t..(row + 1) * t], qseg.as_deref(), "queries", row)?;
        let keys = runs(&vis.key_positions[row * s..(row + 1) * s], kseg.as_deref(), "keys", row)?;
        for q in queries {
            let Some(k) = keys.iter().find(|k| k.segment == q.segment) else {
                return Err(format!("row {row}: the queries at slots {}.. (segment {}) see no key", q.start, q.segment));
            };
            // Query a (position q.first_pos + a) sees key m when k.first_pos + m <= q.first_pos + a.
            let lead = q.first_pos - k.first_pos;
            if lead < 0 {
                return Err(format!("row {row}: the query at slot {} (position {}) sees no key", q.start, q.first_pos));
            }
            let k_len = lead as usize + q.len;
            if k_len > k.len {
                return Err(format!(
                    "row {row}: the queries at slots {}.. reach position {} but the keys of their segment end at {}",
                    q.start,
                    q.first_pos + q.len as i64 - 1,
                    k.first_pos + k.len as i64 - 1
                ));
            }
            out.push(Sequence { row, q_start: q.start, q_len: q.len, k_start: k.start, k_len });
        }
    }
    Ok(out)
}

/// Logs `message` (a `tracing` info event) once per process for each message that
/// differs from the others in more than its numbers ("attention: ...").
pub fn note_once(message: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let shape: String = message.chars().filter(|c| !c.is_ascii_digit()).collect();
    let Ok(mut seen) = SEEN.lock() else { return };
    if !seen.contains(&shape) {
        seen.push(shape);
        tracing::info!("attention: {message}");
    }
}

/// Strides (in elements) of a `[b, heads, len, d]` operand: row, head, token.
pub type Strides = [i64; 3];

/// The strides of a token-major buffer `[b, len, heads, d]` seen as
/// `[b, heads, len, d]` (cuDNN's THD/BSHD layout): head stride `d`, token
/// stride `heads * d`, neither depending on `len`.
pub fn token_major(heads: usize, len: usize, d: usize) -> Strides {
    let (h, len, d) = (heads as i64, len as i64, d as i64);
    [len * h * d, d, h * d]
}

/// Whether cuDNN reads an operand with these strides as it is: token-major
/// (the heads of one token side by side, then the next token), so that a
/// descriptor `[heads, bucket, d]` never overlaps whatever the length
/// bucket, and the strides (part of the graph key) do not depend on the row
/// length. A head-major operand (`[b, heads, t, d]` contiguous, or a KV
/// cache `[b, heads, capacity, d]`) is copied token-major first.
pub fn takes_as_is(st: &Strides, heads: usize, d: usize) -> bool {
    let (hs, ts, h, d) = (st[1], st[2], heads as i64, d as i64);
    (h <= 1 || hs >= d) && ts >= (h - 1).max(0) * hs + d && (h <= 1 || hs < ts)
}

/// Whether a `[heads, len, d]` descriptor with head stride `hs` and token
/// stride `ts` (last dimension contiguous) addresses one element twice.
pub fn overlaps(heads: i64, len: i64, d: i64, hs: i64, ts: i64) -> bool {
    let mut dims = [(heads, hs), (len, ts)];
    dims.sort_by_key(|&(n, st)| (st, n));
    let mut extent = d; // elements spanned by the dimensions below
    for (n, st) in dims {
        if n <= 1 {
            continue;
        }
        if st < extent {
            return true;
        }
        extent += st * (n - 1);
    }
    false
}

/// The strides of each operand as cuDNN reads or writes them: all
/// token-major (inputs as given when [`takes_as_is`], else as the
/// token-major copy made for cuDNN), so that no descriptor overlaps for a
/// row shorter than its bucket and the graph key is the same for every row
/// length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layouts {
    pub q: Strides,
    pub k: Strides,
    pub v: Strides,
    /// The output and its gradient (`[b, t, heads * d]`).
    pub o: Strides,
    /// dQ (`[b, t, heads, d]`), dK and dV (`[b, s, kv_heads, d]`), returned
    /// as `[b, heads, len, d]` views.
    pub dq: Strides,
    pub dkv: Strides,
    /// Which of q, k, v cuDNN reads from a token-major copy.
    pub copied: [bool; 3],
}

impl Layouts {
    /// From the strides of q `[b, heads, t, d]` and k, v `[b, kv_heads, s, d]`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(q: Strides, k: Strides, v: Strides, heads: usize, kv_heads: usize, t: usize, s: usize, d: usize) -> Layouts {
        // One head: its head stride addresses nothing; `d` keeps the key free of the length.
        let pick = |st: Strides, h: usize, len: usize| match takes_as_is(&st, h, d) {
            true if h <= 1 => ([st[0], d as i64, st[2]], false),
            true => (st, false),
            false => (token_major(h, len, d), true),
        };
        let ((q, cq), (k, ck), (v, cv)) = (pick(q, heads, t), pick(k, kv_heads, s), pick(v, kv_heads, s));
        Layouts { q, k, v, o: token_major(heads, t, d), dq: token_major(heads, t, d), dkv: token_major(kv_heads, s, d), copied: [cq, ck, cv] }
    }
}

/// cuDNN's per-sequence inputs for `n` sequences (padded to the bucket
/// with empty sequences): lengths (INT32) and the ragged offsets (INT64,
/// `n + 1` entries, in elements) of each operand. Entry `i < n` is the
/// first element of sequence `i`; entry `n` and those of the empty padding
/// sequences are the past-the-end of the last sequence's data (as NVIDIA's
/// docs and TransformerEngine have it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ragged {
    pub seq_q: Vec<i32>,
    pub seq_kv: Vec<i32>,
    pub q: Vec<i64>,
    pub k: Vec<i64>,
    pub v: Vec<i64>,
    pub o: Vec<i64>,
    pub dq: Vec<i64>,
    pub dkv: Vec<i64>,
    /// The longest sequence's queries and keys.
    pub max_q: usize,
    pub max_kv: usize,
}

/// Where each array of [`Ragged::packed`] starts, in bytes: seq_q, seq_kv,
/// then the offsets of q, k, v, o, dq, dkv (the order of `FgSdpaPtrs` in
/// the shim). Every start is a multiple of 16 (cuDNN's tensors are
/// declared 16-byte aligned).
pub type PackedStarts = [u64; 8];

impl Ragged {
    /// From the sequences, padded to `slots` (>= their count) entries.
    pub fn new(seqs: &[Sequence], layouts: &Layouts, slots: usize) -> Result<Ragged, String> {
        if slots < seqs.len() {
            return Err(format!("{} sequences for {slots} slots", seqs.len()));
        }
        let offsets = |st: &Strides, q_side: bool| -> Vec<i64> {
            let place = |sq: &Sequence, end: bool| {
                let (start, len) = if q_side { (sq.q_start, sq.q_len) } else { (sq.k_start, sq.k_len) };
                sq.row as i64 * st[0] + (start + if end { len } else { 0 }) as i64 * st[2]
            };
            let mut v: Vec<i64> = seqs.iter().map(|sq| place(sq, false)).collect();
            let end = seqs.last().map_or(0, |sq| place(sq, true));
            v.resize(slots + 1, end);
            v
        };
        let lens = |f: fn(&Sequence) -> usize| -> Result<Vec<i32>, String> {
            let mut v = seqs.iter().map(|s| i32::try_from(f(s)).map_err(|_| format!("sequence length {} does not fit cuDNN's INT32 lengths", f(s)))).collect::<Result<Vec<_>, _>>()?;
            v.resize(slots, 0);
            Ok(v)
        };
        Ok(Ragged {
            seq_q: lens(|s| s.q_len)?,
            seq_kv: lens(|s| s.k_len)?,
            q: offsets(&layouts.q, true),
            k: offsets(&layouts.k, false),
            v: offsets(&layouts.v, false),
            o: offsets(&layouts.o, true),
            dq: offsets(&layouts.dq, true),
            dkv: offsets(&layouts.dkv, false),
            max_q: seqs.iter().map(|s| s.q_len).max().unwrap_or(0),
            max_kv: seqs.iter().map(|s| s.k_len).max().unwrap_or(0),
        })
    }

    /// Every array in one little-endian buffer for the device, each padded
    /// to 16 bytes, and where each starts ([`PackedStarts`]).
    pub fn packed(&self) -> (Vec<u8>, PackedStarts) {
        fn pad(out: &mut Vec<u8>) {
            out.resize(out.len().next_multiple_of(16), 0);
        }
        let mut out = Vec::new();
        let mut starts = [0u64; 8];
        for (i, lens) in [&self.seq_q, &self.seq_kv].into_iter().enumerate() {
            starts[i] = out.len() as u64;
            out.extend(lens.iter().flat_map(|x| x.to_le_bytes()));
            pad(&mut out);
        }
        for (i, offs) in [&self.q, &self.k, &self.v, &self.o, &self.dq, &self.dkv].into_iter().enumerate() {
            starts[2 + i] = out.len() as u64;
            out.extend(offs.iter().flat_map(|x| x.to_le_bytes()));
            pad(&mut out);
        }
        (out, starts)
    }
}

/// Sequence-length bucket: the next power of two, at least 64, so that a
/// graph serves every batch whose longest sequence is in the bucket.
pub fn length_bucket(len: usize) -> usize {
    len.max(64).next_power_of_two()
}

/// Sequence-count bucket: the next power of two (at least 1); the slots
/// past the real sequences are empty.
pub fn count_bucket(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// Element type of the graph (cuDNN runs 16-bit inputs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum IoType {
    Bf16 = 0,
    F16 = 1,
}

/// What identifies one cuDNN graph: built once (the slow part) and cached.
/// Lengths and the sequence count are bucketed; strides are the head and
/// token strides cuDNN sees ([`Layouts`]: token-major, so the same for every
/// row length). Passed to the shim as is (`#[repr(C)]`, no padding bytes,
/// mirrored by `FgSdpaKey` in `kernels/cudnn/sdpa.cpp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct GraphKey {
    /// 0: forward (with the statistics the backward reads), 1: backward.
    pub backward: i32,
    pub io: i32,
    pub slots: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    pub max_q: i64,
    pub max_kv: i64,
    /// Head and token strides of q, k, v, o, dq, dkv.
    pub strides: [i64; 12],
    /// The softmax scale's bits (f32), part of the graph.
    pub scale_bits: u32,
    /// 1: the deterministic backward ([`Settings::deterministic`]).
    pub deterministic: i32,
    /// The GPU's compute capability as cuDNN's SM version (`90` for 9.0),
    /// set on the graph rather than read through cudart; 0: unknown.
    pub sm_version: i32,
    /// Zero (keeps the struct free of padding: the shim hashes its bytes).
    pub reserved: i32,
}

impl GraphKey {
    /// The key of a call with these sequences' bucketed sizes.
    #[allow(clippy::too_many_arguments)]
    pub fn new(backward: bool, io: IoType, ragged: &Ragged, heads: usize, kv_heads: usize, head_dim: usize, layouts: &Layouts, scale: f32) -> GraphKey {
        let hs = |s: &Strides| [s[1], s[2]];
        let st = [hs(&layouts.q), hs(&layouts.k), hs(&layouts.v), hs(&layouts.o), hs(&layouts.dq), hs(&layouts.dkv)];
        let mut strides = [0i64; 12];
        for (i, pair) in st.iter().enumerate() {
            strides[2 * i..2 * i + 2].copy_from_slice(pair);
        }
        GraphKey {
            backward: backward as i32,
            io: io as i32,
            slots: ragged.seq_q.len() as i64,
            heads: heads as i64,
            kv_heads: kv_heads as i64,
            head_dim: head_dim as i64,
            max_q: length_bucket(ragged.max_q) as i64,
            max_kv: length_bucket(ragged.max_kv) as i64,
            strides,
            scale_bits: scale.to_bits(),
            deterministic: 1,
            sm_version: 0,
            reserved: 0,
        }
    }

    /// The same key with `settings`' backward and the GPU's SM version.
    pub fn with(self, settings: &Settings, sm_version: i32) -> GraphKey {
        GraphKey { deterministic: settings.deterministic as i32, sm_version, ..self }
    }

    /// f32 elements of the forward's statistics (`[slots, heads, max_q]`).
    pub fn stats_len(&self) -> usize {
        (self.slots * self.heads * self.max_q) as usize
    }

    /// The first operand (q, k, v, o, dq, dkv) whose descriptor
    /// `[heads, bucket, d]` addresses an element twice, if any (cuDNN's
    /// outputs must not overlap; an input that does reads wrong rows).
    pub fn overlapping(&self) -> Option<&'static str> {
        let names = ["q", "k", "v", "o", "dq", "dk/dv"];
        (0..6).find_map(|i| {
            let (h, len) = if matches!(i, 1 | 2 | 5) { (self.kv_heads, self.max_kv) } else { (self.heads, self.max_q) };
            overlaps(h, len, self.head_dim, self.strides[2 * i], self.strides[2 * i + 1]).then_some(names[i])
        })
    }
}

/// Why cuDNN does not take a call before any graph is built: dtype, head
/// dim (cuDNN's fused attention: multiples of 8 up to 256), shapes.
pub fn static_decline(dtype: candle_core::DType, head_dim: usize) -> Option<String> {
    use candle_core::DType;
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Some(format!("cuDNN's fused attention takes bf16 and f16, not {dtype:?}"));
    }
    if !head_dim.is_multiple_of(8) || head_dim > 256 {
        return Some(format!("head dim {head_dim}: cuDNN's fused attention takes multiples of 8 up to 256"));
    }
    None
}

/// The environment variable naming libcudnn.so.9 (a file or its folder).
pub const LIBRARY_ENV: &str = "FUSEGRPO_CUDNN_LIB";

/// Where `libcudnn.so.9` is looked for, in order: [`LIBRARY_ENV`] alone
/// when set; else the loader's own search (the bare name:
/// `LD_LIBRARY_PATH`, the ld.so cache, e.g. a system cuDNN); then the
/// `nvidia/cudnn/lib` folder of Python installs (the `nvidia-cudnn-cu13`
/// / `-cu12` wheels, PyTorch's) under `$VIRTUAL_ENV`, `$CONDA_PREFIX`,
/// `~/.local`, `/usr/local`, `/usr` and `/opt/conda`; then
/// `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`. `env` reads a variable.
pub fn library_candidates(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    const NAME: &str = "libcudnn.so.9";
    if let Some(v) = env(LIBRARY_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        return vec![if p.is_dir() { p.join(NAME) } else { p }];
    }
    let mut out = vec![PathBuf::from(NAME)];
    let home = env("HOME").map(|h| PathBuf::from(h).join(".local"));
    let prefixes = [env("VIRTUAL_ENV").map(PathBuf::from), env("CONDA_PREFIX").map(PathBuf::from), home, Some("/usr/local".into()), Some("/usr".into()), Some("/opt/conda".into())];
    for prefix in prefixes.into_iter().flatten() {
        for site in python_sites(&prefix) {
            let p = site.join("nvidia/cudnn/lib").join(NAME);
            if p.exists() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    for dir in [env("CUDA_HOME").map(|h| PathBuf::from(h).join("lib64")), Some("/usr/local/cuda/lib64".into())].into_iter().flatten() {
        let p = dir.join(NAME);
        if p.exists() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// `<prefix>/lib/python3.*/{site,dist}-packages` and `<prefix>/lib/python3/dist-packages`, sorted.
fn python_sites(prefix: &Path) -> Vec<PathBuf> {
    let lib = prefix.join("lib");
    let Ok(entries) = std::fs::read_dir(&lib) else { return Vec::new() };
    let mut pythons: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3"))).collect();
    pythons.sort();
    pythons.into_iter().flat_map(|p| [p.join("site-packages"), p.join("dist-packages")]).filter(|p| p.is_dir()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vis(batch: usize, q: Vec<i64>, k: Vec<i64>, seg: Option<(Vec<u32>, Vec<u32>)>) -> Visibility {
        let v = Visibility::new(batch, q, k).expect("visibility");
        match seg {
            Some((qs, ks)) => v.with_segments(qs, ks).expect("segments"),
            None => v,
        }
    }

    /// Every (row, query, key) the sequences admit equals what `sees` says
    /// for non-padding queries.
    fn agrees(v: &Visibility, seqs: &[Sequence]) {
        for r in 0..v.batch() {
            for i in 0..v.queries() {
                if v.query_positions[r * v.queries() + i] < 0 {
                    assert!(!seqs.iter().any(|s| s.row == r && (s.q_start..s.q_start + s.q_len).contains(&i)), "padding query {r}/{i} in a sequence");
                    continue;
                }
                let s = seqs.iter().find(|s| s.row == r && (s.q_start..s.q_start + s.q_len).contains(&i)).expect("query in a sequence");
                let a = i - s.q_start;
                for j in 0..v.keys() {
                    let mapped = j >= s.k_start && j < s.k_start + s.k_len && j - s.k_start <= a + s.k_len - s.q_len;
                    assert_eq!(mapped, v.sees(r, i, j), "row {r} query {i} key {j}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn left_padding_is_one_sequence_per_row_starting_after_the_pads() {
        // Row 0: 2 pads then 4 tokens; row 1: 6 tokens.
        let q = vec![-1, -1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5];
        let v = vis(2, q.clone(), q, None);
        let seqs = sequences(&v).expect("maps");
        assert_eq!(seqs, vec![Sequence { row: 0, q_start: 2, q_len: 4, k_start: 2, k_len: 4 }, Sequence { row: 1, q_start: 0, q_len: 6, k_start: 0, k_len: 6 }]);
        agrees(&v, &seqs);
    }

    #[test]
    fn packed_segments_are_one_sequence_each() {
        // One row: segment 0 (3 tokens), segment 1 (2 tokens), 2 trailing pads (segment 2).
        let q = vec![0, 1, 2, 0, 1, -1, -1];
        let seg = vec![0, 0, 0, 1, 1, 2, 2];
        let v = vis(1, q.clone(), q, Some((seg.clone(), seg)));
        let seqs = sequences(&v).expect("maps");
        assert_eq!(seqs, vec![Sequence { row: 0, q_start: 0, q_len: 3, k_start: 0, k_len: 3 }, Sequence { row: 0, q_start: 3, q_len: 2, k_start: 3, k_len: 2 }]);
        agrees(&v, &seqs);
    }

    #[test]
    fn a_kv_prefix_aligns_the_queries_bottom_right() {
        // Keys: 1 pad then positions 0..6; queries: the last 2 (positions 4, 5).
        let k = vec![-1, 0, 1, 2, 3, 4, 5];
        let v = vis(1, vec![4, 5], k, None);
        let seqs = sequences(&v).expect("maps");
        assert_eq!(seqs, vec![Sequence { row: 0, q_start: 0, q_len: 2, k_start: 1, k_len: 6 }]);
        agrees(&v, &seqs);
        // Keys past the last query's position (a longer cache) are cut off.
        let v = vis(1, vec![2, 3], vec![0, 1, 2, 3, 4, 5], None);
        let seqs = sequences(&v).expect("maps");
        assert_eq!(seqs[0].k_len, 4);
        agrees(&v, &seqs);
    }

    #[test]
    fn what_causal_masks_cannot_express_is_declined_with_the_slot() {
        // A segment split in two runs.
        let q = vec![0, 1, 0, 2];
        let seg = vec![0, 0, 1, 0];
        let e = sequences(&vis(1, q.clone(), q, Some((seg.clone(), seg)))).unwrap_err();
        assert!(e.contains("segment 0") && e.contains("slot 3"), "{e}");
        // Positions that skip.
        let q = vec![0, 1, 3];
        let e = sequences(&vis(1, q.clone(), q, None)).unwrap_err();
        assert!(e.contains("slot 2"), "{e}");
        // Queries past the last key.
        let e = sequences(&vis(1, vec![3, 4], vec![0, 1, 2, 3], None)).unwrap_err();
        assert!(e.contains("end at 3"), "{e}");
        // A query before every key.
        let e = sequences(&vis(1, vec![0, 1], vec![1, 2], None)).unwrap_err();
        assert!(e.contains("sees no key"), "{e}");
    }

    #[test]
    fn ragged_offsets_follow_each_operands_strides_and_pad_to_the_bucket() {
        // Rows of t = 7 slots, 4 query heads, 2 kv heads, d = 8; q the
        // token-major view of a projection [b, t, h, d], k a view of a
        // token-major buffer of 10 slots, v head-major (copied token-major).
        let (h, hk, t, s, d) = (4usize, 2usize, 7usize, 7usize, 8usize);
        let q = token_major(h, t, d);
        let k: Strides = [(10 * hk * d) as i64, d as i64, (hk * d) as i64];
        let v: Strides = [(hk * s * d) as i64, (s * d) as i64, d as i64];
        let lay = Layouts::new(q, k, v, h, hk, t, s, d);
        assert_eq!(lay.copied, [false, false, true]);
        assert_eq!(lay.v, token_major(hk, s, d));
        let seqs = [Sequence { row: 0, q_start: 0, q_len: 3, k_start: 0, k_len: 3 }, Sequence { row: 1, q_start: 2, q_len: 5, k_start: 2, k_len: 5 }];
        let r = Ragged::new(&seqs, &lay, count_bucket(seqs.len() + 1)).expect("fits");
        assert_eq!(r.seq_q, vec![3, 5, 0, 0]);
        assert_eq!(r.seq_kv, vec![3, 5, 0, 0]);
        // Entry n and the padding slots: the past-the-end of the last
        // sequence (row 1, slots 2..7), not its start.
        let qd = (h * d) as i64;
        assert_eq!(r.q, vec![0, 7 * qd + 2 * qd, 7 * qd + 7 * qd, 14 * qd, 14 * qd]);
        let kd = (hk * d) as i64;
        assert_eq!(r.k, vec![0, 10 * kd + 2 * kd, 10 * kd + 7 * kd, 17 * kd, 17 * kd]);
        assert_eq!(r.v, vec![0, 7 * kd + 2 * kd, 14 * kd, 14 * kd, 14 * kd]);
        assert_eq!(r.o, r.q);
        assert_eq!(r.dq, r.q);
        assert_eq!(r.dkv, r.v);
        assert_eq!((r.max_q, r.max_kv), (5, 5));
        // No sequence at all: every offset 0.
        assert_eq!(Ragged::new(&[], &lay, 1).expect("empty").q, vec![0, 0]);
        // INT64 offsets: 8 rows x 64K tokens x 32 heads x 128 pass 2^31.
        let big = Layouts::new(token_major(32, 65536, 128), token_major(8, 65536, 128), token_major(8, 65536, 128), 32, 8, 65536, 65536, 128);
        let huge = [Sequence { row: 7, q_start: 0, q_len: 65536, k_start: 0, k_len: 65536 }];
        let r = Ragged::new(&huge, &big, 1).expect("INT64 offsets");
        assert_eq!(r.q, vec![7 * 65536 * 32 * 128, 8 * 65536 * 32 * 128]);
        assert!(r.q[1] > i32::MAX as i64);
    }

    #[test]
    fn the_packed_arrays_each_start_16_byte_aligned_and_read_back() {
        let lay = Layouts::new(token_major(4, 7, 8), token_major(2, 7, 8), token_major(2, 7, 8), 4, 2, 7, 7, 8);
        let seqs = [Sequence { row: 0, q_start: 0, q_len: 3, k_start: 0, k_len: 3 }, Sequence { row: 1, q_start: 2, q_len: 5, k_start: 2, k_len: 5 }];
        for slots in [2, 4, 8] {
            let r = Ragged::new(&seqs, &lay, slots).expect("fits");
            let (bytes, starts) = r.packed();
            let ints = |at: u64, n: usize| (0..n).map(|i| i32::from_le_bytes(bytes[at as usize + 4 * i..][..4].try_into().unwrap())).collect::<Vec<_>>();
            let longs = |at: u64, n: usize| (0..n).map(|i| i64::from_le_bytes(bytes[at as usize + 8 * i..][..8].try_into().unwrap())).collect::<Vec<_>>();
            for (i, &st) in starts.iter().enumerate() {
                assert_eq!(st % 16, 0, "array {i} of {slots} slots starts at byte {st}");
            }
            assert_eq!(ints(starts[0], slots), r.seq_q);
            assert_eq!(ints(starts[1], slots), r.seq_kv);
            for (i, want) in [&r.q, &r.k, &r.v, &r.o, &r.dq, &r.dkv].into_iter().enumerate() {
                assert_eq!(&longs(starts[2 + i], slots + 1), want, "offsets {i}");
                let end = starts[2 + i] + 8 * (slots as u64 + 1);
                assert!(i == 5 || end <= starts[3 + i], "offsets {i} run into the next array");
            }
            assert_eq!(bytes.len() % 16, 0);
        }
    }

    /// The model's operands (q head-major as `.contiguous()` on [b, h, t, d]
    /// leaves it, k, v token-major views) for rows of `t` slots.
    fn model_layouts(t: usize) -> Layouts {
        let (h, hk, d) = (32usize, 8usize, 128usize);
        let head_major = [(h * t * d) as i64, (t * d) as i64, d as i64];
        Layouts::new(head_major, token_major(hk, t, d), token_major(hk, t, d), h, hk, t, t, d)
    }

    /// Whether any operand's `[heads, bucket, d]` box in the key addresses
    /// an element twice (computed here from the key's fields alone).
    fn any_overlap(k: &GraphKey) -> Vec<usize> {
        (0..6)
            .filter(|&i| {
                let (h, len) = if matches!(i, 1 | 2 | 5) { (k.kv_heads, k.max_kv) } else { (k.heads, k.max_q) };
                let (hs, ts) = (k.strides[2 * i], k.strides[2 * i + 1]);
                // Two elements (h1, t1, e1) != (h2, t2, e2) at one address: some
                // head/token pair maps to overlapping [d] runs.
                (0..h).any(|a| (0..len).any(|b| (0..h).any(|c| (0..len).any(|e| (a, b) != (c, e) && (a * hs + b * ts - c * hs - e * ts).abs() < k.head_dim))))
            })
            .collect()
    }

    #[test]
    fn no_descriptor_overlaps_for_rows_shorter_than_their_bucket() {
        // Decode-like rows of 1 and 5 slots, a row of 100 (bucket 128).
        for t in [1usize, 5, 100] {
            let lay = model_layouts(t);
            let seqs: Vec<Sequence> = (0..2).map(|row| Sequence { row, q_start: 0, q_len: t, k_start: 0, k_len: t }).collect();
            let r = Ragged::new(&seqs, &lay, 2).expect("fits");
            let mut key = GraphKey::new(true, IoType::Bf16, &r, 32, 8, 128, &lay, 0.088);
            // A small copy of the same strides (the brute force is quadratic).
            key.heads = 4;
            key.kv_heads = 2;
            key.max_q = key.max_q.min(70);
            key.max_kv = key.max_kv.min(70);
            assert_eq!(any_overlap(&key), Vec::<usize>::new(), "t = {t}: {key:?}");
            assert_eq!(GraphKey::new(true, IoType::Bf16, &r, 32, 8, 128, &lay, 0.088).overlapping(), None, "t = {t}");
        }
        // The closed form agrees with the brute force on a head-major box.
        assert!(overlaps(4, 64, 8, 5 * 8, 8));
        assert!(!overlaps(4, 64, 8, 64 * 8, 8));
        assert!(!overlaps(4, 64, 8, 8, 32));
        assert!(overlaps(4, 64, 8, 8, 24));
    }

    #[test]
    fn the_graph_key_does_not_depend_on_the_row_length() {
        let key = |t: usize, lens: &[usize]| {
            let lay = model_layouts(t);
            let seqs: Vec<Sequence> = lens.iter().enumerate().map(|(row, &n)| Sequence { row, q_start: t - n, q_len: n, k_start: t - n, k_len: n }).collect();
            let r = Ragged::new(&seqs, &lay, count_bucket(seqs.len())).expect("fits");
            (GraphKey::new(false, IoType::Bf16, &r, 32, 8, 128, &lay, 0.088), GraphKey::new(true, IoType::Bf16, &r, 32, 8, 128, &lay, 0.088))
        };
        // Micro-batches of 300, 400 and 512 slots whose sequences share a bucket.
        let a = key(300, &[300, 290]);
        assert_eq!(a, key(400, &[400, 100]));
        assert_eq!(a, key(512, &[257, 3]));
        assert_eq!(a.0.strides, [128, 32 * 128, 128, 8 * 128, 128, 8 * 128, 128, 32 * 128, 128, 32 * 128, 128, 8 * 128]);
    }

    #[test]
    fn graph_keys_share_a_bucket_and_differ_in_what_changes_the_graph() {
        let lay = Layouts::new(token_major(32, 4096, 128), token_major(8, 4096, 128), token_major(8, 4096, 128), 32, 8, 4096, 4096, 128);
        let seqs = |lens: &[usize]| lens.iter().enumerate().map(|(row, &n)| Sequence { row, q_start: 0, q_len: n, k_start: 0, k_len: n }).collect::<Vec<_>>();
        let key = |lens: &[usize], bwd: bool, io: IoType, heads: usize, d: usize, lay: &Layouts| {
            let s = seqs(lens);
            let r = Ragged::new(&s, lay, count_bucket(s.len())).expect("fits");
            GraphKey::new(bwd, io, &r, heads, 8, d, lay, 0.088)
        };
        let a = key(&[3000, 100, 7], false, IoType::Bf16, 32, 128, &lay);
        // Same buckets (4 slots, longest in 2049..=4096): the same graph.
        assert_eq!(a, key(&[4000, 2500, 1, 9], false, IoType::Bf16, 32, 128, &lay));
        assert_eq!((a.slots, a.max_q, a.max_kv), (4, 4096, 4096));
        // q a view of a fused projection (another token stride).
        let fused: Strides = [4096 * 6144, 128, 6144];
        for other in [
            key(&[5000, 100, 7], false, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7, 1, 1], false, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7], true, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7], false, IoType::F16, 32, 128, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 16, 128, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 32, 64, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 32, 128, &Layouts::new(fused, token_major(8, 4096, 128), token_major(8, 4096, 128), 32, 8, 4096, 4096, 128)),
            a.with(&Settings { deterministic: false, ..Settings::default() }, 0),
            a.with(&Settings::default(), 90),
        ] {
            assert_ne!(a, other);
        }
        assert_eq!(a.with(&Settings::default(), 0), a);
        assert_eq!(length_bucket(1), 64);
        assert_eq!(length_bucket(65), 128);
        assert_eq!(count_bucket(0), 1);
        assert_eq!(a.stats_len(), 4 * 32 * 4096);
        assert_eq!(std::mem::size_of::<GraphKey>(), 168, "FgSdpaKey in sdpa.cpp mirrors it");
    }

    #[test]
    fn the_backend_is_read_by_name_and_the_environment_value_names_its_variable() {
        assert_eq!("cudnn".parse::<Backend>(), Ok(Backend::Cudnn));
        assert_eq!(" kernel ".parse::<Backend>(), Ok(Backend::Kernel));
        for name in Backend::NAMES {
            assert_eq!(name.parse::<Backend>().map(Backend::name), Ok(name));
        }
        assert!("flash".parse::<Backend>().unwrap_err().contains("expected one of"));
        assert_eq!(Backend::parse_env(None), Ok(None));
        assert_eq!(Backend::parse_env(Some("")), Ok(None));
        assert_eq!(Backend::parse_env(Some("kernel")), Ok(Some(Backend::Kernel)));
        let e = Backend::parse_env(Some("flash")).unwrap_err();
        assert!(e.contains("FUSEGRPO_ATTENTION=\"flash\"") && e.contains("\"cudnn\""), "{e}");
        assert_eq!(Settings::default(), Settings { backend: Backend::Auto, deterministic: true, workspace_budget: 4 << 30 });
    }

    #[test]
    fn f32_and_odd_head_dims_are_declined_before_cudnn() {
        use candle_core::DType;
        assert!(static_decline(DType::F32, 128).expect("declined").contains("F32"));
        assert!(static_decline(DType::BF16, 100).expect("declined").contains("head dim 100"));
        assert_eq!(static_decline(DType::BF16, 128), None);
        assert_eq!(static_decline(DType::F16, 64), None);
    }

    #[test]
    fn libcudnn_is_looked_for_by_name_then_in_python_wheels() {
        let dir = std::env::temp_dir().join(format!("fusegrpo-cudnn-search-{}", std::process::id()));
        let lib = dir.join("venv/lib/python3.11/site-packages/nvidia/cudnn/lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        std::fs::write(lib.join("libcudnn.so.9"), b"").expect("touch");
        let venv = dir.join("venv").to_string_lossy().into_owned();
        let env = |k: &str| (k == "VIRTUAL_ENV").then(|| venv.clone());
        let c = library_candidates(&env);
        assert_eq!(c[0], PathBuf::from("libcudnn.so.9"));
        assert_eq!(c[1], lib.join("libcudnn.so.9"));
        // The override alone, a folder meaning the library in it.
        let over = lib.to_string_lossy().into_owned();
        let env = |k: &str| (k == LIBRARY_ENV).then(|| over.clone()).or_else(|| (k == "VIRTUAL_ENV").then(|| venv.clone()));
        assert_eq!(library_candidates(&env), vec![lib.join("libcudnn.so.9")]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
