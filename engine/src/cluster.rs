//! Cluster mode plumbing shared by the coordinator and the `worker` binary.
//!
//! Every process runs a `ractor_cluster` node. The coordinator's node listens on
//! `[run] listen`; a worker's node dials it (`worker --join host:port`). Nodes
//! authenticate each other with the shared cookie ([`load_cookie`]) before any message
//! passes. The coordinator actor joins the process group [`COORDINATOR_GROUP`]; once a
//! worker's node session is up, the group's member on that worker's node is a remote
//! actor to which the worker actors send their [`crate::worker::actor::CoordinatorMsg`]s.
//!
//! With TLS ([`crate::tls`]) every connection is mutually authenticated by certificate
//! before the cookie handshake runs inside it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorRef};
use ractor_cluster::node::NodeConnectionMode;
use ractor_cluster::{IncomingEncryptionMode, NodeServer, NodeServerMessage};

use crate::error::{EngineError, Result};
use crate::listener::ClusterListener;
use crate::messages::CoordinatorMsg;
use crate::preauth::CookieKey;
use crate::tls::ClusterTls;

/// The process group the coordinator actor joins.
pub const COORDINATOR_GROUP: &str = "probeflow.coordinator";
/// The cookie itself.
pub const COOKIE_ENV: &str = "PROBEFLOW_COOKIE";
/// A file holding the cookie (e.g. a mounted Kubernetes secret).
pub const COOKIE_FILE_ENV: &str = "PROBEFLOW_COOKIE_FILE";
/// Shortest accepted cookie: 32 characters (128 bits as hex, `openssl rand -hex 16`).
pub const MIN_COOKIE_CHARS: usize = 32;

fn cluster(what: impl Into<String>) -> EngineError {
    EngineError::Cluster(what.into())
}

/// The shared secret: from `file` if given, else the file named by
/// `PROBEFLOW_COOKIE_FILE`, else `PROBEFLOW_COOKIE`. Never from a job file or a flag
/// value (it would show in `ps` and in logs).
pub fn load_cookie(file: Option<&Path>) -> Result<String> {
    let from_env_file = std::env::var_os(COOKIE_FILE_ENV).map(std::path::PathBuf::from);
    let cookie = match file.map(Path::to_path_buf).or(from_env_file) {
        Some(path) => std::fs::read_to_string(&path).map_err(|e| {
            cluster(format!(
                "cannot read the cookie file {}: {e}",
                path.display()
            ))
        })?,
        None => std::env::var(COOKIE_ENV).map_err(|_| {
            cluster(format!(
                "no cookie: set {COOKIE_ENV} (e.g. `export {COOKIE_ENV}=$(openssl rand -hex 16)`) \
                 or {COOKIE_FILE_ENV}, the same on every node"
            ))
        })?,
    };
    let cookie = cookie.trim().to_string();
    if cookie.chars().count() < MIN_COOKIE_CHARS || cookie.chars().any(char::is_whitespace) {
        return Err(cluster(format!(
            "the cookie must be at least {MIN_COOKIE_CHARS} characters without spaces \
             (128 random bits: `openssl rand -hex 16`)"
        )));
    }
    Ok(cookie)
}

/// A transport node name for a worker: its name plus this process's id and start time.
pub fn unique_node_name(worker: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{worker}~{}-{nanos:08x}", std::process::id())
}

/// The node name of a node session's peer (`name@host` on the wire).
pub fn peer_node(full: &str) -> &str {
    full.rsplit_once('@').map_or(full, |(node, _)| node)
}

/// Starts this process's node, listening on `listen` (port 0: any free port). With
/// `tls`, the listener requires TLS with a client certificate signed by the CA.
async fn start_node(
    name: &str,
    listen: SocketAddr,
    cookie: String,
    tls: Option<&ClusterTls>,
) -> Result<ActorRef<NodeServerMessage>> {
    let server = NodeServer::new(
        listen.port(),
        cookie,
        name.to_string(),
        listen.ip().to_string(),
        tls.map(|t| IncomingEncryptionMode::Tls(t.acceptor())),
        Some(NodeConnectionMode::Isolated),
    )
    .with_listen_addr(listen.ip());
    let (node, _handle) = Actor::spawn(None, server, ())
        .await
        .map_err(|e| cluster(format!("cannot start the node on {listen}: {e}")))?;
    Ok(node)
}

/// A node (the coordinator's, or a worker's) whose public socket is `listen`.
///
/// A [`ClusterListener`] serves `listen` (TLS first when `tls` is given): every
/// connection must authenticate within [`crate::listener::AUTH_TIMEOUT`], and only so
/// many may be waiting to. The node's own listener, which has neither limit, is confined
/// to an ephemeral loopback port that nothing dials. Keep the returned listener alive
/// as long as the node should accept connections.
pub async fn start_listening_node(
    name: &str,
    listen: SocketAddr,
    cookie: String,
    tls: Option<(&ClusterTls, Duration)>,
) -> Result<(ActorRef<NodeServerMessage>, ClusterListener)> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let key = CookieKey::new(&cookie);
    let node = start_node(name, loopback, cookie, tls.map(|(t, _)| t)).await?;
    let tls = tls.map(|(t, timeout)| (t.acceptor(), timeout));
    match ClusterListener::bind(listen, node.clone(), key, tls).await {
        Ok(listener) => Ok((node, listener)),
        Err(e) => {
            node.stop(None);
            Err(e)
        }
    }
}

