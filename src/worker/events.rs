//! Job events: what the loop tells whoever listens.
//!
//! The worker never calls its observers by name. It emits these events, as
//! Laravel's `Worker` dispatches `JobProcessing`, `JobProcessed`,
//! `JobFailed`, `WorkerStopping`… through the event dispatcher, and the
//! `work` command wires the listeners, as `WorkCommand::listenForEvents`
//! wires artisan's output:
//!
//! | event        | when                                                     |
//! |--------------|----------------------------------------------------------|
//! | [`polled`]   | a poll of the queues ended (reached the queue or not)    |
//! | [`reserved`] | a job was reserved and is about to run                   |
//! | [`settled`]  | a job's last step reached the queue, or could not: [`Settled`] says which |
//! | [`migrated`] | the migrate script moved due delayed jobs or expired reservations to a ready list |
//! | [`paused`] / [`resumed`] | reserving stopped / started again ([`Pause`]: a signal, or a queue's pause key) |
//! | [`stopping`] | the loop takes no more jobs and drains the ones in flight |
//! | [`stopped`]  | the drain is over: every job in flight settled or was abandoned |
//! | [`handler_tripped`] | a handler's breaker tripped (or a trial failed) |
//! | [`handler_closed`] | a tripped handler answered well again           |
//! | [`rebalanced`] | the slots per queue moved (`[worker] balance`; also once at start) |
//!
//! Listeners run inline on the loop's task or the job's task, so they must
//! be quick and must not block (write a line, bump a counter). A listener
//! that does I/O runs behind [`super::decoupled::Decoupled`]: the events
//! are copied into a bounded channel, dropped and counted when it is full,
//! and handled on a task (or a thread) of their own.
//!
//! [`polled`]: JobEvents::polled
//! [`reserved`]: JobEvents::reserved
//! [`settled`]: JobEvents::settled
//! [`migrated`]: JobEvents::migrated
//! [`paused`]: JobEvents::paused
//! [`resumed`]: JobEvents::resumed
//! [`stopping`]: JobEvents::stopping
//! [`stopped`]: JobEvents::stopped
//! [`handler_tripped`]: JobEvents::handler_tripped
//! [`handler_closed`]: JobEvents::handler_closed
//! [`rebalanced`]: JobEvents::rebalanced

use std::sync::Arc;
use std::time::Duration;

use super::StopReason;
use super::balance::Share;
use super::settle::Settled;
use super::verdict::Verdict;
use crate::handler::breaker::Trip;
use crate::queue::ReservedJob;
use crate::queue::migrated::Migrated;

/// What stopped or started the reserving of jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pause {
    /// SIGUSR2 / SIGCONT (Laravel's `pauseWorker`), which is also how
    /// `horizon:pause`, `horizon:continue` and Horizon's `Pause` and
    /// `ContinueWorking` commands reach the worker: every queue.
    Signal,
    /// The queue's pause key (`queue:pause` / `queue:resume`, Laravel
    /// 11+): that queue only, by name.
    Queue(String),
}

/// A listener for the worker's job events. Every method has an empty
/// default, so a listener implements only what it cares about.
pub trait JobEvents: Send + Sync {
    /// A poll of the queues ended; `reached_queue` is false when it failed
    /// with a queue error (the loop logs it and pauses).
    fn polled(&self, _reached_queue: bool) {}

    /// `job` was reserved (its attempt counted) and is about to run
    /// (Laravel's `JobProcessing`).
    fn reserved(&self, _job: &ReservedJob) {}

    /// `job` was settled with `verdict`, `took` after it was reserved
    /// (Laravel's `JobProcessed`, `JobReleasedAfterException` or
    /// `JobFailed`). Emitted whether or not the queue accepted the settle (a
    /// job left reserved by an outage is still done for this worker);
    /// `settled` says what the queue actually did: deleted, released with its
    /// delay, failed (and whether the failed store has the record), or
    /// refused (the reservation gone, left reserved, the lease lost).
    fn settled(&self, _job: &ReservedJob, _verdict: &Verdict, _settled: Settled, _took: Duration) {}

    /// The migrate script moved jobs to a ready list (Horizon's
    /// `JobsMigrated`): due delayed jobs, or reservations older than
    /// `retry_after`. Emitted after the poll whose pipeline (or the
    /// release whose immediate migration) moved them.
    fn migrated(&self, _migrated: &Migrated) {}

    /// The worker stopped reserving: from every queue
    /// ([`Pause::Signal`]) or from one ([`Pause::Queue`]).
    fn paused(&self, _cause: &Pause) {}

    /// The worker reserves again from what [`JobEvents::paused`] stopped.
    fn resumed(&self, _cause: &Pause) {}

    /// The worker stops taking jobs for `reason` (Laravel's
    /// `WorkerStopping`); jobs in flight still settle after it.
    fn stopping(&self, _reason: StopReason) {}

    /// The drain after [`JobEvents::stopping`] is over (every job in
    /// flight settled, or was abandoned at the drain deadline); the worker
    /// exits for `reason`. The last event.
    fn stopped(&self, _reason: StopReason) {}

    /// A handler tripped: its jobs are handed back until a trial job
    /// gets a good answer (see [`crate::handler::breaker`]).
    fn handler_tripped(&self, _trip: &Trip) {}

    /// The tripped handler named `handler` answered well again.
    fn handler_closed(&self, _handler: &str) {}

    /// A balanced worker's slots per queue, in `--queue` order: once at
    /// start, then after every round that moved one (Horizon's
    /// `processes` per queue).
    fn rebalanced(&self, _slots: &[Share]) {}
}

