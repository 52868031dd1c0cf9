//! The first half of a SwiGLU feed-forward, `silu(x @ w_gate^T) * (x @ w_up^T)`,
//! as one autograd node, for training.
//!
//! Composed from [`crate::projection::linear`] and [`crate::swiglu::swiglu_gate`]
//! it is three nodes, and Candle's backward gives each node's inputs a
//! gradient buffer of their own (a zero-filled tensor, then an addition into
//! it): the gate's and the up projection's `[rows, intermediate]` outputs, the
//! widest activations of a layer, each got one, and `x` two additions. Here
//! the forward keeps the two projections for the backward, which turns the
//! upstream gradient into theirs in one pass and carries them to `x` and both
//! weights with four products, without any of those buffers.
//!
//! The forward is the same product calls and the same element-wise formula
//! as the composition, so the output has the same bits (tested).

use crate::projection::product_with_transpose;
use crate::storage::{contiguous_slice, f32_slice};
use crate::swiglu::{gate_backward, gate_forward, swiglu_gate};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};
use std::sync::{Arc, Mutex};

/// `silu(x @ w_gate^T) * (x @ w_up^T)` for `x` `[.., in]` and both weights
/// `[out, in]` -> `[.., out]`, as one node on the CPU in f32; elsewhere the
/// composition of `linear` and `swiglu_gate`.
pub fn gated_projection(x: &Tensor, w_gate: &Tensor, w_up: &Tensor) -> Result<Tensor> {
    let (out, inner) = w_gate.dims2()?;
    if w_up.dims() != [out, inner] {
        candle_core::bail!("gated_projection: w_gate is [{out}, {inner}] but w_up is {:?}", w_up.dims());
    }
    if x.rank() < 2 || x.dims()[x.rank() - 1] != inner {
        candle_core::bail!("gated_projection: x is {:?}: expected [.., {inner}]", x.dims());
    }
    let f32s = [x, w_gate, w_up].iter().all(|t| t.dtype() == DType::F32);
    if !x.device().is_cpu() || !f32s {
        let g = crate::projection::linear(x, w_gate)?;
        let u = crate::projection::linear(x, w_up)?;
        return swiglu_gate(&g, &u);
    }
    let op = GatedProjection { kept: Arc::new(Mutex::new(None)) };
    x.contiguous()?.apply_op3(&w_gate.contiguous()?, &w_up.contiguous()?, op)
}

/// The op of [`gated_projection`].
#[derive(Clone, Debug)]
struct GatedProjection {
    /// `(x @ w_gate^T, x @ w_up^T)` from the forward, taken by the backward.
    kept: Arc<Mutex<Option<(Vec<f32>, Vec<f32>)>>>,
}

/// The f32 data of a storage the product call returned.
fn into_f32(s: CpuStorage) -> Result<Vec<f32>> {
    match s {
        CpuStorage::F32(v) => Ok(v),
        other => candle_core::bail!("gated_projection: the product returned {:?}", candle_core::backend::BackendStorage::dtype(&other)),
    }
}

