//! What Pulse's `Queues` and `SlowJobs` recorders record for one settled
//! job (laravel/pulse 1.x): the job's `processing` count when it started,
//! then `processed`, `released` or `failed`, and a `slow_job` when it ran
//! for at least the threshold.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::entry::{Aggregation, Entry};
use super::pattern::PhpPattern;
use super::sample;
use crate::worker::decoupled::JobFacts;
use crate::worker::{Settled, Verdict};

/// The recorders' settings (`pulse.recorders.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorders {
    /// The queue connection's name (`redis`), the first half of each
    /// queue count's key.
    pub connection: String,
    /// `Queues` is on (`PULSE_QUEUES_ENABLED`, default true).
    pub queues: bool,
    /// `Queues`' `sample_rate` (`PULSE_QUEUES_SAMPLE_RATE`, default 1).
    pub queues_sample_rate: f64,
    /// `SlowJobs` is on (`PULSE_SLOW_JOBS_ENABLED`, default true).
    pub slow_jobs: bool,
    /// `SlowJobs`' `sample_rate` (`PULSE_SLOW_JOBS_SAMPLE_RATE`, default 1).
    pub slow_jobs_sample_rate: f64,
    /// `SlowJobs`' `threshold`, milliseconds (`PULSE_SLOW_JOBS_THRESHOLD`,
    /// default 1000): a threshold map's `default`.
    pub slow_jobs_threshold_ms: u64,
    /// A threshold map's other entries, in the map's order: the first
    /// whose pattern matches the job's name gives its threshold (ms).
    pub slow_jobs_thresholds: Vec<(PhpPattern, u64)>,
    /// `Queues`' `ignore`: jobs whose name one of these matches are not
    /// counted.
    pub queues_ignore: Vec<PhpPattern>,
    /// `SlowJobs`' `ignore`: jobs whose name one of these matches are
    /// never slow jobs.
    pub slow_jobs_ignore: Vec<PhpPattern>,
}

impl Recorders {
    /// The slow-job threshold of the job `name`, milliseconds, as Pulse's
    /// `Thresholds::threshold` picks it.
    pub fn threshold_ms(&self, name: &str) -> u64 {
        self.slow_jobs_thresholds
            .iter()
            .find(|(pattern, _)| pattern.matches(name))
            .map_or(self.slow_jobs_threshold_ms, |(_, ms)| *ms)
    }
}

/// Pulse's `Ignores::shouldIgnore`: one of `patterns` matches `name`.
fn ignored(patterns: &[PhpPattern], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

/// Which event Laravel's worker fires at the end of a run, as Pulse names
/// it; `None`: the job did not run here (handed back uncounted, its lease
/// lost), and Laravel's worker fires nothing Pulse counts.
fn outcome(verdict: &Verdict, settled: Settled) -> Option<&'static str> {
    if matches!(settled, Settled::LeaseLost) {
        return None;
    }
    match verdict {
        // `JobProcessed` follows a run whatever the job did, a release
        // it asked for itself included.
        Verdict::Delete
        | Verdict::Release {
            exception: None, ..
        } => Some("processed"),
        Verdict::Release {
            exception: Some(_), ..
        } => Some("released"),
        Verdict::Fail { .. } => Some("failed"),
        Verdict::HandBack { .. } | Verdict::LeaseLost => None,
    }
}

/// The entries for `job`, settled `at` with `verdict` after running for
/// `took`, sampled as Pulse samples (the queue counts by the job's uuid,
/// the slow job at random).
pub fn entries(
    recorders: &Recorders,
    job: &JobFacts,
    verdict: &Verdict,
    settled: Settled,
    took: Duration,
    at: SystemTime,
) -> Vec<Entry> {
    let Some(outcome) = outcome(verdict, settled) else {
        return Vec::new();
    };
    let ended = unix_seconds(at);
    let started = unix_seconds(at.checked_sub(took).unwrap_or(at));
    let mut out = Vec::new();
    let uuid = job.id.as_deref().unwrap_or("");
    let name = job.display_name.as_deref().unwrap_or_default();
    if recorders.queues
        && !ignored(&recorders.queues_ignore, name)
        && sample::keeps_deterministically(uuid, recorders.queues_sample_rate)
    {
        let key = format!("{}:{}", recorders.connection, job.queue.name);
        for (timestamp, kind) in [(started, "processing"), (ended, outcome)] {
            out.push(Entry {
                timestamp,
                kind,
                key: key.clone(),
                value: None,
                aggregations: vec![Aggregation::Count],
                only_buckets: true,
            });
        }
    }
    let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
    if recorders.slow_jobs
        && !ignored(&recorders.slow_jobs_ignore, name)
        && ms >= recorders.threshold_ms(name)
        && sample::keeps_at_random(recorders.slow_jobs_sample_rate)
    {
        out.push(Entry {
            timestamp: ended,
            kind: "slow_job",
            key: name.to_string(),
            value: Some(i64::try_from(ms).unwrap_or(i64::MAX)),
            aggregations: vec![Aggregation::Max, Aggregation::Count],
            only_buckets: false,
        });
    }
    out
}

