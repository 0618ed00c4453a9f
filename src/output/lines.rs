//! The job lines bound for standard output, written together.
//!
//! Rust's standard output writes each line as it comes: one `write` call per
//! line, and, for a supervisor reading the pipe, one wake-up each. Here the
//! first line into an empty buffer starts a short wait ([`WRITE_AFTER`]),
//! and a writer task sends every line added meanwhile in one call: under
//! load one call carries the lines of many jobs, and a line is never more
//! than a few milliseconds late. Lines stay whole and in order: they are
//! appended and written under one lock. The buffer is bounded
//! ([`WRITE_AT`]): past it, the line that crosses it writes the whole
//! buffer at once. Whatever is left when the worker stops is written then
//! ([`Lines::flush`], and once more as the last holder goes).

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Bytes after which the buffer is written at once, not at the writer's
/// next turn.
pub const WRITE_AT: usize = 64 * 1024;

/// How long the writer waits after the first line of a batch, so that the
/// lines of the jobs that end meanwhile join the same write.
pub const WRITE_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

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

/// The writer: each time lines are queued, waits [`WRITE_AFTER`] (the lines
/// added meanwhile join the same write), then writes them all. Ends when
/// the buffer is gone.
async fn write_when_queued(lines: std::sync::Weak<Lines>, queued: Arc<Notify>) {
    loop {
        queued.notified().await;
        tokio::time::sleep(WRITE_AFTER).await;
        match lines.upgrade() {
            Some(lines) => lines.flush(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lines_wait_for_the_writer_and_a_full_buffer_goes_at_once() {
        let lines = Lines::stdout();
        lines.push("first");
        lines.push("second");
        assert_eq!(lines.pending().as_slice(), b"first\nsecond\n");
        tokio::time::sleep(WRITE_AFTER / 2).await;
        lines.push("third");
        assert_eq!(
            lines.pending().as_slice(),
            b"first\nsecond\nthird\n",
            "still within the wait"
        );
        tokio::time::sleep(WRITE_AFTER).await;
        assert!(lines.pending().is_empty(), "the writer wrote them");
        let long = "x".repeat(WRITE_AT);
        lines.push(&long);
        assert!(
            lines.pending().is_empty(),
            "past the bound: written at once"
        );
    }
}
