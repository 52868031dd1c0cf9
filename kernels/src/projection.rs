//! `x @ w^T` as one autograd node, for training.
//!
//! The composition `x.reshape((rows, in)).matmul(&w.t())` then a reshape back
//! puts four nodes in Candle's graph (two reshapes, a transpose, the
//! product), and Candle's backward gives every node a gradient buffer of its
//! own (a zero-filled tensor, then an addition into it): for a training step
//! those copies of activations and weights were about a tenth of the time.
//! [`linear`] is one node: the forward is the same product call Candle makes
//! (the backend's `matmul` on the same layouts, so the same bits), the
//! backward computes `g @ w` and `g^T @ x` directly in the shapes they are
//! needed in.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

/// `x @ w^T` for `x` `[.., in]` and `w` `[out, in]` -> `[.., out]`, as one
/// node (see the module docs); CPU tensors of one float dtype. Elsewhere it
/// is the plain composition.
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (out, inner) = w.dims2()?;
    let x_inner = x.dims().last().copied().unwrap_or(0);
    if x_inner != inner || x.rank() == 0 {
        candle_core::bail!("linear: x is {:?} and w is [{out}, {inner}]: expected x [.., {inner}]", x.dims());
    }
    if !x.device().is_cpu() || x.dtype() != w.dtype() || x.rank() < 2 {
        let rows = x.elem_count() / inner.max(1);
        let mut dims = x.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = out;
        return x.reshape((rows, inner))?.matmul(&w.t()?)?.reshape(dims);
    }
    x.contiguous()?.apply_op2(&w.contiguous()?, Linear)
}

/// `x @ w^T` on CPU storages, `x` `[.., in]` and `w` `[out, in]` both
/// contiguous: `[rows, out]` row-major, by the call Candle's `matmul` makes.
pub(crate) fn product_with_transpose(x: (&CpuStorage, &Layout), w: (&CpuStorage, &Layout)) -> Result<CpuStorage> {
    let (out, inner) = w.1.shape().dims2()?;
    let rows = x.1.shape().elem_count() / inner.max(1);
    let (Some((x0, _)), Some((w0, _))) = (x.1.contiguous_offsets(), w.1.contiguous_offsets()) else {
        candle_core::bail!("linear: inputs must be contiguous");
    };
    let x_layout = Layout::contiguous_with_offset((rows, inner), x0);
    let wt_layout = Layout::contiguous_with_offset((out, inner), w0).transpose(0, 1)?;
    x.0.matmul(w.0, (1, rows, out, inner), &x_layout, &wt_layout)
}

/// The op of [`linear`].
#[derive(Clone, Copy, Debug)]
struct Linear;

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let y = product_with_transpose((s1, l1), (s2, l2))?;
        let mut dims = l1.shape().dims().to_vec();
        *dims.last_mut().expect("rank >= 2") = l2.shape().dims2()?.0;
        Ok((y, Shape::from(dims)))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (out, inner) = w.dims2()?;
        let rows = x.elem_count() / inner.max(1);
        let (x_tracks, w_tracks) = (x.track_op(), w.track_op());
        let (x2, w) = (x.detach().reshape((rows, inner))?, w.detach());
        let g = grad.detach().reshape((rows, out))?;
        // A frozen side (a LoRA run's base weight) gets no gradient: its
        // product is skipped, not computed and dropped.
        let grad_x = if x_tracks { Some(g.matmul(&w)?.reshape(x.shape())?) } else { None };
        let grad_w = if w_tracks { Some(g.t()?.matmul(&x2)?) } else { None };
        Ok((grad_x, grad_w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    #[test]
    fn the_forward_has_the_compositions_bits() {
        let x = Tensor::from_vec(data(2 * 37 * 96, 1), (2, 37, 96), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(data(130 * 96, 2), (130, 96), &Device::Cpu).unwrap();
        let ours = linear(&x, &w).unwrap();
        let theirs = x.reshape((74, 96)).unwrap().matmul(&w.t().unwrap()).unwrap().reshape((2, 37, 130)).unwrap();
        assert_eq!(ours.dims(), [2, 37, 130]);
        assert_eq!(ours.flatten_all().unwrap().to_vec1::<f32>().unwrap(), theirs.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }

    #[test]
    fn gradients_match_the_composition() {
        let x = Var::from_vec(data(3 * 50 * 64, 3), (3, 50, 64), &Device::Cpu).unwrap();
        let w = Var::from_vec(data(40 * 64, 4), (40, 64), &Device::Cpu).unwrap();
        let up = Tensor::from_vec(data(3 * 50 * 40, 5), (3, 50, 40), &Device::Cpu).unwrap();
        let loss = |y: Tensor| (y * &up).unwrap().sum_all().unwrap();
        let ours = loss(linear(x.as_tensor(), w.as_tensor()).unwrap()).backward().unwrap();
        let composed = x.as_tensor().reshape((150, 64)).unwrap().matmul(&w.as_tensor().t().unwrap()).unwrap().reshape((3, 50, 40)).unwrap();
        let theirs = loss(composed).backward().unwrap();
        for v in [&x, &w] {
            let a = ours.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let b = theirs.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(&b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(diff <= 1e-6 * scale, "max diff {diff} of {scale}");
        }
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let x = Tensor::zeros((2, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
        let w = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = linear(&x, &w).unwrap_err().to_string();
        assert!(err.contains("expected x [.., 4]"), "{err}");
    }
}
