//! The job lines bound for standard output, written together.
//!
//! Rust's standard output writes each line as it comes: one `write` call per
//! line, and, for a supervisor reading the pipe, one wake-up each. Under load
//! the job tasks that end in one pass of the (single-threaded) runtime each
//! add a line here, and a writer task that runs after them sends them in one
//! call. Lines stay whole and in order: they are appended and written under
//! one lock. The buffer is bounded ([`WRITE_AT`]): past it, the line that
//! crosses it writes the whole buffer at once. Whatever is left when the
//! last holder goes (the worker's exit) is written then.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Bytes after which the buffer is written at once, not at the writer's
/// next turn.
pub const WRITE_AT: usize = 64 * 1024;

/// Lines waiting for the writer task.
#[derive(Debug)]
pub struct Lines {
    pending: Mutex<Vec<u8>>,
    /// Wakes the writer task (held apart, so that the task keeps the
    /// buffer alive only while it writes).
    queued: Arc<Notify>,
    /// No writer task (no runtime): each line is written as it comes.
    at_once: bool,
}

impl Lines {
    /// A buffer and, inside a Tokio runtime, its writer task; outside one
    /// (a unit test), each line is written at once.
    pub fn stdout() -> Arc<Self> {
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let lines = Arc::new(Lines {
            pending: Mutex::default(),
            queued: Arc::default(),
            at_once: !in_runtime,
        });
        if in_runtime {
            let queued = Arc::clone(&lines.queued);
            tokio::spawn(write_when_queued(Arc::downgrade(&lines), queued));
        }
        lines
    }

    /// Adds `line` and a newline; writes the buffer at once past
    /// [`WRITE_AT`], else wakes the writer.
    pub fn push(&self, line: &str) {
        let mut pending = self.pending();
        let was_empty = pending.is_empty();
        pending.extend_from_slice(line.as_bytes());
        pending.push(b'\n');
        if self.at_once || pending.len() >= WRITE_AT {
            write_out(&mut pending);
        } else if was_empty {
            self.queued.notify_one();
        }
    }

    /// Writes whatever is buffered now.
    pub fn flush(&self) {
        write_out(&mut self.pending());
    }

    fn pending(&self) -> MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Writes `pending` to standard output and empties it. A write error (the
/// reader went away) drops the lines: a job's line is never worth stopping
/// the worker for.
fn write_out(pending: &mut Vec<u8>) {
    if pending.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(pending).and_then(|()| out.flush());
    pending.clear();
}

/// The writer: each time lines are queued, lets the other ready tasks run
/// first (their lines join the same write), then writes them all. Ends
/// when the buffer is gone.
async fn write_when_queued(lines: std::sync::Weak<Lines>, queued: Arc<Notify>) {
    loop {
        queued.notified().await;
        tokio::task::yield_now().await;
        match lines.upgrade() {
            Some(lines) => lines.flush(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_wait_for_the_writer_and_a_full_buffer_goes_at_once() {
        let lines = Lines::stdout();
        lines.push("first");
        lines.push("second");
        assert_eq!(lines.pending().as_slice(), b"first\nsecond\n");
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(lines.pending().is_empty(), "the writer wrote them");
        let long = "x".repeat(WRITE_AT);
        lines.push(&long);
        assert!(
            lines.pending().is_empty(),
            "past the bound: written at once"
        );
    }
}
