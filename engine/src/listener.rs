//! The coordinator's public socket: every connection must authenticate by one deadline,
//! and only so many may be waiting to, in all and from one address.
//!
//! ```text
//! accept ─► permit? (≤ MAX_UNAUTHENTICATED waiting, ≤ MAX_UNAUTHENTICATED_PER_IP from
//!        │           its address; else closed at once)
//!        └► task: [TLS handshake] ─► cookie proof (crate::preauth: fixed-size reads)
//!                 ─► node session (ractor_cluster's cookie handshake, then its frames)
//!                 └► all of it within AUTH_TIMEOUT of the accept, else closed
//! ```
//!
//! Each accepted connection holds one permit and one task until its node session has
//! authenticated or it is closed, so a flood of silent sockets can neither block the
//! accept loop nor grow without bound: before its peer has proved the cookie, a
//! connection holds its task, a TLS session (when on: two 16 KiB records and their
//! state) and 72 bytes of reads, so [`MAX_UNAUTHENTICATED`] of them hold a few MiB;
//! ractor_cluster's frames (up to 16 MiB) are read only from a peer that has. The node's own listener (ractor_cluster's, which runs
//! handshakes inline and never times out a silent peer) is bound to an ephemeral
//! loopback port that nothing dials.
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
use crate::preauth::CookieKey;

/// A connection that has not authenticated (the cookie proof and ractor_cluster's
/// handshake) this long after it was accepted (after its TLS handshake's timeout, when
/// TLS is on) is closed: one deadline, however the peer paces its bytes.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections waiting to authenticate at once; connections beyond this are closed at
/// once.
pub const MAX_UNAUTHENTICATED: usize = 64;

/// Connections from one address waiting to authenticate at once: one host cannot take
/// every place (workers of one host join one at a time).
pub const MAX_UNAUTHENTICATED_PER_IP: usize = 16;

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
        key: CookieKey,
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
        let task = tokio::spawn(accept_loop(listener, Admission { node, key, tls }, gate));
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

/// What admitting a connection takes: the node it goes to, the cookie's key, TLS.
#[derive(Clone)]
struct Admission {
    node: ActorRef<NodeServerMessage>,
    key: CookieKey,
    tls: Option<ListenerTls>,
}

/// The unauthenticated connections from each address.
#[derive(Default)]
struct PerAddress(Mutex<HashMap<std::net::IpAddr, usize>>);

impl PerAddress {
    /// One more from `ip`, unless it has [`MAX_UNAUTHENTICATED_PER_IP`].
    fn enter(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<AddressPlace> {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_default();
        if *n >= MAX_UNAUTHENTICATED_PER_IP {
            return None;
        }
        *n += 1;
        Some(AddressPlace(self.clone(), ip))
    }
}

/// A place of one address, given back when dropped.
struct AddressPlace(Arc<PerAddress>, std::net::IpAddr);

impl Drop for AddressPlace {
    fn drop(&mut self) {
        let mut counts = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.1);
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, admission: Admission, gate: Arc<AuthGate>) {
    let unauthenticated = Arc::new(Semaphore::new(MAX_UNAUTHENTICATED));
    let per_address = Arc::new(PerAddress::default());
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
        let Some(place) = per_address.enter(peer.ip()) else {
            tracing::warn!(
                %peer,
                "refused a connection: {MAX_UNAUTHENTICATED_PER_IP} unauthenticated connections \
                 from its address already open"
            );
            continue;
        };
        let admission = admission.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let _held = (permit, place);
            // TLS has its own timeout, within the one deadline.
            let handshake = admission.tls.as_ref().map_or(Duration::ZERO, |t| t.1);
            let deadline = tokio::time::Instant::now() + handshake + AUTH_TIMEOUT;
            admit(stream, peer, &admission, deadline, &gate).await;
        });
    }
}

/// One connection: TLS (if on), the cookie proof, then the node's cookie handshake, all
/// by `deadline`.
async fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    admission: &Admission,
    deadline: tokio::time::Instant,
    gate: &AuthGate,
) {
    let Some(stream) = secured(stream, peer, admission, deadline).await else {
        return;
    };
    let settled = gate.expect(peer);
    let opened = NodeServerMessage::ConnectionOpened {
        stream: Box::new(stream),
        is_server: true,
    };
    if admission.node.cast(opened).is_err() {
        tracing::debug!(%peer, "the node is gone; connection dropped");
        gate.settle(&peer.to_string());
        return;
    }
    if tokio::time::timeout_at(deadline, settled).await.is_err() && gate.close(peer) {
        tracing::warn!(
            %peer,
            "not authenticated within {AUTH_TIMEOUT:?} of connecting; connection closed"
        );
    }
}

/// The connection through TLS (when on) and with the cookie proved, by `deadline`, as
/// the node takes it; `None` (logged) when the peer failed either.
async fn secured(
    stream: TcpStream,
    peer: SocketAddr,
    admission: &Admission,
    deadline: tokio::time::Instant,
) -> Option<NetworkStream> {
    let local = match stream.set_nodelay(true).and_then(|()| stream.local_addr()) {
        Ok(local) => local,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "dropped a connection");
            return None;
        }
    };
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let key = &admission.key;
    let Some((acceptor, handshake_timeout)) = &admission.tls else {
        let mut stream = stream;
        return proved(&mut stream, peer, key, left())
            .await
            .then_some(NetworkStream::Raw {
                peer_addr: peer,
                local_addr: local,
                stream,
            });
    };
    let within = (*handshake_timeout).min(left());
    match tokio::time::timeout(within, acceptor.accept(stream)).await {
        Ok(Ok(mut stream)) => {
            tracing::debug!(%peer, "TLS handshake done");
            proved(&mut stream, peer, key, left())
                .await
                .then_some(NetworkStream::TlsServer {
                    peer_addr: peer,
                    local_addr: local,
                    stream,
                })
        }
        Ok(Err(e)) => {
            tracing::warn!(
                %peer,
                error = %e,
                "TLS handshake failed; connection refused{}",
                crate::tls::not_tls_hint(&e)
            );
            None
        }
        Err(_) => {
            tracing::warn!(
                %peer,
                "TLS handshake timed out after {within:?}; connection closed"
            );
            None
        }
    }
}

/// Whether the peer proved the cookie ([`crate::preauth`]) within `within`; a refusal
/// is logged (a peer that merely closed, at debug level).
async fn proved<S>(stream: &mut S, peer: SocketAddr, key: &CookieKey, within: Duration) -> bool
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match crate::preauth::listener(stream, key, within).await {
        Ok(()) => true,
        Err(crate::preauth::Refused::Io(e)) => {
            tracing::debug!(%peer, error = %e, "a connection closed before proving the cookie");
            false
        }
        Err(crate::preauth::Refused::TimedOut(_)) => {
            tracing::warn!(
                %peer,
                "not authenticated within {AUTH_TIMEOUT:?} of connecting; connection closed"
            );
            false
        }
        Err(e) => {
            tracing::warn!(%peer, "refused a connection: {e}");
            false
        }
    }
}
