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
    /// `--stop-when-empty`: stop at the first poll that finds nothing (and,
    /// exit status 1, after 5 polls in a row that cannot reach the queue).
    pub stop_when_empty: bool,
    /// `--stop-when-empty-for` (Laravel 13.10+): stop at an empty poll once
    /// no job has run for this long, counted from the end of the last job
    /// (or the start); zero = off.
    pub stop_when_empty_for: Duration,
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
    /// `[worker] balance`: slots per queue (Horizon's `balance`); `None`
    /// (`off`, the default) polls the queues in priority order, as
    /// `queue:work`.
    pub balance: Option<super::balance::Policy>,
}

impl WorkerOptions {
    /// Jobs in flight at once: `max_processes` when balanced, else
    /// `--concurrency` (at least 1).
    pub fn slots(&self) -> usize {
        self.balance
            .as_ref()
            .map_or(self.concurrency, |policy| policy.total)
            .max(1)
    }
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            name: "default".into(),
            queues: vec!["default".into()],
            once: false,
            stop_when_empty: false,
            stop_when_empty_for: Duration::ZERO,
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
            balance: None,
        }
    }
}

/// The largest number of seconds any duration option takes (`--sleep`,
/// `--rest`, `retry_after`, `block_for`): 2,147,483,647, the largest PHP
/// integer on 32-bit builds, 68 years. Laravel sets no bound; past this a
/// timer or a reservation score (now + `retry_after`, signed 64-bit) would
/// overflow, so a larger value is refused as a typo rather than run wrong.
pub const MAX_SECONDS: u64 = i32::MAX as u64;

/// The most processes or slots any count takes: `--concurrency`'s bound,
/// shared by `[worker] max_processes` / `min_processes` (and their flags)
/// and a persistent handler's `processes` / `min_processes`. Far above
/// what one machine runs; past it a typo would start processes (or fill
/// memory with slots) until the system refuses.
pub const MAX_PROCESSES: usize = 10_000;

/// The largest `--memory`, in MB: 16 TiB, far above any machine, and small
/// enough that the limit in bytes cannot overflow.
pub const MAX_MEMORY_MB: u64 = 16 * 1024 * 1024;

/// `--sleep` / `--rest`: seconds, fractions allowed, from 0 to
/// [`MAX_SECONDS`].
///
/// # Errors
/// A negative, infinite, NaN or too large value, naming `--{flag}`.
pub fn wait_seconds(flag: &str, value: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        value.is_finite() && (0.0..=MAX_SECONDS as f64).contains(&value),
        "--{flag} must be a number of seconds from 0 to {MAX_SECONDS}, not {value}"
    );
    Ok(Duration::from_secs_f64(value))
}

/// `--memory` in MB: 0 turns the check off (as Laravel 13); otherwise a
/// positive number up to [`MAX_MEMORY_MB`]. Laravel would read a negative
/// value as "always exceeded" and stop after every job; here it is refused.
///
/// # Errors
/// A negative or too large value, naming `--memory`.
pub fn memory_mb(value: i64) -> anyhow::Result<u64> {
    u64::try_from(value)
        .ok()
        .filter(|&mb| mb <= MAX_MEMORY_MB)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--memory must be 0 (no limit) or a number of MB up to {MAX_MEMORY_MB}, not {value}"
            )
        })
}

