//! The CUDA kernels' self-test (`fusegrpo selftest --device cuda`): every
//! CUDA kernel against its plain-tensor reference on the CPU (forward and
//! gradients, f32 and bf16; attention against the CPU attention op;
//! sampling against its f64 reference), on random data with shapes that do
//! not divide the tile sizes, with the max differences and pass/fail
//! against explicit tolerances; [`bench_logprobs`] times the fused and
//! unfused log-prob paths at Qwen3-4B's head size. Built with the `cuda`
//! feature only.

use anyhow::Result;
use std::io::Write as _;
use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use lm::model::{ops, rope::RopeTables};
use lm::config::default_inv_freq;

/// Checks run and the names of those that failed; a line per case goes to
/// `out` (the caller's writer, which decides what a failed write means).
pub struct Report {
    pub total: usize,
    pub failed: Vec<String>,
    out: Box<dyn std::io::Write>,
}

impl Default for Report {
    /// A report whose lines go nowhere.
    fn default() -> Self {
        Report::new(Box::new(std::io::sink()))
    }
}

/// The self-test's groups, in the order they run: the cuBLAS log-prob head
/// first, cuDNN last (`selftest --only <group>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// token_logprobs and weighted_logprob_sum (the cuBLAS head and row kernels).
    Logprobs,
    RmsNorm,
    Rope,
    Sampling,
    /// The fused attention kernel.
    Attention,
    /// cuDNN's fused attention (feature `cudnn`).
    Cudnn,
}

impl Group {
    pub const ALL: [Group; 6] = [Group::Logprobs, Group::RmsNorm, Group::Rope, Group::Sampling, Group::Attention, Group::Cudnn];
    pub const NAMES: [&'static str; 6] = ["logprobs", "rms_norm", "rope", "sampling", "attention", "cudnn"];

    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|g| *g == self).expect("listed")]
    }
}

impl std::str::FromStr for Group {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Group, String> {
        Self::NAMES.iter().position(|n| *n == s).map(|i| Self::ALL[i]).ok_or_else(|| format!("{s:?}: expected one of {}", Self::NAMES.join(", ")))
    }
}

impl Report {
    /// A report writing its lines to `out`.
    pub fn new(out: Box<dyn std::io::Write>) -> Self {
        Report { total: 0, failed: Vec::new(), out }
    }

    /// One line to `out`: a line that cannot be written stops no check.
    fn line(&mut self, line: std::fmt::Arguments) {
        let _ = writeln!(self.out, "{line}");
    }

    /// Runs one case: an error (not a mismatch) is a FAIL line with its
    /// message, and the self-test goes on with the next case.
    pub fn case(&mut self, name: &str, run: impl FnOnce(&mut Report) -> Result<()>) {
        if let Err(e) = run(self) {
            self.line(format_args!("{name:<44} FAIL: {e:#}"));
            self.total += 1;
            self.failed.push(name.to_string());
        }
    }

    /// Compares `got` (any device) with `want` (CPU reference): the max
    /// absolute difference relative to the reference's max magnitude.
    fn check(&mut self, name: &str, got: &Tensor, want: &Tensor, tol: f64) -> Result<()> {
        self.check_scaled(name, got, want, tol, 1e-6)
    }

    /// [`Self::check`] relative to `max(min_scale, max|want|)`.
    fn check_scaled(&mut self, name: &str, got: &Tensor, want: &Tensor, tol: f64, min_scale: f64) -> Result<()> {
        let got = got.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
        let want = want.to_dtype(DType::F32)?;
        anyhow::ensure!(got.dims() == want.dims(), "{name}: shape {:?} vs reference {:?}", got.dims(), want.dims());
        let diff = (&got - &want)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()? as f64;
        let scale = (want.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()? as f64).max(min_scale);
        let rel = diff / scale;
        let ok = rel <= tol && rel.is_finite();
        self.line(format_args!("{:<44} max|diff| {diff:.3e}  rel {rel:.3e}  tol {tol:.0e}  {}", name, if ok { "PASS" } else { "FAIL" }));
        self.total += 1;
        if !ok {
            self.failed.push(name.to_string());
        }
        Ok(())
    }
}

/// Uniform values in [-scale, scale), seeded.
fn random(rng: &mut rand_chacha::ChaCha8Rng, shape: &[usize], scale: f32) -> Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale).collect();
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
}

/// (dtype, name, forward tolerance, gradient tolerance).
const DTYPES: [(DType, &str, f64, f64); 2] = [(DType::F32, "f32", 1e-4, 1e-4), (DType::BF16, "bf16", 2e-2, 3e-2)];

