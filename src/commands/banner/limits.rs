//! The start line's limits and flags: what `queue:work`'s options (and
//! ours, `--concurrency`, `[worker] balance`) set for this worker, in
//! words and in seconds.

use serde::Serialize;

use crate::worker::WorkerOptions;

/// The limits a worker runs under, as its options set them.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Limits {
    /// `--tries` (0: unlimited), for jobs whose payload sets no `maxTries`.
    pub tries: u64,
    /// `--timeout`, seconds, for jobs that set none (0: no limit).
    pub timeout: u64,
    /// `--memory`, MB of resident memory (0: not checked).
    pub memory_mb: u64,
    /// `--sleep` in words (`3 s`): the pause when no job was found.
    pub sleep: String,
    /// `--rest` in words (`0 s`): the pause after each job.
    pub rest: String,
    /// `--backoff`, seconds per attempt.
    pub backoff: Vec<u64>,
    /// `--max-jobs` (0: unlimited).
    pub max_jobs: u64,
    /// `--max-time`, seconds (0: unlimited).
    pub max_time: u64,
    /// The stop and run flags given: `--once`, `--stop-when-empty`,
    /// `--stop-when-empty-for=N`, `--force`.
    pub flags: Vec<String>,
    /// `[worker] balance` in words (`auto, time, 8 slots`), or `off`.
    pub balance: String,
}

/// A duration in words: `3 s`, `0.5 s`.
fn words(d: std::time::Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

impl Limits {
    /// The limits of `options`.
    pub fn of(options: &WorkerOptions) -> Limits {
        let mut flags = Vec::new();
        if options.once {
            flags.push("--once".to_string());
        }
        if options.stop_when_empty {
            flags.push("--stop-when-empty".to_string());
        }
        if !options.stop_when_empty_for.is_zero() {
            let seconds = options.stop_when_empty_for.as_secs();
            flags.push(format!("--stop-when-empty-for={seconds}"));
        }
        if options.force {
            flags.push("--force".to_string());
        }
        let balance = options.balance.as_ref().map_or("off".to_string(), |p| {
            let mode = format!("{:?}", p.mode).to_lowercase();
            let strategy = format!("{:?}", p.strategy).to_lowercase();
            format!("{mode}, {strategy}, {} slots", p.total)
        });
        Limits {
            tries: options.tries,
            timeout: options.timeout,
            memory_mb: options.memory_mb,
            sleep: words(options.sleep),
            rest: words(options.rest),
            backoff: options.backoff.clone(),
            max_jobs: options.max_jobs,
            max_time: options.max_time.as_secs(),
            flags,
            balance,
        }
    }

    /// The limits in one line: `tries 3, timeout 60 s, memory 128 MB,
    /// sleep 3 s, backoff 0 s`, then what is set of the rest
    /// (`rest`, `max-jobs`, `max-time`, the balance, the flags).
    pub fn text(&self, concurrency: usize) -> String {
        let unlimited = |n: u64, unit: &str| match n {
            0 => "unlimited".to_string(),
            n => format!("{n}{unit}"),
        };
        let backoff: Vec<String> = self.backoff.iter().map(|s| format!("{s} s")).collect();
        let mut parts = vec![
            format!("concurrency {concurrency}"),
            format!("tries {}", unlimited(self.tries, "")),
            format!("timeout {}", unlimited(self.timeout, " s")),
            format!("memory {}", unlimited(self.memory_mb, " MB")),
            format!("sleep {}", self.sleep),
            format!("backoff {}", backoff.join(",")),
        ];
        if self.rest != "0 s" {
            parts.push(format!("rest {}", self.rest));
        }
        if self.max_jobs > 0 {
            parts.push(format!("max-jobs {}", self.max_jobs));
        }
        if self.max_time > 0 {
            parts.push(format!("max-time {} s", self.max_time));
        }
        if self.balance != "off" {
            parts.push(format!("balance {}", self.balance));
        }
        parts.extend(self.flags.iter().cloned());
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_read_as_queue_work_s() {
        let limits = Limits::of(&WorkerOptions::default());
        assert_eq!(
            limits.text(1),
            "concurrency 1, tries 1, timeout 60 s, memory 128 MB, sleep 3 s, backoff 0 s"
        );
    }

    #[test]
    fn what_is_set_is_added_and_zero_is_unlimited() {
        let options = WorkerOptions {
            tries: 0,
            max_jobs: 500,
            stop_when_empty: true,
            sleep: std::time::Duration::from_millis(500),
            backoff: vec![10, 30],
            ..WorkerOptions::default()
        };
        assert_eq!(
            Limits::of(&options).text(4),
            "concurrency 4, tries unlimited, timeout 60 s, memory 128 MB, sleep 0.5 s, \
             backoff 10 s,30 s, max-jobs 500, --stop-when-empty"
        );
    }
}
