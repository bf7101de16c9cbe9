//! The cookie proof every cluster connection makes before ractor_cluster sees a byte
//! of it: fixed-size messages, a deadline, and a constant-time comparison.
//!
//! ractor_cluster's own handshake reads length-prefixed frames of up to 16 MiB from a
//! peer that has proved nothing and compares its digests with `==`. So each side of a
//! connection first proves it holds the cookie here, where nothing is read by a length
//! the peer claims:
//!
//! ```text
//! dialer → listener   MAGIC(8) ‖ client nonce(32)
//! listener → dialer   MAGIC(8) ‖ server nonce(32) ‖ proof(K, "listener", nonces)(32)
//! dialer → listener   proof(K, "dialer", nonces)(32)   (REFUSAL if the listener's is wrong)
//! ```
//!
//! The dialer speaks first, as a TLS client does: a worker without TLS at a TLS
//! coordinator is told at once that it does not speak TLS. The listener's proof goes to
//! anyone who sends a hello; it is a keyed hash of fresh nonces, so it tells nothing of a
//! cookie of 128 random bits (the shortest accepted) and cannot stand in for a dialer's.
//!
//! `K` is derived from the cookie (BLAKE3 `derive_key`), a proof is BLAKE3 keyed by `K`
//! over its role and both nonces, and proofs are compared in constant time
//! (`blake3::Hash`'s equality). Each side reads at most [`MAX_PREAUTH_BYTES`] before
//! the other has proved the cookie; then the stream goes to ractor_cluster, whose
//! handshake (the same cookie) and frames run as before.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The first bytes of every probeflow cluster connection (and its version).
pub const MAGIC: [u8; 8] = *b"PFCLSTR\x01";

/// A hello's length: the magic and a nonce.
const HELLO: usize = MAGIC.len() + 32;

/// What a dialer sends instead of its proof when the listener's proof was wrong (the
/// cookies differ), so that the listener can say why it closes.
pub const REFUSAL: [u8; 32] = *b"probeflow: a different cookie\n\0\0";

/// The most a side reads from its peer before the peer has proved the cookie.
pub const MAX_PREAUTH_BYTES: usize = HELLO + 32;

/// The key both sides derive from the cookie.
#[derive(Clone)]
pub struct CookieKey([u8; 32]);

impl CookieKey {
    pub fn new(cookie: &str) -> CookieKey {
        CookieKey(blake3::derive_key(
            "probeflow cluster cookie proof v1",
            cookie.as_bytes(),
        ))
    }

    fn proof(&self, role: &[u8], server: &[u8; 32], client: &[u8; 32]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(role);
        h.update(server);
        h.update(client);
        h.finalize()
    }
}

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

/// Why a peer was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("not a probeflow cluster peer (its first bytes are not probeflow's)")]
    NotProbeflow,
    #[error("a different cookie")]
    WrongCookie,
    #[error("no proof within {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn nonce() -> std::io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(n)
}

/// The listener's side, all of it within `within`.
pub async fn listener<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    key: &CookieKey,
    within: Duration,
) -> Result<(), Refused> {
    tokio::time::timeout(within, async {
        let mut hello = [0u8; HELLO];
        stream.read_exact(&mut hello).await?;
        let client = nonce_after_magic(&hello)?;
        let server = nonce()?;
        let mut answer = [0u8; HELLO + 32];
        answer[..HELLO].copy_from_slice(&with_magic(&server));
        answer[HELLO..].copy_from_slice(key.proof(b"listener", &server, &client).as_bytes());
        stream.write_all(&answer).await?;
        stream.flush().await?;
        let mut theirs = [0u8; 32];
        stream.read_exact(&mut theirs).await?;
        if theirs == REFUSAL || key.proof(b"dialer", &server, &client) != blake3::Hash::from(theirs)
        {
            return Err(Refused::WrongCookie);
        }
        Ok(())
    })
    .await
    .map_err(|_| Refused::TimedOut(within))?
}

