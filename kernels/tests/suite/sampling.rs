//! The sampling op on the CPU: the f64 reference's picks for given
//! uniforms (f32 and bf16 logits, Qwen3's vocabulary and odd sizes, every
//! mode), greedy exactly as the host sampler computed it, and the
//! distribution of 200K draws against softmax(logits / T), untruncated and
//! truncated.

use crate::common::uniform;
use candle_core::{DType, Device, Tensor};
use kernels::fastmath::{argmax, sum_exp_sub};
use kernels::sampling::{sample, sample_reference, SampleMode};
use rand::{Rng, SeedableRng};

/// Log-prob tolerance against the f64 reference (absolute; log-probs at
/// vocabulary 151,936 are around -12, f32 keeps ~7 digits; seen: 1.9e-6).
const LOGPROB_TOL: f32 = 5e-6;
/// Draws whose uniform lies closer than this (as a fraction of the kept
/// mass) to a boundary between tokens may pick the neighbour in f32: the
/// op's weights carry relative errors up to 2e-7 (fastmath's exp).
const MARGIN: f64 = 5e-7;
/// Distribution tests: draws, and the largest allowed |frequency - probability|.
const DRAWS: usize = 200_000;
const FREQ_TOL: f64 = 0.005;

fn modes() -> Vec<SampleMode> {
    vec![
        SampleMode::Greedy,
        SampleMode::Softmax { temperature: 1.0 },
        SampleMode::Softmax { temperature: 0.7 },
        SampleMode::Truncated { temperature: 1.0, top_k: 40, top_p: 1.0 },
        SampleMode::Truncated { temperature: 0.8, top_k: 0, top_p: 0.9 },
        SampleMode::Truncated { temperature: 1.0, top_k: 1000, top_p: 0.95 },
        SampleMode::Truncated { temperature: 1.2, top_k: 1, top_p: 1.0 },
    ]
}

/// Logits `[rows, vocab]`: uniform in [-4, 4) with a few peaks per row, so
/// the distributions are neither flat nor one-hot.
fn logits(seed: u64, rows: usize, vocab: usize) -> Vec<f32> {
    let mut x = uniform(seed, rows * vocab, 4.0);
    let peaks = uniform(seed + 1, rows * 8, 1.0);
    for r in 0..rows {
        for p in 0..8 {
            let at = ((peaks[r * 8 + p] + 1.0) / 2.0 * vocab as f32) as usize % vocab;
            x[r * vocab + at] += 6.0 + p as f32;
        }
    }
    x
}

fn uniforms(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random::<f64>()).collect()
}

