//! The worker: Laravel's `Worker::daemon`, one job flowing
//! fetch → run handler → settle.
//!
//! - [`options`]: `queue:work`'s flags;
//! - [`fetch`]: reserve the next job, queues in priority order;
//! - [`process`]: decide what happens to a reserved job (Laravel's
//!   `Worker::process` rules: max attempts, retryUntil, maxExceptions,
//!   timeouts, backoff) while its handler runs;
//! - [`lease`]: keep the reservation alive while the handler runs;
//! - [`settle`]: carry out the decision in Redis and the failed store;
//! - [`stop`]: the stop conditions and their exit codes;
//! - [`daemon`]: the loop that ties them together.

pub mod backoff;
pub mod daemon;
pub mod fetch;
pub mod lease;
pub mod options;
pub mod process;
pub mod settle;
pub mod stop;

use crate::cache::CacheStore;
use crate::failed::FailedJobStore;
use crate::handler::Router;
use crate::output::Reporter;
use crate::queue::RedisQueue;

pub use daemon::Daemon;
pub use options::WorkerOptions;
pub use stop::StopReason;

/// What every job task needs, shared read-only between them.
pub struct Services {
    /// The queue connection.
    pub queue: RedisQueue,
    /// The queue connection's name (`redis`).
    pub connection: String,
    /// Restart signal and maxExceptions counters.
    pub cache: CacheStore,
    /// Where failed jobs are recorded.
    pub failed: FailedJobStore,
    /// displayName → handler.
    pub router: Router,
    /// Per-job output lines.
    pub reporter: Reporter,
    /// The worker's flags.
    pub options: WorkerOptions,
    /// The app's `storage/framework/down`: while it exists the worker takes
    /// no jobs (maintenance mode). `None` with `--force` or no app path.
    pub down_file: Option<std::path::PathBuf>,
    /// Turns true when the drain deadline passes: jobs still running are
    /// abandoned (their handlers killed) and released.
    pub hand_back: tokio::sync::watch::Receiver<bool>,
    /// The Laravel version whose exception classes and wording are recorded.
    pub laravel: crate::exception::LaravelVersion,
    /// Counters and readiness for the metrics endpoint.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}