/// Every listener, in the order they were added; itself a listener that
/// passes each event to all of them.
#[derive(Clone, Default)]
pub struct Listeners {
    listeners: Vec<Arc<dyn JobEvents>>,
}

impl Listeners {
    /// No listeners: events go nowhere.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `listener` after the ones already there.
    pub fn with(mut self, listener: Arc<dyn JobEvents>) -> Self {
        self.listeners.push(listener);
        self
    }
}

impl JobEvents for Listeners {
    fn polled(&self, reached_queue: bool) {
        for l in &self.listeners {
            l.polled(reached_queue);
        }
    }

    fn reserved(&self, job: &ReservedJob) {
        for l in &self.listeners {
            l.reserved(job);
        }
    }

    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        for l in &self.listeners {
            l.settled(job, verdict, settled, took);
        }
    }

    fn migrated(&self, migrated: &Migrated) {
        for l in &self.listeners {
            l.migrated(migrated);
        }
    }

    fn paused(&self, cause: &Pause) {
        for l in &self.listeners {
            l.paused(cause);
        }
    }

    fn resumed(&self, cause: &Pause) {
        for l in &self.listeners {
            l.resumed(cause);
        }
    }

    fn stopping(&self, reason: StopReason) {
        for l in &self.listeners {
            l.stopping(reason);
        }
    }

    fn stopped(&self, reason: StopReason) {
        for l in &self.listeners {
            l.stopped(reason);
        }
    }

    fn handler_tripped(&self, trip: &Trip) {
        for l in &self.listeners {
            l.handler_tripped(trip);
        }
    }

    fn handler_closed(&self, handler: &str) {
        for l in &self.listeners {
            l.handler_closed(handler);
        }
    }

    fn rebalanced(&self, slots: &[Share]) {
        for l in &self.listeners {
            l.rebalanced(slots);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Record(Mutex<Vec<String>>);

    impl JobEvents for Record {
        fn polled(&self, reached_queue: bool) {
            self.0
                .lock()
                .unwrap()
                .push(format!("polled {reached_queue}"));
        }
        fn stopping(&self, reason: StopReason) {
            self.0
                .lock()
                .unwrap()
                .push(format!("stopping {}", reason.as_str()));
        }
        fn paused(&self, cause: &Pause) {
            self.0.lock().unwrap().push(format!("paused {cause:?}"));
        }
        fn resumed(&self, cause: &Pause) {
            self.0.lock().unwrap().push(format!("resumed {cause:?}"));
        }
        fn stopped(&self, reason: StopReason) {
            self.0
                .lock()
                .unwrap()
                .push(format!("stopped {}", reason.as_str()));
        }
    }

    #[test]
    fn listeners_hear_every_event_in_order() {
        let (a, b) = (Arc::new(Record::default()), Arc::new(Record::default()));
        let all = Listeners::new()
            .with(Arc::clone(&a) as Arc<dyn JobEvents>)
            .with(Arc::clone(&b) as Arc<dyn JobEvents>);
        all.polled(true);
        all.paused(&Pause::Queue("emails".into()));
        all.resumed(&Pause::Signal);
        all.polled(false);
        all.stopping(StopReason::Restart);
        all.stopped(StopReason::Restart);
        let expected = vec![
            "polled true",
            "paused Queue(\"emails\")",
            "resumed Signal",
            "polled false",
            "stopping restart_signal",
            "stopped restart_signal",
        ];
        assert_eq!(*a.0.lock().unwrap(), expected, "first listener");
        assert_eq!(*b.0.lock().unwrap(), expected, "second listener");
    }
}

/// A listener that joins after the worker started (Horizon's records when
/// their Redis was down at start): events before it joins go nowhere, and
/// from then on to it. The last `rebalanced` seen is replayed to it when it
/// joins, so it knows the slots.
#[derive(Default)]
pub struct LateListener {
    joined: std::sync::OnceLock<Arc<dyn JobEvents>>,
    slots: std::sync::Mutex<Option<Vec<Share>>>,
}

impl LateListener {
    /// `listener` hears every event from now on (a second join is ignored).
    pub fn join(&self, listener: Arc<dyn JobEvents>) {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(slots) = slots {
            listener.rebalanced(&slots);
        }
        let _ = self.joined.set(listener);
    }

    fn each(&self, event: impl FnOnce(&dyn JobEvents)) {
        if let Some(listener) = self.joined.get() {
            event(listener.as_ref());
        }
    }
}

impl JobEvents for LateListener {
    fn polled(&self, reached_queue: bool) {
        self.each(|l| l.polled(reached_queue));
    }
    fn reserved(&self, job: &ReservedJob) {
        self.each(|l| l.reserved(job));
    }
    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        self.each(|l| l.settled(job, verdict, settled, took));
    }
    fn migrated(&self, migrated: &Migrated) {
        self.each(|l| l.migrated(migrated));
    }
    fn paused(&self, cause: &Pause) {
        self.each(|l| l.paused(cause));
    }
    fn resumed(&self, cause: &Pause) {
        self.each(|l| l.resumed(cause));
    }
    fn stopping(&self, reason: StopReason) {
        self.each(|l| l.stopping(reason));
    }
    fn stopped(&self, reason: StopReason) {
        self.each(|l| l.stopped(reason));
    }
    fn handler_tripped(&self, trip: &Trip) {
        self.each(|l| l.handler_tripped(trip));
    }
    fn handler_closed(&self, handler: &str) {
        self.each(|l| l.handler_closed(handler));
    }
    fn rebalanced(&self, slots: &[Share]) {
        *self.slots.lock().unwrap_or_else(|e| e.into_inner()) = Some(slots.to_vec());
        self.each(|l| l.rebalanced(slots));
    }
}
