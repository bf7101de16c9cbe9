//! The event log: what each coordinator of a job observed (attempts with their worker,
//! start, end, outcome and reason; workers' joins, losses and exclusions; stages
//! planned; the job's state; coordinator epochs), kept in the output so that the page
//! and the model can be rendered after the job, from the output alone
//! (`coordinator status --html/--json`), by replaying it into the same model the
//! coordinator served ([`replay`]).
//!
//! ```text
//! Monitor::observe_all ─► Recorder (one JSON line per observation, heartbeats left out)
//!   ─► EventLogWriter, every FLUSH_INTERVAL or BATCH_BYTES ─► _job/events/EEEEE-NNNNNN.jsonl
//! status: read() ─► every epoch's batches, in order ─► replay() ─► JobMonitor ─► Status, page
//! ```
//!
//! Object stores cannot append, so the log is written in batches, one object each: a
//! header line (`{"version":1,"epoch":2,"batch":0,"release":"…","dropped":0}`) and then
//! one line per observation, `{"at":<unix seconds>,"event":"attempt_ended",…}` (the
//! fields of [`Observation`]). It is job state, not a final file: it lives under `_job/`
//! beside the journal, which the completion record does not list, and a job planned
//! again from scratch starts a new one. Bounded: a coordinator epoch logs at most
//! [`EPOCH_LOG_BYTES`]; past it, observations are counted as `dropped`, not kept.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};

use super::{JobMonitor, Observation};
use crate::error::{EngineError, Result};
use crate::store::StoreUrl;

/// Where the event log lives, relative to the output root.
pub const EVENTS_DIR: &str = "_job/events";
/// The version of the log's lines (in each batch's header): a field or an event is
/// only ever added within a version.
pub const EVENT_LOG_VERSION: u32 = 1;
/// How often the recorded observations are written (at once after a milestone: an
/// epoch begun, the job's state changed, a worker excluded, so that a coordinator
/// killed after one leaves it in the log).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(10);
/// A batch is written early once this much is recorded.
pub const BATCH_BYTES: usize = 1 << 20;
/// What one coordinator epoch logs at most; past it observations are dropped (and
/// counted). 20 000 tasks take about 5 MiB.
pub const EPOCH_LOG_BYTES: u64 = 64 << 20;
/// Batches read at once.
const READS_IN_FLIGHT: usize = 32;

/// A batch's first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchHeader {
    pub version: u32,
    pub epoch: u32,
    pub batch: u32,
    /// The release of the coordinator that wrote it.
    pub release: String,
    /// Observations this epoch dropped so far (past [`EPOCH_LOG_BYTES`]).
    pub dropped: u64,
}

/// One observation and when it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    at: f64,
    #[serde(flatten)]
    observation: Observation,
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn from_unix(at: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::try_from_secs_f64(at).unwrap_or_default()
}

/// The path of batch `batch` of epoch `epoch`, relative to the output root.
pub fn batch_path(epoch: u32, batch: u32) -> String {
    format!("{EVENTS_DIR}/{epoch:05}-{batch:06}.jsonl")
}

/// The epoch and batch a batch's file name gives.
fn parse_batch_name(name: &str) -> Option<(u32, u32)> {
    let (epoch, batch) = name.strip_suffix(".jsonl")?.split_once('-')?;
    Some((epoch.parse().ok()?, batch.parse().ok()?))
}

/// What is recorded and not written yet, for one coordinator epoch.
#[derive(Debug)]
struct Pending {
    epoch: u32,
    lines: Vec<u8>,
    next_batch: u32,
    logged_bytes: u64,
    dropped: u64,
}

/// Records observations for the event log once [`Recorder::start`] names the epoch
/// (before that, nothing: the output is not this coordinator's yet). Shared by the
/// monitor (which records) and the [`EventLogWriter`] (which takes batches).
#[derive(Clone, Default)]
pub struct Recorder {
    pending: Arc<Mutex<Option<Pending>>>,
    full: Arc<Notify>,
}

