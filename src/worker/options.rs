//! The options of `queue:work` (protocol §6.1), resolved.

use std::time::Duration;

/// How the worker runs; artisan's defaults unless stated.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// `--name` (default `default`).
    pub name: String,
    /// `--queue`, split on `,` in priority order, not trimmed (as Laravel).
    pub queues: Vec<String>,
    /// `--once`: one job (or one `--sleep` when there is none), then stop.
    pub once: bool,
    /// `--stop-when-empty`: stop at the first poll that finds nothing.
    pub stop_when_empty: bool,
    /// `--backoff` (or the larger deprecated `--delay`), seconds per attempt.
    pub backoff: Vec<u64>,
    /// `--max-jobs`: stop after this many reserved jobs; 0 = unlimited.
    pub max_jobs: u64,
    /// `--max-time`: stop after this long; zero = unlimited.
    pub max_time: Duration,
    /// `--force`: run in maintenance mode.
    pub force: bool,
    /// `--memory` in MB of resident memory; 0 disables the check (13.x).
    pub memory_mb: u64,
    /// `--sleep`: pause when no job was found.
    pub sleep: Duration,
    /// `--rest`: pause after each job, in that job's slot.
    pub rest: Duration,
    /// `--timeout` in seconds for jobs that set none; 0 = no limit.
    pub timeout: u64,
    /// `--tries`: attempts allowed when the payload sets no `maxTries`;
    /// 0 = unlimited.
    pub tries: u64,
    /// `--json`: Laravel's JSON event lines instead of artisan lines.
    pub json: bool,
    /// `--concurrency`: jobs in flight at once (ours; default 1).
    pub concurrency: usize,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            name: "default".into(),
            queues: vec!["default".into()],
            once: false,
            stop_when_empty: false,
            backoff: vec![0],
            max_jobs: 0,
            max_time: Duration::ZERO,
            force: false,
            memory_mb: 128,
            sleep: Duration::from_secs(3),
            rest: Duration::ZERO,
            timeout: 60,
            tries: 1,
            json: false,
            concurrency: 1,
        }
    }
}
