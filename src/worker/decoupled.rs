//! Running a listener that does I/O without ever slowing the loop.
//!
//! [`Decoupled`] is a [`JobEvents`] listener like any other, but all it
//! does inline is copy each event into an owned [`Event`] (the job's
//! queue keys and reserved payload are shared, not copied) and hand it to
//! a bounded channel with `try_send`. A [`Consumer`] drains the channel in
//! batches on a thread of its own, with its own single-threaded runtime. When the channel is full
//! the event is dropped and counted ([`Decoupled::dropped`], exposed as
//! `laravel_worker_events_dropped_total{listener}`): the listener misses
//! it, no job waits for it.
//!
//! The inline listeners (the output lines and the metrics) stay inline:
//! they write a line or bump a counter, and losing a line of output under
//! load would be worse than the microsecond it takes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::events::{JobEvents, Pause};
use super::{Settled, StopReason, Verdict};
use crate::handler::breaker::Trip;
use crate::queue::job::Reservation;
use crate::queue::migrated::Migrated;
use crate::queue::{QueueHandle, ReservedJob};

/// What a consumer needs to know of a job, copied out of the
/// [`ReservedJob`] the loop lends its listeners.
#[derive(Debug, Clone)]
pub struct JobFacts {
    /// The job's queue.
    pub queue: Arc<QueueHandle>,
    /// The reserved copy (its `attempts` counted), shared with the job.
    pub reserved: Bytes,
    /// Horizon's `JobPayload::id()`: the payload's `uuid`, else its `id`.
    pub id: Option<String>,
    /// The name the job is shown by (`displayName`, else `job`).
    pub display_name: Option<String>,
    /// A large job, named by digest in `:reserved`: its delete carries no
    /// companion's writes ([`crate::queue::companion`]).
    pub large: bool,
    /// Its payload may have a field of Horizon's (`tags`, `silenced`,
    /// `retry_of`, `pushedAt`): false only when the payload's parse saw
    /// none ([`crate::queue::Payload::has_horizon_fields`]).
    pub horizon_fields: bool,
}

impl JobFacts {
    /// The facts of `job`.
    pub fn of(job: &ReservedJob) -> Self {
        let payload = job.payload.as_ref().ok();
        JobFacts {
            queue: Arc::clone(&job.queue),
            reserved: job.reserved.clone(),
            id: payload.and_then(|p| p.uuid().map(str::to_string).or_else(|| p.id())),
            display_name: payload.and_then(|p| p.display_name().map(str::to_string)),
            large: matches!(&job.reservation, Reservation::Redis(held) if held.digest.is_some()),
            horizon_fields: payload.is_none_or(|p| p.has_horizon_fields()),
        }
    }
}

/// One event, owned (see [`JobEvents`] for when each is emitted). Each
/// consumer reads the variants it cares about; some are read by none yet.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub enum Event {
    /// [`JobEvents::polled`] (only to consumers that ask for it).
    Polled {
        /// The poll reached the queue.
        reached_queue: bool,
    },
    /// [`JobEvents::reserved`].
    Reserved(JobFacts),
    /// [`JobEvents::settled`].
    Settled {
        /// The job.
        job: JobFacts,
        /// What the worker decided.
        verdict: Verdict,
        /// What the queue did.
        settled: Settled,
        /// From reservation to settlement.
        took: Duration,
    },
    /// [`JobEvents::migrated`].
    Migrated(Migrated),
    /// [`JobEvents::paused`].
    Paused(Pause),
    /// [`JobEvents::resumed`].
    Resumed(Pause),
    /// [`JobEvents::stopping`].
    Stopping(StopReason),
    /// [`JobEvents::stopped`].
    Stopped(StopReason),
    /// [`JobEvents::handler_tripped`].
    HandlerTripped(Trip),
    /// [`JobEvents::handler_closed`].
    HandlerClosed(String),
}

