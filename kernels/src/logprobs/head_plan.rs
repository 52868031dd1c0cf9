//! The matrix products of the log-prob head on cuBLAS (`cuda.rs`) as plain
//! data, so that their transposes, leading dimensions and offsets are
//! checked on the CPU (the tests below run them with a column-major product
//! of cuBLAS's convention against the CPU kernels) and the CUDA launcher
//! only maps buffers to device pointers.
//!
//! Per chunk of `rows` tokens from `t0` (row-major buffers throughout):
//! 1. logits `[rows, V]` f32 = `hidden[t0..] @ lm_head^T / T`;
//! 2. the row kernel (`kernels/cuda/logprobs.cu`) turns them into the
//!    statistics and writes `dz = dL/d(h w)` over them, as the inputs'
//!    dtype `T`, leading dimension [`dz_ld`];
//! 3. `grad_hidden[t0..t0 + rows] = dz @ lm_head` (written once);
//! 4. `grad_head += dz^T @ hidden[t0..]` (f32, the first chunk overwrites).

/// The logits of one chunk take at most this many bytes (f32), unless a
/// single token's row is larger: 256 MiB holds 440 tokens at Qwen3's
/// vocabulary of 151,936, a product of `440 x 151,936 x 2,560` per chunk,
/// large enough for the GPU's tensor cores and 2% of the `[N, V]` f32
/// logits of a 16K-token micro-batch.
pub const CHUNK_LOGITS_BYTES: usize = 256 << 20;
/// Chunks hold a multiple of this many tokens (when they hold more).
const ROW_ALIGN: usize = 8;

/// A buffer of the head. `Logits` and `Dz` are the same device memory, read
/// as f32 logits and as the `T` gradient the row kernel wrote over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Buf {
    /// `[N, d]`, `T`.
    Hidden,
    /// `[V, d]`, `T`.
    LmHead,
    /// One chunk's `[rows, V]` f32 logits.
    Logits,
    /// The gradient over them: `T`, leading dimension [`dz_ld`].
    Dz,
    /// `[N, d]`, `T`.
    GradHidden,
    /// `[V, d]`, f32.
    GradHead,
}

/// A matrix operand in cuBLAS's column-major convention: `offset` and `ld`
/// in elements of the buffer's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Operand {
    pub buf: Buf,
    pub offset: usize,
    pub ld: usize,
}

/// `C = alpha op(A) op(B) + beta C` with `op(A)` `[m, k]`, `op(B)` `[k, n]`
/// and `C` `[m, n]`, column-major (cublasGemmEx's arguments).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub alpha: f32,
    pub beta: f32,
}

/// Tokens `t0..t0 + rows` of the head's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub t0: usize,
    pub rows: usize,
}

/// Most tokens per chunk for `n` tokens and a vocabulary of `v` within
/// `budget` bytes of f32 logits: a multiple of [`ROW_ALIGN`] when more than
/// that fits, at least one, at most `n`.
pub(crate) fn chunk_rows(n: usize, v: usize, budget: usize) -> usize {
    let fit = budget / (4 * v.max(1));
    let aligned = if fit >= ROW_ALIGN { fit / ROW_ALIGN * ROW_ALIGN } else { fit.max(1) };
    aligned.min(n.max(1))
}

/// The chunks of `n` tokens, `most` at a time.
pub(crate) fn chunks(n: usize, most: usize) -> impl Iterator<Item = Chunk> {
    (0..n).step_by(most.max(1)).map(move |t0| Chunk { t0, rows: most.min(n - t0) })
}

/// Leading dimension of the gradient in elements of `T` (`elem_bytes`
/// each): the row kernel writes row `r` over row `r`'s own f32 logits.
pub(crate) fn dz_ld(v: usize, elem_bytes: usize) -> usize {
    v * 4 / elem_bytes
}

