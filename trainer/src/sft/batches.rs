//! SFT data order: a held-out split by task, and length-bucketed batches in
//! a seeded order per epoch (resumable from a [`DataCursor`]).

use crate::checkpoint::DataCursor;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rollout::episode::filter::SftExample;
use std::collections::BTreeSet;

/// Indices of training and held-out examples: a seeded share
/// (`fraction`, at least one task when > 0, never all) of the tasks is held out.
pub fn heldout_split(examples: &[SftExample], fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut tasks: Vec<&str> = examples.iter().map(|e| e.task_id.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
    tasks.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let n = if fraction > 0.0 && tasks.len() >= 2 {
        ((fraction * tasks.len() as f64).ceil() as usize).clamp(1, tasks.len() - 1)
    } else {
        0
    };
    let held: BTreeSet<&str> = tasks[..n].iter().copied().collect();
    (0..examples.len()).partition(|&i| !held.contains(examples[i].task_id.as_str()))
}

/// Batches of one epoch: `rows` sorted by length and cut into groups of
/// `batch_rows` (similar lengths pad little), the groups in a seeded order.
pub fn epoch_batches(examples: &[SftExample], rows: &[usize], batch_rows: usize, seed: u64, epoch: u64) -> Vec<Vec<usize>> {
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|&i| (examples[i].tokens.len(), i));
    let mut batches: Vec<Vec<usize>> = sorted.chunks(batch_rows.max(1)).map(<[usize]>::to_vec).collect();
    batches.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    batches
}

/// Optimizer steps of `epochs` passes over `n` rows.
pub fn total_steps(n: usize, batch_rows: usize, epochs: u64) -> u64 {
    n.div_ceil(batch_rows.max(1)) as u64 * epochs
}

/// The batch at `cursor` (and the cursor after it); `None` past the last epoch.
pub fn batch_at(
    examples: &[SftExample],
    rows: &[usize],
    batch_rows: usize,
    seed: u64,
    epochs: u64,
    cursor: DataCursor,
) -> Option<(Vec<usize>, DataCursor)> {
    if cursor.epoch >= epochs || rows.is_empty() {
        return None;
    }
    let batches = epoch_batches(examples, rows, batch_rows, seed, cursor.epoch);
    let batch = batches.get(cursor.index as usize)?.clone();
    let next = if cursor.index as usize + 1 >= batches.len() {
        DataCursor { epoch: cursor.epoch + 1, index: 0 }
    } else {
        DataCursor { epoch: cursor.epoch, index: cursor.index + 1 }
    };
    Some((batch, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(task: &str, len: usize) -> SftExample {
        SftExample { task_id: task.into(), sample: 0, tokens: vec![1; len], loss_mask: vec![0; len], truncated_tokens: 0, reward: 0.0 }
    }

    #[test]
    fn split_is_by_task_and_seeded() {
        let examples: Vec<SftExample> = (0..20).map(|i| ex(&format!("t{}", i % 10), 5 + i)).collect();
        let (train, held) = heldout_split(&examples, 0.2, 7);
        assert_eq!(train.len() + held.len(), 20);
        let held_tasks: BTreeSet<&str> = held.iter().map(|&i| examples[i].task_id.as_str()).collect();
        assert_eq!(held_tasks.len(), 2, "20% of 10 tasks");
        assert!(train.iter().all(|&i| !held_tasks.contains(examples[i].task_id.as_str())), "no task on both sides");
        assert_eq!(heldout_split(&examples, 0.2, 7), (train, held), "same seed, same split");
        assert_eq!(heldout_split(&examples, 0.0, 7).1.len(), 0);
    }

    #[test]
    fn batches_cover_an_epoch_once_with_similar_lengths() {
        let examples: Vec<SftExample> = (0..10).map(|i| ex("t", 100 - 7 * i)).collect();
        let rows: Vec<usize> = (0..10).collect();
        let batches = epoch_batches(&examples, &rows, 3, 1, 0);
        let mut all: Vec<usize> = batches.concat();
        all.sort();
        assert_eq!(all, rows);
        for b in &batches {
            let lens: Vec<usize> = b.iter().map(|&i| examples[i].tokens.len()).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 14, "bucketed: {lens:?}");
        }
        // Walking with the cursor gives the same batches, then the next epoch.
        let mut cursor = DataCursor::default();
        for want in &batches {
            let (got, next) = batch_at(&examples, &rows, 3, 1, 2, cursor).unwrap();
            assert_eq!(&got, want);
            cursor = next;
        }
        assert_eq!(cursor, DataCursor { epoch: 1, index: 0 });
        assert_eq!(total_steps(10, 3, 2), 8);
        assert!(batch_at(&examples, &rows, 3, 1, 1, cursor).is_none(), "past the last epoch");
    }
}
