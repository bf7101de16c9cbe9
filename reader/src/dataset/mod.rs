//! The training dataset: a split's shards → per-rank epoch order → blocks of rows →
//! contexts → packed sequences → batches, resumable from a small state.
//!
//! ```text
//! RowSource (mmap'd shards, global row index)
//!   epoch e: Permutation(rows, key(seed, e)); rank r of W takes positions r, r+W, …
//!   block b: block_rows consecutive positions → sample_row each (in parallel, keyed by
//!            (seed, e, row)) → contexts shuffled together → packed into sequences
//!   batches: the next batch_size sequences of the stream (blocks and epochs run on)
//! ```
//!
//! The stream is a pure function of the options, so its position, [`Position`]
//! `(epoch, block, sequence)` — the next sequence to hand out — is the whole iterator
//! state: restoring it rebuilds that block and continues with identical batches.
//! [`Loader::set_states`] continues from the states of *all* ranks of a run with another
//! number of ranks (elastic resume): the rest of each epoch they were in is dealt to the
//! new ranks by [`crate::epoch_layout`], partly delivered blocks included, so no row of
//! the epoch is read twice or skipped; the state then also holds those epochs' changes
//! (version 2). [`Loader::mixture`] reads several outputs ("sources") at once: one such
//! stream per source (`SourceStream`), and [`crate::mixture`] picks the source of each
//! sequence. The
//! [`Loader`] produces batches on a background thread (with its own rayon pool) into a
//! bounded channel; after `fork` the child starts a fresh producer from the last
//! delivered position instead of touching the parent's threads.
//!
//! * `source`: the split's shards as one row source ([`RowSource`]);
//! * `options`: [`DatasetOptions`] and their defaults;
//! * `state`: [`Position`], [`IteratorState`], the checks of a state to restore and
//!   the re-dealing of all ranks' states to another number of ranks;
//! * `stream`: one source's batch stream (epochs, blocks, sampling, packing), and
//!   the stream over one source or a mixture;
//! * `loader`: the [`Loader`] (background production, states, weights, fork).

mod loader;
mod options;
pub(crate) mod source;
mod state;
mod stream;

pub use loader::{note_fork_in_child, Loader};
pub use options::DatasetOptions;
pub use source::{CacheOptions, RowSource};
pub use state::{IteratorState, Position};

#[cfg(test)]
pub(crate) mod tests;
