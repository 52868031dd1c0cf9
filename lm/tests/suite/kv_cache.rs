//! The KV cache and per-row positions: decoding token by token from a
//! left-padded batch gives the same logits as a full forward of each row.

use crate::common;

use candle_core::{Device, IndexOp, Tensor};
use lm::model::cache::{KvCache, Positions};

#[test]
fn incremental_decoding_matches_full_forward() {
    let m = common::model("untied");
    let rows: Vec<Vec<u32>> = vec![(1..12).collect(), (40..45).collect(), (100..108).collect()];
    // Reference: each row alone, one full forward.
    let full: Vec<Vec<Vec<f32>>> = rows
        .iter()
        .map(|r| {
            let t = Tensor::from_slice(r, (1, r.len()), &Device::Cpu).unwrap();
            let h = m.forward(&t, &Positions::sequential(1, r.len()), None).unwrap();
            m.logits(&h.squeeze(0).unwrap()).unwrap().to_vec2::<f32>().unwrap()
        })
        .collect();
    // Batched: prefill the first 4 tokens of every row (left-padded to the
    // same width), then feed the rest one token per step.
    let prefill = 4;
    let mut cache = KvCache::new(m.config().num_hidden_layers, rows.len());
    let toks: Vec<u32> = rows.iter().flat_map(|r| r[..prefill].to_vec()).collect();
    let t = Tensor::from_vec(toks, (rows.len(), prefill), &Device::Cpu).unwrap();
    let h = m.forward(&t, &Positions::sequential(rows.len(), prefill), Some(&mut cache)).unwrap();
    let mut worst = 0f32;
    for (r, want) in full.iter().enumerate() {
        let got = m.logits(&h.i((r, prefill - 1)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
        worst = worst.max(max_diff(&got, &want[prefill - 1]));
    }
    let longest = rows.iter().map(Vec::len).max().unwrap();
    for step in prefill..longest {
        // Rows that are already finished get a padding token (position -1).
        let toks: Vec<u32> = rows.iter().map(|r| r.get(step).copied().unwrap_or(0)).collect();
        let pos: Vec<i64> = rows.iter().map(|r| if step < r.len() { step as i64 } else { -1 }).collect();
        let t = Tensor::from_vec(toks, (rows.len(), 1), &Device::Cpu).unwrap();
        let h = m.forward(&t, &Positions { batch: rows.len(), len: 1, data: pos, segments: None }, Some(&mut cache)).unwrap();
        for (r, want) in full.iter().enumerate() {
            if step < rows[r].len() {
                let got = m.logits(&h.i((r, 0)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
                worst = worst.max(max_diff(&got, &want[step]));
            }
        }
    }
    println!("cached vs full logits: max |diff| = {worst:.3e}");
    assert!(worst < 1e-4, "cached decoding diverges: {worst}");
    assert_eq!(cache.slots(), longest);
}

#[test]
fn retain_rows_keeps_the_chosen_rows_in_order() {
    let m = common::model("tied_sharded");
    let mut cache = KvCache::new(m.config().num_hidden_layers, 3);
    let t = Tensor::from_vec(vec![1u32, 2, 3, 4, 5, 6], (3, 2), &Device::Cpu).unwrap();
    m.forward(&t, &Positions::sequential(3, 2), Some(&mut cache)).unwrap();
    cache.retain_rows(&[2, 0]).unwrap();
    assert_eq!(cache.batch(), 2);
    // Continue row "2" (tokens 5, 6) and row "0" (1, 2) with the same token:
    // each must match a fresh single-row forward of its own sequence.
    let t = Tensor::from_vec(vec![7u32, 7], (2, 1), &Device::Cpu).unwrap();
    let h = m.forward(&t, &Positions { batch: 2, len: 1, data: vec![2, 2], segments: None }, Some(&mut cache)).unwrap();
    for (row, seq) in [(0usize, [5u32, 6, 7]), (1, [1, 2, 7])] {
        let got = m.logits(&h.i((row, 0)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
        let full = m.forward(&Tensor::new(&[seq], &Device::Cpu).unwrap(), &Positions::sequential(1, 3), None).unwrap();
        let want = m.logits(&full.i((0, 2)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
        assert!(max_diff(&got, &want) < 1e-4);
    }
}

/// Decodes far past the cache's first capacity (so its buffers grow while
/// rows are padded), parks each row as a compact cache, stacks the parked
/// rows again (other lengths, so left padding) and decodes on: every logit
/// must equal a fresh full forward of the row's sequence.
#[test]
fn growing_parking_and_stacking_keep_decoding_exact() {
    let m = common::model("untied");
    let vocab = 173u32;
    let rows: Vec<Vec<u32>> = (0..3u32).map(|r| (0..150 + 20 * r).map(|j| (j * 7 + r * 11) % vocab).collect()).collect();
    let full_logits = |seq: &[u32]| -> Vec<Vec<f32>> {
        let t = Tensor::from_slice(seq, (1, seq.len()), &Device::Cpu).unwrap();
        let h = m.forward(&t, &Positions::sequential(1, seq.len()), None).unwrap();
        m.logits(&h.squeeze(0).unwrap()).unwrap().to_vec2::<f32>().unwrap()
    };
    let full: Vec<Vec<Vec<f32>>> = rows.iter().map(|r| full_logits(r)).collect();
    let mut worst = 0f32;
    // Phase 1: rows 0..3 prefilled with 2 tokens, then decoded to step 100
    // (the first buffers hold 2 + 64 slots, so they grow at least twice).
    let mut cache = KvCache::new(m.config().num_hidden_layers, 3);
    let toks: Vec<u32> = rows.iter().flat_map(|r| r[..2].to_vec()).collect();
    m.forward(&Tensor::from_vec(toks, (3, 2), &Device::Cpu).unwrap(), &Positions::sequential(3, 2), Some(&mut cache)).unwrap();
    for step in 2..100 {
        let toks: Vec<u32> = rows.iter().map(|r| r[step]).collect();
        let pos = Positions { batch: 3, len: 1, data: vec![step as i64; 3], segments: None };
        let h = m.forward(&Tensor::from_vec(toks, (3, 1), &Device::Cpu).unwrap(), &pos, Some(&mut cache)).unwrap();
        for (r, want) in full.iter().enumerate() {
            let got = m.logits(&h.i((r, 0)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
            worst = worst.max(max_diff(&got, &want[step]));
        }
    }
    assert!(cache.bytes() > 0 && cache.slots() == 100);
    // Phase 2: park rows 2 and 0 (row 1 leaves), feed row 2 ten more tokens
    // alone so the parked lengths differ, then stack and decode both.
    let mut row2 = cache.extract_row(2).unwrap();
    let row0 = cache.extract_row(0).unwrap();
    let toks: Vec<u32> = rows[2][100..110].to_vec();
    let pos = Positions { batch: 1, len: 10, data: (100..110).collect(), segments: None };
    m.forward(&Tensor::from_vec(toks, (1, 10), &Device::Cpu).unwrap(), &pos, Some(&mut row2)).unwrap();
    let mut both = KvCache::stack(&[row0, row2]).unwrap();
    assert_eq!(both.slots(), 110);
    for j in 0..40 {
        let (s0, s2) = (100 + j, 110 + j);
        let toks = vec![rows[0][s0], rows[2][s2]];
        let pos = Positions { batch: 2, len: 1, data: vec![s0 as i64, s2 as i64], segments: None };
        let h = m.forward(&Tensor::from_vec(toks, (2, 1), &Device::Cpu).unwrap(), &pos, Some(&mut both)).unwrap();
        for (i, (r, s)) in [(0usize, s0), (2, s2)].into_iter().enumerate() {
            let got = m.logits(&h.i((i, 0)).unwrap()).unwrap().to_vec1::<f32>().unwrap();
            worst = worst.max(max_diff(&got, &full[r][s]));
        }
    }
    println!("grown, parked and stacked cache vs full logits: max |diff| = {worst:.3e}");
    assert!(worst < 1e-4, "cached decoding diverges: {worst}");
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
