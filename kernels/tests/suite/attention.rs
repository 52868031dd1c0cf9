//! The attention op against its stock-op reference: outputs and gradients of
//! q, k and v, over block-straddling lengths, query groups, head sizes,
//! padding, packed rows and a KV cache; bit-identical reruns; packed rows
//! equal to the same sequences run as rows of their own.

use crate::common::{assert_close, tensor};
use candle_core::{DType, Device, Tensor, Var};
use kernels::attention::{attention, attention_reference, forward_backward, fused_dtype, queries_alone, Settings, Visibility};
use std::sync::Arc;

/// Relative tolerance (of `max(1, max |ref|)`) of outputs and gradients.
const REL: f32 = 1e-5;

/// One parity case: shapes and how the rows are laid out.
struct Case {
    name: &'static str,
    batch: usize,
    heads: usize,
    kv_heads: usize,
    queries: usize,
    keys: usize,
    head_dim: usize,
    layout: Layout,
}

#[derive(Clone, Copy)]
enum Layout {
    /// Every row `0..t` (keys = queries).
    Sequential,
    /// Row r left-padded by `3 * r` slots (as stacked caches are), queries the last `t` slots.
    LeftPadded,
    /// Row r right-padded by `5 * r` query and key slots (as training batches are).
    RightPadded,
    /// Each row packs sequences of lengths 37, 70 and the rest, positions restarting.
    Packed,
}

fn visibility(c: &Case) -> Visibility {
    let (b, t, s) = (c.batch, c.queries, c.keys);
    let mut qp = Vec::new();
    let mut kp = Vec::new();
    let mut qs = Vec::new();
    let mut ks = Vec::new();
    for r in 0..b {
        let keys: Vec<(i64, u32)> = match c.layout {
            Layout::Sequential => (0..s as i64).map(|j| (j, 0)).collect(),
            Layout::LeftPadded => {
                let pad = (3 * r).min(s - 1);
                (0..s).map(|j| if j < pad { (-1, 0) } else { ((j - pad) as i64, 0) }).collect()
            }
            Layout::RightPadded => {
                let real = s - (5 * r).min(s - 1);
                (0..s).map(|j| if j < real { (j as i64, 0) } else { (-1, 0) }).collect()
            }
            Layout::Packed => (0..s)
                .map(|j| match j {
                    j if j < 37 => (j as i64, 0),
                    j if j < 107 => ((j - 37) as i64, 1),
                    j => ((j - 107) as i64, 2),
                })
                .collect(),
        };
        qp.extend(keys[s - t..].iter().map(|k| k.0));
        qs.extend(keys[s - t..].iter().map(|k| k.1));
        kp.extend(keys.iter().map(|k| k.0));
        ks.extend(keys.iter().map(|k| k.1));
    }
    let vis = Visibility::new(b, qp, kp).unwrap();
    match c.layout {
        Layout::Packed => vis.with_segments(qs, ks).unwrap(),
        _ => vis,
    }
}

/// Random q, k, v (as variables) for a case, seeded by `seed`.
fn inputs(c: &Case, seed: u64) -> (Var, Var, Var) {
    let q = tensor(seed, &[c.batch, c.heads, c.queries, c.head_dim], 1.5);
    let k = tensor(seed + 1, &[c.batch, c.kv_heads, c.keys, c.head_dim], 1.5);
    let v = tensor(seed + 2, &[c.batch, c.kv_heads, c.keys, c.head_dim], 1.0);
    (Var::from_tensor(&q).unwrap(), Var::from_tensor(&k).unwrap(), Var::from_tensor(&v).unwrap())
}

/// Output and gradients of q, k, v for `sum(out * g)`.
fn run(fused: bool, q: &Var, k: &Var, v: &Var, vis: &Arc<Visibility>, g: &Tensor) -> [Tensor; 4] {
    let scale = 1.0 / (q.dim(3).unwrap() as f64).sqrt();
    let (qt, kt, vt) = (q.as_tensor(), k.as_tensor(), v.as_tensor());
    let out = if fused { attention(qt, kt, vt, vis, scale, Settings::default()) } else { attention_reference(qt, kt, vt, vis, scale) }.unwrap();
    let grads = (&out * g).unwrap().sum_all().unwrap().backward().unwrap();
    let get = |x: &Tensor| grads.get(x).expect("gradient").clone();
    [out.clone(), get(qt), get(kt), get(vt)]
}

fn check(c: &Case, seed: u64) {
    let vis = Arc::new(visibility(c));
    let (q, k, v) = inputs(c, seed);
    let g = tensor(seed + 3, &[c.batch, c.queries, c.heads * c.head_dim], 1.0);
    let fused = run(true, &q, &k, &v, &vis, &g);
    let reference = run(false, &q, &k, &v, &vis, &g);
    for (what, (a, b)) in ["out", "grad q", "grad k", "grad v"].iter().zip(fused.iter().zip(&reference)) {
        assert_close(&format!("{} {what}", c.name), a, b, REL);
    }
}