impl CustomOp3 for GatedProjection {
    fn name(&self) -> &'static str {
        "gated-projection"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = into_f32(product_with_transpose((s1, l1), (s2, l2))?)?;
        let u = into_f32(product_with_transpose((s1, l1), (s3, l3))?)?;
        let h = gate_forward(&g, &u);
        *self.kept.lock().expect("gated-projection activations") = Some((g, u));
        let mut dims = l1.shape().dims().to_vec();
        *dims.last_mut().expect("rank >= 2") = l2.shape().dims2()?.0;
        Ok((CpuStorage::F32(h), Shape::from(dims)))
    }

    fn bwd(&self, x: &Tensor, w_gate: &Tensor, w_up: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (out, inner) = w_gate.dims2()?;
        let rows = x.elem_count() / inner.max(1);
        let kept = self.kept.lock().expect("gated-projection activations").take();
        let (g, u) = match kept {
            Some(kept) => kept,
            // A second backward through one forward: the projections again.
            None => {
                let x2 = x.detach().reshape((rows, inner))?;
                let project = |w: &Tensor| x2.matmul(&w.detach().t()?)?.flatten_all()?.to_vec1::<f32>();
                (project(w_gate)?, project(w_up)?)
            }
        };
        let grad = grad.to_dtype(DType::F32)?.contiguous()?;
        let (dg, du) = {
            let (storage, layout) = grad.storage_and_layout();
            let candle_core::Storage::Cpu(storage) = &*storage else {
                candle_core::bail!("gated-projection: the upstream gradient is not on the CPU");
            };
            let dh = contiguous_slice(f32_slice(storage, "gated-projection gradient")?, layout, "gated-projection gradient")?;
            let (mut dg, mut du) = (vec![0.0f32; g.len()], vec![0.0f32; g.len()]);
            gate_backward(&g, &u, dh, &mut dg, &mut du);
            (dg, du)
        };
        let dg = Tensor::from_vec(dg, (rows, out), x.device())?;
        let du = Tensor::from_vec(du, (rows, out), x.device())?;
        let (gate_tracks, up_tracks) = (w_gate.track_op(), w_up.track_op());
        let (x2, w_gate, w_up) = (x.detach().reshape((rows, inner))?, w_gate.detach(), w_up.detach());
        let grad_x = (dg.matmul(&w_gate)? + du.matmul(&w_up)?)?.reshape(x.shape())?;
        // Frozen weights (a LoRA run's base) get no gradient product.
        let weight_grad = |tracks: bool, d: &Tensor| if tracks { d.t().and_then(|d| d.matmul(&x2)).map(Some) } else { Ok(None) };
        let grad_gate = weight_grad(gate_tracks, &dg)?;
        let grad_up = weight_grad(up_tracks, &du)?;
        Ok((Some(grad_x), grad_gate, grad_up))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 1000) as f32 / 250.0 - 2.0).collect()
    }

    fn composition(x: &Tensor, w_gate: &Tensor, w_up: &Tensor) -> Tensor {
        let g = crate::projection::linear(x, w_gate).unwrap();
        let u = crate::projection::linear(x, w_up).unwrap();
        crate::swiglu::swiglu_gate(&g, &u).unwrap()
    }

    #[test]
    fn the_forward_has_the_compositions_bits() {
        let x = Tensor::from_vec(data(2 * 37 * 96, 1), (2, 37, 96), &Device::Cpu).unwrap();
        let wg = Tensor::from_vec(data(130 * 96, 2), (130, 96), &Device::Cpu).unwrap();
        let wu = Tensor::from_vec(data(130 * 96, 3), (130, 96), &Device::Cpu).unwrap();
        let ours = gated_projection(&x, &wg, &wu).unwrap();
        assert_eq!(ours.dims(), [2, 37, 130]);
        let theirs = composition(&x, &wg, &wu);
        assert_eq!(ours.flatten_all().unwrap().to_vec1::<f32>().unwrap(), theirs.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }

    #[test]
    fn gradients_match_the_composition() {
        let x = Var::from_vec(data(3 * 50 * 64, 4), (3, 50, 64), &Device::Cpu).unwrap();
        let wg = Var::from_vec(data(40 * 64, 5), (40, 64), &Device::Cpu).unwrap();
        let wu = Var::from_vec(data(40 * 64, 6), (40, 64), &Device::Cpu).unwrap();
        let up = Tensor::from_vec(data(3 * 50 * 40, 7), (3, 50, 40), &Device::Cpu).unwrap();
        // x feeds the op twice, as a residual stream feeds a layer: the
        // gradients from both uses add up.
        let loss = |h: Tensor| ((h * &up).unwrap().sum_all().unwrap() + x.as_tensor().sqr().unwrap().sum_all().unwrap()).unwrap();
        let ours = loss(gated_projection(x.as_tensor(), wg.as_tensor(), wu.as_tensor()).unwrap()).backward().unwrap();
        let theirs = loss(composition(x.as_tensor(), wg.as_tensor(), wu.as_tensor())).backward().unwrap();
        for v in [&x, &wg, &wu] {
            let a = ours.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let b = theirs.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(&b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(scale > 0.0 && diff <= 1e-6 * scale, "max diff {diff} of {scale}");
        }
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let z = |s: &[usize]| Tensor::zeros(s, DType::F32, &Device::Cpu).unwrap();
        let err = gated_projection(&z(&[2, 5]), &z(&[3, 4]), &z(&[3, 4])).unwrap_err().to_string();
        assert!(err.contains("expected [.., 4]"), "{err}");
        let err = gated_projection(&z(&[2, 4]), &z(&[3, 4]), &z(&[2, 4])).unwrap_err().to_string();
        assert!(err.contains("w_up is [2, 4]"), "{err}");
    }

    #[test]
    fn a_second_backward_on_one_forward_gives_the_same_gradients() {
        let x = Var::from_vec(data(4 * 8, 8), (4, 8), &Device::Cpu).unwrap();
        let w = Var::from_vec(data(6 * 8, 9), (6, 8), &Device::Cpu).unwrap();
        let h = gated_projection(x.as_tensor(), w.as_tensor(), w.as_tensor()).unwrap().sum_all().unwrap();
        let grads = |g: candle_core::backprop::GradStore| {
            [&x, &w].map(|v| g.get(v.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap())
        };
        let first = grads(h.backward().unwrap());
        let second = grads(h.backward().unwrap());
        for (a, b) in first.iter().zip(&second) {
            let diff = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(diff <= 1e-5, "max diff {diff}");
        }
    }
}
