//! Packing: contexts into sequences of `seq_len` tokens, and sequences into the six
//! arrays MaxText trains on.
//!
//! With packing on, a block's contexts go best-fit, longest first, into sequences: each
//! context takes the open sequence with the least room that still fits it, so short
//! contexts fill the tails that long ones leave (the dataset then shuffles the
//! sequences). With packing off, every context is its own padded sequence.
//!
//! A sequence's arrays: `inputs` (tokens, 0 as padding), `inputs_segmentation` (1, 2, 3 …
//! per context, 0 for padding), `inputs_position` (0, 1, 2 … restarting per context),
//! and the `targets*` arrays as MaxText's `ShiftData` leaves them: `targets[t] =
//! inputs[t + 1]`, `targets_segmentation[t] = inputs_segmentation[t + 1]` (the last
//! position 0), `targets_position = inputs_position`.

use crate::tokenizer::MIN_MEASUREMENT_TOKENS;

/// Groups contexts (by index into `lengths`) into sequences: best-fit decreasing, ties
/// in the given order. Deterministic for a given `order`.
pub fn pack(lengths: &[usize], order: &[u32], seq_len: usize, packing: bool) -> Vec<Vec<u32>> {
    if !packing {
        return order.iter().map(|&c| vec![c]).collect();
    }
    let mut sorted = order.to_vec();
    sorted.sort_by_key(|&c| std::cmp::Reverse(lengths[c as usize]));
    let mut sequences: Vec<Vec<u32>> = Vec::new();
    // (room left, sequence) of the open sequences.
    let mut open: std::collections::BTreeSet<(usize, usize)> = Default::default();
    for c in sorted {
        let len = lengths[c as usize];
        let (s, room) = match open.range((len, 0)..).next().copied() {
            Some((room, s)) => {
                open.remove(&(room, s));
                sequences[s].push(c);
                (s, room - len)
            }
            None => {
                sequences.push(vec![c]);
                (sequences.len() - 1, seq_len.saturating_sub(len))
            }
        };
        // With less room left a sequence can take nothing more and is closed.
        if room >= MIN_MEASUREMENT_TOKENS {
            open.insert((room, s));
        }
    }
    sequences
}

/// The six int32 arrays of a batch, row-major `[batch, seq_len]`: the rows pushed so
/// far, completed with padding rows by [`Batch::pad`] / [`Batch::into_arrays`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub batch_size: usize,
    pub seq_len: usize,
    pub inputs: Vec<i32>,
    pub inputs_segmentation: Vec<i32>,
    pub inputs_position: Vec<i32>,
    pub targets: Vec<i32>,
    pub targets_segmentation: Vec<i32>,
    pub targets_position: Vec<i32>,
}

/// The names of the arrays, in [`Batch::into_arrays`] order.
pub const BATCH_KEYS: [&str; 6] = [
    "inputs",
    "inputs_segmentation",
    "inputs_position",
    "targets",
    "targets_segmentation",
    "targets_position",
];

impl Batch {
    /// An empty batch: sequences are appended with [`Batch::push_sequence`]; rows never
    /// pushed are padding.
    pub fn new(batch_size: usize, seq_len: usize) -> Self {
        let v = || Vec::with_capacity(batch_size * seq_len);
        Batch {
            batch_size,
            seq_len,
            inputs: v(),
            inputs_segmentation: v(),
            inputs_position: v(),
            targets: v(),
            targets_segmentation: v(),
            targets_position: v(),
        }
    }

    /// Sequences pushed so far.
    pub fn rows(&self) -> usize {
        self.inputs.len() / self.seq_len.max(1)
    }