/// An event and when it was emitted.
#[derive(Debug, Clone)]
pub struct Stamped {
    /// When the loop emitted it.
    pub at: SystemTime,
    /// What happened.
    pub event: Event,
}

/// The far side of a [`Decoupled`] listener: handles the events in
/// batches, at its own pace.
pub trait Consumer: Send + 'static {
    /// Whether it hears [`Event::Polled`] (one per poll: most consumers do
    /// not care, and the loop then copies nothing).
    const POLLED: bool = false;

    /// Handles `events`, oldest first. The batch is cleared afterwards.
    fn consume(&mut self, events: &mut Vec<Stamped>) -> impl Future<Output = ()> + Send;
}

/// How a [`Decoupled`] listener buffers.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    /// Events waiting before new ones are dropped.
    pub capacity: usize,
    /// Most events handed to the consumer at once.
    pub batch: usize,
    /// How long a batch that is not full waits for more events: one
    /// consumer call for the events of a few milliseconds, whatever the
    /// pace of the jobs. Zero: no wait.
    pub linger: Duration,
}

/// The listener the loop calls: copies, `try_send`s, counts the drops.
pub struct Decoupled {
    name: &'static str,
    sender: mpsc::Sender<Stamped>,
    dropped: Arc<AtomicU64>,
    /// Events in the channel or in the consumer's hands.
    queued: Arc<AtomicU64>,
    polled: bool,
}

/// The consumer's end, kept by whoever stops the listener: resolves when
/// the consumer has handled its last event, and can close its channel so
/// that this happens as soon as the events already queued are handled,
/// whoever still holds the listener.
pub struct Finished {
    done: oneshot::Receiver<()>,
    close: oneshot::Sender<()>,
    queued: Arc<AtomicU64>,
}

impl Finished {
    /// Closes the channel (an event sent from now on is dropped and
    /// counted), lets the consumer handle the events already queued, and
    /// waits at most `limit` for it to end. Returns how many events it had
    /// not handled when the wait ended: 0 when it handled them all, the
    /// events still queued (the batch in hand included) when `limit`
    /// passed first, as when its I/O hangs.
    pub async fn close(self, limit: Duration) -> u64 {
        let Finished {
            done,
            close,
            queued,
        } = self;
        let _ = close.send(());
        match tokio::time::timeout(limit, done).await {
            Ok(Ok(())) => 0,
            // Timed out, or the thread ended without handling them.
            _ => queued.load(Ordering::Relaxed),
        }
    }
}

impl Decoupled {
    /// Runs the consumer that `build` makes on a thread of its own, with a
    /// single-threaded runtime: whatever it opens there (a connection) is
    /// served there, off the loop's thread.
    ///
    /// # Errors
    /// The thread or its runtime cannot start, or `build` fails.
    pub async fn on_thread<C, F, Fut>(
        name: &'static str,
        buffer: Buffer,
        build: F,
    ) -> anyhow::Result<(Self, Finished)>
    where
        C: Consumer,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<C>>,
    {
        let (sender, receiver) = mpsc::channel(buffer.capacity.max(1));
        let (ready, started) = oneshot::channel::<anyhow::Result<()>>();
        let (done, finished) = oneshot::channel();
        let (close, closing) = oneshot::channel();
        let queued = Arc::new(AtomicU64::new(0));
        let pump = Pump {
            buffer,
            closing,
            queued: Arc::clone(&queued),
        };
        std::thread::Builder::new()
            .name(format!("lw-{name}"))
            .spawn(move || {
                run_on_thread(build, receiver, pump, ready);
                let _ = done.send(());
            })?;
        started
            .await
            .map_err(|_| anyhow::anyhow!("the {name} thread ended at start"))??;
        let finished = Finished {
            done: finished,
            close,
            queued: Arc::clone(&queued),
        };
        Ok((Self::new(name, sender, C::POLLED, queued), finished))
    }