/// Every case of the groups in `only` (all when empty), in [`Group::ALL`]'s
/// order; a case that errors is a FAIL line ([`Report::case`]), never the
/// end of the self-test.
pub fn check_all(dev: &Device, seed: u64, only: &[Group], report: &mut Report) {
    let on = |g: Group| only.is_empty() || only.contains(&g);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let rng = &mut rng;
    for (dtype, dn, tf, tg) in DTYPES {
        if on(Group::Logprobs) {
            for (n, d, v, temp) in [(67, 80, 1037, 0.7), (1, 64, 151_936, 1.0), (300, 256, 151_936, 1.0)] {
                let name = format!("token_logprobs {dn} N={n} d={d} V={v} T={temp}");
                report.case(&name, |r| logprobs_case(dev, rng, dtype, (n, d, v, temp), &name, (tf, tg), r));
            }
            for (n, d, v, temp) in [(67, 80, 1037, 0.7), (300, 256, 151_936, 1.0)] {
                let name = format!("weighted_logprob_sum {dn} N={n} d={d} V={v} T={temp}");
                report.case(&name, |r| folded_case(dev, rng, dtype, (n, d, v, temp), &name, (tf, tg), r));
            }
        }
        if on(Group::RmsNorm) {
            for shape in [vec![3, 5, 200], vec![2, 7, 128], vec![4, 2560]] {
                let name = format!("rms_norm {dn} {shape:?}");
                report.case(&name, |r| rms_case(dev, rng, dtype, &shape, &name, (tf, tg), r));
            }
        }
        if on(Group::Rope) {
            for (b, h, t, hd) in [(2, 3, 7, 64), (1, 4, 33, 128)] {
                let name = format!("rope {dn} [{b},{h},{t},{hd}]");
                report.case(&name, |r| rope_case(dev, rng, dtype, (b, h, t, hd), &name, (tf, tg), r));
            }
        }
    }
    if on(Group::Sampling) {
        for (dtype, dn, _, _) in DTYPES {
            for v in [1000, 151_936] {
                let name = format!("sample {dn} V={v}");
                report.case(&name, |r| sampling_case(dev, rng, dtype, v, &name, r));
            }
        }
    }
    if on(Group::Attention) {
        for (dtype, dn, tf, tg) in ATTENTION_DTYPES {
            for case in ATTENTION_CASES {
                let name = format!("attention {dn} {}", case.name);
                report.case(&name, |r| attention_case(dev, rng, dtype, &case, &name, (tf, tg), r));
            }
        }
    }
    if on(Group::Cudnn) {
        cudnn_attention(dev, rng, report);
    }
}

/// cuDNN attention tolerances, as the kernel's bf16 ones: (dtype, name,
/// output, gradients).
#[cfg(feature = "cudnn")]
const CUDNN_DTYPES: [(DType, &str, f64, f64); 2] = [(DType::BF16, "bf16", 2e-2, 3e-2), (DType::F16, "f16", 1e-2, 2e-2)];

/// With feature `cudnn`: cuDNN's fused attention (forced) against the CPU
/// attention op on every attention case (padded, packed, a KV-cache view,
/// decoding) plus one at Qwen3-4B's heads (32/8, d = 128) and one with
/// token-major operands (as the model passes them, read without a copy)
/// whose rows are longer than their sequences' length bucket (a layout
/// refusal shows there first), forward and the three gradients, the
/// upstream gradient zero at padding queries and their outputs left out
/// (cuDNN writes 0 there, ours the mean of every value: never used); then
/// a second run bitwise equal to the first (the deterministic backward).
/// A cuDNN that declines (no libcudnn, an older GPU) fails each case with
/// the reason. Without the feature: one line saying so.
#[cfg(feature = "cudnn")]
fn cudnn_attention(dev: &Device, rng: &mut rand_chacha::ChaCha8Rng, report: &mut Report) {
    match kernels::attention::cudnn_library() {
        Ok(lib) => report.line(format_args!("attention cudnn: libcudnn {} at {}", lib.version, lib.path.display())),
        Err(e) => report.line(format_args!("attention cudnn: {e}")),
    }
    let qwen = AttentionCase { name: "qwen3-4b heads b=1 h=32/8 t=s=300 d=128", b: 1, heads: 32, kv_heads: 8, t: 300, s: 300, d: 128, slots: Slots::Packed, extra: 0, token_major: false };
    for (dtype, dn, tf, tg) in CUDNN_DTYPES {
        for case in ATTENTION_CASES.iter().chain([&qwen, &TOKEN_MAJOR_CASE]) {
            let name = format!("attention cudnn {dn} {}", case.name);
            report.case(&name, |r| cudnn_case(dev, rng, dtype, case, &name, (tf, tg), r));
        }
    }
}

