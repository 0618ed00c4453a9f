//! Telling a scheme that does not match the server: `rediss://` against a
//! plain Redis (the TLS handshake waits for an answer that never comes, so
//! each try ran into its time limit: 85 s before start gave up) and
//! `redis://` against a TLS-only port (the server resets the connection).
//!
//! When a connection to one server fails, [`mismatch`] asks the port once,
//! in plain text, `PING`: a plain Redis answers `+PONG` (or an error reply,
//! `-NOAUTH`…); a TLS-only port resets or closes the connection, or answers
//! with a TLS alert record. The answer turns the failure into one that is
//! not retried, with the scheme to use.

use std::time::Duration;

use redis::{ConnectionAddr, ErrorKind, RedisError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the probe may take, connect and answer each.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// What the port said to a plain-text `PING`.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// A Redis reply: the port speaks plain Redis.
    PlainRedis,
    /// A reset, a close, or a TLS alert: the port wants TLS.
    NotPlain,
}

/// `error`, made permanent and given the scheme to use, when connecting to
/// `addr` failed because the scheme does not match what the server speaks;
/// `error` itself otherwise (other addresses, or the probe is unsure).
pub async fn mismatch(addr: &ConnectionAddr, error: RedisError) -> RedisError {
    let (host, port, tls) = match addr {
        ConnectionAddr::Tcp(host, port) => (host, *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host, *port, true),
        _ => return error,
    };
    let hint = match (tls, probe(host, port).await) {
        (true, Some(Heard::PlainRedis)) => {
            "the server answers plain Redis, not TLS: use redis:// (REDIS_SCHEME=tcp)"
        }
        (false, Some(Heard::NotPlain)) => {
            "the server does not answer plain Redis; if it accepts TLS only, use rediss:// \
             (REDIS_SCHEME=tls)"
        }
        _ => return error,
    };
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "the URL's scheme does not match the server",
        format!("{error}; {hint}"),
    ))
}

/// For a TLS connection to `addr` still not made after a second: resolves
/// to the error to give when the port answers plain Redis (the handshake
/// would only run into its time limit, try after try); never otherwise.
pub async fn plain_under_tls(addr: &ConnectionAddr) -> RedisError {
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let ConnectionAddr::TcpTls { host, port, .. } = addr
        && probe(host, *port).await == Some(Heard::PlainRedis)
    {
        let waited = RedisError::from((ErrorKind::Io, "no TLS handshake after a second"));
        return mismatch(addr, waited).await;
    }
    std::future::pending().await
}

/// Sends `PING` in plain text to `host:port` and classifies the answer;
/// `None` when the port cannot be reached or says nothing in time.
async fn probe(host: &str, port: u16) -> Option<Heard> {
    let connect = TcpStream::connect((host, port));
    let mut stream = tokio::time::timeout(PROBE_LIMIT, connect)
        .await
        .ok()?
        .ok()?;
    stream.write_all(b"PING\r\n").await.ok()?;
    let mut first = [0u8; 1];
    match tokio::time::timeout(PROBE_LIMIT, stream.read(&mut first)).await {
        Ok(Ok(1)) if matches!(first[0], b'+' | b'-') => Some(Heard::PlainRedis),
        // A TLS alert record (0x15), a close (0 bytes) or a reset.
        Ok(Ok(1)) if first[0] == 0x15 => Some(Heard::NotPlain),
        Ok(Ok(0)) | Ok(Err(_)) => Some(Heard::NotPlain),
        _ => None,
    }
}