/// The dialer's side, all of it within `within`.
pub async fn dialer<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    key: &CookieKey,
    within: Duration,
) -> Result<(), Refused> {
    tokio::time::timeout(within, async {
        let client = nonce()?;
        stream.write_all(&with_magic(&client)).await?;
        stream.flush().await?;
        let mut answer = [0u8; HELLO + 32];
        stream.read_exact(&mut answer).await?;
        let server = nonce_after_magic(&answer[..HELLO])?;
        let theirs: [u8; 32] = answer[HELLO..]
            .try_into()
            .map_err(|_| Refused::NotProbeflow)?;
        if key.proof(b"listener", &server, &client) != blake3::Hash::from(theirs) {
            // Our proof would tell the listener nothing it needs: say why instead.
            let _ = stream.write_all(&REFUSAL).await;
            let _ = stream.flush().await;
            return Err(Refused::WrongCookie);
        }
        stream
            .write_all(key.proof(b"dialer", &server, &client).as_bytes())
            .await?;
        stream.flush().await?;
        Ok(())
    })
    .await
    .map_err(|_| Refused::TimedOut(within))?
}

fn with_magic(nonce: &[u8; 32]) -> [u8; HELLO] {
    let mut hello = [0u8; HELLO];
    hello[..MAGIC.len()].copy_from_slice(&MAGIC);
    hello[MAGIC.len()..].copy_from_slice(nonce);
    hello
}

/// The nonce of a hello, if it starts with the magic.
fn nonce_after_magic(hello: &[u8]) -> Result<[u8; 32], Refused> {
    if hello.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(Refused::NotProbeflow);
    }
    hello[MAGIC.len()..]
        .try_into()
        .map_err(|_| Refused::NotProbeflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    async fn pair(
        listener_cookie: &str,
        dialer_cookie: &str,
    ) -> (Result<(), Refused>, Result<(), Refused>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (lk, dk) = (
            CookieKey::new(listener_cookie),
            CookieKey::new(dialer_cookie),
        );
        // The listener's side closes its end when it is done, as a connection does.
        let listening = tokio::spawn(async move { listener(&mut a, &lk, SECOND).await });
        let dialed = dialer(&mut b, &dk, SECOND).await;
        (listening.await.unwrap(), dialed)
    }

    #[tokio::test]
    async fn the_same_cookie_passes_both_ways() {
        let (l, d) = pair(
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef",
        )
        .await;
        assert!(l.is_ok() && d.is_ok(), "{l:?} {d:?}");
    }

    #[tokio::test]
    async fn a_different_cookie_is_refused_by_the_listener() {
        let (l, d) = pair(
            "0123456789abcdef0123456789abcdef",
            "fedcba9876543210fedcba9876543210",
        )
        .await;
        assert!(matches!(l, Err(Refused::WrongCookie)), "{l:?}");
        // Both learn why.
        assert!(matches!(d, Err(Refused::WrongCookie)), "{d:?}");
    }

    #[tokio::test]
    async fn garbage_and_silence_are_refused_in_time_reading_a_fixed_size() {
        let key = CookieKey::new("0123456789abcdef0123456789abcdef");
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        // A peer that sends 16 MiB of anything: the listener reads 72 bytes.
        let sender = tokio::spawn(async move {
            let junk = vec![0xffu8; 1 << 20];
            for _ in 0..16 {
                if b.write_all(&junk).await.is_err() {
                    break;
                }
            }
            b
        });
        let refused = listener(&mut a, &key, SECOND).await;
        assert!(matches!(refused, Err(Refused::NotProbeflow)), "{refused:?}");
        drop(a);
        let _ = sender.await;
        // A peer that never answers.
        let (mut a, _silent) = tokio::io::duplex(1024);
        let started = std::time::Instant::now();
        let refused = listener(&mut a, &key, Duration::from_millis(200)).await;
        assert!(matches!(refused, Err(Refused::TimedOut(_))), "{refused:?}");
        assert!(started.elapsed() < SECOND);
    }
}
