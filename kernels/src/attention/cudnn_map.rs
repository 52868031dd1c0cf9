//! How cuDNN's fused attention (feature `cudnn`, `cudnn.rs`) sees one call,
//! in plain Rust so that the CPU tests check it: which backend runs
//! ([`Backend`], `FUSEGRPO_ATTENTION`), our [`Visibility`] as cuDNN's
//! sequences ([`sequences`]: per (row, segment) one run of queries and the
//! run of keys it sees, bottom-right causal), their lengths and ragged
//! offsets ([`Ragged`]), the graph-cache key ([`GraphKey`]) with its
//! length buckets, and where `libcudnn.so.9` is looked for
//! ([`library_candidates`]).
//!
//! cuDNN's view: a "batch" of `n` sequences, sequence `i` with `seq_q[i]`
//! queries and `seq_kv[i]` keys, its first query and key at element
//! offsets `q_off[i]`, `k_off[i]` (ragged offsets, `n + 1` entries) of
//! tensors laid out `[n, heads, max_len, d]` with the head and token
//! strides of ours; query `a` of a sequence sees keys `0 ..= a + seq_kv -
//! seq_q` (causal, bottom-right aligned: a KV prefix in front of the
//! queries). Padding queries (ours see every key; their output is never
//! used) are in no sequence: cuDNN leaves their output and gradients at
//! the zeros they start as.

use super::Visibility;
use std::path::{Path, PathBuf};

/// Which attention runs on CUDA: `FUSEGRPO_ATTENTION=auto|cudnn|kernel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// cuDNN where it takes the call, else the fused kernel (logged once per
    /// reason). The default.
    Auto,
    /// cuDNN or an error saying why it declined (for benchmarks).
    Cudnn,
    /// The fused kernel (`kernels/cuda/attention.cu`), never cuDNN.
    Kernel,
}

/// The environment variable that forces a backend.
pub const BACKEND_ENV: &str = "FUSEGRPO_ATTENTION";

impl Backend {
    /// Parses a value of [`BACKEND_ENV`] (unset or empty: auto).
    pub fn parse(value: Option<&str>) -> Result<Backend, String> {
        match value.map(str::trim) {
            None | Some("") | Some("auto") => Ok(Backend::Auto),
            Some("cudnn") => Ok(Backend::Cudnn),
            Some("kernel") => Ok(Backend::Kernel),
            Some(other) => Err(format!("{BACKEND_ENV}={other:?}: expected \"auto\", \"cudnn\" or \"kernel\"")),
        }
    }

    /// [`BACKEND_ENV`] of this process (read once).
    pub fn from_env() -> Result<Backend, String> {
        static B: std::sync::OnceLock<Result<Backend, String>> = std::sync::OnceLock::new();
        B.get_or_init(|| Backend::parse(std::env::var(BACKEND_ENV).ok().as_deref())).clone()
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cudnn => "cudnn",
            Backend::Kernel => "kernel",
        }
    }
}

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

/// Logs `message` on stderr once per process for each message that
/// differs from the others in more than its numbers ("attention: ...").
pub fn note_once(message: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let shape: String = message.chars().filter(|c| !c.is_ascii_digit()).collect();
    let Ok(mut seen) = SEEN.lock() else { return };
    if !seen.contains(&shape) {
        seen.push(shape);
        eprintln!("attention: {message}");
    }
}

/// Strides (in elements) of a `[b, heads, len, d]` operand: row, head, token.
pub type Strides = [i64; 3];

/// The strides of each operand as cuDNN reads or writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layouts {
    pub q: Strides,
    pub k: Strides,
    pub v: Strides,
    /// The output and its gradient (`[b, t, heads * d]`).
    pub o: Strides,
    /// dQ, dK, dV (contiguous `[b, heads, len, d]`; dK and dV alike).
    pub dq: Strides,
    pub dkv: Strides,
}

