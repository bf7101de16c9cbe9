//! The coordinator's public socket: every connection must authenticate in time, and
//! only so many may be waiting to.
//!
//! ```text
//! accept ─► permit? (≤ MAX_UNAUTHENTICATED waiting; else closed at once)
//!        └► task: [TLS handshake under its timeout] ─► node session (cookie handshake)
//!                 └► authenticated within AUTH_TIMEOUT? else the session is stopped
//! ```
//!
//! Each accepted connection holds one permit and one task until its node session has
//! authenticated (the cookie handshake, inside TLS when it is on) or it is closed, so a
//! flood of silent sockets can neither block the accept loop nor grow without bound. The
//! node's own listener (ractor_cluster's, which runs handshakes inline and never times
//! out a silent peer) is bound to an ephemeral loopback port that nothing dials.
//!
//! Whether a session authenticated comes from the node's events
//! ([`ractor_cluster::NodeEventSubscription`]), matched by the peer's address.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::ActorRef;
use ractor_cluster::node::{NodeServerSessionInformation, NodeSessionMessage};
use ractor_cluster::{NetworkStream, NodeServerMessage};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::error::{EngineError, Result};

/// A connection that has not authenticated (cookie handshake) this long after its
/// transport is up (TCP, or TLS after its handshake) is closed.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections waiting to authenticate at once; connections beyond this are closed at
/// once.
pub const MAX_UNAUTHENTICATED: usize = 256;

/// TLS for the listener: the acceptor and the handshake timeout.
pub type ListenerTls = (TlsAcceptor, Duration);

/// The coordinator's public listener. Stops accepting when dropped.
pub struct ClusterListener {
    task: tokio::task::JoinHandle<()>,
}

impl ClusterListener {
    /// Binds `addr` and starts accepting connections for `node` (TLS first when `tls`
    /// is given).
    pub async fn bind(
        addr: SocketAddr,
        node: ActorRef<NodeServerMessage>,
        tls: Option<ListenerTls>,
    ) -> Result<ClusterListener> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| EngineError::Cluster(format!("cannot listen on {addr}: {e}")))?;
        let gate = Arc::new(AuthGate::default());
        node.cast(NodeServerMessage::SubscribeToEvents {
            id: "probeflow-auth-gate".into(),
            subscription: Box::new(AuthEvents(gate.clone())),
        })
        .map_err(|e| EngineError::Cluster(format!("cannot watch the node's sessions: {e}")))?;
        let task = tokio::spawn(accept_loop(listener, node, tls, gate));
        Ok(ClusterListener { task })
    }
}

impl Drop for ClusterListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection waiting to authenticate.
struct Waiter {
    session: Option<ActorRef<NodeSessionMessage>>,
    settled: Option<oneshot::Sender<()>>,
}

/// The connections waiting to authenticate, by peer address.
#[derive(Default)]
struct AuthGate {
    waiting: Mutex<HashMap<String, Waiter>>,
}

impl AuthGate {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expect(&self, peer: SocketAddr) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiting().insert(
            peer.to_string(),
            Waiter {
                session: None,
                settled: Some(tx),
            },
        );
        rx
    }

    /// The peer authenticated or its session ended.
    fn settle(&self, peer: &str) {
        if let Some(mut w) = self.waiting().remove(peer) {
            if let Some(tx) = w.settled.take() {
                let _ = tx.send(());
            }
        }
    }

    /// Gives up on `peer`: its session, if one was opened, is stopped.
    fn close(&self, peer: SocketAddr) -> bool {
        match self.waiting().remove(&peer.to_string()) {
            Some(Waiter {
                session: Some(session),
                ..
            }) => {
                session.stop(Some("not authenticated in time".into()));
                true
            }
            _ => false,
        }
    }
}

struct AuthEvents(Arc<AuthGate>);

impl ractor_cluster::NodeEventSubscription for AuthEvents {
    fn node_session_opened(&self, ses: NodeServerSessionInformation) {
        if let Some(w) = self.0.waiting().get_mut(&ses.peer_addr) {
            w.session = Some(ses.actor);
        }
    }

    fn node_session_disconnected(&self, ses: NodeServerSessionInformation) {
        self.0.settle(&ses.peer_addr);
    }

    fn node_session_authenticated(&self, ses: NodeServerSessionInformation) {
        self.0.settle(&ses.peer_addr);
    }
}

async fn accept_loop(
    listener: TcpListener,
    node: ActorRef<NodeServerMessage>,
    tls: Option<ListenerTls>,
    gate: Arc<AuthGate>,
) {
    let unauthenticated = Arc::new(Semaphore::new(MAX_UNAUTHENTICATED));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Typically out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = unauthenticated.clone().try_acquire_owned() else {
            tracing::warn!(
                %peer,
                "refused a connection: {MAX_UNAUTHENTICATED} unauthenticated connections already open"
            );
            continue;
        };
        let node = node.clone();
        let tls = tls.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let _permit = permit;
            admit(stream, peer, &node, tls, &gate).await;
        });
    }
}

/// One connection: TLS (if on), then the node's cookie handshake within [`AUTH_TIMEOUT`].
async fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    node: &ActorRef<NodeServerMessage>,
    tls: Option<ListenerTls>,
    gate: &AuthGate,
) {
    let local = match stream.set_nodelay(true).and_then(|()| stream.local_addr()) {
        Ok(local) => local,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "dropped a connection");
            return;
        }
    };
    let stream = match tls {
        None => NetworkStream::Raw {
            peer_addr: peer,
            local_addr: local,
            stream,
        },
        Some((acceptor, handshake_timeout)) => {
            match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    tracing::debug!(%peer, "TLS handshake done");
                    NetworkStream::TlsServer {
                        peer_addr: peer,
                        local_addr: local,
                        stream,
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(
                        %peer,
                        error = %e,
                        "TLS handshake failed; connection refused{}",
                        crate::tls::not_tls_hint(&e)
                    );
                    return;
                }
                Err(_) => {
                    tracing::warn!(
                        %peer,
                        "TLS handshake timed out after {handshake_timeout:?}; connection closed"
                    );
                    return;
                }
            }
        }
    };
    let settled = gate.expect(peer);
    let opened = NodeServerMessage::ConnectionOpened {
        stream: Box::new(stream),
        is_server: true,
    };
    if node.cast(opened).is_err() {
        tracing::debug!(%peer, "the node is gone; connection dropped");
        gate.settle(&peer.to_string());
        return;
    }
    if tokio::time::timeout(AUTH_TIMEOUT, settled).await.is_err() && gate.close(peer) {
        tracing::warn!(
            %peer,
            "not authenticated within {AUTH_TIMEOUT:?}; connection closed (a different cookie, or not a probeflow worker)"
        );
    }
}