#[cfg(not(feature = "cudnn"))]
fn cudnn_attention(_: &Device, _: &mut rand_chacha::ChaCha8Rng, report: &mut Report) {
    report.line(format_args!("attention cudnn: not built (cargo build --features cuda,cudnn)"));
}

/// One cuDNN case: see [`cudnn_attention`].
#[cfg(feature = "cudnn")]
#[allow(clippy::too_many_arguments)]
fn cudnn_case(dev: &Device, rng: &mut rand_chacha::ChaCha8Rng, dtype: DType, c: &AttentionCase, name: &str, (tf, tg): (f64, f64), report: &mut Report) -> Result<()> {
    let vis = std::sync::Arc::new(attention_visibility(c)?);
    let scale = 1.0 / (c.d as f64).sqrt();
    let live: Vec<f32> = (0..c.b).flat_map(|r| (0..c.t).map(move |i| (r, i))).map(|(r, i)| if vis.is_padding_query(r, i) { 0.0 } else { 1.0 }).collect();
    let live = Tensor::from_vec(live, (c.b, c.t, 1), &Device::Cpu)?;
    let (q, cache_k, cache_v) = case_inputs(rng, c, dtype)?;
    let g = random(rng, &[c.b, c.t, c.heads * c.d], 1.0)?.broadcast_mul(&live)?.to_dtype(dtype)?;
    let f32s = |x: &Tensor| x.to_dtype(DType::F32);
    let want = kernels::attention::forward_backward(&f32s(&q)?, &f32s(&cache_k)?.narrow(2, 0, c.s)?, &f32s(&cache_v)?.narrow(2, 0, c.s)?, &vis, scale, &f32s(&g)?)?;
    let (qc, kc, vc, gc) = (q.to_device(dev)?, cache_k.to_device(dev)?, cache_v.to_device(dev)?, g.to_device(dev)?);
    let run = || kernels::cuda_ops::attention_cudnn_forward_backward(&qc, &kc.narrow(2, 0, c.s)?, &vc.narrow(2, 0, c.s)?, &vis, scale, &gc);
    let got = run()?;
    anyhow::ensure!(got.0.dtype() == dtype && got.1.dtype() == dtype, "{name}: cuDNN outputs are {:?}, expected {dtype:?}", got.0.dtype());
    let out = got.0.to_device(&Device::Cpu)?.to_dtype(DType::F32)?.broadcast_mul(&live)?;
    report.check_scaled(&format!("{name} out"), &out, &want.0.broadcast_mul(&live)?, tf, 1.0)?;
    report.check_scaled(&format!("{name} grad_q"), &got.1, &want.1, tg, 1.0)?;
    report.check_scaled(&format!("{name} grad_k"), &got.2, &want.2, tg, 1.0)?;
    report.check_scaled(&format!("{name} grad_v"), &got.3, &want.3, tg, 1.0)?;
    let again = run()?;
    for (what, a, b) in [("out", &again.0, &got.0), ("grad_q", &again.1, &got.1), ("grad_k", &again.2, &got.2), ("grad_v", &again.3, &got.3)] {
        report.check(&format!("{name} {what} bitwise rerun"), a, &b.to_device(&Device::Cpu)?, 0.0)?;
    }
    Ok(())
}

/// The sampling kernel against `kernels::sampling::sample_reference`
/// (f64) for every mode on 8 rows of random logits with a few peaks:
/// the same tokens wherever the uniform lies further than 5e-7 of the
/// kept mass from a token boundary, log-probs within 3e-5 of the
/// largest |log-prob|.
fn sampling_case(dev: &Device, rng: &mut rand_chacha::ChaCha8Rng, dtype: DType, v: usize, name: &str, report: &mut Report) -> Result<()> {
    use kernels::sampling::{sample_reference, SampleMode};
    let rows = 8;
    let mut x = random(rng, &[rows, v], 4.0)?.to_dtype(dtype)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    for r in 0..rows {
        for p in 0..8 {
            x[r * v + rng.random_range(0..v)] += 6.0 + p as f32;
        }
    }
    // The peaks moved the values off the dtype's grid: the reference reads
    // the logits the kernel reads (rounded to bf16 again where bf16).
    let logits = Tensor::from_vec(x, (rows, v), &Device::Cpu)?.to_dtype(dtype)?;
    let x = logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let modes = [
        SampleMode::Greedy,
        SampleMode::Softmax { temperature: 0.7 },
        SampleMode::Truncated { temperature: 1.0, top_k: 40, top_p: 1.0 },
        SampleMode::Truncated { temperature: 0.8, top_k: 0, top_p: 0.9 },
        SampleMode::Truncated { temperature: 1.0, top_k: 1000, top_p: 0.95 },
    ];
    for mode in modes {
        let us: Vec<f64> = (0..rows).map(|_| rng.random::<f64>()).collect();
        let picks = kernels::cuda_ops::sample(&logits.to_device(dev)?, &Tensor::new(us.as_slice(), dev)?, mode)?.to_device(&Device::Cpu)?.to_vec2::<f32>()?;
        let (mut got_tok, mut want_tok, mut got_lp, mut want_lp) = (vec![], vec![], vec![], vec![]);
        for r in 0..rows {
            let (want, margin) = sample_reference(&x[r * v..(r + 1) * v], us[r], mode);
            // Near a boundary either neighbour is right: compare the reference with itself.
            got_tok.push(if margin < 5e-7 { want.token as f32 } else { picks[r][0] });
            want_tok.push(want.token as f32);
            got_lp.push(picks[r][1]);
            want_lp.push(want.logprob);
        }
        let t = |v: Vec<f32>| Tensor::from_vec(v, rows, &Device::Cpu);
        report.check(&format!("{name} {mode:?} tokens"), &t(got_tok)?, &t(want_tok)?, 0.0)?;
        report.check_scaled(&format!("{name} {mode:?} logprobs"), &t(got_lp)?, &t(want_lp)?, 3e-5, 1.0)?;
    }
    Ok(())
}

