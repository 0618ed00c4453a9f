//! The worker: Laravel's `Worker::daemon`, one job flowing
//! fetch → run handler → settle.
//!
//! - [`options`]: `queue:work`'s flags;
//! - [`fetch`]: reserve the next job, queues in priority order;
//! - [`process`]: decide what happens to a reserved job (Laravel's
//!   `Worker::process` rules: max attempts, retryUntil, maxExceptions,
//!   timeouts, backoff) while its handler runs;
//! - [`lease`]: keep the reservation alive while the handler runs;
//! - [`settle`]: carry out the decision in the queue and the failed store;
//! - [`slot`]: a job's `--concurrency` slot, given back when it is settled
//!   or, for a plain delete or release, as that write is sent;
//! - [`starts`]: the reserved jobs not yet handed to their handler;
//! - [`task`]: one job's task, run handler → settle → settled event;
//! - [`verdict`]: what becomes of a job (delete, release, fail, hand back);
//! - [`outcome`]: what became of it, verdict and settle together, in the
//!   one set of words output and metrics report;
//! - [`stop`]: the stop conditions and their exit codes;
//! - [`tripped`]: what a handler's trip does to the worker;
//! - [`balance`]: slots per queue (`[worker] balance`): the decision, its
//!   settings, the live slots and the rounds that move them;
//! - [`progress`]: the loop's counters for the stop conditions;
//! - [`cache_signals`]: `queue:restart` and `queue:pause` as last read;
//! - [`drain`]: the end of the loop, waiting for the jobs in flight up to
//!   the drain deadline;
//! - [`events`]: the job events the loop emits to its listeners (output,
//!   metrics), which it never calls by name;
//! - [`decoupled`]: the adapter a listener that does I/O runs behind (a
//!   bounded channel, drops counted), so it never slows the loop;
//! - [`daemon`]: the loop that ties them together.

pub mod assignment;
pub mod backoff;
pub mod balance;
pub mod cache_signals;
pub mod daemon;
pub mod decoupled;
pub mod drain;
pub mod events;
pub mod fetch;
pub mod finish;
pub mod invocation;
pub mod lease;
pub mod options;
pub mod outcome;
pub mod process;
pub mod progress;
pub mod received;
pub mod settle;
pub mod should_run;
pub mod slot;
pub mod starts;
pub mod stop;
pub mod task;
pub mod tripped;
pub mod unrecorded;
pub mod verdict;

use crate::cache::CacheStore;
use crate::failed::FailedJobStore;
use crate::handler::Router;
use crate::queue::Queue;

#[cfg(test)]
mod loop_tests;

pub use daemon::Daemon;
pub use events::{JobEvents, Listeners};
pub use options::WorkerOptions;
pub use outcome::Outcome;
pub use settle::Settled;
pub use stop::StopReason;
pub use verdict::Verdict;

/// What every job task needs, shared read-only between them.
pub struct Services {
    /// The queue connection.
    pub queue: Queue,
    /// The queue connection's name (`redis`).
    pub connection: String,
    /// Restart signal and maxExceptions counters.
    pub cache: CacheStore,
    /// Where failed jobs are recorded.
    pub failed: FailedJobStore,
    /// displayName → handler.
    pub router: Router,
    /// Who hears the job events (output lines, metrics).
    pub events: Listeners,
    /// The worker's flags.
    pub options: WorkerOptions,
    /// The app's `storage/framework/down`: while it exists the worker takes
    /// no jobs (maintenance mode). `None` with `--force` or no app path.
    pub down_file: Option<std::path::PathBuf>,
    /// Turns true when the drain deadline passes: jobs still running are
    /// abandoned (their handlers killed) and released, the attempt counted.
    pub drain_deadline: tokio::sync::watch::Receiver<bool>,
    /// What to do with a handler whose reservation is lost.
    pub on_lease_lost: lease::OnLeaseLost,
    /// The Laravel version whose exception classes and wording are recorded.
    pub laravel: crate::exception::LaravelVersion,
    /// What a handler's trip does (`[worker] on_handler_tripped`).
    pub on_tripped: tripped::TripPolicy,
    /// Unique locks and batches of jobs Laravel's code does not run.
    pub bookkeeping: crate::whole::Bookkeeping,
}
