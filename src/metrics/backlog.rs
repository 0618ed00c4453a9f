//! Queue backlog gauges, for autoscalers (KEDA, an HPA on Prometheus).
//!
//! The job counters of [`metrics`](crate::metrics) say what this worker
//! did; an autoscaler needs what is waiting. Every `[metrics]
//! backlog_interval` seconds a sampler reads, for each queue the worker
//! watches, one [`QueueSizes`] (one script, no job over the wire, see
//! [`Queue::sizes`]) and sets, labelled `queue`:
//!
//! | gauge | value |
//! |---|---|
//! | `laravel_worker_queue_ready` | jobs in the ready list |
//! | `laravel_worker_queue_delayed` | jobs in `:delayed`, due or not |
//! | `laravel_worker_queue_delayed_due` | of those, the ones already due |
//! | `laravel_worker_queue_reserved` | jobs in `:reserved` (running, or waiting to be reclaimed) |
//! | `laravel_worker_queue_oldest_ready_age_seconds` | now − `createdAt` (or Horizon's `pushedAt`) of the head job; absent when the list is empty or its payload has neither |
//! | `laravel_worker_queue_backlog` | ready + due delayed + reserved: the one number to scale on |
//!
//! The age needs the head job, and Redis can only copy a list element
//! whole (about 100 ms of Redis's time for a 50 MB job). So a head of a
//! MiB or more is read again only when jobs have left the list since, or
//! after one interval per MiB it holds (at most ten minutes); until then
//! its age is the one read last (see [`HeadMemo`]).
//!
//! A sample that fails (Redis down, an ACL without `zcount`) is logged
//! through a [`RepeatLimiter`] and leaves the last values standing; the
//! worker's own loop is never touched.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::log_limit::{DEFAULT_INTERVAL, RepeatLimiter};
use crate::queue::QueueSizes;
use crate::queue::now;
use crate::queue::{HeadAge, Queue, QueueHandle};

/// Log site of a failed sample (see [`RepeatLimiter`]).
const SAMPLE_FAILED: &str = "cannot read the queue sizes for the backlog gauges";

/// A head job of this many bytes or more is read seldom (see [`HeadMemo`]).
const LARGE_HEAD: u64 = 1 << 20;

/// The longest a large head's age is reused without reading it again.
const LONGEST_HOLD: Duration = Duration::from_secs(600);

/// What the last reading of a queue's large head found, so that the next
/// samples can leave it in Redis.
#[derive(Debug, Clone, Copy)]
struct HeadMemo {
    /// The head's `createdAt`/`pushedAt` (UNIX seconds), if it had one.
    pushed: Option<i64>,
    /// The head's size, bytes.
    bytes: u64,
    /// Ready jobs when it was read.
    ready: u64,
    /// When it was read.
    read_at: Instant,
}

