//! Prometheus metrics and health endpoints (`[metrics] listen`).
//!
//! | path       | answer                                                      |
//! |------------|-------------------------------------------------------------|
//! | `/metrics` | OpenMetrics text (below)                                    |
//! | `/healthz` | 200 while the worker process runs its loop                  |
//! | `/readyz`  | 200 when the last reservation attempt reached the queue, no handler is tripped and the worker is not stopping; 503 otherwise, naming the tripped handlers |
//!
//! Metrics, all prefixed `laravel_worker_`:
//! - `jobs_total{queue, outcome}`: settled jobs; `outcome` is `done`,
//!   `released` (asked by the handler), `released_after_exception` (an
//!   exception, a timeout, or the drain deadline passing), `handed_back`
//!   (no handler here: returned uncounted), `failed` or `lease_lost` (the
//!   reservation was lost and the handler stopped);
//! - `job_duration_seconds{queue}`: from reservation to settlement;
//! - `jobs_in_flight`: jobs reserved and not yet settled;
//! - `reserve_errors_total`: polls that failed to reach the queue;
//! - `queue_*`: the watched queues' backlog, for autoscalers (see
//!   [`backlog`]);
//! - `queue_slots{queue}`: a balanced worker's slots per queue
//!   (`[worker] balance`), as the last round left them;
//! - `handler_trips_total{handler}`: trips of a handler's breaker (the
//!   first trip and each failed trial), `handler` its `match` pattern;
//! - `pool_*{handler}`: the persistent handlers' warm processes (alive,
//!   busy, idle, size; see [`pools`]).
//! - `jobs_migrated_total{queue, from}`: jobs the migrate script moved to a
//!   ready list, `from` `delayed` (due) or `reserved` (reclaimed after
//!   `retry_after`);
//! - `events_dropped_total{listener}`: events a listener that runs behind
//!   a bounded channel ([`crate::worker::decoupled`]) missed because it
//!   fell behind (`horizon`).

pub mod backlog;
pub mod listener;
pub mod pools;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::handler::breaker::Trip;
use crate::queue::ReservedJob;
use crate::queue::migrated::Migrated;

use crate::worker::balance::Share;
use crate::worker::{JobEvents, Outcome, Settled, StopReason, Verdict};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    queue: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandlerLabels {
    handler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MigratedLabels {
    queue: String,
    from: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

/// The worker's metrics and readiness, shared by the loop, the job tasks
/// and the HTTP endpoint.
pub struct Metrics {
    registry: Registry,
    jobs: Family<JobLabels, Counter>,
    duration: Family<QueueLabels, Histogram>,
    in_flight: Gauge,
    reserve_errors: Counter,
    trips: Family<HandlerLabels, Counter>,
    slots: Family<QueueLabels, Gauge>,
    queue_ok: AtomicBool,
    stopping: AtomicBool,
    /// The handlers tripped now.
    tripped: Mutex<BTreeSet<String>>,
    /// The pools of warm processes, read at each scrape.
    pools: pools::PoolGauges,
    migrated: Family<MigratedLabels, Counter>,
    dropped: Family<ListenerLabels, Counter>,
    /// The drop counters of the decoupled listeners, read at each render.
    watched: Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("laravel_worker");
        let jobs = Family::<JobLabels, Counter>::default();
        // 5 ms to about 20 min, doubling.
        let duration = Family::<QueueLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.005, 2.0, 18))) as fn() -> Histogram,
        );
        let in_flight = Gauge::default();
        let reserve_errors = Counter::default();
        registry.register("jobs", "Settled jobs by queue and outcome", jobs.clone());
        registry.register(
            "job_duration_seconds",
            "Seconds from reservation to settlement",
            duration.clone(),
        );
        registry.register(
            "jobs_in_flight",
            "Jobs reserved and not yet settled",
            in_flight.clone(),
        );
        registry.register(
            "reserve_errors",
            "Polls that failed to reach Redis",
            reserve_errors.clone(),
        );
        let trips = Family::<HandlerLabels, Counter>::default();
        registry.register(
            "handler_trips",
            "Trips of a handler that kept failing on its own",
            trips.clone(),
        );
        let slots = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "queue_slots",
            "Job slots a balanced worker gives the queue now",
            slots.clone(),
        );
        let migrated = Family::<MigratedLabels, Counter>::default();
        registry.register(
            "jobs_migrated",
            "Jobs moved to a ready list: due delayed jobs, expired reservations",
            migrated.clone(),
        );
        let dropped = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "events_dropped",
            "Events a listener behind a bounded channel missed because it fell behind",
            dropped.clone(),
        );
        Metrics {
            migrated,
            dropped,
            watched: Mutex::new(Vec::new()),
            registry,
            slots,
            jobs,
            duration,
            in_flight,
            reserve_errors,
            trips,
            queue_ok: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            tripped: Mutex::new(BTreeSet::new()),
            pools: pools::PoolGauges::default(),
        }
    }

    /// Registers the gauges of `pools` (each with its handler's `match`
    /// pattern), read from them at each scrape.
    pub fn watch_pools(&mut self, pools: Vec<(String, std::sync::Arc<crate::handler::Pool>)>) {
        self.pools = pools::PoolGauges::register(&mut self.registry, pools);
    }

    /// Registers the queue backlog gauges beside the job metrics; the
    /// returned handle's sampler sets them.
    pub fn backlog(&mut self) -> backlog::Backlog {
        backlog::Backlog::register(&mut self.registry)
    }

    /// Whether `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        self.queue_ok.load(Ordering::Relaxed)
            && !self.stopping.load(Ordering::Relaxed)
            && self.tripped_handlers().is_empty()
    }

    /// The handlers tripped now, by `match` pattern.
    pub fn tripped_handlers(&self) -> Vec<String> {
        let tripped = self.tripped.lock().unwrap_or_else(|e| e.into_inner());
        tripped.iter().cloned().collect()
    }

    /// The body of a 503 from `/readyz`: why.
    fn not_ready(&self) -> String {
        let mut text = String::from("not ready\n");
        for handler in self.tripped_handlers() {
            text.push_str(&format!(
                "handler {handler:?} is tripped: it keeps failing on its own (see the log)\n"
            ));
        }
        text
    }

    /// Reports the events `listener` dropped, counted by `counter`, as
    /// `events_dropped_total{listener}`.
    pub fn watch_dropped(&self, listener: &str, counter: Arc<AtomicU64>) {
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        watched.push((listener.to_string(), counter));
        drop(watched);
        drop(self.dropped.get_or_create(&ListenerLabels {
            listener: listener.to_string(),
        }));
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        self.pools.refresh();
        let watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        for (listener, counter) in watched.iter() {
            let total = self.dropped.get_or_create(&ListenerLabels {
                listener: listener.clone(),
            });
            total.inc_by(counter.load(Ordering::Relaxed).saturating_sub(total.get()));
        }
        drop(watched);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The metrics listen to the worker's job events.
impl JobEvents for Metrics {
    fn polled(&self, reached_queue: bool) {
        if !reached_queue {
            self.reserve_errors.inc();
        }
        self.queue_ok.store(reached_queue, Ordering::Relaxed);
    }

    fn reserved(&self, _job: &ReservedJob) {
        self.in_flight.inc();
    }

    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        self.in_flight.dec();
        let outcome = Outcome::of(verdict, settled).label();
        let queue = &job.queue.name;
        self.jobs
            .get_or_create(&JobLabels {
                queue: queue.clone(),
                outcome,
            })
            .inc();
        self.duration
            .get_or_create(&QueueLabels {
                queue: queue.clone(),
            })
            .observe(took.as_secs_f64());
    }

    fn migrated(&self, migrated: &Migrated) {
        self.migrated
            .get_or_create(&MigratedLabels {
                queue: migrated.queue.name.clone(),
                from: migrated.from.as_str(),
            })
            .inc_by(migrated.count);
    }

    fn stopping(&self, _reason: StopReason) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    fn handler_tripped(&self, trip: &Trip) {
        self.trips
            .get_or_create(&HandlerLabels {
                handler: trip.handler.clone(),
            })
            .inc();
        let mut tripped = self.tripped.lock().unwrap_or_else(|e| e.into_inner());
        tripped.insert(trip.handler.clone());
    }

    fn handler_closed(&self, handler: &str) {
        let mut tripped = self.tripped.lock().unwrap_or_else(|e| e.into_inner());
        tripped.remove(handler);
    }

    fn rebalanced(&self, slots: &[Share]) {
        for share in slots {
            let label = QueueLabels {
                queue: share.queue.clone(),
            };
            let value = i64::try_from(share.slots).unwrap_or(i64::MAX);
            self.slots.get_or_create(&label).set(value);
        }
    }
}

