//! Single-threaded f32 matrix products on row-major slices, through the
//! `gemm` crate Candle itself uses on the CPU. The fused ops call these per
//! chunk from their own rayon tasks, so no call here spawns threads.

use gemm::Parallelism;

/// A row-major f32 matrix view: `rows x cols`, element `(r, c)` at
/// `data[r * row_stride + c]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
}

impl<'a> Mat<'a> {
    /// A dense `rows x cols` matrix (`row_stride == cols`).
    pub fn dense(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Mat { data, rows, cols, row_stride: cols }
    }

    /// Rows `start..start + len`.
    pub fn rows(&self, start: usize, len: usize) -> Self {
        Mat { data: &self.data[start * self.row_stride..], rows: len, ..*self }
    }

    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            assert!(self.cols <= self.row_stride, "matrix columns exceed row stride");
            assert!((self.rows - 1) * self.row_stride + self.cols <= self.data.len(), "matrix view out of bounds");
        }
    }
}

/// Whether the right-hand side is used as stored or transposed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rhs {
    /// `b` is `[k, n]`.
    AsIs,
    /// `b` is `[n, k]` and `b^T` is used (e.g. `h @ W^T` with `W` `[V, d]`).
    Transposed,
}

/// Whether the product overwrites `dst` or is added to it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accumulate {
    /// `dst = scale * a @ b`.
    Overwrite,
    /// `dst += scale * a @ b`.
    Add,
}

/// `dst (m x n, dense row-major) {=, +=} scale * a (m x k) @ op(b)`, one thread.
///
/// `a^T` can be used instead of `a` with `transpose_a` (`a` then stored
/// `[k, m]`). Panics when shapes or slice lengths disagree (callers hold the
/// invariants; a panic here is a bug, not bad input).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_f32(dst: &mut [f32], a: Mat, transpose_a: bool, b: Mat, rhs: Rhs, scale: f32, acc: Accumulate) {
    a.check();
    b.check();
    let (m, k) = if transpose_a { (a.cols, a.rows) } else { (a.rows, a.cols) };
    let (kb, n) = match rhs {
        Rhs::AsIs => (b.rows, b.cols),
        Rhs::Transposed => (b.cols, b.rows),
    };
    assert_eq!(k, kb, "inner dimensions differ");
    assert!(dst.len() >= m * n, "destination too small");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if acc == Accumulate::Overwrite {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    let (a_rs, a_cs) = if transpose_a { (1, a.row_stride) } else { (a.row_stride, 1) };
    let (b_rs, b_cs) = match rhs {
        Rhs::AsIs => (b.row_stride, 1),
        Rhs::Transposed => (1, b.row_stride),
    };
    // SAFETY: `check` and the assertions above guarantee that every index the
    // product touches, `(i, l)` of `a` for i < m, l < k through (a_rs, a_cs),
    // `(l, j)` of `b` through (b_rs, b_cs) and `(i, j)` of `dst` at
    // `i * n + j`, lies inside its slice; `dst` is borrowed mutably, so it
    // aliases neither input; `Parallelism::None` keeps the call on this thread.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            acc == Accumulate::Add,
            a.data.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.data.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}
