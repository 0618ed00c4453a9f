//! A warm process's stdin: where its requests are written, shared by the
//! call that owns the process and, in a pipelined pool, the call written
//! behind it (see [`super::pipeline`]).
//!
//! Each request is written whole under a lock, so two calls' lines never
//! mix. The input counts the bytes written, and where each request starts,
//! so that after the process ended the worker can tell whether it had read
//! a given request: the pipe still holds what nobody read (`FIONREAD`),
//! and requests are read in the order they were written.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::Mutex;

use super::request_line::Request;

/// A process's stdin, and what was written to it.
#[derive(Debug)]
pub struct Input {
    stdin: Mutex<ChildStdin>,
    /// The pipe's write end, for `FIONREAD`; open as long as `stdin` is.
    fd: RawFd,
    /// Bytes of the requests written so far.
    written: AtomicU64,
    /// Requests written and not yet answered; shared with the reader of
    /// the process's answers, which takes one off per answer line.
    outstanding: Arc<AtomicU64>,
}

/// Where a request starts in the stream of bytes written to a process's
/// stdin.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    start: u64,
}

impl Input {
    /// The input of a process whose stdin is `stdin`; `outstanding` is
    /// shared with its answers' reader.
    pub fn new(stdin: ChildStdin, outstanding: Arc<AtomicU64>) -> Self {
        Input {
            fd: stdin.as_raw_fd(),
            stdin: Mutex::new(stdin),
            written: AtomicU64::new(0),
            outstanding,
        }
    }

    /// Writes `request` whole (waiting for a write under way to end first)
    /// and counts it outstanding; returns where it starts.
    ///
    /// # Errors
    /// The pipe cannot be written (the process closed its stdin or ended).
    pub async fn send(&self, request: &Request<'_>) -> std::io::Result<Sent> {
        let mut stdin = self.stdin.lock().await;
        // Before the write: a quick answer must find its request counted.
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        let start = self.written.load(Ordering::SeqCst);
        let written = match request.write_to(&mut *stdin).await {
            Ok(bytes) => stdin.flush().await.map(|()| bytes),
            Err(e) => Err(e),
        };
        match written {
            Ok(bytes) => {
                self.written.fetch_add(bytes as u64, Ordering::SeqCst);
                Ok(Sent { start })
            }
            Err(e) => {
                self.outstanding.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Whether the process read any of the request `sent`: some of its
    /// bytes are no longer in the pipe. Meant for a process that has
    /// ended (a live one may read on). When the pipe cannot be asked, it
    /// is taken as read (the job may have started).
    pub fn was_read(&self, sent: Sent) -> bool {
        match unread_bytes(self.fd) {
            Some(unread) => {
                let read = (self.written.load(Ordering::SeqCst)).saturating_sub(unread as u64);
                read > sent.start
            }
            None => true,
        }
    }
}

/// Bytes written to a pipe and not read yet (`FIONREAD`, which Linux
/// answers on either end of a pipe).
fn unread_bytes(fd: RawFd) -> Option<usize> {
    let mut n: nix::libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at
    // `n`; the caller keeps the descriptor open.
    let r = unsafe { nix::libc::ioctl(fd, nix::libc::FIONREAD, &mut n) };
    (r == 0).then(|| usize::try_from(n).unwrap_or(0))
}
