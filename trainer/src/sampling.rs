//! Next-token selection from one row of logits: greedy, or temperature with
//! optional top-k and top-p, drawing from a seeded RNG the caller owns.

use rand::Rng;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy (argmax, first index on ties).
    pub temperature: f64,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1.0 = off).
    pub top_p: f64,
    /// Keep the `top_k` most likely tokens (0 = off).
    pub top_k: usize,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.0, top_p: 1.0, top_k: 0 }
    }
}

/// A chosen token and its log-probability under `softmax(logits / T)` (T = 1
/// when greedy): the same number `score` gives, before top-k/top-p truncation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampled {
    pub token: u32,
    pub logprob: f32,
}

impl SamplerConfig {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Pick a token from `logits` (one row, f32).
    pub fn sample<R: Rng>(&self, logits: &[f32], rng: &mut R) -> Sampled {
        let t = if self.is_greedy() { 1.0 } else { self.temperature as f32 };
        let scaled: Vec<f32> = logits.iter().map(|&x| x / t).collect();
        let max = scaled.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = max + scaled.iter().map(|&x| ((x - max) as f64).exp()).sum::<f64>().ln() as f32;
        let token = if self.is_greedy() { argmax(&scaled) } else { self.draw(&scaled, max, rng) };
        Sampled { token: token as u32, logprob: scaled[token] - lse }
    }

    fn draw<R: Rng>(&self, scaled: &[f32], max: f32, rng: &mut R) -> usize {
        let mut order: Vec<usize> = (0..scaled.len()).collect();
        order.sort_by(|&a, &b| scaled[b].total_cmp(&scaled[a]).then(a.cmp(&b)));
        if self.top_k > 0 {
            order.truncate(self.top_k);
        }
        let weights: Vec<f64> = order.iter().map(|&i| ((scaled[i] - max) as f64).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut keep = weights.len();
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (n, w) in weights.iter().enumerate() {
                acc += w / total;
                if acc >= self.top_p {
                    keep = n + 1;
                    break;
                }
            }
        }
        let kept_total: f64 = weights[..keep].iter().sum();
        let mut u = rng.random::<f64>() * kept_total;
        for (n, w) in weights[..keep].iter().enumerate() {
            if u < *w {
                return order[n];
            }
            u -= w;
        }
        order[keep - 1]
    }
}

fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn greedy_picks_first_max_and_reports_its_logprob() {
        let s = SamplerConfig::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let out = s.sample(&[1.0, 3.0, 3.0, -1.0], &mut rng);
        assert_eq!(out.token, 1);
        let lse = (1f64.exp() + 2.0 * 3f64.exp() + (-1f64).exp()).ln();
        assert!((out.logprob as f64 - (3.0 - lse)).abs() < 1e-6);
    }

    #[test]
    fn top_k_one_is_greedy_and_seeded_sampling_repeats() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7919) % 13) as f32 * 0.3).collect();
        let k1 = SamplerConfig { temperature: 0.7, top_p: 1.0, top_k: 1 };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..20 {
            assert_eq!(k1.sample(&logits, &mut rng).token as usize, argmax(&logits));
        }
        let s = SamplerConfig { temperature: 1.0, top_p: 0.9, top_k: 20 };
        let draw = |seed| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            (0..30).map(|_| s.sample(&logits, &mut rng).token).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn top_p_excludes_the_tail() {
        // probabilities ~ [0.665, 0.245, 0.09]: top_p 0.5 keeps only the first.
        let s = SamplerConfig { temperature: 1.0, top_p: 0.5, top_k: 0 };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..100 {
            assert_eq!(s.sample(&[2.0, 1.0, 0.0], &mut rng).token, 0);
        }
    }
}
