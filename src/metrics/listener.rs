//! The HTTP listener of `[metrics] listen`, bounded so that no client can
//! use it to take the worker's descriptors or hold its connections open:
//!
//! - a request's head must arrive within `header_timeout` (5 s) of the
//!   listener starting to wait for it (a fresh connection, or a kept-alive
//!   one between requests);
//! - a connection that reads and writes nothing for `idle_timeout` (30 s)
//!   is closed (a client that stops reading its answer, or trickles a
//!   body);
//! - at most `max_connections` (32) are served at once, and never more
//!   than a quarter of the process's open-file limit (`RLIMIT_NOFILE`), so
//!   handlers and Redis keep the rest; a connection over the cap is
//!   accepted and closed at once.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{Metrics, answer};
use crate::log_limit::{DEFAULT_INTERVAL, RepeatLimiter};

/// The listener's bounds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time allowed for a request's head.
    pub header_timeout: Duration,
    /// Time a connection may stay without a byte read or written.
    pub idle_timeout: Duration,
    /// Connections served at once, before the open-file limit applies.
    pub max_connections: usize,
}

/// Default `header_timeout`: 5 s.
const HEADER_TIMEOUT: u64 = 5;
/// Default `idle_timeout`: 30 s.
const IDLE_TIMEOUT: u64 = 30;
/// Default `max_connections`: 32.
const MAX_CONNECTIONS: usize = 32;

impl Limits {
    /// The limits `[metrics]` sets (`header_timeout` and `idle_timeout` in
    /// seconds, `max_connections`; `None`: the default).
    ///
    /// # Errors
    /// A zero timeout or cap, naming the key (zero would refuse every
    /// scrape; the key is never silently changed).
    pub fn new(
        header_timeout: Option<u64>,
        idle_timeout: Option<u64>,
        max_connections: Option<usize>,
    ) -> anyhow::Result<Limits> {
        let seconds = |value: Option<u64>, default: u64, key: &str| match value {
            Some(0) => anyhow::bail!("[metrics] {key} = 0: expected at least 1 (seconds)"),
            value => Ok(Duration::from_secs(value.unwrap_or(default))),
        };
        if max_connections == Some(0) {
            anyhow::bail!("[metrics] max_connections = 0: expected at least 1");
        }
        Ok(Limits {
            header_timeout: seconds(header_timeout, HEADER_TIMEOUT, "header_timeout")?,
            idle_timeout: seconds(idle_timeout, IDLE_TIMEOUT, "idle_timeout")?,
            max_connections: max_connections.unwrap_or(MAX_CONNECTIONS),
        })
    }

    /// The cap in force: `max_connections`, at most a quarter of the soft
    /// open-file limit `nofile` (`None`: unlimited), and at least 1.
    pub fn cap(&self, nofile: Option<u64>) -> usize {
        let quarter = nofile.map_or(usize::MAX, |n| usize::try_from(n / 4).unwrap_or(usize::MAX));
        self.max_connections.min(quarter).max(1)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(HEADER_TIMEOUT),
            idle_timeout: Duration::from_secs(IDLE_TIMEOUT),
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The soft `RLIMIT_NOFILE` of this process; `None` when unlimited or
/// unknown.
pub fn open_file_limit() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft != RLIM_INFINITY => Some(soft),
        _ => None,
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` within
/// `limits`, `cap` connections at once, until the process ends. Errors
/// are logged (repeats summarised) and never stop the worker.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, limits: Limits, cap: usize) {
    let slots = Arc::new(Semaphore::new(cap));
    let mut errors = RepeatLimiter::new(DEFAULT_INTERVAL);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                errors.log(tracing::Level::WARN, ACCEPT_FAILED, &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                errors.log_resolved(OVER_CAP);
                let metrics = Arc::clone(&metrics);
                tokio::spawn(serve_connection(stream, metrics, limits, slot));
            }
            Err(_) => errors.log(tracing::Level::WARN, OVER_CAP, &cap),
        }
    }
}

/// Log site: `accept` failed (descriptors exhausted, ...).
const ACCEPT_FAILED: &str = "metrics endpoint: cannot accept a connection";
/// Log site: a connection refused because the cap is reached.
const OVER_CAP: &str =
    "metrics endpoint: connection closed at once, [metrics] max_connections reached";

/// Serves one connection; `_slot` is given back when it ends.
async fn serve_connection(
    stream: TcpStream,
    metrics: Arc<Metrics>,
    limits: Limits,
    _slot: OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let metrics = Arc::clone(&metrics);
        async move { Ok::<_, Infallible>(answer(&request, &metrics)) }
    });
    let watched = Watched::new(stream);
    let last = Arc::clone(&watched.last);
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(watched), service);
    tokio::pin!(connection);
    loop {
        let deadline = *lock(&last) + limits.idle_timeout;
        tokio::select! {
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!("metrics endpoint: connection ended: {e}");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                if *lock(&last) + limits.idle_timeout <= Instant::now() {
                    tracing::debug!("metrics endpoint: idle connection closed");
                    return;
                }
            }
        }
    }
}

fn lock(last: &Mutex<Instant>) -> std::sync::MutexGuard<'_, Instant> {
    last.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A stream that notes when it last read or wrote a byte.
struct Watched {
    inner: TcpStream,
    last: Arc<Mutex<Instant>>,
}

impl Watched {
    fn new(inner: TcpStream) -> Self {
        Watched {
            inner,
            last: Arc::new(Mutex::new(Instant::now())),
        }
    }

    fn note<T>(&self, poll: Poll<std::io::Result<T>>, moved: bool) -> Poll<std::io::Result<T>> {
        if moved && matches!(poll, Poll::Ready(Ok(_))) {
            *lock(&self.last) = Instant::now();
        }
        poll
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        let moved = buf.filled().len() > before;
        this.note(poll, moved)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        let moved = matches!(poll, Poll::Ready(Ok(n)) if n > 0);
        this.note(poll, moved)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_keeps_three_quarters_of_the_descriptors() {
        let limits = Limits::default();
        assert_eq!(limits.max_connections, 32);
        assert_eq!(limits.cap(None), 32);
        assert_eq!(limits.cap(Some(1024)), 32);
        assert_eq!(limits.cap(Some(64)), 16);
        assert_eq!(limits.cap(Some(2)), 1);
    }

    #[test]
    fn zero_is_refused_naming_the_key() {
        let e = Limits::new(None, Some(0), None).unwrap_err().to_string();
        assert!(e.contains("[metrics] idle_timeout = 0"), "{e}");
    }
}