/// Attention tolerances, relative to max(1, max|reference|): (dtype,
/// name, output, gradients). bf16 rounds the output and gradients (2^-8
/// relative) and computes D = rowsum(dO * O) from the rounded output.
const ATTENTION_DTYPES: [(DType, &str, f64, f64); 2] = [(DType::F32, "f32", 1e-5, 1e-5), (DType::BF16, "bf16", 2e-2, 3e-2)];

/// Which keys the queries of an attention case see.
#[derive(Clone, Copy)]
enum Slots {
    /// Row r starts with 3 r padding slots; the last row ends with 2 (s = t).
    Padded,
    /// Each row packs three sequences (positions restart, one segment
    /// each) and 2 padding slots (s = t).
    Packed,
    /// The t queries follow s - t cached keys; row 1's first 3 keys are padding.
    Cache,
    /// Row r is one sequence of `[60, 45, 20][r % 3]` tokens after left
    /// padding (s = t, rows longer than the sequences' length bucket).
    #[cfg_attr(not(feature = "cudnn"), allow(dead_code))]
    Short,
}

/// An attention parity case; k and v are views of a `[b, kv_heads, s +
/// extra, d]` cache (strided where `extra > 0`).
struct AttentionCase {
    name: &'static str,
    b: usize,
    heads: usize,
    kv_heads: usize,
    t: usize,
    s: usize,
    d: usize,
    slots: Slots,
    extra: usize,
    /// q, k, v as token-major views (`[b, len, heads, d]` transposed), as
    /// the model passes them; else head-major (`[b, heads, len, d]`).
    token_major: bool,
}

/// The token-major case with rows longer than their sequences' bucket (cuDNN only).
#[cfg(feature = "cudnn")]
const TOKEN_MAJOR_CASE: AttentionCase =
    AttentionCase { name: "token-major short rows b=3 h=8/2 t=s=200 d=128", b: 3, heads: 8, kv_heads: 2, t: 200, s: 200, d: 128, slots: Slots::Short, extra: 0, token_major: true };

/// q `[b, heads, t, d]` and the k, v caches `[b, kv_heads, s + extra, d]`
/// (head-major, or token-major views) in `dtype`.
fn case_inputs(rng: &mut rand_chacha::ChaCha8Rng, c: &AttentionCase, dtype: DType) -> Result<(Tensor, Tensor, Tensor)> {
    let make = |rng: &mut rand_chacha::ChaCha8Rng, h: usize, len: usize| -> Result<Tensor> {
        Ok(if c.token_major { random(rng, &[c.b, len, h, c.d], 1.0)?.to_dtype(dtype)?.transpose(1, 2)? } else { random(rng, &[c.b, h, len, c.d], 1.0)?.to_dtype(dtype)? })
    };
    Ok((make(rng, c.heads, c.t)?, make(rng, c.kv_heads, c.s + c.extra)?, make(rng, c.kv_heads, c.s + c.extra)?))
}

const ATTENTION_CASES: [AttentionCase; 4] = [
    AttentionCase { name: "padded b=2 h=4/4 t=s=45 d=64", b: 2, heads: 4, kv_heads: 4, t: 45, s: 45, d: 64, slots: Slots::Padded, extra: 0, token_major: false },
    AttentionCase { name: "packed b=2 h=8/2 t=s=70 d=128", b: 2, heads: 8, kv_heads: 2, t: 70, s: 70, d: 128, slots: Slots::Packed, extra: 0, token_major: false },
    AttentionCase { name: "cache view b=2 h=4/2 t=3 s=70 d=128", b: 2, heads: 4, kv_heads: 2, t: 3, s: 70, d: 128, slots: Slots::Cache, extra: 10, token_major: false },
    AttentionCase { name: "decode b=1 h=8/2 t=1 s=37 d=64", b: 1, heads: 8, kv_heads: 2, t: 1, s: 37, d: 64, slots: Slots::Cache, extra: 5, token_major: false },
];

