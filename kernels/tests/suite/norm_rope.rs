//! RMSNorm and rotary embeddings against their stock-op references:
//! forward and gradients through Candle's autograd.

use crate::common::{assert_close, tensor};
use candle_core::{Tensor, Var};
use kernels::norm::{rms_norm, rms_norm_reference};
use kernels::rope::{rope, rope_reference};

/// Relative tolerance of values and gradients.
const REL: f32 = 1e-5;

#[test]
fn rms_norm_matches_the_reference() {
    for (shape, seed) in [(vec![3usize, 67, 40], 1u64), (vec![1, 1, 7], 2), (vec![130, 128], 3)] {
        let d = *shape.last().unwrap();
        let x = Var::from_tensor(&tensor(seed, &shape, 2.0)).unwrap();
        let w = Var::from_tensor(&tensor(seed + 1, &[d], 1.5)).unwrap();
        let g = tensor(seed + 2, &shape, 1.0);
        let a = rms_norm(x.as_tensor(), w.as_tensor(), 1e-6).unwrap();
        let b = rms_norm_reference(x.as_tensor(), w.as_tensor(), 1e-6).unwrap();
        assert_close(&format!("rms_norm {shape:?}"), &a, &b, REL);
        let ga = (a * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b * &g).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, v) in [("grad x", &x), ("grad w", &w)] {
            assert_close(&format!("rms_norm {shape:?} {name}"), ga.get(v.as_tensor()).unwrap(), gb.get(v.as_tensor()).unwrap(), REL);
        }
    }
}

/// Tables as the trainer builds them: per-row positions, both halves alike.
fn tables(b: usize, t: usize, hd: usize) -> (Tensor, Tensor) {
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for r in 0..b {
        for p in 0..t {
            for _ in 0..2 {
                for i in 0..hd / 2 {
                    let angle = (p + 3 * r) as f32 / 10000f32.powf(2.0 * i as f32 / hd as f32);
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
    }
    let dev = candle_core::Device::Cpu;
    (Tensor::from_vec(cos, (b, 1, t, hd), &dev).unwrap(), Tensor::from_vec(sin, (b, 1, t, hd), &dev).unwrap())
}

#[test]
fn rope_matches_the_reference() {
    for (b, h, t, hd, seed) in [(2usize, 3usize, 5usize, 8usize, 4u64), (1, 1, 1, 2, 5), (3, 4, 17, 64, 6)] {
        let (cos, sin) = tables(b, t, hd);
        let x = Var::from_tensor(&tensor(seed, &[b, h, t, hd], 1.0)).unwrap();
        let g = tensor(seed + 1, &[b, h, t, hd], 1.0);
        let a = rope(x.as_tensor(), &cos, &sin).unwrap();
        let r = rope_reference(x.as_tensor(), &cos, &sin).unwrap();
        assert_close(&format!("rope {b}x{h}x{t}x{hd}"), &a, &r, REL);
        let ga = (a * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let gr = (r * &g).unwrap().sum_all().unwrap().backward().unwrap();
        assert_close(&format!("rope {b}x{h}x{t}x{hd} grad x"), ga.get(x.as_tensor()).unwrap(), gr.get(x.as_tensor()).unwrap(), REL);
    }
}

#[test]
fn rope_rejects_mismatched_tables() {
    let (cos, sin) = tables(1, 4, 8);
    assert!(rope(&tensor(7, &[2, 1, 4, 8], 1.0), &cos, &sin).is_err());
}

#[test]
fn swiglu_gate_matches_the_reference() {
    use kernels::swiglu::{swiglu_gate, swiglu_gate_reference};
    for (shape, seed) in [(vec![3usize, 67, 40], 11u64), (vec![1, 1], 12), (vec![70_001], 13)] {
        // Gate values up to +-12 reach both saturated ends of the sigmoid.
        let g = Var::from_tensor(&tensor(seed, &shape, 12.0)).unwrap();
        let u = Var::from_tensor(&tensor(seed + 1, &shape, 2.0)).unwrap();
        let dh = tensor(seed + 2, &shape, 1.0);
        let a = swiglu_gate(g.as_tensor(), u.as_tensor()).unwrap();
        let b = swiglu_gate_reference(g.as_tensor(), u.as_tensor()).unwrap();
        assert_close(&format!("swiglu {shape:?}"), &a, &b, REL);
        let ga = (a * &dh).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b * &dh).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, v) in [("grad gate", &g), ("grad up", &u)] {
            assert_close(&format!("swiglu {shape:?} {name}"), ga.get(v.as_tensor()).unwrap(), gb.get(v.as_tensor()).unwrap(), REL);
        }
    }
}
