//! The object store's requests as metrics, on the coordinator (its journal, lock,
//! epoch, event log and final writes, and its listing of the input) and on every worker
//! (its reads and writes): each HTTP request the store clients send, their own retries
//! included, as the reader's connector sees it
//! ([`probeflow_reader::remote::requests`]). Process-wide: one store client serves
//! every task of a process. A local disk sends no request, so it shows none.
//!
//! * `probeflow_store_requests_total{op,outcome}`;
//! * `probeflow_store_request_duration_seconds{op}`, until the answer's headers;
//! * `probeflow_store_retries_total{reason}`: answers after which the client tries
//!   again while its retry budget lasts (`slow_down`: 503 or 429; `server_error`: other
//!   5xx; `reset`: no answer);
//! * `probeflow_store_written_bytes_total`, `probeflow_store_read_bytes_total`: the
//!   requests' bodies, and the answers' as their `Content-Length` says.

use std::sync::LazyLock;

use probeflow_reader::remote::requests::{self, RequestObserver, RequestSeen};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

type Labels = Vec<(&'static str, &'static str)>;

fn duration_histogram() -> Histogram {
    // 1 ms to ~65 s, ×4.
    Histogram::new(exponential_buckets(0.001, 4.0, 9))
}

/// The process's store metrics.
struct StoreMetrics {
    requests: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    retries: Family<Labels, Counter>,
    written: Counter,
    read: Counter,
}

static STORE: LazyLock<StoreMetrics> = LazyLock::new(|| StoreMetrics {
    requests: Family::default(),
    durations: Family::new_with_constructor(duration_histogram),
    retries: Family::default(),
    written: Counter::default(),
    read: Counter::default(),
});

struct Observer;

impl RequestObserver for Observer {
    fn seen(&self, r: RequestSeen) {
        let op = r.op.as_str();
        STORE
            .requests
            .get_or_create(&vec![("op", op), ("outcome", r.outcome.as_str())])
            .inc();
        STORE
            .durations
            .get_or_create(&vec![("op", op)])
            .observe(r.seconds);
        if let Some(reason) = r.outcome.retry_reason() {
            STORE.retries.get_or_create(&vec![("reason", reason)]).inc();
        }
        STORE.written.inc_by(r.bytes_sent);
        STORE.read.inc_by(r.bytes_received);
    }
}

/// Counts this process's store requests from now on (once a process; later calls do
/// nothing).
pub fn install() {
    requests::observe_requests(Observer);
}

/// Serves the store metrics in `registry` (and counts from now on).
pub fn register(registry: &mut Registry) {
    install();
    registry.register(
        "probeflow_store_requests",
        "Requests sent to the object store, by operation and how they ended.",
        STORE.requests.clone(),
    );
    registry.register_with_unit(
        "probeflow_store_request_duration",
        "Time until the object store's answer (its headers), by operation.",
        Unit::Seconds,
        STORE.durations.clone(),
    );
    registry.register(
        "probeflow_store_retries",
        "Answers after which the store client tries again (while its retry budget lasts).",
        STORE.retries.clone(),
    );
    registry.register_with_unit(
        "probeflow_store_written",
        "Bytes sent to the object store (request bodies).",
        Unit::Bytes,
        STORE.written.clone(),
    );
    registry.register_with_unit(
        "probeflow_store_read",
        "Bytes the object store answered with (as its Content-Length says).",
        Unit::Bytes,
        STORE.read.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use probeflow_reader::remote::requests::{StoreOp, StoreOutcome};

    #[test]
    fn a_request_counts_by_op_and_outcome_and_a_throttled_one_as_a_retry() {
        let mut registry = Registry::default();
        register(&mut registry);
        for outcome in [
            StoreOutcome::Ok,
            StoreOutcome::Throttled,
            StoreOutcome::Throttled,
        ] {
            Observer.seen(RequestSeen {
                op: StoreOp::PutIfAbsent,
                outcome,
                seconds: 0.002,
                bytes_sent: 10,
                bytes_received: 3,
            });
        }
        let text = super::super::metrics::openmetrics(&registry);
        for line in [
            "probeflow_store_requests_total{op=\"put_if_absent\",outcome=\"throttled\"} 2",
            "probeflow_store_requests_total{op=\"put_if_absent\",outcome=\"ok\"} 1",
            "probeflow_store_retries_total{reason=\"slow_down\"} 2",
            "probeflow_store_request_duration_seconds_bucket{le=\"0.004\",op=\"put_if_absent\"} 3",
            "# UNIT probeflow_store_request_duration_seconds seconds",
            "probeflow_store_written_bytes_total 30",
            "probeflow_store_read_bytes_total 9",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