/// The case's visibility: positions (-1 padding) and, for packed rows, segments.
fn attention_visibility(c: &AttentionCase) -> Result<kernels::attention::Visibility> {
    let (mut qpos, mut kpos, mut qseg) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..c.b {
        match c.slots {
            Slots::Padded => {
                let (front, back) = (3 * r, if r + 1 == c.b { 2 } else { 0 });
                let n = c.t - front - back;
                qpos.extend((0..front).map(|_| -1).chain(0..n as i64).chain((0..back).map(|_| -1)));
            }
            Slots::Packed => {
                let lens = [c.t / 3, c.t / 2, c.t - c.t / 3 - c.t / 2 - 2];
                for (sg, &len) in lens.iter().enumerate() {
                    qpos.extend(0..len as i64);
                    qseg.extend(std::iter::repeat_n(sg as u32, len));
                }
                qpos.extend([-1, -1]);
                qseg.extend([3, 3]);
            }
            Slots::Short => {
                let n = [60, 45, 20][r % 3].min(c.t);
                qpos.extend((0..c.t - n).map(|_| -1).chain(0..n as i64));
            }
            Slots::Cache => {
                let pad = if r == 1 { 3 } else { 0 };
                let row: Vec<i64> = (0..pad).map(|_| -1).chain(0..(c.s - pad) as i64).collect();
                qpos.extend_from_slice(&row[c.s - c.t..]);
                kpos.extend(row);
            }
        }
    }
    if !matches!(c.slots, Slots::Cache) {
        kpos = qpos.clone();
    }
    let vis = kernels::attention::Visibility::new(c.b, qpos, kpos)?;
    Ok(match c.slots {
        Slots::Packed => vis.with_segments(qseg.clone(), qseg)?,
        _ => vis,
    })
}

/// Reference: the CPU attention op (f32) on the same dtype-rounded
/// inputs; the CUDA side runs the op's `cuda_fwd` and CUDA backward
/// (`cuda_ops::attention_forward_backward`) in `dtype`, k and v as views
/// of a longer cache where `extra > 0`.
#[allow(clippy::too_many_arguments)]
fn attention_case(
    dev: &Device,
    rng: &mut rand_chacha::ChaCha8Rng,
    dtype: DType,
    c: &AttentionCase,
    name: &str,
    (tf, tg): (f64, f64),
    report: &mut Report,
) -> Result<()> {
    let vis = std::sync::Arc::new(attention_visibility(c)?);
    let scale = 1.0 / (c.d as f64).sqrt();
    let (q, cache_k, cache_v) = case_inputs(rng, c, dtype)?;
    let g = random(rng, &[c.b, c.t, c.heads * c.d], 1.0)?.to_dtype(dtype)?;
    let f32s = |x: &Tensor| x.to_dtype(DType::F32);
    let want = kernels::attention::forward_backward(
        &f32s(&q)?,
        &f32s(&cache_k)?.narrow(2, 0, c.s)?,
        &f32s(&cache_v)?.narrow(2, 0, c.s)?,
        &vis,
        scale,
        &f32s(&g)?,
    )?;
    let (qc, kc, vc, gc) = (q.to_device(dev)?, cache_k.to_device(dev)?, cache_v.to_device(dev)?, g.to_device(dev)?);
    let kernel = kernels::attention::Settings { backend: kernels::attention::Backend::Kernel, ..Default::default() };
    let got = kernels::cuda_ops::attention_forward_backward(&qc, &kc.narrow(2, 0, c.s)?, &vc.narrow(2, 0, c.s)?, &vis, scale, &gc, kernel)?;
    anyhow::ensure!(got.4 == kernels::attention::Ran::Kernel, "{name}: {} ran, not the fused kernel", got.4.name());
    anyhow::ensure!(got.0.dtype() == dtype && got.1.dtype() == dtype, "{name}: CUDA outputs are {:?}, expected {dtype:?}", got.0.dtype());
    report.check_scaled(&format!("{name} out"), &got.0, &want.0, tf, 1.0)?;
    report.check_scaled(&format!("{name} grad_q"), &got.1, &want.1, tg, 1.0)?;
    report.check_scaled(&format!("{name} grad_k"), &got.2, &want.2, tg, 1.0)?;
    report.check_scaled(&format!("{name} grad_v"), &got.3, &want.3, tg, 1.0)
}

