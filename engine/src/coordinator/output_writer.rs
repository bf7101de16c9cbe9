//! The job kind's own files (its progress files), written off the coordinator's actor.
//!
//! ```text
//! actor: driver.record_progress ─► OutputWriter::write ─► queue ─► one writer task ─► store
//! actor: before driver.finish ─► OutputWriter::flush ─► waits for every write queued
//! ```
//!
//! The actor only queues: a slow or throttled store delays the files, not the
//! heartbeats and leases the actor answers. One task writes them in the order they were
//! queued (a later snapshot or summary is never overwritten by an earlier one), and
//! [`OutputWriter::flush`] returns the first write that failed, so a job whose progress
//! files could not be written still fails (before its final outputs), as when they
//! were written in place.

use crate::error::EngineError;
use crate::kind::ProgressFile;
use crate::store::StoreUrl;
use tokio::sync::{mpsc, oneshot};

enum Command {
    Write(ProgressFile),
    /// Answers once every write queued before it is done: the first that failed since
    /// the last flush, if any.
    Flush(oneshot::Sender<Option<EngineError>>),
}

/// Writes files to one output, in order, on a task of its own.
pub struct OutputWriter {
    queue: mpsc::UnboundedSender<Command>,
}

impl OutputWriter {
    /// Starts the writer task for `output` (on the current tokio runtime).
    pub fn start(output: StoreUrl) -> Self {
        let (queue, mut commands) = mpsc::unbounded_channel::<Command>();
        tokio::spawn(async move {
            let mut failed: Option<EngineError> = None;
            while let Some(command) = commands.recv().await {
                match command {
                    Command::Write(file) => {
                        let at = output.child(&file.path);
                        if let Err(e) = output.put(&at, file.bytes).await {
                            tracing::warn!(file = %output.display(&at), error = %e, "cannot write");
                            failed.get_or_insert(e);
                        }
                    }
                    Command::Flush(done) => {
                        let _ = done.send(failed.take());
                    }
                }
            }
        });
        OutputWriter { queue }
    }

    /// Queues `files`, to be written after everything queued before.
    pub fn write(&self, files: Vec<ProgressFile>) {
        for file in files {
            // The task ends only when this writer is dropped: a send cannot fail while
            // it lives.
            let _ = self.queue.send(Command::Write(file));
        }
    }

    /// Waits until every file queued so far is written; the first write that failed
    /// since the last flush is the error.
    pub async fn flush(&self) -> Result<(), EngineError> {
        let (done, answer) = oneshot::channel();
        if self.queue.send(Command::Flush(done)).is_err() {
            return Err(EngineError::Runtime("the output writer stopped".into()));
        }
        match answer.await {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(e),
            Err(_) => Err(EngineError::Runtime("the output writer stopped".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_are_written_in_order_and_a_failure_comes_out_at_the_flush() {
        let dir = tempfile::tempdir().unwrap();
        let output = StoreUrl::parse(dir.path().to_str().unwrap()).unwrap();
        let writer = OutputWriter::start(output);
        let file = |path: &str, bytes: &[u8]| ProgressFile {
            path: path.into(),
            bytes: bytes.to_vec(),
        };
        // The same file twice: the later write wins.
        writer.write(vec![
            file("progress_summary.json", b"first"),
            file("p/a.jsonl", b"a"),
        ]);
        writer.write(vec![file("progress_summary.json", b"second")]);
        writer.flush().await.unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("progress_summary.json")).unwrap(),
            b"second"
        );
        assert_eq!(std::fs::read(dir.path().join("p/a.jsonl")).unwrap(), b"a");
        // A write that cannot succeed (its parent is a file): the flush says so, once,
        // and the writer goes on.
        writer.write(vec![file("p/a.jsonl/below", b"x"), file("b.jsonl", b"b")]);
        assert!(writer.flush().await.is_err());
        assert_eq!(std::fs::read(dir.path().join("b.jsonl")).unwrap(), b"b");
        writer.flush().await.unwrap();
    }
}