impl Recorder {
    fn pending(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records from now on, for coordinator epoch `epoch`.
    pub fn start(&self, epoch: u32) {
        *self.pending() = Some(Pending {
            epoch,
            lines: Vec::new(),
            next_batch: 0,
            logged_bytes: 0,
            dropped: 0,
        });
    }

    /// Records `observation`, made at `now` (if recording, and it is logged).
    pub fn record(&self, observation: &Observation, now: SystemTime) {
        if !observation.is_logged() {
            return;
        }
        let mut guard = self.pending();
        let Some(p) = guard.as_mut() else {
            return;
        };
        let line = Line {
            at: unix(now),
            observation: observation.clone(),
        };
        let Ok(mut bytes) = serde_json::to_vec(&line) else {
            p.dropped += 1;
            return;
        };
        bytes.push(b'\n');
        if p.logged_bytes + bytes.len() as u64 > EPOCH_LOG_BYTES {
            p.dropped += 1;
            return;
        }
        p.logged_bytes += bytes.len() as u64;
        p.lines.extend_from_slice(&bytes);
        if p.lines.len() >= BATCH_BYTES || observation.is_milestone() {
            self.full.notify_one();
        }
    }

    /// The next batch to write (its path and bytes), if anything was recorded.
    fn take_batch(&self) -> Option<(String, Vec<u8>)> {
        let mut guard = self.pending();
        let p = guard.as_mut()?;
        if p.lines.is_empty() {
            return None;
        }
        let header = BatchHeader {
            version: EVENT_LOG_VERSION,
            epoch: p.epoch,
            batch: p.next_batch,
            release: crate::protocol::RELEASE.to_string(),
            dropped: p.dropped,
        };
        let mut bytes = serde_json::to_vec(&header).ok()?;
        bytes.push(b'\n');
        bytes.append(&mut p.lines);
        let path = batch_path(p.epoch, p.next_batch);
        p.next_batch += 1;
        Some((path, bytes))
    }
}

/// Writes the recorder's batches in a task of its own (the store's latency never
/// stalls the actor), every [`FLUSH_INTERVAL`] or once a batch is full; the last one
/// when [`EventLogWriter::finish`]ed. A batch the store refuses is kept and written
/// again with the next (the log is for people: a failure is a warning, never the job's).
pub struct EventLogWriter {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl EventLogWriter {
    pub fn start(output: StoreUrl, recorder: Recorder) -> EventLogWriter {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut unsent: Vec<(String, Vec<u8>)> = Vec::new();
            loop {
                let last = tokio::select! {
                    _ = tokio::time::sleep(FLUSH_INTERVAL) => false,
                    _ = recorder.full.notified() => false,
                    _ = stopped.changed() => true,
                };
                unsent.extend(recorder.take_batch());
                write_batches(&output, &mut unsent).await;
                if last {
                    return;
                }
            }
        });
        EventLogWriter { stop, task }
    }