/// The op's picks equal the reference's for every row whose uniform is not
/// within [`MARGIN`] of a token boundary; log-probs within [`LOGPROB_TOL`].
#[test]
fn op_matches_the_f64_reference() {
    for (vocab, rows) in [(151_936, 3), (1, 2), (7, 5), (1000, 4), (8193, 3), (24_581, 2)] {
        let data = logits(vocab as u64, rows, vocab);
        for dtype in [DType::F32, DType::BF16] {
            let t = Tensor::from_vec(data.clone(), (rows, vocab), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
            // The reference sees exactly the values the op reads.
            let seen = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for (m, mode) in modes().into_iter().enumerate() {
                let us = uniforms(vocab as u64 * 31 + m as u64, rows);
                let got = sample(&t, &us, mode).unwrap();
                let (mut worst, mut skipped) = (0f32, 0);
                for r in 0..rows {
                    let (want, margin) = sample_reference(&seen[r * vocab..(r + 1) * vocab], us[r], mode);
                    if margin < MARGIN {
                        skipped += 1;
                        continue;
                    }
                    assert_eq!(got[r].token, want.token, "V={vocab} {dtype:?} {mode:?} row {r} u={}", us[r]);
                    worst = worst.max((got[r].logprob - want.logprob).abs());
                }
                println!("V={vocab} {dtype:?} {mode:?}: max |logprob diff| {worst:.2e}, {skipped} of {rows} rows near a boundary");
                assert!(worst <= LOGPROB_TOL, "V={vocab} {dtype:?} {mode:?}: {worst}");
                assert!(skipped * 3 <= rows, "too many rows skipped: {skipped}");
            }
        }
    }
}

/// Greedy picks exactly what the host sampler picked (fastmath's argmax, the
/// first largest) and its log-prob as the host computed it, ties included.
#[test]
fn greedy_is_the_host_samplers_greedy() {
    let (rows, vocab) = (4, 151_936);
    let mut data = logits(3, rows, vocab);
    // Row 1: a tie between two blocks' maxima; the earlier wins.
    data[vocab + 100] = 50.0;
    data[vocab + 9000] = 50.0;
    let t = Tensor::from_vec(data.clone(), (rows, vocab), &Device::Cpu).unwrap();
    let got = sample(&t, &[0.0; 4], SampleMode::Greedy).unwrap();
    let mut worst = 0f32;
    for r in 0..rows {
        let row = &data[r * vocab..(r + 1) * vocab];
        let token = argmax(row);
        let lse = row[token] + sum_exp_sub(row, row[token]).ln() as f32;
        assert_eq!(got[r].token as usize, token, "row {r}");
        worst = worst.max((got[r].logprob - (row[token] - lse)).abs());
    }
    assert_eq!(got[1].token, 100);
    println!("greedy vs host formula: max |logprob diff| {worst:.2e}");
    assert!(worst <= 1e-6);
}

/// Bad inputs are errors naming the problem.
#[test]
fn bad_inputs_are_errors() {
    let t = Tensor::zeros((2, 5), DType::F32, &Device::Cpu).unwrap();
    let soft = SampleMode::Softmax { temperature: 1.0 };
    assert!(sample(&t, &[0.5], soft).unwrap_err().to_string().contains("1 uniforms for 2 rows"));
    assert!(sample(&t, &[0.5, 1.0], soft).unwrap_err().to_string().contains("outside [0, 1)"));
    assert!(sample(&t, &[0.5, 0.5], SampleMode::Softmax { temperature: 0.0 }).is_err());
    assert!(sample(&t, &[0.5, 0.5], SampleMode::Truncated { temperature: 1.0, top_k: 0, top_p: 0.0 }).is_err());
}

/// 200K draws of one row's distribution (in calls of `rows` copies of it);
/// the counts per token.
fn counts(row: &[f32], mode: SampleMode, seed: u64) -> Vec<usize> {
    let vocab = row.len();
    let rows = if vocab > 1000 { 200 } else { 2000 };
    let data: Vec<f32> = (0..rows).flat_map(|_| row.iter().copied()).collect();
    let t = Tensor::from_vec(data, (rows, vocab), &Device::Cpu).unwrap();
    let mut counts = vec![0usize; vocab];
    for call in 0..DRAWS / rows {
        for p in sample(&t, &uniforms(seed * 1000 + call as u64, rows), mode).unwrap() {
            counts[p.token as usize] += 1;
        }
    }
    counts
}

/// softmax(row / T) renormalized over `kept`, in f64.
fn probabilities(row: &[f32], temperature: f64, kept: &[usize]) -> Vec<f64> {
    let max = row.iter().map(|&x| x as f64 / temperature).fold(f64::NEG_INFINITY, f64::max);
    let mut p = vec![0.0; row.len()];
    for &i in kept {
        p[i] = (row[i] as f64 / temperature - max).exp();
    }
    let z: f64 = p.iter().sum();
    p.iter().map(|w| w / z).collect()
}

/// Max |frequency - probability| over the tokens; prints it.
fn check_frequencies(what: &str, counts: &[usize], p: &[f64]) {
    let mut worst = 0f64;
    for (i, (&c, &q)) in counts.iter().zip(p).enumerate() {
        let f = c as f64 / DRAWS as f64;
        assert!(q > 0.0 || c == 0, "{what}: token {i} outside the kept set drawn {c} times");
        worst = worst.max((f - q).abs());
    }
    println!("{what}: max |frequency - probability| over {} tokens = {worst:.4}", p.len());
    assert!(worst < FREQ_TOL, "{what}: {worst}");
}

/// Untruncated: a flat distribution over 24,581 tokens (three blocks and
/// a remainder, so most draws walk deep into the vocabulary), compared per
/// token and pooled per logit value.
#[test]
fn untruncated_draws_follow_the_softmax() {
    let vocab = 24_581;
    let level = |i: usize| (i * 37) % 11;
    let row: Vec<f32> = (0..vocab).map(|i| level(i) as f32 * 0.1).collect();
    let t = 0.7;
    let c = counts(&row, SampleMode::Softmax { temperature: t }, 9);
    let p = probabilities(&row, t, &(0..vocab).collect::<Vec<_>>());
    check_frequencies("untruncated per token", &c, &p);
    for l in 0..11 {
        let (mut pl, mut fl) = (0.0, 0.0);
        for i in (0..vocab).filter(|&i| level(i) == l) {
            pl += p[i];
            fl += c[i] as f64 / DRAWS as f64;
        }
        assert!((pl - fl).abs() < FREQ_TOL, "level {l}: p {pl:.4} vs frequency {fl:.4}");
    }
    // The second half of the vocabulary (other blocks) gets its share.
    let tail_p: f64 = p[vocab / 2..].iter().sum();
    let tail_f = c[vocab / 2..].iter().sum::<usize>() as f64 / DRAWS as f64;
    println!("untruncated second half: p {tail_p:.4} vs frequency {tail_f:.4}");
    assert!((tail_p - tail_f).abs() < FREQ_TOL);
}

/// Top-k and top-p: frequencies follow the probabilities renormalized over
/// the kept set (found here by a full f64 sort), nothing outside it drawn.
#[test]
fn truncated_draws_follow_the_renormalized_softmax() {
    let row: Vec<f32> = uniform(17, 60, 2.5);
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let kept_top_p = |t: f64, top_k: usize, top_p: f64| -> Vec<usize> {
        let cand = &order[..if top_k > 0 { top_k } else { order.len() }];
        let p = probabilities(&row, t, cand);
        let mut acc = 0.0;
        let n = cand.iter().position(|&i| {
            acc += p[i];
            acc >= top_p
        });
        cand[..n.map_or(cand.len(), |n| n + 1)].to_vec()
    };
    for (seed, (t, top_k, top_p)) in [(1.0, 10, 1.0), (0.9, 0, 0.8), (1.0, 25, 0.7)].into_iter().enumerate() {
        let kept = kept_top_p(t, top_k, top_p);
        let mode = SampleMode::Truncated { temperature: t, top_k, top_p };
        let c = counts(&row, mode, 100 + seed as u64);
        check_frequencies(&format!("{mode:?} ({} kept)", kept.len()), &c, &probabilities(&row, t, &kept));
    }
}
