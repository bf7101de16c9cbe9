//! The [`Loader`]: batches produced on a background thread into a bounded channel,
//! states taken and restored (elastic resume, mixtures, weights), fork safety.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use crate::epoch_layout::EpochLayout;
use crate::error::{Error, Result};
use crate::mixture::{
    source_seed, LoaderState, MixtureSourceState, MixtureState, Weights, MIXTURE_STATE_VERSION,
};
use crate::packing::Batch;

use super::{options::*, source::*, state::*, stream::*};

pub(super) static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Call in a forked child (Python: `os.register_at_fork(after_in_child=…)`): loaders
/// then leave the parent's threads alone and start fresh producers.
pub fn note_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

pub(super) type Produced = Result<Option<(Batch, StreamPosition)>>;

pub(super) struct Producer {
    pub(super) rx: Receiver<Produced>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) handle: Option<std::thread::JoinHandle<()>>,
}

/// A rank's batches, produced in the background, resumable from its state: of one
/// output ([`Loader::new`], an [`IteratorState`]) or of a weighted mixture of several
/// ([`Loader::mixture`], a [`MixtureState`]).
pub struct Loader {
    pub(super) sources: Vec<Source>,
    pub(super) opts: Arc<DatasetOptions>,
    /// A mixture's weights (`None`: one output).
    pub(super) weights: Option<Arc<Weights>>,
    /// Position after the last batch handed out.
    pub(super) position: StreamPosition,
    /// Per source, the epochs re-dealt by an elastic resume (this rank's share).
    pub(super) changes: Vec<Arc<Changes>>,
    pub(super) producer: Option<Producer>,
    pub(super) inline: Option<BatchStream>,
    pub(super) generation: u64,
    pub(super) exhausted: bool,
}

/// `e` with its message prefixed by `what` (for errors about one source of a mixture).
pub(super) fn about(what: &str, e: Error) -> Error {
    match e {
        Error::Input(m) => Error::Input(format!("{what}: {m}")),
        Error::State(m) => Error::State(format!("{what}: {m}")),
        other => other,
    }
}

impl Loader {
    /// The batches of one output's split.
    pub fn new(rows: RowSource, opts: DatasetOptions) -> Result<Self> {
        let source = Source {
            name: String::new(),
            rows: Arc::new(rows),
            seed: opts.seed,
        };
        Self::with_sources(vec![source], None, opts)
    }

    /// The batches of a weighted mixture of several outputs' splits (`(name, rows)`,
    /// the name for people): each sequence comes from source `s` with probability
    /// `weights[s] / sum(weights)` (see [`crate::mixture`]). Each source has its own
    /// epochs (a small source with a large weight is repeated more often), its ranks
    /// are disjoint as for one output, and a finite stream (`num_epochs`) ends when a
    /// picked source has ended.
    pub fn mixture(
        sources: Vec<(String, RowSource)>,
        weights: Vec<f64>,
        opts: DatasetOptions,
    ) -> Result<Self> {
        if sources.is_empty() {
            return Err(Error::Input("a mixture needs at least one source".into()));
        }
        let weights = Weights::new(weights, sources.len())?;
        let sources = sources
            .into_iter()
            .enumerate()
            .map(|(i, (name, rows))| Source {
                name,
                rows: Arc::new(rows),
                seed: source_seed(opts.seed, i),
            })
            .collect();
        Self::with_sources(sources, Some(Arc::new(weights)), opts)
    }

    pub(super) fn with_sources(
        sources: Vec<Source>,
        weights: Option<Arc<Weights>>,
        opts: DatasetOptions,
    ) -> Result<Self> {
        opts.check()?;
        for (i, s) in sources.iter().enumerate() {
            if s.rows.is_empty() {
                let e = Error::Input("the split has no rows".into());
                return Err(match weights {
                    None => e,
                    Some(_) => about(&format!("source {i} ({})", s.name), e),
                });
            }
        }
        let start = Position {
            epoch: 0,
            block: 0,
            sequence: 0,
        };
        Ok(Loader {
            position: StreamPosition {
                sources: vec![start; sources.len()],
                picks: 0,
            },
            changes: (0..sources.len())
                .map(|_| Arc::new(Changes::new()))
                .collect(),
            sources,
            opts: Arc::new(opts),
            weights,
            producer: None,
            inline: None,
            generation: FORK_GENERATION.load(Ordering::SeqCst),
            exhausted: false,
        })
    }