    fn new(
        name: &'static str,
        sender: mpsc::Sender<Stamped>,
        polled: bool,
        queued: Arc<AtomicU64>,
    ) -> Self {
        Decoupled {
            name,
            sender,
            dropped: Arc::new(AtomicU64::new(0)),
            queued,
            polled,
        }
    }

    /// Events dropped so far because the channel was full (or the
    /// consumer gone).
    pub fn dropped(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.dropped)
    }

    fn send(&self, event: Event) {
        let stamped = Stamped {
            at: SystemTime::now(),
            event,
        };
        // Counted before the send, so that the consumer never takes an
        // event off the count before it was on it.
        self.queued.fetch_add(1, Ordering::Relaxed);
        if self.sender.try_send(stamped).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    listener = self.name,
                    dropped,
                    "a listener handles events slower than the worker emits them: events dropped"
                );
            }
        }
    }
}

/// The thread's body: a runtime, the consumer, the pump.
fn run_on_thread<C, F, Fut>(
    build: F,
    receiver: mpsc::Receiver<Stamped>,
    pump: Pump,
    ready: oneshot::Sender<anyhow::Result<()>>,
) where
    C: Consumer,
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<C>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    runtime.block_on(async move {
        match build().await {
            Ok(consumer) => {
                let _ = ready.send(Ok(()));
                pump.run(receiver, consumer).await;
            }
            Err(e) => {
                let _ = ready.send(Err(e));
            }
        }
    });
}

/// What hands the events to the consumer, on its thread.
struct Pump {
    buffer: Buffer,
    /// Told by [`Finished::close`].
    closing: oneshot::Receiver<()>,
    /// Shared with the listener: events sent and not yet handled.
    queued: Arc<AtomicU64>,
}

impl Pump {
    /// Hands the events to `consumer` in batches until every sender is
    /// gone or [`Finished::close`] closed the channel, and the events
    /// queued before are handled.
    async fn run<C: Consumer>(self, mut receiver: mpsc::Receiver<Stamped>, mut consumer: C) {
        let Pump {
            buffer,
            closing,
            queued,
        } = self;
        // `None` once closed, or once no `Finished` can close it any more.
        let mut closing = Some(closing);
        let size = buffer.batch.max(1);
        let mut batch = Vec::with_capacity(size);
        loop {
            let got = match closing.as_mut() {
                Some(close) => tokio::select! {
                    got = receiver.recv_many(&mut batch, size) => got,
                    told = close => {
                        closing = None;
                        if told.is_ok() {
                            // Nothing new gets in; what is queued still
                            // comes out, then `recv_many` gives 0.
                            receiver.close();
                        }
                        continue;
                    }
                },
                None => receiver.recv_many(&mut batch, size).await,
            };
            if got == 0 {
                break;
            }
            // Once closed nothing more can come: no use waiting.
            let open = !receiver.is_closed();
            if open && batch.len() < size && !buffer.linger.is_zero() {
                tokio::time::sleep(buffer.linger).await;
                while batch.len() < size {
                    match receiver.try_recv() {
                        Ok(event) => batch.push(event),
                        Err(_) => break,
                    }
                }
            }
            consumer.consume(&mut batch).await;
            queued.fetch_sub(batch.len() as u64, Ordering::Relaxed);
            batch.clear();
        }
    }
}

impl JobEvents for Decoupled {
    fn polled(&self, reached_queue: bool) {
        if self.polled {
            self.send(Event::Polled { reached_queue });
        }
    }