fn case(name: &'static str, (batch, heads, kv_heads): (usize, usize, usize), (queries, keys, head_dim): (usize, usize, usize), layout: Layout) -> Case {
    Case { name, batch, heads, kv_heads, queries, keys, head_dim, layout }
}

#[test]
fn attention_matches_the_reference() {
    let cases = [
        case("t=200 (not a block multiple), groups 1, d 64", (2, 3, 3), (200, 200, 64), Layout::Sequential),
        case("groups 4, d 128", (1, 8, 2), (130, 130, 128), Layout::Sequential),
        case("groups 8, d 64", (1, 8, 1), (97, 97, 64), Layout::Sequential),
        case("t=1", (2, 4, 2), (1, 1, 64), Layout::Sequential),
        case("right-padded rows", (3, 4, 2), (150, 150, 64), Layout::RightPadded),
        case("left-padded rows, keys before the queries", (3, 4, 1), (70, 260, 64), Layout::LeftPadded),
        case("packed rows", (2, 4, 2), (300, 300, 64), Layout::Packed),
        case("decode: one query against 300 cached keys, groups 4, d 128", (3, 8, 2), (1, 300, 128), Layout::LeftPadded),
        case("a draft: 9 queries against 300 cached keys, groups 3, d 64", (1, 9, 3), (9, 300, 64), Layout::Sequential),
        case("16 queries, left-padded, d 60 (not a multiple of 8)", (2, 4, 2), (16, 140, 60), Layout::LeftPadded),
        case("5 queries, right-padded", (3, 4, 2), (5, 133, 64), Layout::RightPadded),
        case("17 queries (blocks shared between queries)", (1, 4, 2), (17, 150, 64), Layout::Sequential),
    ];
    for (n, c) in cases.iter().enumerate() {
        check(c, 10 * n as u64 + 1);
    }
}

#[test]
fn attention_reads_strided_cache_views() {
    // Keys and values as the KV cache hands them out: the first `s` slots of
    // buffers with spare capacity, so dimension 2 does not span the buffer.
    let (b, h, kv, s, cap, d) = (2, 4, 2, 90, 128, 64);
    let c = case("strided", (b, h, kv), (1, s, d), Layout::LeftPadded);
    let vis = Arc::new(visibility(&c));
    let q = tensor(5, &[b, h, 1, d], 1.5);
    let kb = tensor(6, &[b, kv, cap, d], 1.5);
    let vb = tensor(7, &[b, kv, cap, d], 1.0);
    let (k, v) = (kb.narrow(2, 0, s).unwrap(), vb.narrow(2, 0, s).unwrap());
    assert!(!k.is_contiguous());
    let scale = 0.125;
    let fused = attention(&q, &k, &v, &vis, scale, Settings::default()).unwrap();
    let reference = attention_reference(&q, &k.contiguous().unwrap(), &v.contiguous().unwrap(), &vis, scale).unwrap();
    assert_close("strided cache view", &fused, &reference, REL);
}

#[test]
fn only_f32_takes_the_fused_op_on_the_cpu() {
    // bf16 on the CPU runs the reference (the same bits); the op's direct
    // entry refuses it rather than converting.
    assert!(fused_dtype(&Device::Cpu, DType::F32) && !fused_dtype(&Device::Cpu, DType::BF16));
    let c = case("bf16", (1, 4, 2), (20, 20, 64), Layout::Sequential);
    let vis = Arc::new(visibility(&c));
    let (q, k, v) = inputs(&c, 3);
    let [q, k, v] = [q, k, v].map(|x| x.as_tensor().to_dtype(DType::BF16).unwrap());
    let fused = attention(&q, &k, &v, &vis, 0.125, Settings::default()).unwrap();
    let reference = attention_reference(&q, &k, &v, &vis, 0.125).unwrap();
    assert_eq!(fused.dtype(), DType::BF16);
    let bits = |t: &Tensor| t.flatten_all().unwrap().to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(bits(&fused), bits(&reference));
    let g = Tensor::zeros((1, 20, 4 * 64), DType::BF16, &Device::Cpu).unwrap();
    assert!(forward_backward(&q, &k, &v, &vis, 0.125, &g).is_err());
}

#[test]
fn attention_gives_the_same_bits_twice() {
    let c = case("rerun", (1, 8, 2), (333, 333, 64), Layout::Sequential);
    let vis = Arc::new(visibility(&c));
    let (q, k, v) = inputs(&c, 77);
    let g = tensor(80, &[1, 333, 8 * 64], 1.0);
    let bits = |ts: [Tensor; 4]| -> Vec<Vec<u32>> {
        ts.iter().map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()).collect()
    };
    let a = bits(run(true, &q, &k, &v, &vis, &g));
    let b = bits(run(true, &q, &k, &v, &vis, &g));
    assert!(a == b, "two runs of the attention op differ");
}