    /// Appends the next sequence, made of `contexts` (segments 1, 2, … in this order;
    /// tokens past `seq_len` are dropped, the packer never produces them).
    pub fn push_sequence<'c>(&mut self, contexts: impl IntoIterator<Item = &'c [i32]>) {
        let l = self.seq_len;
        let base = self.inputs.len();
        let mut at = 0;
        for (seg, toks) in contexts.into_iter().enumerate() {
            let n = toks.len().min(l - at);
            self.inputs.extend_from_slice(&toks[..n]);
            self.inputs_segmentation
                .extend(std::iter::repeat_n(seg as i32 + 1, n));
            self.inputs_position.extend(0..n as i32);
            at += n;
        }
        for v in [
            &mut self.inputs,
            &mut self.inputs_segmentation,
            &mut self.inputs_position,
        ] {
            v.resize(base + l, 0);
        }
        if l == 0 {
            return;
        }
        self.targets.extend_from_slice(&self.inputs[base + 1..]);
        self.targets.push(0);
        self.targets_segmentation
            .extend_from_slice(&self.inputs_segmentation[base + 1..]);
        self.targets_segmentation.push(0);
        self.targets_position
            .extend_from_slice(&self.inputs_position[base..]);
    }

    /// Fills the rows not pushed with padding.
    pub fn pad(&mut self) {
        let n = self.batch_size * self.seq_len;
        for v in self.arrays_mut() {
            v.resize(n, 0);
        }
    }

    fn arrays_mut(&mut self) -> [&mut Vec<i32>; 6] {
        [
            &mut self.inputs,
            &mut self.inputs_segmentation,
            &mut self.inputs_position,
            &mut self.targets,
            &mut self.targets_segmentation,
            &mut self.targets_position,
        ]
    }

    /// Non-padding tokens (segmentation ≠ 0).
    pub fn real_tokens(&self) -> usize {
        self.inputs_segmentation.iter().filter(|&&s| s != 0).count()
    }

    /// The arrays in [`BATCH_KEYS`] order, `[batch_size, seq_len]` each (padded).
    pub fn into_arrays(mut self) -> [Vec<i32>; 6] {
        self.pad();
        [
            self.inputs,
            self.inputs_segmentation,
            self.inputs_position,
            self.targets,
            self.targets_segmentation,
            self.targets_position,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Contexts;

    fn contexts(lengths: &[usize]) -> Contexts {
        let mut c = Contexts::default();
        for (i, &n) in lengths.iter().enumerate() {
            c.tokens.extend(std::iter::repeat_n(11 + i as i32, n));
            c.ends.push(c.tokens.len());
            c.modes.push(crate::sampler::TimestampMode::Full);
        }
        c
    }

    #[test]
    fn best_fit_fills_tails() {
        let lengths = [900, 800, 100, 200, 120, 1024];
        let order: Vec<u32> = (0..6).collect();
        let seqs = pack(&lengths, &order, 1024, true);
        assert_eq!(seqs, vec![vec![5], vec![0, 4], vec![1, 3], vec![2]]);
        for s in &seqs {
            assert!(s.iter().map(|&c| lengths[c as usize]).sum::<usize>() <= 1024);
        }
        let unpacked = pack(&lengths, &order, 1024, false);
        assert_eq!(unpacked.len(), 6);
    }

    #[test]
    fn arrays_are_shifted_like_maxtext() {
        let c = contexts(&[3, 2]);
        let mut b = Batch::new(1, 8);
        b.push_sequence([c.get(0), c.get(1)]);
        assert_eq!(b.inputs, vec![11, 11, 11, 12, 12, 0, 0, 0]);
        assert_eq!(b.inputs_segmentation, vec![1, 1, 1, 2, 2, 0, 0, 0]);
        assert_eq!(b.inputs_position, vec![0, 1, 2, 0, 1, 0, 0, 0]);
        assert_eq!(b.targets, vec![11, 11, 12, 12, 0, 0, 0, 0]);
        assert_eq!(b.targets_segmentation, vec![1, 1, 2, 2, 0, 0, 0, 0]);
        assert_eq!(b.targets_position, b.inputs_position);
        assert_eq!(b.real_tokens(), 5);
        let mut two = Batch::new(2, 8);
        two.push_sequence([c.get(1)]);
        assert_eq!(two.rows(), 1);
        let [inputs, seg, ..] = two.into_arrays();
        assert_eq!(inputs, [12, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(seg.iter().sum::<i32>(), 2);
    }
}
