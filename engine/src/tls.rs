//! Optional mutual TLS between cluster nodes.
//!
//! Every node holds one certificate (with its key) and trusts one CA. The coordinator
//! accepts only peers that present a certificate signed by that CA; a worker accepts
//! only a coordinator whose certificate is signed by that CA and valid for the name it
//! dialled (or `--tls-server-name`). The cookie is still checked inside the TLS
//! session, so a peer needs both.
//!
//! On the coordinator, [`crate::listener::ClusterListener`] owns the public socket and
//! runs each TLS handshake (with [`ClusterTls::acceptor`]) in a task of its own under a
//! timeout, before the cookie handshake.
//!
//! On a worker, [`connect`] dials the coordinator, runs the handshake under a timeout
//! and hands the stream to the worker's node.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor_cluster::{NetworkStream, NodeServerMessage};
use tokio_rustls::rustls::crypto::{aws_lc_rs, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::error::{EngineError, Result};

/// Where a node's TLS material lives (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate, optionally followed by its intermediate chain.
    pub cert: PathBuf,
    /// The certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificate(s) that sign every node's certificate.
    pub ca: PathBuf,
}

/// Loaded, validated TLS settings of one node: the server side (coordinator) requires
/// client certificates; the client side (worker) presents one.
#[derive(Clone)]
pub struct ClusterTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls").finish_non_exhaustive()
    }
}

fn tls_err(what: impl Into<String>) -> EngineError {
    EngineError::Tls(what.into())
}

fn read_certs(path: &Path, role: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = std::fs::read(path)
        .map_err(|e| tls_err(format!("cannot read the {role} {}: {e}", path.display())))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("{}: not a PEM {role}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_err(format!(
            "{}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" block for the {role})",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let bytes = std::fs::read(path).map_err(|e| {
        tls_err(format!(
            "cannot read the private key {}: {e}",
            path.display()
        ))
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        tls_err(format!(
            "{}: no usable private key in it (PEM PKCS#8, PKCS#1 or SEC1 expected): {e}",
            path.display()
        ))
    })
}

impl ClusterTls {
    /// Reads and checks the files: the key must match the certificate, and the CA file
    /// must hold at least one usable certificate.
    pub fn load(files: &TlsFiles) -> Result<ClusterTls> {
        let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
        let chain = read_certs(&files.cert, "certificate")?;
        let key = read_key(&files.key)?;
        let mut roots = RootCertStore::empty();
        for ca in read_certs(&files.ca, "CA certificate")? {
            roots.add(ca).map_err(|e| {
                tls_err(format!(
                    "{}: not a usable CA certificate: {e}",
                    files.ca.display()
                ))
            })?;
        }
        let roots = Arc::new(roots);
        let mismatch = |e: tokio_rustls::rustls::Error| {
            tls_err(format!(
                "{} and {}: {e} (does the key belong to the certificate?)",
                files.cert.display(),
                files.key.display()
            ))
        };
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| tls_err(format!("{}: {e}", files.ca.display())))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(mismatch)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(mismatch)?;
        Ok(ClusterTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The server side: requires a client certificate signed by the CA.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.server.clone())
    }

    /// The client side: presents this node's certificate, verifies the server's.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector::from(self.client.clone())
    }
}

/// A hint for the most common mistake: a peer that does not speak TLS at all.
pub(crate) fn not_tls_hint(e: &std::io::Error) -> &'static str {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>());
    match rustls_error {
        Some(tokio_rustls::rustls::Error::InvalidMessage(_)) => {
            " (the peer does not speak TLS: a worker without --tls-cert?)"
        }
        Some(tokio_rustls::rustls::Error::NoCertificatesPresented) => {
            " (the peer has no client certificate)"
        }
        _ => "",
    }
}

/// The name a worker checks the coordinator's certificate against: `server_name` if
/// given, else the host part of `join` (`host:port`, `[v6]:port`).
pub fn server_name(join: &str, server_name: Option<&str>) -> Result<ServerName<'static>> {
    let host = match server_name {
        Some(name) => name,
        None => {
            let (host, _port) = join
                .rsplit_once(':')
                .ok_or_else(|| tls_err(format!("{join:?}: expected host:port")))?;
            host.trim_start_matches('[').trim_end_matches(']')
        }
    };
    ServerName::try_from(host.to_string())
        .map_err(|e| tls_err(format!("{host:?} is not a DNS name or IP address: {e}")))
}

/// Dials `join`, runs the TLS handshake (both under `timeout`) and hands the session to
/// `node`, which then runs the cookie handshake.
pub async fn connect(
    node: &ActorRef<NodeServerMessage>,
    join: &str,
    connector: TlsConnector,
    name: ServerName<'static>,
    (key, timeout): (&crate::preauth::CookieKey, Duration),
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let (stream, peer, local) = crate::cluster::dial(join, timeout).await?;
    let mut stream = tokio::time::timeout_at(deadline, connector.connect(name, stream))
        .await
        .map_err(|_| tls_err(format!("the TLS handshake with {join} timed out")))?
        .map_err(|e| tls_err(format!("the TLS handshake with {join} failed: {e}")))?;
    crate::cluster::prove(&mut stream, join, key, deadline)
        .await
        .map_err(|e| e.or_closed("it refused this worker's certificate: see its log"))?;
    node.cast(NodeServerMessage::ConnectionOpened {
        stream: Box::new(NetworkStream::TlsClient {
            peer_addr: peer,
            local_addr: local,
            stream,
        }),
        is_server: false,
    })
    .map_err(|e| EngineError::Cluster(format!("the node is gone: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            ca: dir.join("ca.pem"),
        }
    }

    #[test]
    fn missing_or_empty_files_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let err = ClusterTls::load(&f).unwrap_err().to_string();
        assert!(
            err.contains("cannot read the certificate") && err.contains("node.pem"),
            "{err}"
        );
        std::fs::write(&f.cert, "not pem at all\n").unwrap();
        let err = ClusterTls::load(&f).unwrap_err().to_string();
        assert!(
            err.contains("node.pem") && err.contains("no certificate"),
            "{err}"
        );
        std::fs::write(
            &f.cert,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = ClusterTls::load(&f).unwrap_err().to_string();
        assert!(err.contains("cannot read the private key"), "{err}");
        std::fs::write(
            &f.key,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = ClusterTls::load(&f).unwrap_err().to_string();
        assert!(
            err.contains("node.key") && err.contains("no usable private key"),
            "{err}"
        );
    }

    #[test]
    fn the_server_name_comes_from_the_join_address_unless_given() {
        assert_eq!(
            server_name("coord.example:7077", None).unwrap(),
            ServerName::try_from("coord.example").unwrap()
        );
        assert_eq!(
            server_name("10.0.0.5:7077", None).unwrap(),
            ServerName::try_from("10.0.0.5").unwrap()
        );
        assert_eq!(
            server_name("[::1]:7077", None).unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            server_name("10.0.0.5:7077", Some("coordinator")).unwrap(),
            ServerName::try_from("coordinator").unwrap()
        );
        assert!(server_name("bad name!:1", None).is_err());
    }
}