/// Logits `[rows, V]` (row-major) = `hidden[t0..] [rows, d] @ lm_head^T / T`:
/// column-major `[V, rows] = lm_head^T' x hidden'`.
pub(crate) fn logits(c: Chunk, v: usize, d: usize, inv_t: f32) -> Gemm {
    Gemm {
        trans_a: true,
        trans_b: false,
        m: v,
        n: c.rows,
        k: d,
        a: Operand { buf: Buf::LmHead, offset: 0, ld: d },
        b: Operand { buf: Buf::Hidden, offset: c.t0 * d, ld: d },
        c: Operand { buf: Buf::Logits, offset: 0, ld: v },
        alpha: inv_t,
        beta: 0.0,
    }
}

/// `grad_hidden[t0..] [rows, d] = dz [rows, V] @ lm_head [V, d]`.
pub(crate) fn grad_hidden(c: Chunk, v: usize, d: usize, ld: usize) -> Gemm {
    Gemm {
        trans_a: false,
        trans_b: false,
        m: d,
        n: c.rows,
        k: v,
        a: Operand { buf: Buf::LmHead, offset: 0, ld: d },
        b: Operand { buf: Buf::Dz, offset: 0, ld },
        c: Operand { buf: Buf::GradHidden, offset: c.t0 * d, ld: d },
        alpha: 1.0,
        beta: 0.0,
    }
}