/// Dials `join` (plain TCP), proves the cookie ([`crate::preauth`]) and hands the
/// connection to `node`, which then runs ractor_cluster's handshake; all within
/// `timeout`.
pub async fn connect(
    node: &ActorRef<NodeServerMessage>,
    join: &str,
    key: &CookieKey,
    timeout: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut stream, peer, local) = dial(join, timeout).await?;
    prove(&mut stream, join, key, deadline)
        .await
        .map_err(|e| e.or_closed("it requires TLS: --tls-cert/--tls-key/--tls-ca"))?;
    node.cast(NodeServerMessage::ConnectionOpened {
        stream: Box::new(ractor_cluster::NetworkStream::Raw {
            peer_addr: peer,
            local_addr: local,
            stream,
        }),
        is_server: false,
    })
    .map_err(|e| cluster(format!("the node is gone: {e}")))
}

/// A TCP connection to `join`, made within `timeout`, with its peer's and its own
/// address.
pub(crate) async fn dial(
    join: &str,
    timeout: Duration,
) -> Result<(tokio::net::TcpStream, SocketAddr, SocketAddr)> {
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(join))
        .await
        .map_err(|_| cluster(format!("connecting to {join} timed out")))?
        .map_err(|e| cluster(format!("cannot connect to {join}: {e}")))?;
    let addresses = stream
        .set_nodelay(true)
        .and_then(|()| Ok((stream.peer_addr()?, stream.local_addr()?)));
    let (peer, local) = addresses.map_err(|e| cluster(format!("{join}: {e}")))?;
    Ok((stream, peer, local))
}

/// The dialer's cookie proof to `join`, by `deadline`.
pub(crate) async fn prove<S>(
    stream: &mut S,
    join: &str,
    key: &CookieKey,
    deadline: tokio::time::Instant,
) -> std::result::Result<(), ProofFailed>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    crate::preauth::dialer(stream, key, left)
        .await
        .map_err(|refused| ProofFailed {
            join: join.to_string(),
            refused,
        })
}

/// A dialer's failed cookie proof, said as a worker's operator needs it.
#[derive(Debug)]
pub(crate) struct ProofFailed {
    join: String,
    refused: crate::preauth::Refused,
}

impl ProofFailed {
    /// The error, where the listener closed without a word suggesting `likely` (what a
    /// plain worker at a TLS coordinator, or a refused certificate, looks like).
    pub(crate) fn or_closed(self, likely: &str) -> EngineError {
        use crate::preauth::Refused;
        let join = &self.join;
        cluster(match self.refused {
            Refused::WrongCookie => format!(
                "{join} holds a different cookie: set the same {COOKIE_ENV} (or \
                 {COOKIE_FILE_ENV}) on every node"
            ),
            Refused::NotProbeflow => {
                format!("{join} is not a probeflow coordinator of this release")
            }
            Refused::Io(e) => format!(
                "{join} closed the connection before the cookie proof ({e}): most likely \
                 {likely}"
            ),
            Refused::TimedOut(t) => format!("{join} gave no cookie proof within {t:?}"),
        })
    }
}

/// Tells the coordinator actor when a worker node's session ends (the fast path of
/// failure detection; leases renewed by heartbeats catch what the transport never
/// reports, such as a hung or partitioned worker).
pub struct NodeLossNotifier(pub ActorRef<CoordinatorMsg>);

impl ractor_cluster::NodeEventSubscription for NodeLossNotifier {
    fn node_session_opened(&self, _: ractor_cluster::node::NodeServerSessionInformation) {}

    fn node_session_authenticated(&self, _: ractor_cluster::node::NodeServerSessionInformation) {}

    fn node_session_disconnected(&self, ses: ractor_cluster::node::NodeServerSessionInformation) {
        if let Some(peer) = ses.peer_name {
            let node = peer_node(&peer.name).to_string();
            let _ = self.0.cast(CoordinatorMsg::NodeLost { node });
        }
    }
}

/// Waits until the coordinator actor is visible (its group member, local or remote).
/// Gives up early when `node` has no session left (e.g. the peer that accepted the
/// connection was a coordinator going down).
pub async fn find_coordinator(
    node: &ActorRef<NodeServerMessage>,
    timeout: Duration,
) -> Option<ActorRef<CoordinatorMsg>> {
    let start = Instant::now();
    loop {
        let members = ractor::pg::get_members(&COORDINATOR_GROUP.to_string());
        if let Some(cell) = members.into_iter().next() {
            return Some(ActorRef::from(cell));
        }
        if start.elapsed() >= timeout {
            return None;
        }
        if start.elapsed() > Duration::from_millis(500) {
            let sessions = ractor::call_t!(node, NodeServerMessage::GetSessions, 1000);
            if sessions.is_ok_and(|s| s.is_empty()) {
                return None;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_missing_cookies_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "secret\n").unwrap();
        let err = load_cookie(Some(&short)).unwrap_err().to_string();
        assert!(err.contains("at least 32 characters"), "{err}");
        let good = dir.path().join("good");
        std::fs::write(&good, "0123456789abcdef0123456789abcdef\n").unwrap();
        assert_eq!(
            load_cookie(Some(&good)).unwrap(),
            "0123456789abcdef0123456789abcdef"
        );
        let missing = dir.path().join("missing");
        let err = load_cookie(Some(&missing)).unwrap_err().to_string();
        assert!(err.contains("cannot read the cookie file"), "{err}");
    }
}