impl HeadMemo {
    /// Whether the head read at `self` is still worth reusing at `now`
    /// with `ready` jobs in the list: only for a large head, while no job
    /// has left the list (a pop takes the head), and for one `interval`
    /// per MiB of it, at most [`LONGEST_HOLD`], so that reading it costs
    /// Redis about the same share of its time whatever its size.
    fn holds(&self, ready: u64, interval: Duration, now: Instant) -> bool {
        let mib = u32::try_from(self.bytes / LARGE_HEAD).unwrap_or(u32::MAX);
        let hold = interval.saturating_mul(mib).min(LONGEST_HOLD);
        self.bytes >= LARGE_HEAD
            && ready >= self.ready
            && ready > 0
            && now.saturating_duration_since(self.read_at) < hold
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

type PerQueue = Family<QueueLabel, Gauge>;

/// The backlog gauges of the watched queues, registered in the worker's
/// metrics registry.
#[derive(Clone, Default)]
pub struct Backlog {
    ready: PerQueue,
    delayed: PerQueue,
    delayed_due: PerQueue,
    reserved: PerQueue,
    oldest_age: PerQueue,
    backlog: PerQueue,
}

impl Backlog {
    /// Registers the gauges (all prefixed `laravel_worker_queue_`) in
    /// `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let b = Backlog::default();
        let queue = registry.sub_registry_with_prefix("queue");
        for (name, help, family) in [
            ("ready", "Jobs in the ready list", &b.ready),
            (
                "delayed",
                "Jobs in the delayed zset, due or not",
                &b.delayed,
            ),
            ("delayed_due", "Delayed jobs already due", &b.delayed_due),
            (
                "reserved",
                "Jobs reserved (running, or waiting to be reclaimed)",
                &b.reserved,
            ),
            (
                "oldest_ready_age_seconds",
                "Seconds since the job at the head of the ready list was pushed",
                &b.oldest_age,
            ),
            (
                "backlog",
                "Ready + due delayed + reserved jobs: the number to scale on",
                &b.backlog,
            ),
        ] {
            queue.register(name, help, family.clone());
        }
        b
    }

    /// Sets the gauges of queue `name` from `sizes`, read at `now` (UNIX
    /// seconds).
    fn set(&self, name: &str, sizes: &QueueSizes, now: i64) {
        let label = QueueLabel {
            queue: name.to_string(),
        };
        let gauge = |family: &PerQueue, value: u64| {
            family
                .get_or_create(&label)
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        gauge(&self.ready, sizes.pending);
        gauge(&self.delayed, sizes.delayed);
        gauge(&self.delayed_due, sizes.delayed_due);
        gauge(&self.reserved, sizes.reserved);
        gauge(&self.backlog, sizes.backlog());
        match sizes.oldest_pending.filter(|_| sizes.pending > 0) {
            Some(pushed) => {
                let age = u64::try_from(now.saturating_sub(pushed)).unwrap_or(0);
                gauge(&self.oldest_age, age);
            }
            None => {
                self.oldest_age.remove(&label);
            }
        }
    }

    /// Samples `queues` every `interval` until the process ends.
    pub async fn sample(self, queue: Queue, queues: Vec<Arc<QueueHandle>>, interval: Duration) {
        let mut errors = RepeatLimiter::new(DEFAULT_INTERVAL);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heads = HashMap::new();
        loop {
            tick.tick().await;
            match self
                .sample_once(&queue, &queues, &mut heads, interval)
                .await
            {
                Ok(()) => errors.log_resolved(SAMPLE_FAILED),
                Err(e) => {
                    let at = queue.at();
                    let error = format_args!("{e} (queue {at})");
                    errors.log(tracing::Level::WARN, SAMPLE_FAILED, &error);
                }
            }
        }
    }

    /// Reads every queue's sizes and sets its gauges; a large head found
    /// in `heads` and still holding is not read again.
    async fn sample_once(
        &self,
        queue: &Queue,
        queues: &[Arc<QueueHandle>],
        heads: &mut HashMap<String, HeadMemo>,
        interval: Duration,
    ) -> crate::queue::QueueResult<()> {
        for keys in queues {
            let sizes = read(queue, keys, heads, interval).await?;
            self.set(&keys.name, &sizes, now());
        }
        Ok(())
    }
}

/// `keys`' sizes, its head's age taken from `heads` while that memo holds
/// (the counts are read each time, cheaply), else read and remembered when
/// the head is large.
async fn read(
    queue: &Queue,
    keys: &QueueHandle,
    heads: &mut HashMap<String, HeadMemo>,
    interval: Duration,
) -> crate::queue::QueueResult<QueueSizes> {
    if let Some(memo) = heads.get(&keys.name).copied() {
        let mut sizes = queue.sizes(keys, HeadAge::Skip).await?;
        if memo.holds(sizes.pending, interval, Instant::now()) {
            sizes.oldest_pending = memo.pushed;
            return Ok(sizes);
        }
    }
    let sizes = queue.sizes(keys, HeadAge::Read).await?;
    if sizes.head_bytes >= LARGE_HEAD {
        let memo = HeadMemo {
            pushed: sizes.oldest_pending,
            bytes: sizes.head_bytes,
            ready: sizes.pending,
            read_at: Instant::now(),
        };
        heads.insert(keys.name.clone(), memo);
    } else {
        heads.remove(&keys.name);
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_leaves_out_jobs_delayed_into_the_future() {
        let mut registry = Registry::with_prefix("laravel_worker");
        let b = Backlog::register(&mut registry);
        let sizes = QueueSizes {
            pending: 3,
            delayed: 5,
            delayed_due: 2,
            reserved: 1,
            oldest_pending: Some(1_000),
            head_bytes: 0,
        };
        b.set("default", &sizes, 1_030);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "laravel_worker_queue_ready{queue=\"default\"} 3",
            "laravel_worker_queue_delayed{queue=\"default\"} 5",
            "laravel_worker_queue_delayed_due{queue=\"default\"} 2",
            "laravel_worker_queue_reserved{queue=\"default\"} 1",
            "laravel_worker_queue_backlog{queue=\"default\"} 6",
            "laravel_worker_queue_oldest_ready_age_seconds{queue=\"default\"} 30",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let empty = QueueSizes {
            pending: 0,
            oldest_pending: None,
            ..sizes
        };
        b.set("default", &empty, 1_030);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("oldest_ready_age_seconds{"), "{text}");
    }

    #[test]
    fn a_large_head_is_read_again_after_a_pop_or_one_interval_per_mib() {
        let at = Instant::now();
        let memo = HeadMemo {
            pushed: Some(1_000),
            bytes: 50 * LARGE_HEAD,
            ready: 4,
            read_at: at,
        };
        let second = Duration::from_secs(1);
        assert!(memo.holds(4, second, at + 49 * second));
        assert!(
            memo.holds(9, second, at + 49 * second),
            "pushes keep the head"
        );
        assert!(
            !memo.holds(4, second, at + 50 * second),
            "one interval per MiB"
        );
        assert!(!memo.holds(3, second, at), "a pop takes the head");
        assert!(!memo.holds(0, second, at), "an empty list has no head");
        let hour = Duration::from_secs(3600);
        assert!(
            !memo.holds(4, hour, at + LONGEST_HOLD),
            "ten minutes at most"
        );
        let small = HeadMemo {
            bytes: LARGE_HEAD - 1,
            ..memo
        };
        assert!(
            !small.holds(4, second, at),
            "a small head is read each time"
        );
    }
}