/// `grad_head [V, d] (+)= dz^T [V, rows] @ hidden[t0..] [rows, d]`; the
/// first chunk overwrites (cuBLAS does not read C when beta is 0).
pub(crate) fn grad_head(c: Chunk, v: usize, d: usize, ld: usize, first: bool) -> Gemm {
    Gemm {
        trans_a: false,
        trans_b: true,
        m: d,
        n: v,
        k: c.rows,
        a: Operand { buf: Buf::Hidden, offset: c.t0 * d, ld: d },
        b: Operand { buf: Buf::Dz, offset: 0, ld },
        c: Operand { buf: Buf::GradHead, offset: 0, ld: d },
        alpha: 1.0,
        beta: if first { 0.0 } else { 1.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logprobs::cpu::Problem;
    use crate::logprobs::folded_cpu;

    /// Host buffers standing in for the device's (`Logits` and `Dz` apart:
    /// the aliasing is the row kernel's, checked by the emulated harness).
    struct Host {
        hidden: Vec<f32>,
        lm_head: Vec<f32>,
        logits: Vec<f32>,
        dz: Vec<f32>,
        grad_hidden: Vec<f32>,
        grad_head: Vec<f32>,
    }

    impl Host {
        fn get(&mut self, b: Buf) -> &mut Vec<f32> {
            match b {
                Buf::Hidden => &mut self.hidden,
                Buf::LmHead => &mut self.lm_head,
                Buf::Logits => &mut self.logits,
                Buf::Dz => &mut self.dz,
                Buf::GradHidden => &mut self.grad_hidden,
                Buf::GradHead => &mut self.grad_head,
            }
        }

        /// cublasGemmEx's definition, column-major, f64 sums.
        fn run(&mut self, g: &Gemm) {
            let a = self.get(g.a.buf).clone();
            let b = self.get(g.b.buf).clone();
            let at = |i: usize, l: usize| if g.trans_a { a[g.a.offset + l + i * g.a.ld] } else { a[g.a.offset + i + l * g.a.ld] };
            let bt = |l: usize, j: usize| if g.trans_b { b[g.b.offset + j + l * g.b.ld] } else { b[g.b.offset + l + j * g.b.ld] };
            let c = self.get(g.c.buf);
            for j in 0..g.n {
                for i in 0..g.m {
                    let sum: f64 = (0..g.k).map(|l| at(i, l) as f64 * bt(l, j) as f64).sum();
                    let idx = g.c.offset + i + j * g.c.ld;
                    let old = if g.beta == 0.0 { 0.0 } else { g.beta * c[idx] };
                    c[idx] = g.alpha * sum as f32 + old;
                }
            }
        }
    }

    /// The row kernel's folded mode (its contract; the kernel itself is
    /// checked against the same formulas in kernels/cuda/emu): log-probs,
    /// and `dz = (w / T) (1[v = t] - p)` at leading dimension `ld`.
    fn rows_folded(h: &mut Host, c: Chunk, v: usize, ld: usize, targets: &[u32], weights: &[f32], inv_t: f32) -> Vec<f32> {
        let mut logp = Vec::new();
        for r in 0..c.rows {
            let z = &h.logits[r * v..(r + 1) * v];
            let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = max + z.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
            let t = targets[c.t0 + r] as usize;
            logp.push((z[t] as f64 - lse) as f32);
            let a = weights[c.t0 + r] * inv_t;
            let row: Vec<f32> = (0..v).map(|j| a * ((j == t) as u8 as f32 - (z[j] as f64 - lse).exp() as f32)).collect();
            h.dz[r * ld..r * ld + v].copy_from_slice(&row);
        }
        logp
    }

    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * scale).collect()
    }

    /// The chunked products of the plan, with the folded row step between
    /// them, give the CPU folded kernel's log-probs and both gradients: for
    /// f32 (`ld = V`) and bf16's layout (`ld = 2V`), chunks that do not
    /// divide the tokens, and a chunk of one token.
    #[test]
    fn the_plans_products_give_the_cpu_kernels_gradients() {
        let (n, v, d, temperature) = (11, 37, 6, 0.8f64);
        let inv_t = (1.0 / temperature) as f32;
        let hidden = values(n * d, 1, 2.0);
        let lm_head = values(v * d, 7, 1.0);
        let targets: Vec<u32> = (0..n).map(|i| (i * 13 % v) as u32).collect();
        let weights: Vec<f32> = (0..n).map(|i| if i == 3 { 0.0 } else { 0.1 * i as f32 - 0.4 }).collect();
        let p = Problem { hidden: &hidden, lm_head: &lm_head, n, d, v, inv_t };
        let want = folded_cpu::forward(&p, &targets, &weights);
        for (most, elem_bytes) in [(4, 4), (4, 2), (1, 2), (11, 4), (5, 2)] {
            let ld = dz_ld(v, elem_bytes);
            let mut h = Host {
                hidden: hidden.clone(),
                lm_head: lm_head.clone(),
                logits: vec![f32::NAN; most * v],
                dz: vec![f32::NAN; most * ld],
                grad_hidden: vec![f32::NAN; n * d],
                grad_head: vec![f32::NAN; v * d],
            };
            let mut logp = Vec::new();
            for (i, c) in chunks(n, most).enumerate() {
                h.run(&logits(c, v, d, inv_t));
                logp.extend(rows_folded(&mut h, c, v, ld, &targets, &weights, inv_t));
                h.run(&grad_hidden(c, v, d, ld));
                h.run(&grad_head(c, v, d, ld, i == 0));
            }
            let close = |what: &str, got: &[f32], want: &[f32]| {
                // NaN (a value never written, read through a wrong offset) fails too.
                let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, |m, x| if x.is_nan() || m.is_nan() { f32::NAN } else { m.max(x) });
                assert!(got.len() == want.len() && worst < 2e-5, "{what} (chunks of {most}, ld {ld}): max difference {worst}");
            };
            let want_logp: Vec<f32> = want.stats.chunks(4).map(|s| s[0]).collect();
            close("log-probs", &logp, &want_logp);
            close("grad hidden", &h.grad_hidden, &want.grad_hidden);
            close("grad lm_head", &h.grad_head, &want.grad_lm_head);
        }
    }

    #[test]
    fn chunks_fit_the_budget_and_cover_the_tokens() {
        assert_eq!(chunk_rows(16_384, 151_936, CHUNK_LOGITS_BYTES), 440);
        const { assert!(440 * 151_936 * 4 <= CHUNK_LOGITS_BYTES) };
        assert_eq!(chunk_rows(100, 151_936, CHUNK_LOGITS_BYTES), 100);
        assert_eq!(chunk_rows(10, 1 << 30, CHUNK_LOGITS_BYTES), 1, "one token's row beyond the budget still runs");
        assert_eq!(chunk_rows(1000, 37, 37 * 4 * 7), 7, "fewer than the alignment: as many as fit");
        let all: Vec<Chunk> = chunks(10, 4).collect();
        assert_eq!(all, vec![Chunk { t0: 0, rows: 4 }, Chunk { t0: 4, rows: 4 }, Chunk { t0: 8, rows: 2 }]);
        assert_eq!(dz_ld(151_936, 2), 2 * 151_936);
    }
}