impl Layouts {
    /// The output `[b, t, heads, d]` viewed as `[b, heads, t, d]`, and the
    /// contiguous gradients, beside the inputs' strides.
    pub fn new(q: Strides, k: Strides, v: Strides, heads: usize, kv_heads: usize, t: usize, s: usize, d: usize) -> Layouts {
        let (h, hk, t, s, d) = (heads as i64, kv_heads as i64, t as i64, s as i64, d as i64);
        Layouts { q, k, v, o: [t * h * d, d, h * d], dq: [h * t * d, t * d, d], dkv: [hk * s * d, s * d, d] }
    }
}

/// cuDNN's per-sequence inputs for `n` sequences (padded to the bucket
/// with empty sequences): lengths and the ragged offsets (`n + 1` entries,
/// in elements) of each operand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ragged {
    pub seq_q: Vec<i32>,
    pub seq_kv: Vec<i32>,
    pub q: Vec<i32>,
    pub k: Vec<i32>,
    pub v: Vec<i32>,
    pub o: Vec<i32>,
    pub dq: Vec<i32>,
    pub dkv: Vec<i32>,
    /// The longest sequence's queries and keys.
    pub max_q: usize,
    pub max_kv: usize,
}

impl Ragged {
    /// From the sequences, padded to `slots` (>= their count) entries.
    pub fn new(seqs: &[Sequence], layouts: &Layouts, slots: usize) -> Result<Ragged, String> {
        if slots < seqs.len() {
            return Err(format!("{} sequences for {slots} slots", seqs.len()));
        }
        let i32_of = |x: i64, what: &str| i32::try_from(x).map_err(|_| format!("{what} {x} does not fit cuDNN's 32-bit ragged offsets"));
        let offsets = |st: &Strides, q_side: bool, what: &str| -> Result<Vec<i32>, String> {
            let mut v = Vec::with_capacity(slots + 1);
            for sq in seqs {
                let start = if q_side { sq.q_start } else { sq.k_start };
                v.push(i32_of(sq.row as i64 * st[0] + start as i64 * st[2], what)?);
            }
            let last = v.last().copied().unwrap_or(0);
            v.resize(slots + 1, last);
            Ok(v)
        };
        let lens = |f: fn(&Sequence) -> usize| -> Result<Vec<i32>, String> {
            let mut v = seqs.iter().map(|s| i32_of(f(s) as i64, "sequence length")).collect::<Result<Vec<_>, _>>()?;
            v.resize(slots, 0);
            Ok(v)
        };
        Ok(Ragged {
            seq_q: lens(|s| s.q_len)?,
            seq_kv: lens(|s| s.k_len)?,
            q: offsets(&layouts.q, true, "q offset")?,
            k: offsets(&layouts.k, false, "k offset")?,
            v: offsets(&layouts.v, false, "v offset")?,
            o: offsets(&layouts.o, true, "output offset")?,
            dq: offsets(&layouts.dq, true, "dq offset")?,
            dkv: offsets(&layouts.dkv, false, "dk/dv offset")?,
            max_q: seqs.iter().map(|s| s.q_len).max().unwrap_or(0),
            max_kv: seqs.iter().map(|s| s.k_len).max().unwrap_or(0),
        })
    }

    /// Every array in the order the shim reads them from one device buffer:
    /// seq_q, seq_kv (`slots` each), then the offsets of q, k, v, o, dq,
    /// dkv (`slots + 1` each).
    pub fn packed(&self) -> Vec<i32> {
        [&self.seq_q, &self.seq_kv, &self.q, &self.k, &self.v, &self.o, &self.dq, &self.dkv].into_iter().flatten().copied().collect()
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
/// Lengths and the sequence count are bucketed; strides are the
/// operands' own (a layout whose head stride depends on the row length is
/// a new graph per length). Passed to the shim as is (`#[repr(C)]`,
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
    /// 1: the deterministic backward (always on).
    pub deterministic: i32,
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
        }
    }

    /// f32 elements of the forward's statistics (`[slots, heads, max_q]`).
    pub fn stats_len(&self) -> usize {
        (self.slots * self.heads * self.max_q) as usize
    }
}