/// Reference: log_softmax(h W^T / T) gathered at the targets, its
/// log-sum-exp and entropy, gradients of sum(g_logp logp + g_lse lse) by
/// autograd, in f32 on the CPU from the same (dtype-rounded) inputs. The
/// CUDA side runs the ops' storage functions: stats, then the backward on
/// aux rows (target, lse, g_logp, g_lse) as `TokenLogprobsOp::bwd` packs them.
#[allow(clippy::too_many_arguments)]
fn logprobs_case(
    dev: &Device,
    rng: &mut rand_chacha::ChaCha8Rng,
    dtype: DType,
    (n, d, v, temp): (usize, usize, usize, f64),
    name: &str,
    (tf, tg): (f64, f64),
    report: &mut Report,
) -> Result<()> {
    let h = random(rng, &[n, d], 1.0)?.to_dtype(dtype)?;
    let w = random(rng, &[v, d], 0.2)?.to_dtype(dtype)?;
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..v as u32)).collect();
    let t = Tensor::new(targets.as_slice(), &Device::Cpu)?;
    let (g_lp, g_lse) = (random(rng, &[n], 1.0)?, random(rng, &[n], 0.5)?);
    let hv = Var::from_tensor(&h.to_dtype(DType::F32)?)?;
    let wv = Var::from_tensor(&w.to_dtype(DType::F32)?)?;
    let logits = (hv.as_tensor().matmul(&wv.as_tensor().t()?)? / temp)?;
    let max = logits.max_keepdim(1)?.detach();
    let lse = (logits.broadcast_sub(&max)?.exp()?.sum_keepdim(1)?.log()? + &max)?;
    let logp = logits.gather(&t.unsqueeze(1)?, 1)?.sub(&lse)?.squeeze(1)?;
    let lse = lse.squeeze(1)?;
    let probs = ops::softmax_last(&logits.detach())?;
    let entropy = (&lse.detach() - (probs * logits.detach())?.sum(1)?)?;
    let grads = ((&logp * &g_lp)? + (&lse * &g_lse)?)?.sum_all()?.backward()?;
    let (hc, wc, tc) = (h.to_device(dev)?, w.to_device(dev)?, t.to_device(dev)?);
    let stats = kernels::cuda_ops::token_logprobs_stats(&hc, &wc, &tc, temp)?;
    report.check(&format!("{name} logp"), &stats.narrow(1, 0, 1)?.squeeze(1)?, &logp, tf)?;
    report.check(&format!("{name} lse"), &stats.narrow(1, 1, 1)?.squeeze(1)?, &lse, tf)?;
    report.check(&format!("{name} entropy"), &stats.narrow(1, 2, 1)?.squeeze(1)?, &entropy, tf)?;
    let aux = Tensor::stack(&[&tc.to_dtype(DType::F32)?, &stats.narrow(1, 1, 1)?.squeeze(1)?, &g_lp.to_device(dev)?, &g_lse.to_device(dev)?], 1)?;
    let both = kernels::cuda_ops::token_logprobs_backward(&hc, &wc, &aux, temp)?;
    report.check(&format!("{name} grad_hidden"), &both.narrow(0, 0, n)?, grads.get(hv.as_tensor()).expect("grad"), tg)?;
    report.check(&format!("{name} grad_lm_head"), &both.narrow(0, n, v)?, grads.get(wv.as_tensor()).expect("grad"), tg)
}

/// The folded head (`weighted_logprob_sum`'s CUDA path: gradients made in
/// the forward) against the plain composition with autograd on the CPU:
/// log-probs, entropy, `w log p` and both gradients of `sum w log p`, one
/// weight 0 (a masked token).
fn folded_case(dev: &Device, rng: &mut rand_chacha::ChaCha8Rng, dtype: DType, (n, d, v, temp): (usize, usize, usize, f64), name: &str, (tf, tg): (f64, f64), report: &mut Report) -> Result<()> {
    let h = random(rng, &[n, d], 1.0)?.to_dtype(dtype)?;
    let w = random(rng, &[v, d], 0.2)?.to_dtype(dtype)?;
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..v as u32)).collect();
    let t = Tensor::new(targets.as_slice(), &Device::Cpu)?;
    let mut weights: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    weights[0] = 0.0;
    let wt = Tensor::new(weights.as_slice(), &Device::Cpu)?;
    let hv = Var::from_tensor(&h.to_dtype(DType::F32)?)?;
    let wv = Var::from_tensor(&w.to_dtype(DType::F32)?)?;
    let logits = (hv.as_tensor().matmul(&wv.as_tensor().t()?)? / temp)?;
    let max = logits.max_keepdim(1)?.detach();
    let lse = (logits.broadcast_sub(&max)?.exp()?.sum_keepdim(1)?.log()? + &max)?;
    let logp = logits.gather(&t.unsqueeze(1)?, 1)?.sub(&lse)?.squeeze(1)?;
    let probs = ops::softmax_last(&logits.detach())?;
    let entropy = (&lse.squeeze(1)?.detach() - (probs * logits.detach())?.sum(1)?)?;
    let grads = (&logp * &wt)?.sum_all()?.backward()?;
    let aux = Tensor::stack(&[&t.to_dtype(DType::F32)?, &wt], 1)?.to_device(dev)?;
    let (stats, both) = kernels::cuda_ops::folded_logprobs(&h.to_device(dev)?, &w.to_device(dev)?, &aux, temp)?;
    report.check(&format!("{name} logp"), &stats.narrow(1, 0, 1)?.squeeze(1)?, &logp, tf)?;
    report.check(&format!("{name} entropy"), &stats.narrow(1, 2, 1)?.squeeze(1)?, &entropy, tf)?;
    report.check(&format!("{name} w logp"), &stats.narrow(1, 3, 1)?.squeeze(1)?, &(&logp * &wt)?, tf)?;
    report.check(&format!("{name} grad_hidden"), &both.narrow(0, 0, n)?, grads.get(hv.as_tensor()).expect("grad"), tg)?;
    report.check(&format!("{name} grad_lm_head"), &both.narrow(0, n, v)?, grads.get(wv.as_tensor()).expect("grad"), tg)
}