/// Whole UNIX seconds of `at` (0 before the epoch).
fn unix_seconds(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::exception::JobException;
    use crate::queue::QueueHandle;

    fn recorders() -> Recorders {
        Recorders {
            connection: "redis".into(),
            queues: true,
            queues_sample_rate: 1.0,
            slow_jobs: true,
            slow_jobs_sample_rate: 1.0,
            slow_jobs_threshold_ms: 1000,
            slow_jobs_thresholds: Vec::new(),
            queues_ignore: Vec::new(),
            slow_jobs_ignore: Vec::new(),
        }
    }

    fn job() -> JobFacts {
        JobFacts {
            queue: Arc::new(QueueHandle::named("emails")),
            reserved: bytes::Bytes::new(),
            id: Some("4f1b".into()),
            display_name: Some("App\\Jobs\\Send".into()),
            large: false,
            horizon_fields: true,
        }
    }

    fn kinds(entries: &[Entry]) -> Vec<(&str, i64, &str)> {
        entries
            .iter()
            .map(|e| (e.kind, e.timestamp, e.key.as_str()))
            .collect()
    }

    #[test]
    fn each_verdict_counts_as_laravels_event() {
        let at = UNIX_EPOCH + Duration::from_secs(1000);
        let took = Duration::from_millis(2500);
        let e =
            |verdict: Verdict, settled| entries(&recorders(), &job(), &verdict, settled, took, at);
        let done = e(Verdict::Delete, Settled::Done);
        assert_eq!(
            kinds(&done),
            [
                ("processing", 997, "redis:emails"),
                ("processed", 1000, "redis:emails"),
                ("slow_job", 1000, "App\\Jobs\\Send"),
            ]
        );
        assert_eq!(done[2].value, Some(2500));
        let exception = JobException::new("RuntimeException", "boom");
        let released = Verdict::Release {
            delay: 5,
            exception: Some(exception.clone()),
        };
        assert_eq!(
            e(released, Settled::Released { delay: 5 })[1].kind,
            "released"
        );
        let own_release = Verdict::Release {
            delay: 5,
            exception: None,
        };
        assert_eq!(
            e(own_release, Settled::Released { delay: 5 })[1].kind,
            "processed"
        );
        let failed = Verdict::Fail {
            exception,
            failed_hook: false,
        };
        assert_eq!(
            e(failed, Settled::Failed { recorded: true })[1].kind,
            "failed"
        );
        let back = Verdict::HandBack {
            delay: 0,
            tripped: true,
        };
        assert!(e(back, Settled::Released { delay: 0 }).is_empty());
        assert!(e(Verdict::Delete, Settled::LeaseLost).is_empty());
    }

    #[test]
    fn under_the_threshold_no_slow_job_and_sampling_at_zero_nothing() {
        let at = UNIX_EPOCH + Duration::from_secs(1000);
        let quick = entries(
            &recorders(),
            &job(),
            &Verdict::Delete,
            Settled::Done,
            Duration::from_millis(999),
            at,
        );
        assert_eq!(quick.len(), 2);
        let none = Recorders {
            queues_sample_rate: 0.0,
            slow_jobs_sample_rate: 0.0,
            ..recorders()
        };
        let slow = Duration::from_secs(5);
        assert!(entries(&none, &job(), &Verdict::Delete, Settled::Done, slow, at).is_empty());
    }

    #[test]
    fn a_threshold_map_and_ignore_lists_apply_per_job_name() {
        let at = UNIX_EPOCH + Duration::from_secs(1000);
        let p = |text: &str| PhpPattern::parse(text).unwrap();
        let r = Recorders {
            slow_jobs_threshold_ms: 0,
            slow_jobs_thresholds: vec![(p(r"#^App\\Jobs\\Send$#"), 5000), (p("#Send#"), 1)],
            ..recorders()
        };
        assert_eq!(r.threshold_ms(r"App\Jobs\Send"), 5000, "the first match");
        assert_eq!(r.threshold_ms(r"App\Jobs\SendLater"), 1);
        assert_eq!(r.threshold_ms(r"App\Jobs\Other"), 0, "the default");
        let took = Duration::from_millis(2500);
        let e = |r: &Recorders| entries(r, &job(), &Verdict::Delete, Settled::Done, took, at);
        assert_eq!(
            e(&r).len(),
            2,
            "2.5 s is under Send's 5 s: counted, not slow"
        );
        let quiet = Recorders {
            queues_ignore: vec![p("/send$/i")],
            ..recorders()
        };
        assert_eq!(kinds(&e(&quiet)), [("slow_job", 1000, r"App\Jobs\Send")]);
        let not_slow = Recorders {
            slow_jobs_ignore: vec![p("#Send#")],
            ..recorders()
        };
        assert_eq!(e(&not_slow).len(), 2);
    }
}
