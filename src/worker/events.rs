//! Job events: what the loop tells whoever listens.
//!
//! The worker never calls its observers by name. It emits four events, as
//! Laravel's `Worker` dispatches `JobProcessing`, `JobProcessed`,
//! `JobFailed`, `WorkerStopping`… through the event dispatcher, and the
//! `work` command wires the listeners, as `WorkCommand::listenForEvents`
//! wires artisan's output:
//!
//! | event        | when                                                     |
//! |--------------|----------------------------------------------------------|
//! | [`polled`]   | a poll of the queues ended (reached Redis or not)        |
//! | [`reserved`] | a job was reserved and is about to run                   |
//! | [`settled`]  | a job was deleted, released or failed (its last step)    |
//! | [`stopping`] | the loop takes no more jobs and drains the ones in flight |
//! | [`handler_tripped`] | a handler's breaker tripped (or a trial failed) |
//! | [`handler_closed`] | a tripped handler answered well again           |
//! | [`rebalanced`] | the slots per queue moved (`[worker] balance`; also once at start) |
//!
//! Listeners run inline on the loop's task or the job's task, so they must
//! be quick and must not block (write a line, bump a counter).
//!
//! [`polled`]: JobEvents::polled
//! [`reserved`]: JobEvents::reserved
//! [`settled`]: JobEvents::settled
//! [`stopping`]: JobEvents::stopping
//! [`handler_tripped`]: JobEvents::handler_tripped
//! [`handler_closed`]: JobEvents::handler_closed
//! [`rebalanced`]: JobEvents::rebalanced

use std::sync::Arc;
use std::time::Duration;

use super::StopReason;
use super::settle::Settled;
use super::slots::Share;
use super::verdict::Verdict;
use crate::handler::breaker::Trip;
use crate::queue::ReservedJob;

/// A listener for the worker's job events. Every method has an empty
/// default, so a listener implements only what it cares about.
pub trait JobEvents: Send + Sync {
    /// A poll of the queues ended; `reached_redis` is false when it failed
    /// with a Redis error (the loop logs it and pauses).
    fn polled(&self, _reached_redis: bool) {}

    /// `job` was reserved (its attempt counted) and is about to run
    /// (Laravel's `JobProcessing`).
    fn reserved(&self, _job: &ReservedJob) {}

    /// `job` was settled with `verdict`, `took` after it was reserved
    /// (Laravel's `JobProcessed`, `JobReleasedAfterException` or
    /// `JobFailed`). Emitted whether or not Redis accepted the settle (a
    /// job left reserved by an outage is still done for this worker);
    /// `settled` says what Redis actually did.
    fn settled(&self, _job: &ReservedJob, _verdict: &Verdict, _settled: Settled, _took: Duration) {}

    /// The worker stops taking jobs for `reason` (Laravel's
    /// `WorkerStopping`); jobs in flight still settle after it.
    fn stopping(&self, _reason: StopReason) {}

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
    fn polled(&self, reached_redis: bool) {
        for l in &self.listeners {
            l.polled(reached_redis);
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

    fn stopping(&self, reason: StopReason) {
        for l in &self.listeners {
            l.stopping(reason);
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
        fn polled(&self, reached_redis: bool) {
            self.0
                .lock()
                .unwrap()
                .push(format!("polled {reached_redis}"));
        }
        fn stopping(&self, reason: StopReason) {
            self.0
                .lock()
                .unwrap()
                .push(format!("stopping {}", reason.as_str()));
        }
    }

    #[test]
    fn listeners_hear_every_event_in_order() {
        let (a, b) = (Arc::new(Record::default()), Arc::new(Record::default()));
        let all = Listeners::new()
            .with(Arc::clone(&a) as Arc<dyn JobEvents>)
            .with(Arc::clone(&b) as Arc<dyn JobEvents>);
        all.polled(true);
        all.polled(false);
        all.stopping(StopReason::Restart);
        let expected = vec!["polled true", "polled false", "stopping restart_signal"];
        assert_eq!(*a.0.lock().unwrap(), expected, "first listener");
        assert_eq!(*b.0.lock().unwrap(), expected, "second listener");
    }
}