/// Reference: `ops::rms_norm` (the model's composition) with autograd.
fn rms_case(dev: &Device, rng: &mut rand_chacha::ChaCha8Rng, dtype: DType, shape: &[usize], name: &str, (tf, tg): (f64, f64), report: &mut Report) -> Result<()> {
    let eps = 1e-6;
    let x = random(rng, shape, 2.0)?.to_dtype(dtype)?;
    let w = (random(rng, &shape[shape.len() - 1..], 0.5)? + 1.0)?.to_dtype(dtype)?;
    let dy = random(rng, shape, 1.0)?.to_dtype(dtype)?;
    let xv = Var::from_tensor(&x.to_dtype(DType::F32)?)?;
    let wv = Var::from_tensor(&w.to_dtype(DType::F32)?)?;
    let want = ops::rms_norm(xv.as_tensor(), wv.as_tensor(), eps)?;
    let grads = (&want * dy.to_dtype(DType::F32)?)?.sum_all()?.backward()?;
    let (xc, wc, dyc) = (x.to_device(dev)?, w.to_device(dev)?, dy.to_device(dev)?);
    report.check(&format!("{name} fwd"), &kernels::cuda_ops::rms_norm(&xc, &wc, eps)?, &want, tf)?;
    let (dx, dw) = kernels::cuda_ops::rms_norm_backward(&xc, &wc, &dyc, eps)?;
    report.check(&format!("{name} grad_x"), &dx, grads.get(xv.as_tensor()).expect("grad"), tg)?;
    report.check(&format!("{name} grad_w"), &dw, grads.get(wv.as_tensor()).expect("grad"), tg)?;
    let packed = kernels::cuda_ops::rms_norm_backward_packed(&xc, &wc, &dyc, eps)?;
    let rows = x.elem_count() / shape[shape.len() - 1];
    let want_packed = Tensor::cat(&[&grads.get(xv.as_tensor()).expect("grad").flatten_to(shape.len() - 2)?, &grads.get(wv.as_tensor()).expect("grad").unsqueeze(0)?], 0)?;
    anyhow::ensure!(packed.dim(0)? == rows + 1, "{name}: packed backward has {} rows, expected {}", packed.dim(0)?, rows + 1);
    report.check(&format!("{name} packed backward"), &packed, &want_packed, tg)
}

/// Reference: `RopeTables::apply` (the model's composition) with autograd.
fn rope_case(
    dev: &Device,
    rng: &mut rand_chacha::ChaCha8Rng,
    dtype: DType,
    (b, h, t, hd): (usize, usize, usize, usize),
    name: &str,
    (tf, tg): (f64, f64),
    report: &mut Report,
) -> Result<()> {
    let positions: Vec<i64> = (0..b * t).map(|_| rng.random_range(-1..4096)).collect();
    let x = random(rng, &[b, h, t, hd], 1.0)?.to_dtype(dtype)?;
    let dy = random(rng, &[b, h, t, hd], 1.0)?.to_dtype(dtype)?;
    let tables = RopeTables::new(&positions, b, t, &default_inv_freq(hd, 1e6), DType::F32, &Device::Cpu)?;
    let xv = Var::from_tensor(&x.to_dtype(DType::F32)?)?;
    let want = tables.apply(xv.as_tensor())?;
    let grads = (&want * dy.to_dtype(DType::F32)?)?.sum_all()?.backward()?;
    let gt = RopeTables::new(&positions, b, t, &default_inv_freq(hd, 1e6), dtype, dev)?;
    let (xc, dyc) = (x.to_device(dev)?, dy.to_device(dev)?);
    report.check(&format!("{name} fwd"), &kernels::cuda_ops::rope(&xc, &gt.cos, &gt.sin)?, &want, tf)?;
    let dx = kernels::cuda_ops::rope_op(&dyc, &gt.cos, &gt.sin, true)?;
    report.check(&format!("{name} grad_x"), &dx, grads.get(xv.as_tensor()).expect("grad"), tg)
}