/// `--backoff` (a comma list, as `calculateBackoff` reads it) and the
/// deprecated `--delay`, which Laravel uses instead when it is larger than
/// every entry: seconds, each at most [`MAX_SECONDS`].
///
/// # Errors
/// An entry that is not a whole number of seconds from 0 to
/// [`MAX_SECONDS`] (`-2`, `x`, an empty one), naming the flag.
pub fn backoff_seconds(backoff: &str, delay: u64) -> anyhow::Result<Vec<u64>> {
    // Each entry a whole number of seconds: PHP's (int) would read `-2` as
    // a release into the past and `x` as 0; neither is what was meant.
    if let Some(bad) = backoff
        .split(',')
        .map(str::trim)
        .find(|entry| entry.is_empty() || !entry.bytes().all(|b| b.is_ascii_digit()))
    {
        anyhow::bail!(
            "--backoff entries must be seconds from 0 to {MAX_SECONDS}, not {bad:?} (in {backoff:?})"
        );
    }
    let mut list = crate::queue::payload::parse_backoff(backoff);
    if let Some(&b) = list.iter().find(|&&b| b > MAX_SECONDS) {
        anyhow::bail!("--backoff entries must be seconds from 0 to {MAX_SECONDS}, not {b}");
    }
    anyhow::ensure!(
        delay <= MAX_SECONDS,
        "--delay must be a number of seconds from 0 to {MAX_SECONDS}, not {delay}"
    );
    if delay > 0 && list.iter().all(|&b| b < delay) {
        list = vec![delay];
    }
    Ok(list)
}

/// The queues to work, in priority order: `--queue` split on `,` (not
/// trimmed, as Laravel), else the connection's default queue. An empty
/// `--queue=` means the default, as artisan's `option('queue') ?: default`.
///
/// # Errors
/// An empty name in the list (`--queue=a,,b`, or an empty `[queue] queue` /
/// `REDIS_QUEUE`), which Laravel would poll as the key `queues:` (no job is
/// ever pushed there); the message names the flag or setting it came from.
pub fn queue_list(flag: Option<&str>, default: &str) -> anyhow::Result<Vec<String>> {
    let (list, source) = match flag {
        Some(list) if !list.is_empty() => (list, "--queue"),
        _ => (default, "[queue] queue (REDIS_QUEUE)"),
    };
    let queues: Vec<String> = list.split(',').map(str::to_string).collect();
    anyhow::ensure!(
        queues.iter().all(|q| !q.is_empty()),
        "{source} = {list:?}: every queue name must be non-empty"
    );
    Ok(queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_values_are_refused_with_the_flag_named() {
        assert_eq!(
            wait_seconds("sleep", 0.5).unwrap(),
            Duration::from_millis(500)
        );
        for bad in [1e20, -1.0, f64::NAN, f64::INFINITY] {
            let e = wait_seconds("sleep", bad).unwrap_err().to_string();
            assert!(e.starts_with("--sleep must be"), "{e}");
        }
        assert_eq!(memory_mb(0).unwrap(), 0);
        assert_eq!(memory_mb(128).unwrap(), 128);
        assert!(memory_mb(-1).unwrap_err().to_string().contains("--memory"));
        assert!(memory_mb(i64::MAX).is_err());
        assert_eq!(backoff_seconds("1,5", 0).unwrap(), [1, 5]);
        assert_eq!(
            backoff_seconds("1,5", 9).unwrap(),
            [9],
            "the larger --delay"
        );
        let e = backoff_seconds("1,99999999999", 0).unwrap_err().to_string();
        assert!(e.starts_with("--backoff"), "{e}");
        let e = backoff_seconds("0", u64::MAX).unwrap_err().to_string();
        assert!(e.starts_with("--delay"), "{e}");
    }

    #[test]
    fn queue_lists_follow_artisan() {
        assert_eq!(
            queue_list(Some("high,low"), "default").unwrap(),
            ["high", "low"]
        );
        assert_eq!(queue_list(Some(""), "default").unwrap(), ["default"]);
        // Not trimmed: `" b"` is a queue of its own, as in Laravel.
        assert_eq!(queue_list(Some("a, b"), "default").unwrap(), ["a", " b"]);
        assert_eq!(queue_list(None, "default").unwrap(), ["default"]);
        assert!(
            queue_list(Some("a,,b"), "default")
                .unwrap_err()
                .to_string()
                .contains("--queue")
        );
        assert!(
            queue_list(None, "")
                .unwrap_err()
                .to_string()
                .contains("[queue] queue")
        );
    }
}