fn answer<B>(request: &Request<B>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" if metrics.ready() => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            metrics.not_ready(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> ReservedJob {
        let raw =
            bytes::Bytes::from_static(br#"{"uuid":"u","displayName":"App\\Jobs\\A","attempts":0}"#);
        ReservedJob {
            queue: Arc::new(crate::queue::QueueHandle::named("default")),
            payload: crate::queue::Payload::parse(raw.clone()),
            reservation: crate::queue::job::Reservation::Redis(
                crate::queue::redis_queue::member::RedisReservation::new(
                    Arc::new(crate::queue::redis_queue::keys::QueueKeys::new(
                        "", "default", false,
                    )),
                    &raw,
                    0,
                ),
            ),
            reserved: raw.clone(),
            raw,
            lease: crate::queue::job::Lease::new(Some(90), std::time::Instant::now()),
        }
    }

    #[test]
    fn counts_outcomes_and_readiness() {
        let m = Metrics::new();
        assert!(!m.ready());
        m.polled(true);
        assert!(m.ready());
        let job = job();
        m.reserved(&job);
        m.settled(
            &job,
            &Verdict::Delete,
            Settled::Done,
            Duration::from_millis(20),
        );
        let text = m.render();
        assert!(
            text.contains("laravel_worker_jobs_total{queue=\"default\",outcome=\"done\"} 1"),
            "{text}"
        );
        assert!(text.contains("laravel_worker_jobs_in_flight 0"), "{text}");
        assert!(
            text.contains("laravel_worker_job_duration_seconds_count{queue=\"default\"} 1"),
            "{text}"
        );
        m.polled(false);
        assert!(!m.ready());
        assert!(m.render().contains("laravel_worker_reserve_errors_total 1"));
        m.polled(true);
        m.stopping(StopReason::Restart);
        assert!(!m.ready());
        let dropped = Arc::new(AtomicU64::new(0));
        m.watch_dropped("horizon", Arc::clone(&dropped));
        dropped.store(3, Ordering::Relaxed);
        assert!(
            m.render()
                .contains("laravel_worker_events_dropped_total{listener=\"horizon\"} 3")
        );
    }
}
