//! Every HTTP request the object store clients send ([`super::store::object_store_for`]),
//! seen as it is answered: its operation, how it ended and how long its answer took,
//! told to the process's [`RequestObserver`] (the engine's metrics), if one is set. The
//! clients' own retries are requests too, so a throttled store shows as `throttled`
//! answers, each followed by a retry while the retry budget lasts.
//!
//! ```text
//! object_store ─ HttpClient ─► Observed ─► reqwest ─► the store
//!                                 └ RequestSeen { op, outcome, seconds } ─► the observer
//! ```

use std::sync::OnceLock;
use std::time::Instant;

use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

/// What a request did, from a fixed set (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    Get,
    Head,
    List,
    Put,
    /// A create-only put (`If-None-Match: *`; on GCS `ifGenerationMatch=0`).
    PutIfAbsent,
    /// A compare-and-swap put (`If-Match`; on GCS `ifGenerationMatch=N`).
    PutIfMatch,
    /// Multipart uploads' steps and other POSTs.
    Post,
    Delete,
}

impl StoreOp {
    pub const ALL: [StoreOp; 8] = [
        StoreOp::Get,
        StoreOp::Head,
        StoreOp::List,
        StoreOp::Put,
        StoreOp::PutIfAbsent,
        StoreOp::PutIfMatch,
        StoreOp::Post,
        StoreOp::Delete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Get => "get",
            StoreOp::Head => "head",
            StoreOp::List => "list",
            StoreOp::Put => "put",
            StoreOp::PutIfAbsent => "put_if_absent",
            StoreOp::PutIfMatch => "put_if_match",
            StoreOp::Post => "post",
            StoreOp::Delete => "delete",
        }
    }

    /// The operation of `req`, by its method, query and conditional headers.
    fn of(req: &HttpRequest) -> StoreOp {
        let query = req.uri().query().unwrap_or("");
        let headers = req.headers();
        let generation = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("ifGenerationMatch="));
        match req.method().as_str() {
            "GET" if query.contains("list-type=") || query.contains("prefix=") => StoreOp::List,
            "GET" => StoreOp::Get,
            "HEAD" => StoreOp::Head,
            "DELETE" => StoreOp::Delete,
            "POST" if query.split('&').any(|kv| kv == "delete" || kv == "delete=") => {
                StoreOp::Delete
            }
            "PUT" | "POST" if headers.contains_key("if-none-match") || generation == Some("0") => {
                StoreOp::PutIfAbsent
            }
            "PUT" | "POST" if headers.contains_key("if-match") || generation.is_some() => {
                StoreOp::PutIfMatch
            }
            "PUT" => StoreOp::Put,
            _ => StoreOp::Post,
        }
    }
}

/// How a request ended, from a fixed set (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOutcome {
    /// 2xx.
    Ok,
    /// 304.
    NotModified,
    /// 404.
    NotFound,
    /// 412 or 409: a condition did not hold (another writer won, the object changed).
    PreconditionFailed,
    /// 503 or 429: the store asks the client to slow down (S3's `SlowDown`).
    Throttled,
    /// Any other 5xx.
    ServerError,
    /// Any other answer (3xx, 4xx).
    ClientError,
    /// No answer: the connection failed, was reset or timed out.
    TransportError,
}

impl StoreOutcome {
    pub const ALL: [StoreOutcome; 8] = [
        StoreOutcome::Ok,
        StoreOutcome::NotModified,
        StoreOutcome::NotFound,
        StoreOutcome::PreconditionFailed,
        StoreOutcome::Throttled,
        StoreOutcome::ServerError,
        StoreOutcome::ClientError,
        StoreOutcome::TransportError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StoreOutcome::Ok => "ok",
            StoreOutcome::NotModified => "not_modified",
            StoreOutcome::NotFound => "not_found",
            StoreOutcome::PreconditionFailed => "precondition_failed",
            StoreOutcome::Throttled => "throttled",
            StoreOutcome::ServerError => "server_error",
            StoreOutcome::ClientError => "client_error",
            StoreOutcome::TransportError => "transport_error",
        }
    }

    fn of_status(status: u16) -> StoreOutcome {
        match status {
            200..=299 => StoreOutcome::Ok,
            304 => StoreOutcome::NotModified,
            404 => StoreOutcome::NotFound,
            409 | 412 => StoreOutcome::PreconditionFailed,
            429 | 503 => StoreOutcome::Throttled,
            500..=599 => StoreOutcome::ServerError,
            _ => StoreOutcome::ClientError,
        }
    }

    /// Why the store client tries a request again after this outcome, if it does
    /// (while its retry budget lasts): `slow_down`, `server_error` or `reset`.
    pub fn retry_reason(self) -> Option<&'static str> {
        match self {
            StoreOutcome::Throttled => Some("slow_down"),
            StoreOutcome::ServerError => Some("server_error"),
            StoreOutcome::TransportError => Some("reset"),
            _ => None,
        }
    }
}

