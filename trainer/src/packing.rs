//! Micro-batches as a token budget. A micro-batch is one row holding several
//! sequences end to end, each at positions `0..len` and attending only to
//! itself (packed segments of the attention op), so no padding is computed.
//!
//! The optimizer batch itself stays right-padded `[B, T]` (that is what the
//! loss references and the TRL fixtures describe); a [`Pack`] names which of
//! its rows go into one packed row and how many leading tokens of each
//! matter, and [`Pack::gather`] cuts them out and lays them end to end.

use crate::error::{Error, Result};
use lm::model::cache::Positions;
use candle_core::{DType, Tensor};
use serde::Serialize;

/// How an optimizer batch is cut into forward/backward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MicroBatching {
    /// Contiguous ranges of this many right-padded rows.
    Rows(usize),
    /// Packed rows of at most this many tokens; a longer sequence gets a row
    /// of its own.
    Tokens(usize),
}

impl MicroBatching {
    /// From a config section: `micro_batch_tokens`, when set, replaces
    /// `micro_batch_rows`. `section` names the config section in errors.
    pub fn from_settings(section: &str, rows: usize, tokens: Option<usize>) -> Result<Self> {
        match tokens {
            Some(0) => Err(Error::invalid(format!("{section}.micro_batch_tokens"), "must be at least 1 (leave it out for micro_batch_rows)")),
            Some(t) => Ok(MicroBatching::Tokens(t)),
            None if rows == 0 => Err(Error::invalid(format!("{section}.micro_batch_rows"), "must be at least 1")),
            None => Ok(MicroBatching::Rows(rows)),
        }
    }
}

/// One packed row: `(row of the padded batch, leading tokens of it)` in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    pub items: Vec<(usize, usize)>,
}

impl Pack {
    /// Tokens in the packed row.
    pub fn width(&self) -> usize {
        self.items.iter().map(|&(_, n)| n).sum()
    }

    /// Offset of each item in the packed row.
    pub fn offsets(&self) -> Vec<usize> {
        self.items.iter().scan(0, |o, &(_, n)| { let at = *o; *o += n; Some(at) }).collect()
    }

    /// Positions restarting at 0 for every item, each item its own segment.
    pub fn positions(&self) -> Positions {
        let lengths: Vec<usize> = self.items.iter().map(|&(_, n)| n).collect();
        Positions::packed(&lengths)
    }

    /// `[1, width]` from a padded `[B, T]` tensor: each item's row cut to its
    /// length, end to end.
    pub fn gather(&self, padded: &Tensor) -> Result<Tensor> {
        let parts = self.items.iter().map(|&(r, n)| Ok(padded.narrow(0, r, 1)?.narrow(1, 0, n)?)).collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&parts, 1)?)
    }

    /// `[1, width]` f32 from one value per token of each item (`per_row(r, n)`
    /// gives item `(r, n)`'s `n` values).
    pub fn gather_host(&self, per_row: impl Fn(usize, usize) -> Vec<f32>, device: &candle_core::Device) -> Result<Tensor> {
        let values: Vec<f32> = self.items.iter().flat_map(|&(r, n)| per_row(r, n)).collect();
        Ok(Tensor::from_vec(values, (1, self.width()), device)?)
    }
}

/// First-fit decreasing: sequences (longest first, ties by row) go into the
/// first pack with room for them under `budget` tokens; one longer than the
/// budget gets a pack of its own. Sequences of length 0 (nothing to train)
/// are left out. Within a pack the items are in row order. Depends only on
/// `lengths` and `budget`.
pub fn plan(lengths: &[usize], budget: usize) -> Result<Vec<Pack>> {
    if budget == 0 {
        return Err(Error::invalid("packing", "token budget is 0"));
    }
    let mut order: Vec<usize> = (0..lengths.len()).filter(|&r| lengths[r] > 0).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(lengths[r]), r));
    let mut packs: Vec<(usize, Vec<usize>)> = Vec::new();
    for r in order {
        let n = lengths[r];
        match packs.iter_mut().find(|(used, _)| used + n <= budget) {
            Some((used, rows)) => {
                *used += n;
                rows.push(r);
            }
            None => packs.push((n, vec![r])),
        }
    }
    Ok(packs
        .into_iter()
        .map(|(_, mut rows)| {
            rows.sort_unstable();
            Pack { items: rows.into_iter().map(|r| (r, lengths[r])).collect() }
        })
        .collect())
}