    fn reserved(&self, job: &ReservedJob) {
        self.send(Event::Reserved(JobFacts::of(job)));
    }

    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        self.send(Event::Settled {
            job: JobFacts::of(job),
            verdict: verdict.clone(),
            settled,
            took,
        });
    }

    fn migrated(&self, migrated: &Migrated) {
        self.send(Event::Migrated(migrated.clone()));
    }

    fn paused(&self, cause: &Pause) {
        self.send(Event::Paused(cause.clone()));
    }

    fn resumed(&self, cause: &Pause) {
        self.send(Event::Resumed(cause.clone()));
    }

    fn stopping(&self, reason: StopReason) {
        self.send(Event::Stopping(reason));
    }

    fn stopped(&self, reason: StopReason) {
        self.send(Event::Stopped(reason));
    }

    fn handler_tripped(&self, trip: &Trip) {
        self.send(Event::HandlerTripped(trip.clone()));
    }

    fn handler_closed(&self, handler: &str) {
        self.send(Event::HandlerClosed(handler.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds its first batch until `gate` is notified; records them all.
    struct Slow {
        gate: Option<Arc<tokio::sync::Notify>>,
        seen: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Consumer for Slow {
        async fn consume(&mut self, events: &mut Vec<Stamped>) {
            if let Some(gate) = self.gate.take() {
                gate.notified().await;
            }
            let mut seen = self.seen.lock().unwrap();
            seen.extend(events.iter().map(|e| format!("{:?}", e.event)));
        }
    }

    #[tokio::test]
    async fn a_stuck_consumer_costs_drops_not_waits() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let slow = Slow {
            gate: Some(Arc::clone(&gate)),
            seen: Arc::clone(&seen),
        };
        let buffer = Buffer {
            capacity: 2,
            batch: 1,
            linger: Duration::ZERO,
        };
        let (listener, finished) =
            Decoupled::on_thread("test", buffer, move || async move { Ok(slow) })
                .await
                .unwrap();
        // The pump takes the first event and waits in the consumer: two
        // more fill the channel, the rest are dropped at once.
        listener.stopping(StopReason::Restart);
        while listener.sender.capacity() < 2 {
            tokio::task::yield_now().await;
        }
        for _ in 0..5 {
            listener.stopped(StopReason::Restart);
        }
        listener.polled(true);
        assert_eq!(listener.dropped().load(Ordering::Relaxed), 3);
        drop(listener);
        gate.notify_one();
        assert_eq!(finished.close(Duration::from_secs(5)).await, 0);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[0].starts_with("Stopping"), "{seen:?}");
    }

    /// Whoever still holds the listener (an `Arc` kept by a task that
    /// outlives the worker), closing ends the consumer as soon as what
    /// was queued is handled, and nothing is reported lost.
    #[tokio::test]
    async fn closing_ends_once_the_queue_is_handled_though_a_sender_lives() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let consumer = Slow {
            gate: None,
            seen: Arc::clone(&seen),
        };
        let buffer = Buffer {
            capacity: 8,
            batch: 2,
            linger: Duration::from_millis(5),
        };
        let (listener, finished) =
            Decoupled::on_thread("test", buffer, move || async move { Ok(consumer) })
                .await
                .unwrap();
        for _ in 0..5 {
            listener.stopped(StopReason::Restart);
        }
        // A limit no run of this test reaches: the answer says whether
        // the consumer ended (0) or the wait gave up (the events left).
        assert_eq!(finished.close(Duration::from_secs(3600)).await, 0);
        assert_eq!(seen.lock().unwrap().len(), 5);
        listener.stopped(StopReason::Restart);
        assert_eq!(listener.dropped().load(Ordering::Relaxed), 1, "closed");
    }

    /// A consumer that never ends its batch: the wait gives up at its
    /// limit and says how many events were never handled.
    #[tokio::test]
    async fn a_stuck_consumer_at_close_reports_the_events_left() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let consumer = Slow {
            gate: Some(Arc::clone(&gate)),
            seen: Arc::new(std::sync::Mutex::new(Vec::new())),
        };
        let buffer = Buffer {
            capacity: 8,
            batch: 1,
            linger: Duration::ZERO,
        };
        let (listener, finished) =
            Decoupled::on_thread("test", buffer, move || async move { Ok(consumer) })
                .await
                .unwrap();
        for _ in 0..3 {
            listener.stopped(StopReason::Restart);
        }
        drop(listener);
        assert_eq!(finished.close(Duration::from_millis(50)).await, 3);
    }
}
