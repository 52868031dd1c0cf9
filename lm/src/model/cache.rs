//! Positions and the KV cache, both passed into `forward` by the caller.
//!
//! Every row of a batch is its own sequence with its own positions; a
//! position of -1 marks padding. The cache stores, per layer, keys and values
//! `[b, kv_heads, slots, head_dim]` and, per row, the position of each slot,
//! from which the attention mask is built (a query at position p sees the
//! slots of its row whose position is in 0..=p).

use candle_core::{Result, Tensor};
use kernels::attention::Visibility;
use std::sync::Arc;

/// Row-major `[batch, len]` token positions; negative entries are padding.
/// Packed rows also carry a segment id per slot: a token attends only to
/// tokens of its own segment (several sequences in one row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positions {
    pub batch: usize,
    pub len: usize,
    pub data: Vec<i64>,
    /// Row-major `[batch, len]` segment ids; `None`: each row is one sequence.
    pub segments: Option<Vec<u32>>,
}

impl Positions {
    /// Rows of equal length.
    pub fn from_rows(rows: &[Vec<i64>]) -> Result<Self> {
        let len = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != len) {
            candle_core::bail!("positions: rows have different lengths");
        }
        Ok(Positions { batch: rows.len(), len, data: rows.concat(), segments: None })
    }

    /// `0..len` for every row (training on unpadded, equal-length rows).
    pub fn sequential(batch: usize, len: usize) -> Self {
        let row: Vec<i64> = (0..len as i64).collect();
        Positions { batch, len, data: row.repeat(batch), segments: None }
    }

    /// One row holding sequences of `lengths` end to end, each at positions
    /// `0..len` in its own segment.
    pub fn packed(lengths: &[usize]) -> Self {
        let data: Vec<i64> = lengths.iter().flat_map(|&n| 0..n as i64).collect();
        let segments: Vec<u32> = lengths.iter().enumerate().flat_map(|(s, &n)| std::iter::repeat_n(s as u32, n)).collect();
        Positions { batch: 1, len: data.len(), data, segments: Some(segments) }
    }

    /// Step positions `[rows, 1]` (decoding), one per row.
    pub fn step(data: Vec<i64>) -> Self {
        Positions { batch: data.len(), len: 1, data, segments: None }
    }

    pub fn row(&self, i: usize) -> &[i64] {
        &self.data[i * self.len..(i + 1) * self.len]
    }
}

/// Keys and values of every layer for a batch of sequences being generated.
///
/// Each layer's keys and values live in buffers `[b, kv_heads, capacity,
/// head_dim]` of which the first `slots()` slots are filled: a decoding step
/// writes its slot in place (`slice_set`) instead of copying the whole cache
/// into a new tensor, and the buffers grow by half when full (amortized
/// O(1) copying per token instead of O(slots)). Buffers are never shared
/// between caches (every constructor copies), which in-place writes need;
/// hence no `Clone`.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    key_positions: Vec<Vec<i64>>,
}

/// Capacity for `needed` slots: half as much again, at least 64 more.
fn grown_capacity(needed: usize) -> usize {
    needed + (needed / 2).max(64)
}

/// `[rows, h, capacity, d]` zeros, dtype and device of `like` (`[_, h, _, d]`).
fn zero_buffer(like: &Tensor, rows: usize, capacity: usize) -> Result<Tensor> {
    let (_, h, _, d) = like.dims4()?;
    Tensor::zeros((rows, h, capacity, d), like.dtype(), like.device())
}

/// A buffer of `capacity` slots for `like`'s rows, with the first `keep`
/// slots of `like` copied in.
fn buffer_like(like: &Tensor, capacity: usize, keep: usize) -> Result<Tensor> {
    let buf = zero_buffer(like, like.dim(0)?, capacity)?;
    if keep > 0 {
        buf.slice_set(&like.narrow(2, 0, keep)?.contiguous()?, 2, 0)?;
    }
    Ok(buf)
}

impl KvCache {
    pub fn new(num_layers: usize, batch: usize) -> Self {
        KvCache { layers: vec![None; num_layers], key_positions: vec![Vec::new(); batch] }
    }

    /// Rows in the cache.
    pub fn batch(&self) -> usize {
        self.key_positions.len()
    }

    /// Slots per row (including padding slots).
    pub fn slots(&self) -> usize {
        self.key_positions.first().map_or(0, Vec::len)
    }

    /// Position of each slot, per row (-1 for padding).
    pub fn key_positions(&self) -> &[Vec<i64>] {
        &self.key_positions
    }