#[test]
fn packed_rows_equal_their_sequences_run_alone() {
    // One row packing sequences of 37, 70 and 93 tokens vs each sequence as
    // its own row: outputs and gradients of every slot agree.
    let (h, kv, d) = (4, 2, 64);
    let lens = [37usize, 70, 93];
    let t: usize = lens.iter().sum();
    let c = case("packed", (1, h, kv), (t, t, d), Layout::Packed);
    let vis = Arc::new(visibility(&c));
    let (q, k, v) = inputs(&c, 31);
    let g = tensor(34, &[1, t, h * d], 1.0);
    let [out, gq, gk, gv] = run(true, &q, &k, &v, &vis, &g);
    let mut start = 0;
    for &len in &lens {
        let part = |x: &Tensor, dim: usize| Var::from_tensor(&x.narrow(dim, start, len).unwrap().contiguous().unwrap()).unwrap();
        let (qs, ks, vs) = (part(q.as_tensor(), 2), part(k.as_tensor(), 2), part(v.as_tensor(), 2));
        let alone = Arc::new(Visibility::new(1, (0..len as i64).collect(), (0..len as i64).collect()).unwrap());
        let gs = g.narrow(1, start, len).unwrap().contiguous().unwrap();
        let [o, a, b, cc] = run(true, &qs, &ks, &vs, &alone, &gs);
        assert_close(&format!("segment at {start}: out"), &out.narrow(1, start, len).unwrap(), &o, REL);
        assert_close(&format!("segment at {start}: grad q"), &gq.narrow(2, start, len).unwrap(), &a, REL);
        assert_close(&format!("segment at {start}: grad k"), &gk.narrow(2, start, len).unwrap(), &b, REL);
        assert_close(&format!("segment at {start}: grad v"), &gv.narrow(2, start, len).unwrap(), &cc, REL);
        start += len;
    }
}

#[test]
fn few_queries_get_the_bits_they_get_alone() {
    // A decoding step's query alone against the keys up to its own, or
    // among the draft's queries in one call: the same bits (what lets
    // `CausalLm::forward_steps` check a draft in one call). Keys of a cache
    // buffer with spare capacity, past a key block; SmolLM2's and Qwen3's
    // head shapes.
    let scale = 0.125;
    let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (h, kv, d, before, t) in [(9, 3, 64, 250, 9), (8, 2, 128, 127, 16), (4, 4, 64, 3, 2)] {
        assert!(queries_alone(&Device::Cpu, DType::F32, t));
        let s = before + t;
        let cap = s + 40;
        let q = tensor(11, &[1, h, t, d], 1.5);
        let (kb, vb) = (tensor(12, &[1, kv, cap, d], 1.5), tensor(13, &[1, kv, cap, d], 1.0));
        let (k, v) = (kb.narrow(2, 0, s).unwrap(), vb.narrow(2, 0, s).unwrap());
        let vis = Arc::new(Visibility::new(1, (before as i64..s as i64).collect(), (0..s as i64).collect()).unwrap());
        let together = attention(&q, &k, &v, &vis, scale, Settings::default()).unwrap();
        for i in 0..t {
            let keys = before + i + 1;
            let one = Arc::new(Visibility::new(1, vec![(before + i) as i64], (0..keys as i64).collect()).unwrap());
            let alone = attention(&q.narrow(2, i, 1).unwrap(), &k.narrow(2, 0, keys).unwrap(), &v.narrow(2, 0, keys).unwrap(), &one, scale, Settings::default()).unwrap();
            assert!(bits(&alone) == bits(&together.narrow(1, i, 1).unwrap()), "h {h}, d {d}: query {i} of {t} differs alone");
        }
    }
    // More queries than that share products: no promise, and none made.
    assert!(!queries_alone(&Device::Cpu, DType::F32, 17) && !queries_alone(&Device::Cpu, DType::BF16, 1));
}

#[test]
fn attention_rejects_mismatched_shapes() {
    let vis = Arc::new(Visibility::new(1, vec![0, 1], vec![0, 1]).unwrap());
    let dev = Device::Cpu;
    let q = Tensor::zeros((1, 3, 2, 8), candle_core::DType::F32, &dev).unwrap();
    let k = Tensor::zeros((1, 2, 2, 8), candle_core::DType::F32, &dev).unwrap();
    let err = attention(&q, &k, &k, &vis, 1.0, Settings::default()).unwrap_err().to_string();
    assert!(err.contains("multiple of kv_heads"), "{err}");
    let k3 = Tensor::zeros((1, 3, 3, 8), candle_core::DType::F32, &dev).unwrap();
    let err = attention(&q, &k3, &k3, &vis, 1.0, Settings::default()).unwrap_err().to_string();
    assert!(err.contains("visibility is for 1 rows x 2 queries x 2 keys"), "{err}");
    assert!(Visibility::new(2, vec![0, 1, 2], vec![0]).is_err());
}