/// One answered (or failed) request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestSeen {
    pub op: StoreOp,
    pub outcome: StoreOutcome,
    /// Until the answer's headers (a body is streamed after).
    pub seconds: f64,
    /// The request's body (what was written).
    pub bytes_sent: u64,
    /// The answer's body as its `Content-Length` says (what was read; 0 without one).
    pub bytes_received: u64,
}

/// What is told of every request.
pub trait RequestObserver: Send + Sync + 'static {
    fn seen(&self, request: RequestSeen);
}

static OBSERVER: OnceLock<Box<dyn RequestObserver>> = OnceLock::new();

/// Sets the process's observer of store requests; `false` if one was set already (it
/// stays).
pub fn observe_requests(observer: impl RequestObserver) -> bool {
    OBSERVER.set(Box::new(observer)).is_ok()
}

/// The object store clients' connector: reqwest's, each request observed.
#[derive(Debug, Default)]
pub struct ObservedConnector;

impl HttpConnector for ObservedConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Observed(inner)))
    }
}

#[derive(Debug)]
struct Observed(HttpClient);

#[async_trait::async_trait]
impl HttpService for Observed {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let op = StoreOp::of(&req);
        let bytes_sent = req.body().content_length() as u64;
        let started = Instant::now();
        let answer = self.0.execute(req).await;
        if let Some(observer) = OBSERVER.get() {
            let (outcome, bytes_received) = match &answer {
                Ok(r) => (
                    StoreOutcome::of_status(r.status().as_u16()),
                    content_length(r),
                ),
                Err(_) => (StoreOutcome::TransportError, 0),
            };
            observer.seen(RequestSeen {
                op,
                outcome,
                seconds: started.elapsed().as_secs_f64(),
                bytes_sent,
                bytes_received,
            });
        }
        answer
    }
}

fn content_length(r: &HttpResponse) -> u64 {
    r.headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str, header: Option<&'static str>) -> HttpRequest {
        let mut r = HttpRequest::new(object_store::client::HttpRequestBody::empty());
        *r.method_mut() = method.parse().unwrap();
        *r.uri_mut() = uri.parse().unwrap();
        if let Some(h) = header {
            r.headers_mut().insert(h, "x".parse().unwrap());
        }
        r
    }

    #[test]
    fn a_request_is_named_by_its_method_query_and_conditions() {
        let cases = [
            ("GET", "http://s/b/k", None, StoreOp::Get),
            (
                "GET",
                "http://s/b?list-type=2&prefix=_job",
                None,
                StoreOp::List,
            ),
            (
                "GET",
                "http://s/storage/v1/b/b/o?prefix=x",
                None,
                StoreOp::List,
            ),
            ("HEAD", "http://s/b/k", None, StoreOp::Head),
            ("PUT", "http://s/b/k", None, StoreOp::Put),
            (
                "PUT",
                "http://s/b/k",
                Some("if-none-match"),
                StoreOp::PutIfAbsent,
            ),
            ("PUT", "http://s/b/k", Some("if-match"), StoreOp::PutIfMatch),
            (
                "POST",
                "http://s/upload/b?ifGenerationMatch=0",
                None,
                StoreOp::PutIfAbsent,
            ),
            (
                "POST",
                "http://s/upload/b?ifGenerationMatch=17",
                None,
                StoreOp::PutIfMatch,
            ),
            ("POST", "http://s/b/k?uploads", None, StoreOp::Post),
            ("POST", "http://s/b?delete", None, StoreOp::Delete),
            ("DELETE", "http://s/b/k", None, StoreOp::Delete),
        ];
        for (method, uri, header, op) in cases {
            assert_eq!(
                StoreOp::of(&request(method, uri, header)),
                op,
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn an_answer_is_classed_by_its_status_and_the_retried_ones_say_why() {
        let cases = [
            (200, StoreOutcome::Ok, None),
            (206, StoreOutcome::Ok, None),
            (304, StoreOutcome::NotModified, None),
            (404, StoreOutcome::NotFound, None),
            (412, StoreOutcome::PreconditionFailed, None),
            (409, StoreOutcome::PreconditionFailed, None),
            (503, StoreOutcome::Throttled, Some("slow_down")),
            (429, StoreOutcome::Throttled, Some("slow_down")),
            (500, StoreOutcome::ServerError, Some("server_error")),
            (403, StoreOutcome::ClientError, None),
        ];
        for (status, outcome, retry) in cases {
            assert_eq!(StoreOutcome::of_status(status), outcome, "{status}");
            assert_eq!(outcome.retry_reason(), retry, "{status}");
        }
        assert_eq!(StoreOutcome::TransportError.retry_reason(), Some("reset"));
    }
}