/// Fused vs unfused (matmul, log_softmax, gather, autograd) log-probs
/// forward+backward on the device, bf16, N=1024, d=2560, V=151936; a line
/// per path to `out`.
pub fn bench_logprobs(dev: &Device, seed: u64, out: &mut dyn std::io::Write) -> Result<()> {
    let (n, d, v) = (1024, 2560, 151_936);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let h = random(&mut rng, &[n, d], 1.0)?.to_dtype(DType::BF16)?.to_device(dev)?;
    let w = random(&mut rng, &[v, d], 0.05)?.to_dtype(DType::BF16)?.to_device(dev)?;
    let targets: Vec<u32> = (0..n).map(|_| rng.random_range(0..v as u32)).collect();
    let t = Tensor::new(targets.as_slice(), dev)?;
    let g = Tensor::ones(n, DType::F32, dev)?;
    let fused = || -> Result<f32> {
        let stats = kernels::cuda_ops::token_logprobs_stats(&h, &w, &t, 1.0)?;
        let lse = stats.narrow(1, 1, 1)?.squeeze(1)?;
        let aux = Tensor::stack(&[&t.to_dtype(DType::F32)?, &lse, &g, &g.zeros_like()?], 1)?;
        let grads = kernels::cuda_ops::token_logprobs_backward(&h, &w, &aux, 1.0)?;
        let _ = grads.narrow(0, 0, n)?.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        Ok(stats.narrow(1, 0, 1)?.sum_all()?.to_scalar::<f32>()?)
    };
    let unfused = || -> Result<f32> {
        let (hv, wv) = (Var::from_tensor(&h)?, Var::from_tensor(&w)?);
        let logits = hv.as_tensor().matmul(&wv.as_tensor().t()?)?.to_dtype(DType::F32)?;
        let lp = ops::log_softmax_last(&logits)?.gather(&t.unsqueeze(1)?, 1)?.squeeze(1)?;
        let grads = lp.sum_all()?.backward()?;
        let gh = grads.get(hv.as_tensor()).expect("grad");
        let _ = gh.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        Ok(lp.sum_all()?.to_scalar::<f32>()?)
    };
    for (mode, f) in [("fused", &fused as &dyn Fn() -> Result<f32>), ("unfused", &unfused)] {
        let _ = f()?; // warm-up (module load, allocator)
        let t0 = std::time::Instant::now();
        let reps = 3;
        let mut sum = 0.0;
        for _ in 0..reps {
            sum = f()?;
        }
        dev.synchronize()?;
        let secs = t0.elapsed().as_secs_f64() / reps as f64;
        writeln!(out, "bench logprob {mode:<8} bf16 N={n} d={d} V={v} fwd+bwd: {secs:.4} s  (logprob_sum {sum:.3})")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error in one case (here: no CUDA device for the kernel) is that
    /// case's FAIL line; every later case of the group still runs.
    #[test]
    fn an_erroring_case_fails_alone_and_the_self_test_goes_on() {
        let mut report = Report::default();
        check_all(&Device::Cpu, 0, &[Group::Rope], &mut report);
        assert_eq!(report.total, 4, "2 shapes x 2 dtypes: {:?}", report.failed);
        assert_eq!(report.failed.len(), 4);
        assert!(report.failed[0].starts_with("rope f32") && report.failed[3].starts_with("rope bf16"), "{:?}", report.failed);
        let mut report = Report::default();
        check_all(&Device::Cpu, 0, &[Group::Sampling, Group::RmsNorm], &mut report);
        assert_eq!(report.total, 6 + 4, "{:?}", report.failed);
    }

    #[test]
    fn groups_are_named_in_order_cublas_first_cudnn_last() {
        for (g, n) in Group::ALL.iter().zip(Group::NAMES) {
            assert_eq!(n.parse::<Group>(), Ok(*g));
            assert_eq!(g.name(), n);
        }
        assert_eq!(Group::ALL[0], Group::Logprobs);
        assert_eq!(Group::ALL[5], Group::Cudnn);
        assert!("flash".parse::<Group>().unwrap_err().contains("expected one of logprobs"));
    }
}