    /// Writes what is left and stops.
    pub async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Writes `batches` in order; those the store refused stay in it.
async fn write_batches(output: &StoreUrl, batches: &mut Vec<(String, Vec<u8>)>) {
    while let Some((path, bytes)) = batches.first() {
        if let Err(e) = output.put(&output.child(path), bytes.clone()).await {
            tracing::warn!(batch = %path, error = %e, "writing the event log failed; trying again with the next batch");
            return;
        }
        batches.remove(0);
    }
}

/// One coordinator epoch's part of the log.
#[derive(Debug, Default)]
pub struct EpochEvents {
    pub epoch: u32,
    /// Its observations, in the order it made them.
    pub events: Vec<(SystemTime, Observation)>,
    /// Observations it dropped past [`EPOCH_LOG_BYTES`].
    pub dropped: u64,
    /// The release of the coordinator that wrote it.
    pub release: String,
}

/// The event log as read back.
#[derive(Debug, Default)]
pub struct EventLog {
    pub epochs: Vec<EpochEvents>,
    /// What could not be read (a batch torn by a crash, of another version, missing),
    /// one sentence each.
    pub unreadable: Vec<String>,
}

/// The event log of the output at `out`; `None` if it has none (a job not started,
/// or one run by a release before the event log).
pub async fn read(out: &StoreUrl) -> Result<Option<EventLog>> {
    let listed = out.list(EVENTS_DIR).await?;
    if listed.is_empty() {
        return Ok(None);
    }
    let mut log = EventLog::default();
    let mut batches = Vec::new();
    for meta in listed {
        let name = meta.location.filename().unwrap_or_default().to_string();
        match parse_batch_name(&name) {
            Some(_) if meta.size > EPOCH_LOG_BYTES + BATCH_BYTES as u64 => {
                log.unreadable.push(format!(
                    "{name}: {} bytes, more than an epoch logs: not read",
                    meta.size
                ))
            }
            Some((epoch, batch)) => batches.push((epoch, batch, name, meta.location)),
            None => log
                .unreadable
                .push(format!("{name}: not an event log batch: not read")),
        }
    }
    batches.sort_by_key(|(epoch, batch, ..)| (*epoch, *batch));
    let read: Vec<(u32, u32, String, Option<bytes::Bytes>)> =
        futures::stream::iter(batches.into_iter().map(
            |(epoch, batch, name, location)| async move {
                let bytes = out.get_opt(&location).await?;
                Ok::<_, EngineError>((epoch, batch, name, bytes))
            },
        ))
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut expected = (0, 0);
    for (epoch, batch, name, bytes) in read {
        if epoch != expected.0 {
            expected = (epoch, 0);
        }
        if batch != expected.1 {
            log.unreadable.push(format!(
                "epoch {epoch}: batches {}..{batch} missing",
                expected.1
            ));
        }
        expected.1 = batch + 1;
        let Some(bytes) = bytes else { continue };
        if log.epochs.last().is_none_or(|e| e.epoch != epoch) {
            log.epochs.push(EpochEvents {
                epoch,
                ..EpochEvents::default()
            });
        }
        let Some(into) = log.epochs.last_mut() else {
            continue;
        };
        if let Err(why) = decode_batch(&bytes, epoch, batch, into) {
            log.unreadable.push(format!("{name}: {why}"));
        }
    }
    Ok(Some(log))
}

/// Appends batch `batch` of `epoch` (`bytes`) to `into`: its header checked, every
/// line decoded (a line that does not decode, torn by a crash, ends the batch).
fn decode_batch(
    bytes: &[u8],
    epoch: u32,
    batch: u32,
    into: &mut EpochEvents,
) -> std::result::Result<(), String> {
    let mut lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let header: BatchHeader = lines
        .next()
        .ok_or("empty")
        .and_then(|l| serde_json::from_slice(l).map_err(|_| "no header"))?;
    if header.version != EVENT_LOG_VERSION {
        return Err(format!(
            "written in event log version {}, this release reads version {EVENT_LOG_VERSION}",
            header.version
        ));
    }
    if (header.epoch, header.batch) != (epoch, batch) {
        return Err(format!(
            "its header names epoch {} batch {}",
            header.epoch, header.batch
        ));
    }
    into.dropped = into.dropped.max(header.dropped);
    into.release = header.release;
    for (n, line) in lines.enumerate() {
        let line: Line = serde_json::from_slice(line)
            .map_err(|e| format!("line {}: {e}; the rest of the batch is not read", n + 2))?;
        into.events.push((from_unix(line.at), line.observation));
    }
    Ok(())
}

/// The model of the job of `kind` writing to `output`, from its event log: every
/// epoch's observations replayed in order, a coordinator restart between epochs. A
/// log that ends mid-job (the job runs on, or its coordinator was killed) leaves the
/// model as the last batch saw it.
pub fn replay(kind: &str, output: &str, log: &EventLog) -> JobMonitor {
    let first = log
        .epochs
        .iter()
        .find_map(|e| e.events.first())
        .map_or(SystemTime::UNIX_EPOCH, |(at, _)| *at);
    let mut model = JobMonitor::new(kind, output, first);
    for epoch in &log.epochs {
        for (at, observation) in &epoch.events {
            model.observe(observation.clone(), *at);
        }
    }
    model
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::{JobState, Outcome};
    use crate::protocol::{StageName, TaskId};

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn started(task: TaskId, attempt: u32, worker: &str) -> Observation {
        Observation::AttemptStarted {
            task,
            attempt,
            worker: worker.into(),
        }
    }

    fn ended_as(task: TaskId, attempt: u32, worker: &str, outcome: Outcome) -> Observation {
        Observation::AttemptEnded {
            task,
            attempt,
            worker: worker.into(),
            outcome,
            reason: (outcome != Outcome::Accepted).then(|| "disk on fire".into()),
        }
    }

    fn map(i: u32) -> TaskId {
        TaskId::new("map", i)
    }

    #[test]
    fn every_observation_but_a_heartbeat_reads_back_as_it_was_written() {
        let observations = vec![
            Observation::Epoch { epoch: 3 },
            Observation::StagePlanned {
                stage: StageName::new("map").unwrap(),
                unit: "input_rows".into(),
                tasks: vec![(map(0), 10), (map(1), 20)],
            },
            Observation::Replayed { task: map(0) },
            Observation::WorkerJoined {
                worker: "w\"1".into(),
                memory_bytes: 1 << 30,
                capacity: 2,
            },
            started(map(1), 2001, "w\"1"),
            ended_as(map(1), 2001, "w\"1", Outcome::Lost),
            Observation::Rejected {
                task: map(0),
                counts: vec![("null_rtt".into(), 4)],
            },
            Observation::WorkerLeft {
                worker: "w\"1".into(),
            },
            Observation::WorkerExcluded {
                worker: "w2".into(),
                reason: "scratch full".into(),
            },
            Observation::State {
                state: JobState::Failed,
                error: Some("out of attempts".into()),
            },
        ];
        let recorder = Recorder::default();
        recorder.start(3);
        for (i, o) in observations.iter().enumerate() {
            recorder.record(o, at(i as u64));
        }
        recorder.record(
            &Observation::Heartbeat {
                worker: "w\"1".into(),
            },
            at(99),
        );
        let (path, bytes) = recorder.take_batch().unwrap();
        assert_eq!(path, "_job/events/00003-000000.jsonl");
        let mut read = EpochEvents::default();
        decode_batch(&bytes, 3, 0, &mut read).unwrap();
        let expected: Vec<_> = observations
            .into_iter()
            .enumerate()
            .map(|(i, o)| (at(i as u64), o))
            .collect();
        assert_eq!(read.events, expected);
        assert!(recorder.take_batch().is_none(), "nothing left to write");
    }

    #[test]
    fn nothing_is_recorded_before_the_epoch_is_known() {
        let recorder = Recorder::default();
        recorder.record(
            &Observation::State {
                state: JobState::Planning,
                error: None,
            },
            at(0),
        );
        recorder.start(1);
        assert!(recorder.take_batch().is_none());
    }

    #[test]
    fn an_epoch_past_its_limit_counts_what_it_drops() {
        let recorder = Recorder::default();
        recorder.start(1);
        let big = Observation::WorkerExcluded {
            worker: "w".into(),
            reason: "x".repeat(1 << 20),
        };
        let mut batches = 0;
        for i in 0..70 {
            recorder.record(&big, at(i));
            if let Some((_, bytes)) = recorder.take_batch() {
                batches += 1;
                assert!(bytes.len() < 2 * BATCH_BYTES);
            }
        }
        assert_eq!(batches, 63, "64 MiB holds 63 lines of a MiB and more");
        recorder.record(&big, at(71));
        assert!(recorder.take_batch().is_none());
        recorder.record(&Observation::Replayed { task: map(0) }, at(72));
        let (_, bytes) = recorder.take_batch().unwrap();
        let header: BatchHeader =
            serde_json::from_slice(bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(header.dropped, 8, "seven lines past the limit and one more");
        assert_eq!(header.batch, 63);
    }

    #[test]
    fn a_torn_line_ends_its_batch_and_another_version_is_named() {
        let recorder = Recorder::default();
        recorder.start(1);
        recorder.record(&Observation::Replayed { task: map(0) }, at(0));
        recorder.record(&Observation::Replayed { task: map(1) }, at(1));
        let (_, bytes) = recorder.take_batch().unwrap();
        let torn = &bytes[..bytes.len() - 10];
        let mut read = EpochEvents::default();
        let why = decode_batch(torn, 1, 0, &mut read).unwrap_err();
        assert!(why.starts_with("line 3:"), "{why}");
        assert_eq!(read.events.len(), 1, "the whole lines before it are kept");
        let other =
            String::from_utf8(bytes.clone())
                .unwrap()
                .replacen("\"version\":1", "\"version\":9", 1);
        let why = decode_batch(other.as_bytes(), 1, 0, &mut EpochEvents::default()).unwrap_err();
        assert!(why.contains("version 9"), "{why}");
        let why = decode_batch(&bytes, 2, 0, &mut EpochEvents::default()).unwrap_err();
        assert!(why.contains("names epoch 1 batch 0"), "{why}");
    }

    #[tokio::test]
    async fn the_writer_writes_batches_the_reader_replays_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let out = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        for (epoch, attempt) in [(1, 1), (2, 1001)] {
            let recorder = Recorder::default();
            recorder.start(epoch);
            let writer = EventLogWriter::start(out.clone(), recorder.clone());
            let t = u64::from(epoch) * 100;
            let mut o = vec![
                Observation::Epoch { epoch },
                Observation::StagePlanned {
                    stage: StageName::new("map").unwrap(),
                    unit: "input_rows".into(),
                    tasks: vec![(map(0), 10), (map(1), 20)],
                },
                Observation::WorkerJoined {
                    worker: format!("w{epoch}"),
                    memory_bytes: 1,
                    capacity: 1,
                },
            ];
            if epoch == 2 {
                o.push(Observation::Replayed { task: map(0) });
            }
            let task = map(epoch - 1);
            o.push(started(task, attempt, &format!("w{epoch}")));
            o.push(ended_as(
                task,
                attempt,
                &format!("w{epoch}"),
                Outcome::Accepted,
            ));
            if epoch == 2 {
                o.push(Observation::State {
                    state: JobState::Succeeded,
                    error: None,
                });
            }
            for (i, o) in o.iter().enumerate() {
                recorder.record(o, at(t + i as u64));
            }
            writer.finish().await;
        }
        let log = read(&out).await.unwrap().unwrap();
        assert!(log.unreadable.is_empty(), "{:?}", log.unreadable);
        assert_eq!(
            log.epochs.iter().map(|e| e.epoch).collect::<Vec<_>>(),
            [1, 2]
        );
        let model = replay("probe_rows", "out", &log);
        assert_eq!(model.state, JobState::Succeeded);
        let status = model.status(at(1000));
        assert_eq!(status.epoch, 2);
        assert_eq!(status.stages[0].done, 2);
        assert_eq!(status.stages[0].units_done, 30);
        assert_eq!(status.timeline.len(), 2, "one bar per attempt");
        assert_eq!(status.started, unix(at(100)));
        assert!(status
            .events
            .iter()
            .any(|e| e.what == "coordinator epoch 2" && e.worker.is_none()));
        assert!(
            read(&StoreUrl::parse(dir.path().join("none").to_str().unwrap()).unwrap())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_missing_batch_and_a_stray_file_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let recorder = Recorder::default();
        recorder.start(1);
        let mut unsent = Vec::new();
        for i in 0..3 {
            recorder.record(&Observation::Replayed { task: map(i) }, at(i.into()));
            unsent.extend(recorder.take_batch());
        }
        unsent.remove(1);
        write_batches(&out, &mut unsent).await;
        out.put(&out.child("_job/events/notes.txt"), b"hi".to_vec())
            .await
            .unwrap();
        let log = read(&out).await.unwrap().unwrap();
        assert_eq!(log.epochs[0].events.len(), 2);
        assert_eq!(
            log.unreadable,
            [
                "notes.txt: not an event log batch: not read",
                "epoch 1: batches 1..2 missing"
            ]
        );
    }
}
