//! The read-only HTTP listener of the coordinator and of every worker, on its own port
//! (`[run] http`, `coordinator run --http`, `worker --http`): hyper's HTTP/1 server
//! directly (the routes are five fixed GETs; axum's router and extractors would add
//! crates for nothing), bounded before it reads a byte of a request: at most
//! [`MAX_CONNECTIONS`] at once, [`HEADER_TIMEOUT`] to send the headers, no body read.
//!
//! | route | what |
//! |---|---|
//! | `/metrics` | OpenMetrics 1.0 text, or Prometheus' 0.0.4 text if the scraper does not accept it |
//! | `/livez`, `/readyz` | 200 or 503; `?verbose` lists each check (`[+]journal ok`) |
//! | `/api/v1/status` | the coordinator's model as JSON ([`super::model::Status`]) |
//! | `/` | the coordinator's status page (HTML, refreshing itself) |

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::{metrics, Monitor};
use crate::error::{EngineError, Result};

/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// A connection that has not sent its request headers by then is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// One named health check: `Ok` or why not.
pub struct Check {
    pub name: &'static str,
    pub check: Box<dyn Fn() -> std::result::Result<(), String> + Send + Sync>,
}

impl Check {
    pub fn new(
        name: &'static str,
        check: impl Fn() -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Check {
        Check {
            name,
            check: Box::new(check),
        }
    }
}

/// What one process serves.
pub struct Endpoints {
    pub registry: Registry,
    pub live: Vec<Check>,
    pub ready: Vec<Check>,
    /// The coordinator's model (`/api/v1/status`, `/`); none on a worker.
    pub monitor: Option<Monitor>,
}

/// Binds the listener's address (before anything else starts, so that a port in use
/// fails the command at once).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| EngineError::Runtime(format!("cannot listen for HTTP on {addr}: {e}")))
}

/// Serves `endpoints` on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    endpoints: Arc<Endpoints>,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            a = listener.accept() => a,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP accept failed");
                continue;
            }
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let endpoints = endpoints.clone();
                async move { Ok::<_, Infallible>(respond(&endpoints, &req)) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
            drop(permit);
        });
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The answer to one request (no body is read: every route is a GET).
pub fn respond(endpoints: &Endpoints, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    route(
        endpoints,
        req.method(),
        req.uri().path(),
        req.uri().query(),
        accept,
    )
}

/// The answer to `method path?query` with `accept` (separate from hyper's request
/// type, for the tests).
pub fn route(
    endpoints: &Endpoints,
    method: &Method,
    path: &str,
    query: Option<&str>,
    accept: Option<&str>,
) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "read-only: GET only\n",
        );
    }
    let verbose = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "verbose" || p.starts_with("verbose="))
    });
    match path {
        "/metrics" => {
            let om = metrics::openmetrics(&endpoints.registry);
            if metrics::accepts_openmetrics(accept) {
                text(StatusCode::OK, metrics::OPENMETRICS, om)
            } else {
                text(StatusCode::OK, metrics::TEXT_004, metrics::to_text_004(&om))
            }
        }
        "/livez" => health("livez", &endpoints.live, verbose),
        "/readyz" => health("readyz", &endpoints.ready, verbose),
        "/api/v1/status" => match &endpoints.monitor {
            Some(m) => {
                let status = m.lock().status(SystemTime::now());
                match serde_json::to_vec_pretty(&status) {
                    Ok(json) => text(StatusCode::OK, "application/json", json),
                    Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("{e}\n")),
                }
            }
            None => text(
                StatusCode::NOT_FOUND,
                PLAIN,
                "a worker has no job status: ask the coordinator\n",
            ),
        },
        "/" => match &endpoints.monitor {
            Some(m) => {
                let status = m.lock().status(SystemTime::now());
                text(
                    StatusCode::OK,
                    "text/html; charset=utf-8",
                    super::page::render(&status, true),
                )
            }
            None => text(
                StatusCode::OK,
                PLAIN,
                "probeflow worker: /metrics /livez /readyz\n",
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "not found: / /metrics /livez /readyz /api/v1/status\n",
        ),
    }
}

/// Kubernetes' convention: 200 `ok` when every check passes, 503 otherwise;
/// `verbose` lists each (`[+]name ok`, `[-]name failed: why`).
fn health(what: &str, checks: &[Check], verbose: bool) -> Response<Full<Bytes>> {
    let results: Vec<_> = checks.iter().map(|c| (c.name, (c.check)())).collect();
    let ok = results.iter().all(|(_, r)| r.is_ok());
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = if verbose || !ok {
        let mut body = String::new();
        for (name, r) in &results {
            match r {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(why) => body.push_str(&format!("[-]{name} failed: {why}\n")),
            }
        }
        body.push_str(&format!(
            "{what} check {}\n",
            if ok { "passed" } else { "failed" }
        ));
        body
    } else {
        "ok\n".to_string()
    };
    text(status, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn endpoints(ready: Arc<AtomicBool>) -> Endpoints {
        Endpoints {
            registry: metrics::registry(vec![Box::new(metrics::ProcessCollector)]),
            live: vec![Check::new("actor", || Ok(()))],
            ready: vec![
                Check::new("journal", || Ok(())),
                Check::new("output_lock", move || {
                    if ready.load(Ordering::Relaxed) {
                        Ok(())
                    } else {
                        Err("not held yet".into())
                    }
                }),
            ],
            monitor: None,
        }
    }

    async fn body(r: Response<Full<Bytes>>) -> (StatusCode, String) {
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_is_503_naming_the_failed_check_until_every_check_passes() {
        let ready = Arc::new(AtomicBool::new(false));
        let e = endpoints(ready.clone());
        let (status, text) = body(route(&e, &Method::GET, "/readyz", None, None)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            text.contains("[-]output_lock failed: not held yet"),
            "{text}"
        );
        assert!(text.contains("[+]journal ok"), "{text}");
        ready.store(true, Ordering::Relaxed);
        let (status, text) = body(route(&e, &Method::GET, "/readyz", None, None)).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "ok\n"));
        let (_, text) = body(route(&e, &Method::GET, "/readyz", Some("verbose"), None)).await;
        assert_eq!(
            text,
            "[+]journal ok\n[+]output_lock ok\nreadyz check passed\n"
        );
    }

    #[tokio::test]
    async fn metrics_are_negotiated_and_other_routes_and_methods_refused() {
        let e = endpoints(Arc::new(AtomicBool::new(true)));
        let om = route(
            &e,
            &Method::GET,
            "/metrics",
            None,
            Some("application/openmetrics-text;version=1.0.0"),
        );
        assert_eq!(om.headers()[CONTENT_TYPE], metrics::OPENMETRICS);
        let (_, text) = body(om).await;
        assert!(text.ends_with("# EOF\n"));
        let plain = route(&e, &Method::GET, "/metrics", None, None);
        assert_eq!(plain.headers()[CONTENT_TYPE], metrics::TEXT_004);
        assert_eq!(
            route(&e, &Method::POST, "/metrics", None, None).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            route(&e, &Method::GET, "/secrets", None, None).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route(&e, &Method::GET, "/api/v1/status", None, None).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn the_listener_serves_over_tcp_and_stops_when_told() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            Arc::new(endpoints(Arc::new(AtomicBool::new(true)))),
            stopped,
        ));
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /livez?verbose HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("[+]actor ok"), "{answer}");
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
