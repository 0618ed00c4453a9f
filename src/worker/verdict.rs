//! [`Verdict`]: what becomes of a reserved job once its handler is done.
//!
//! [`process`](super::process) decides it, [`settle`](super::settle)
//! carries it out, and the job's [`settled`](super::events::JobEvents::settled)
//! event reports it.

use crate::exception::JobException;

/// What happens to a job once its handler is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It ran: ZREM it.
    Delete,
    /// Back to `:delayed` with the attempt counted, available in `delay`
    /// seconds; `exception` is set when an exception caused it (the
    /// handler's, a timeout, or the drain deadline passing).
    Release {
        /// Seconds.
        delay: u64,
        /// The exception, for a release after one.
        exception: Option<JobException>,
    },
    /// Record it in the failed store, ZREM it, and, when `failed_hook`,
    /// call the handler in failed mode.
    Fail {
        /// What is recorded.
        exception: JobException,
        /// Whether the app's `failed()` hook must still run.
        failed_hook: bool,
    },
    /// Handed back to `:delayed` uncounted: this worker has no handler for
    /// it (`[queue] unmatched = "release"`) or its handler is tripped, so
    /// the attempt it took at reservation is given back. The only
    /// uncounted return.
    HandBack {
        /// Seconds.
        delay: u64,
        /// Its handler is tripped (see [`crate::handler::breaker`]): it did
        /// not run, and artisan's output gets no line for it.
        tripped: bool,
    },
    /// The reservation was lost while the handler ran (a renewal found it
    /// gone, or the queue stayed unreachable past its expiry) and the handler
    /// was stopped (`[worker] on_lease_lost = "kill"`). Nothing is written:
    /// the job belongs to whoever reclaims it.
    LeaseLost,
}