    /// Bytes held by keys and values (the buffers' capacity, filled or not).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum()
    }

    /// Append this step's keys/values `[b, kv_heads, t, d]` for `layer`
    /// (called before [`Self::push_positions`], so `slots()` is the old
    /// length); returns views of the filled slots, new ones included.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let len = self.slots();
        let needed = len + k.dim(2)?;
        let (kb, vb) = match self.layers[layer].take() {
            Some((kb, vb)) if kb.dim(2)? >= needed => (kb, vb),
            Some((kb, vb)) => {
                let cap = grown_capacity(needed);
                (buffer_like(&kb, cap, len)?, buffer_like(&vb, cap, len)?)
            }
            None => (buffer_like(k, grown_capacity(needed), 0)?, buffer_like(v, grown_capacity(needed), 0)?),
        };
        kb.slice_set(&k.contiguous()?, 2, len)?;
        vb.slice_set(&v.contiguous()?, 2, len)?;
        let filled = (kb.narrow(2, 0, needed)?, vb.narrow(2, 0, needed)?);
        self.layers[layer] = Some((kb, vb));
        Ok(filled)
    }

    /// Record the positions of the slots appended by the last forward pass.
    pub fn push_positions(&mut self, positions: &Positions) {
        for (i, row) in self.key_positions.iter_mut().enumerate() {
            row.extend_from_slice(positions.row(i));
        }
    }

    /// Drop every slot from `slots` on (drafted tokens that were not
    /// kept): later appends overwrite them in place.
    pub fn truncate(&mut self, slots: usize) {
        self.key_positions.iter_mut().for_each(|row| row.truncate(slots));
    }

    /// Keep only `rows` (in this order), e.g. when episodes finish.
    pub fn retain_rows(&mut self, rows: &[usize]) -> Result<()> {
        if rows.is_empty() {
            self.layers.iter_mut().for_each(|l| *l = None);
            self.key_positions.clear();
            return Ok(());
        }
        let device = self.layers.iter().flatten().next().map(|(k, _)| k.device().clone());
        if let Some(device) = device {
            let idx = Tensor::from_vec(rows.iter().map(|&r| r as u32).collect::<Vec<_>>(), rows.len(), &device)?;
            for (k, v) in self.layers.iter_mut().flatten() {
                *k = k.index_select(&idx, 0)?;
                *v = v.index_select(&idx, 0)?;
            }
        }
        self.key_positions = rows.iter().map(|&r| self.key_positions[r].clone()).collect();
        Ok(())
    }
}

impl KvCache {
    /// Take row `r` out as a compact single-row cache (its padding slots
    /// dropped), e.g. to park an episode between turns.
    pub fn extract_row(&self, r: usize) -> Result<KvCache> {
        let valid: Vec<u32> = (0..self.slots()).filter(|&j| self.key_positions[r][j] >= 0).map(|j| j as u32).collect();
        let mut layers = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            layers.push(match layer {
                None => None,
                Some((k, v)) => {
                    let idx = Tensor::from_vec(valid.clone(), valid.len(), k.device())?;
                    let row = Tensor::from_vec(vec![r as u32], 1, k.device())?;
                    let k = k.index_select(&row, 0)?.index_select(&idx, 2)?;
                    let v = v.index_select(&row, 0)?.index_select(&idx, 2)?;
                    Some((k, v))
                }
            });
        }
        let positions = valid.iter().map(|&j| self.key_positions[r][j as usize]).collect();
        Ok(KvCache { layers, key_positions: vec![positions] })
    }

    /// Stack caches row-wise into one batch, left-padding shorter rows with
    /// invisible slots (position -1). Every part must have the same layers.
    /// The buffers have room for half as many slots again (at least 64).
    pub fn stack(parts: &[KvCache]) -> Result<KvCache> {
        let width = parts.iter().map(KvCache::slots).max().unwrap_or(0);
        Self::stack_with_room(&parts.iter().collect::<Vec<_>>(), grown_capacity(width) - width)
    }

    /// [`Self::stack`] of borrowed parts with room for exactly `room` more
    /// slots per row (a decode that knows its new-token budget never grows).
    pub fn stack_with_room(parts: &[&KvCache], room: usize) -> Result<KvCache> {
        let num_layers = parts.first().map_or(0, |p| p.layers.len());
        if parts.iter().any(|p| p.layers.len() != num_layers) {
            candle_core::bail!("KvCache::stack: caches have different layer counts");
        }
        let width = parts.iter().map(|p| p.slots()).max().unwrap_or(0);
        let rows: usize = parts.iter().map(|p| p.batch()).sum();
        // Copied once, straight into buffers with room for the next tokens
        // (the zeros left of a shorter part are its padding slots).
        let capacity = width + room.max(1);
        let mut layers = Vec::with_capacity(num_layers);
        for l in 0..num_layers {
            let mut buffers: Option<(Tensor, Tensor)> = None;
            let mut row = 0;
            for p in parts {
                let Some((k, v)) = &p.layers[l] else {
                    candle_core::bail!("KvCache::stack: layer {l} is empty in one part");
                };
                let (kb, vb) = match &buffers {
                    Some(b) => b,
                    None => buffers.insert((zero_buffer(k, rows, capacity)?, zero_buffer(v, rows, capacity)?)),
                };
                let (n, slots) = (p.batch(), p.slots());
                if slots > 0 {
                    kb.narrow(0, row, n)?.slice_set(&k.narrow(2, 0, slots)?.contiguous()?, 2, width - slots)?;
                    vb.narrow(0, row, n)?.slice_set(&v.narrow(2, 0, slots)?.contiguous()?, 2, width - slots)?;
                }
                row += n;
            }
            layers.push(buffers);
        }
        let key_positions = parts
            .iter()
            .flat_map(|p| {
                let pad = width - p.slots();
                p.key_positions.iter().map(move |row| std::iter::repeat_n(-1, pad).chain(row.iter().copied()).collect())
            })
            .collect();
        Ok(KvCache { layers, key_positions })
    }
}

/// Which keys each query sees (`kernels::attention::Visibility`): a query
/// at position p sees the keys of its row whose position is in 0..=p; a
/// padding query sees every key so that its softmax stays finite. Packed
/// queries (with segments) must be their own keys: no cache.
pub fn visibility(queries: &Positions, keys: &[Vec<i64>]) -> Result<Arc<Visibility>> {
    if keys.len() != queries.batch {
        candle_core::bail!("attention: {} rows of key positions for {} rows of queries", keys.len(), queries.batch);
    }
    let vis = Visibility::new(queries.batch, queries.data.clone(), keys.concat())?;
    Ok(Arc::new(match &queries.segments {
        None => vis,
        Some(_) if keys.iter().any(|k| k.len() != queries.len) => {
            candle_core::bail!("attention: packed rows (segments) cannot attend to a KV cache")
        }
        Some(seg) => vis.with_segments(seg.clone(), seg.clone())?,
    }))
}