/// Why cuDNN does not take a call before any graph is built: dtype, head
/// dim (cuDNN's fused attention: multiples of 8 up to 256), shapes.
pub fn static_decline(dtype: candle_core::DType, head_dim: usize) -> Option<String> {
    use candle_core::DType;
    if !matches!(dtype, DType::BF16 | DType::F16) {
        return Some(format!("cuDNN's fused attention takes bf16 and f16, not {dtype:?}"));
    }
    if head_dim % 8 != 0 || head_dim > 256 {
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
        // Rows of t = 7 slots, 4 query heads, 2 kv heads, d = 8; q contiguous
        // [b, h, t, d], k a view of a cache of 10 slots, v token-major.
        let (h, hk, t, s, d) = (4usize, 2usize, 7usize, 7usize, 8usize);
        let q: Strides = [(h * t * d) as i64, (t * d) as i64, d as i64];
        let k: Strides = [(hk * 10 * d) as i64, (10 * d) as i64, d as i64];
        let v: Strides = [(s * hk * d) as i64, d as i64, (hk * d) as i64];
        let lay = Layouts::new(q, k, v, h, hk, t, s, d);
        let seqs = [Sequence { row: 0, q_start: 0, q_len: 3, k_start: 0, k_len: 3 }, Sequence { row: 1, q_start: 2, q_len: 5, k_start: 2, k_len: 5 }];
        let r = Ragged::new(&seqs, &lay, count_bucket(seqs.len() + 1)).expect("fits");
        assert_eq!(r.seq_q, vec![3, 5, 0, 0]);
        assert_eq!(r.seq_kv, vec![3, 5, 0, 0]);
        assert_eq!(r.q, vec![0, (h * t * d + 2 * d) as i32, 240, 240, 240]);
        assert_eq!(r.k, vec![0, (hk * 10 * d + 2 * d) as i32, 176, 176, 176]);
        assert_eq!(r.v, vec![0, (s * hk * d + 2 * hk * d) as i32, 144, 144, 144]);
        assert_eq!(r.o, vec![0, (t * h * d + 2 * h * d) as i32, 288, 288, 288]);
        assert_eq!(r.dkv[1], (hk * s * d + 2 * d) as i32);
        assert_eq!((r.max_q, r.max_kv), (5, 5));
        assert_eq!(r.packed().len(), 4 * 2 + 5 * 6);
        let huge = [Sequence { row: 10_000_000, q_start: 0, q_len: 1, k_start: 0, k_len: 1 }];
        assert!(Ragged::new(&huge, &lay, 1).unwrap_err().contains("32-bit"));
    }

    #[test]
    fn graph_keys_share_a_bucket_and_differ_in_what_changes_the_graph() {
        let lay = Layouts::new([0, 4096, 128], [0, 4096, 128], [0, 4096, 128], 32, 8, 4096, 4096, 128);
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
        for other in [
            key(&[5000, 100, 7], false, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7, 1, 1], false, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7], true, IoType::Bf16, 32, 128, &lay),
            key(&[3000, 100, 7], false, IoType::F16, 32, 128, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 16, 128, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 32, 64, &lay),
            key(&[3000, 100, 7], false, IoType::Bf16, 32, 128, &Layouts::new([0, 8192, 128], [0, 4096, 128], [0, 4096, 128], 32, 8, 4096, 4096, 128)),
        ] {
            assert_ne!(a, other);
        }
        assert_eq!(length_bucket(1), 64);
        assert_eq!(length_bucket(65), 128);
        assert_eq!(count_bucket(0), 1);
        assert_eq!(a.stats_len(), 4 * 32 * 4096);
    }

    #[test]
    fn the_backend_comes_from_the_environment_value() {
        assert_eq!(Backend::parse(None), Ok(Backend::Auto));
        assert_eq!(Backend::parse(Some("cudnn")), Ok(Backend::Cudnn));
        assert_eq!(Backend::parse(Some(" kernel ")), Ok(Backend::Kernel));
        let e = Backend::parse(Some("flash")).unwrap_err();
        assert!(e.contains("FUSEGRPO_ATTENTION=\"flash\"") && e.contains("\"cudnn\""), "{e}");
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