    pub fn options(&self) -> &DatasetOptions {
        &self.opts
    }

    /// Rows of every source, in order.
    pub fn source_rows(&self) -> Vec<u64> {
        self.sources.iter().map(|s| s.rows.len()).collect()
    }

    /// Rows of all sources together.
    pub fn num_rows(&self) -> u64 {
        self.source_rows().iter().sum()
    }

    /// A mixture's current weights; `None` for one output.
    pub fn weights(&self) -> Option<&[f64]> {
        self.weights.as_deref().map(Weights::as_slice)
    }

    /// The stream from the last delivered position.
    pub(super) fn stream(&self) -> Result<BatchStream> {
        let sources = self
            .sources
            .iter()
            .zip(&self.changes)
            .zip(&self.position.sources)
            .map(|((source, changes), pos)| {
                SourceStream::new(source.clone(), self.opts.clone(), changes.clone(), *pos)
            })
            .collect();
        BatchStream::new(
            sources,
            self.weights.clone(),
            self.position.picks,
            self.opts.clone(),
        )
    }

    pub(super) fn start_producer(&mut self) -> Result<()> {
        let (tx, rx): (SyncSender<Produced>, Receiver<Produced>) =
            std::sync::mpsc::sync_channel(self.opts.prefetch);
        let stop = Arc::new(AtomicBool::new(false));
        let mut stream = self.stream()?;
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("probeflow-producer".into())
            .spawn(move || loop {
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let item = stream.next_batch();
                let end = !matches!(item, Ok(Some(_)));
                if tx.send(item).is_err() || end {
                    break;
                }
            })
            .map_err(|e| Error::Thread(format!("cannot start the producer thread: {e}")))?;
        self.producer = Some(Producer {
            rx,
            stop,
            handle: Some(handle),
        });
        Ok(())
    }

    pub(super) fn stop_producer(&mut self) {
        if let Some(mut p) = self.producer.take() {
            p.stop.store(true, Ordering::Relaxed);
            // Unblocks a producer waiting on a full channel.
            drop(p.rx);
            if let Some(h) = p.handle.take() {
                let _ = h.join();
            }
        }
        self.inline = None;
    }

    /// After a fork the parent's threads do not exist here: forget them (never join or
    /// signal them) and continue from the last delivered position.
    pub(super) fn check_fork(&mut self) {
        let g = FORK_GENERATION.load(Ordering::SeqCst);
        if g != self.generation {
            self.generation = g;
            if let Some(p) = self.producer.take() {
                std::mem::forget(p);
            }
            if let Some(s) = self.inline.take() {
                std::mem::forget(s);
            }
        }
    }