/// Per row of a `[B, T]` mask: the columns up to and including its last
/// nonzero entry (what a forward pass must cover for that row), 0 when the
/// row has none.
pub fn trained_lengths(mask: &Tensor) -> Result<Vec<usize>> {
    Ok(lengths_of_rows(&mask.to_dtype(DType::F32)?.to_vec2::<f32>()?))
}

/// [`trained_lengths`] of a mask already on the host.
pub fn lengths_of_rows(rows: &[Vec<f32>]) -> Vec<usize> {
    rows.iter().map(|m| m.iter().rposition(|&x| x != 0.0).map_or(0, |j| j + 1)).collect()
}

/// Token slots computed against tokens that needed computing, over the
/// micro-batches of a step: the padding share that remains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Padding {
    /// Slots of every micro-batch, rows x columns.
    pub slots: usize,
    /// Of those, the tokens of some sequence (its trained length).
    pub tokens: usize,
}

impl Padding {
    pub fn add(&mut self, slots: usize, tokens: usize) {
        self.slots += slots;
        self.tokens += tokens;
    }

    /// `1 - tokens / slots` (0 when nothing was computed).
    pub fn share(&self) -> f64 {
        if self.slots == 0 { 0.0 } else { 1.0 - self.tokens as f64 / self.slots as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn plan_fills_first_fit_decreasing_and_covers_every_row_once() {
        let lengths = [5, 0, 9, 3, 4, 12, 2];
        let packs = plan(&lengths, 10).unwrap();
        // Longest first: 12 alone (over budget), 9, then 5 + 4, then 3 + 2.
        let widths: Vec<usize> = packs.iter().map(Pack::width).collect();
        assert_eq!(widths, vec![12, 9, 9, 5]);
        let mut rows: Vec<usize> = packs.iter().flat_map(|p| p.items.iter().map(|&(r, _)| r)).collect();
        rows.sort();
        assert_eq!(rows, vec![0, 2, 3, 4, 5, 6], "row 1 has nothing to train");
        assert!(packs.iter().all(|p| p.items.windows(2).all(|w| w[0].0 < w[1].0)), "row order inside a pack");
        assert_eq!(plan(&lengths, 10).unwrap(), packs, "deterministic");
        assert!(plan(&lengths, 0).is_err());
    }

    #[test]
    fn gather_lays_rows_end_to_end_with_restarting_positions() {
        let t = Tensor::arange(0u32, 12, &Device::Cpu).unwrap().reshape((3, 4)).unwrap();
        let pack = Pack { items: vec![(0, 2), (2, 3)] };
        assert_eq!(pack.gather(&t).unwrap().to_vec2::<u32>().unwrap(), vec![vec![0, 1, 8, 9, 10]]);
        assert_eq!(pack.positions().data, vec![0, 1, 0, 1, 2]);
        assert_eq!(pack.offsets(), vec![0, 2]);
        let adv = pack.gather_host(|r, n| vec![r as f32; n], &Device::Cpu).unwrap();
        assert_eq!(adv.to_vec2::<f32>().unwrap(), vec![vec![0.0, 0.0, 2.0, 2.0, 2.0]]);
    }

    #[test]
    fn trained_lengths_end_at_the_last_mask_column() {
        let m = Tensor::new(&[[0f32, 1., 0., 0.], [0., 0., 0., 0.], [0., 1., 1., 1.]], &Device::Cpu).unwrap();
        assert_eq!(trained_lengths(&m).unwrap(), vec![2, 0, 4]);
        let mut p = Padding::default();
        p.add(8, 6);
        assert!((p.share() - 0.25).abs() < 1e-12);
    }
}