    /// The next batch; `None` at the end of a finite stream.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        self.check_fork();
        if self.exhausted {
            return Ok(None);
        }
        let item = if self.opts.prefetch == 0 {
            if self.inline.is_none() {
                self.inline = Some(self.stream()?);
            }
            match self.inline.as_mut() {
                Some(s) => s.next_batch(),
                None => Ok(None),
            }
        } else {
            if self.producer.is_none() {
                self.start_producer()?;
            }
            match self.producer.as_ref().map(|p| p.rx.recv()) {
                Some(Ok(item)) => item,
                _ => Err(Error::Thread(
                    "the batch producer thread stopped unexpectedly (it panicked)".into(),
                )),
            }
        };
        match item {
            Ok(Some((batch, pos))) => {
                self.position = pos;
                Ok(Some(batch))
            }
            Ok(None) => {
                self.exhausted = true;
                self.stop_producer();
                Ok(None)
            }
            Err(e) => {
                self.stop_producer();
                Err(e)
            }
        }
    }

    /// Source `i`'s state after the last batch handed out.
    pub(super) fn source_state(&self, i: usize) -> IteratorState {
        let o = &self.opts;
        let pos = self.position.sources[i];
        let changes: Changes = self.changes[i]
            .range(pos.epoch..)
            .map(|(e, c)| (*e, c.clone()))
            .collect();
        IteratorState {
            version: if changes.is_empty() {
                STATE_VERSION
            } else {
                STATE_VERSION_CHANGES
            },
            epoch: pos.epoch,
            block: pos.block,
            sequence: pos.sequence,
            seed: self.sources[i].seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            rows: self.sources[i].rows.len(),
            rows_digest: self.sources[i].rows.digest().to_string(),
            seq_len: o.sampler.context_len,
            batch_size: o.batch_size,
            packing: o.packing,
            block_rows: o.block_rows,
            changes,
        }
    }

    /// The state after the last batch handed out: an [`IteratorState`] for one
    /// output, a [`MixtureState`] for a mixture.
    pub fn state(&self) -> LoaderState {
        let Some(weights) = &self.weights else {
            return self.source_state(0).into();
        };
        let o = &self.opts;
        MixtureState {
            version: MIXTURE_STATE_VERSION,
            seed: o.seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            batch_size: o.batch_size,
            picks: self.position.picks,
            sources: self
                .sources
                .iter()
                .enumerate()
                .map(|(i, s)| MixtureSourceState {
                    name: s.name.clone(),
                    weight: weights.as_slice()[i],
                    state: self.source_state(i),
                })
                .collect(),
        }
        .into()
    }

    /// Source `i`'s position and changes from `state`, checked against this loader.
    pub(super) fn checked_source_state(
        &self,
        i: usize,
        state: &IteratorState,
    ) -> Result<(Position, Changes)> {
        let mine = self.source_state(i);
        check_version(state)?;
        check_rows(state, &mine)?;
        if let Some((what, a, b)) = first_difference(state, &mine, true) {
            return Err(Error::State(format!(
                "iterator state is for {what} = {a}, this iterator has {b}"
            )));
        }
        // The changes must fit this dataset (checked now, not at the epoch).
        for changes in state.changes.values() {
            EpochLayout::new(mine.rows, &changes.reshards, mine.shard_count)?
                .check_pending(&changes.pending, mine.block_rows as u64)?;
        }
        let pos = Position {
            epoch: state.epoch,
            block: state.block,
            sequence: state.sequence,
        };
        Ok((pos, state.changes.clone()))
    }

    /// What this loader is, for errors about a state of the other kind.
    pub(super) fn kind(&self) -> String {
        match &self.weights {
            None => "this iterator reads one output".into(),
            Some(_) => format!(
                "this iterator is a mixture of {} sources",
                self.sources.len()
            ),
        }
    }

    /// Continues from `state` (prefetched batches are discarded). A mixture's state
    /// restores into a mixture of the same sources (same rows, in the same order)
    /// whatever its weights: every source continues where it was, and only the picks
    /// from now on follow the new weights.
    pub fn set_state(&mut self, state: &LoaderState) -> Result<()> {
        self.check_fork();
        let (sources, picks) = match (state, &self.weights) {
            (LoaderState::Single(s), None) => (vec![self.checked_source_state(0, s)?], 0),
            (LoaderState::Mixture(m), Some(_)) => (self.checked_mixture_state(m)?, m.picks),
            (LoaderState::Single(_), Some(_)) => {
                return Err(Error::State(format!(
                    "iterator state is of one output; {}",
                    self.kind()
                )))
            }
            (LoaderState::Mixture(m), None) => {
                return Err(Error::State(format!(
                    "iterator state is of a mixture of {} sources; {}",
                    m.sources.len(),
                    self.kind()
                )))
            }
        };
        self.stop_producer();
        let (positions, changes): (Vec<Position>, Vec<Changes>) = sources.into_iter().unzip();
        self.position = StreamPosition {
            sources: positions,
            picks,
        };
        self.changes = changes.into_iter().map(Arc::new).collect();
        self.exhausted = false;
        Ok(())
    }

    /// Refuses a mixture state of another version, other sources or another seed;
    /// `same_ranks`: also of another rank, number of ranks or batch size (a restore on
    /// the same ranks).
    pub(super) fn check_mixture_header(&self, m: &MixtureState, same_ranks: bool) -> Result<()> {
        let o = &self.opts;
        if m.version != MIXTURE_STATE_VERSION {
            return Err(Error::State(format!(
                "mixture state is for state version = {}, this iterator has \
                 {MIXTURE_STATE_VERSION}",
                m.version
            )));
        }
        if m.sources.len() != self.sources.len() {
            return Err(Error::State(format!(
                "mixture state is of {} sources; {}",
                m.sources.len(),
                self.kind()
            )));
        }
        if m.sources
            .iter()
            .any(|s| (s.state.shard_index, s.state.shard_count) != (m.shard_index, m.shard_count))
        {
            return Err(Error::State(
                "mixture state: its sources' states are of other ranks than the mixture's \
                 (a damaged state)"
                    .into(),
            ));
        }
        let pair = |a: &dyn ToString, b: &dyn ToString| (a.to_string(), b.to_string());
        let fields = [
            ("seed", pair(&m.seed, &o.seed), false),
            ("shard_index", pair(&m.shard_index, &o.shard_index), true),
            ("shard_count", pair(&m.shard_count, &o.shard_count), true),
            ("batch_size", pair(&m.batch_size, &o.batch_size), true),
        ];
        match fields
            .into_iter()
            .filter(|(_, _, placement)| same_ranks || !placement)
            .find(|(_, (a, b), _)| a != b)
        {
            Some((what, (a, b), _)) => Err(Error::State(format!(
                "mixture state is for {what} = {a}, this iterator has {b}"
            ))),
            None => Ok(()),
        }
    }

    pub(super) fn checked_mixture_state(
        &self,
        m: &MixtureState,
    ) -> Result<Vec<(Position, Changes)>> {
        self.check_mixture_header(m, true)?;
        m.sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                self.checked_source_state(i, &s.state).map_err(|e| {
                    about(
                        &format!(
                            "source {i} ({}, state taken on {})",
                            self.sources[i].name, s.name
                        ),
                        e,
                    )
                })
            })
            .collect()
    }

    /// Changes a mixture's weights from the position after the last batch handed out
    /// (prefetched batches are discarded): every source continues where it was.
    pub fn set_weights(&mut self, weights: Vec<f64>) -> Result<()> {
        self.check_fork();
        if self.weights.is_none() {
            return Err(Error::Input(format!(
                "set_weights: {}, not a mixture",
                self.kind()
            )));
        }
        let weights = Weights::new(weights, self.sources.len())?;
        self.stop_producer();
        self.weights = Some(Arc::new(weights));
        self.exhausted = false;
        Ok(())
    }

    /// Continues from the states of **every** rank of a run (any number of ranks, one
    /// state each, in any order) — the elastic resume. With as many ranks as this
    /// iterator's `shard_count`, it is [`Loader::set_state`] of this rank's state. With
    /// another number, the rest of each epoch those ranks were in (each may be in its
    /// own epoch) is dealt to the new ranks: no row of those epochs is read twice or
    /// skipped, and a block a rank had partly delivered is rebuilt from the same keys
    /// for its undelivered sequences. Costs O(old ranks + new ranks). The seed, rows,
    /// sequence length, packing and block rows must be the same; the batch size may
    /// differ (positions count sequences, not batches). A mixture does this source by
    /// source; its picks start again from 0 after a change of the number of ranks.
    pub fn set_states(&mut self, states: &[LoaderState]) -> Result<()> {
        self.check_fork();
        let bad = |what: String| Err(Error::State(format!("iterator states: {what}")));
        if self.weights.is_none() {
            let mut singles = Vec::with_capacity(states.len());
            for s in states {
                match s {
                    LoaderState::Single(s) => singles.push(s),
                    LoaderState::Mixture(m) => {
                        return bad(format!(
                            "a state is of a mixture of {} sources; {}",
                            m.sources.len(),
                            self.kind()
                        ))
                    }
                }
            }
            let resumed = self.resumed_source_state(0, &singles)?;
            return self.set_state(&resumed.into());
        }
        let mut mixtures = Vec::with_capacity(states.len());
        for s in states {
            match s {
                LoaderState::Mixture(m) => {
                    self.check_mixture_header(m, false)
                        .map_err(|e| about("iterator states", e))?;
                    mixtures.push(m)
                }
                LoaderState::Single(_) => {
                    return bad(format!("a state is of one output; {}", self.kind()))
                }
            }
        }
        let Some(first) = mixtures.first() else {
            return bad("none given".into());
        };
        let o = self.opts.clone();
        let mut sources = Vec::with_capacity(self.sources.len());
        for i in 0..self.sources.len() {
            let states: Vec<&IteratorState> =
                mixtures.iter().map(|m| &m.sources[i].state).collect();
            let resumed = self
                .resumed_source_state(i, &states)
                .map_err(|e| about(&format!("source {i} ({})", self.sources[i].name), e))?;
            sources.push(MixtureSourceState {
                name: first.sources[i].name.clone(),
                weight: first.sources[i].weight,
                state: resumed,
            });
        }
        // The picks go on where they were on the same ranks, and start afresh on others.
        let picks = if first.shard_count == o.shard_count {
            mixtures
                .iter()
                .find(|m| m.shard_index == o.shard_index)
                .map_or(0, |m| m.picks)
        } else {
            0
        };
        let resumed = MixtureState {
            version: MIXTURE_STATE_VERSION,
            seed: first.seed,
            shard_index: o.shard_index,
            shard_count: o.shard_count,
            batch_size: o.batch_size,
            picks,
            sources,
        };
        self.set_state(&resumed.into())
    }

    /// The state source `i` continues from after the elastic resume from `states` (one
    /// per old rank, in any order).
    pub(super) fn resumed_source_state(
        &self,
        i: usize,
        states: &[&IteratorState],
    ) -> Result<IteratorState> {
        let mine = self.source_state(i);
        let bad = |what: String| Err(Error::State(format!("iterator states: {what}")));
        let Some(first) = states.first() else {
            return bad("none given".into());
        };
        let count = first.shard_count;
        let mut by_rank: Vec<Option<&IteratorState>> = vec![None; states.len()];
        for s in states {
            check_version(s)?;
            if s.shard_count != count || s.shard_count != states.len() as u64 {
                return bad(format!(
                    "{} states, for {} and {} ranks: give the state of every rank of one \
                     checkpoint",
                    states.len(),
                    count,
                    s.shard_count
                ));
            }
            let slot = &mut by_rank[s.shard_index.min(count - 1) as usize];
            if s.shard_index >= count || slot.is_some() {
                return bad(format!(
                    "rank {} given twice or out of range",
                    s.shard_index
                ));
            }
            *slot = Some(s);
            check_rows(s, &mine).map_err(|e| about("iterator states", e))?;
            if let Some((what, a, b)) = first_difference(s, &mine, false) {
                return bad(format!(
                    "a state is for {what} = {a}, this iterator has {b}"
                ));
            }
        }
        let by_rank: Vec<&IteratorState> = by_rank.into_iter().flatten().collect();
        if count == mine.shard_count {
            let own = by_rank[mine.shard_index as usize];
            return Ok(IteratorState {
                batch_size: mine.batch_size,
                ..own.clone()
            });
        }
        let changes = reshard_states(&by_rank, mine.shard_index, mine.shard_count)?;
        let epoch = by_rank.iter().map(|s| s.epoch).min().unwrap_or(0);
        Ok(IteratorState {
            version: STATE_VERSION_CHANGES,
            epoch,
            block: 0,
            sequence: 0,
            changes,
            ..mine
        })
    }

    /// Stops the background producer.
    pub fn close(&mut self) {
        self.check_fork();
        self.stop_producer();
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.close();
    }
}
