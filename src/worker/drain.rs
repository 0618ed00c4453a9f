//! [`InFlight`]: the job tasks the loop has started, and the drain that
//! waits for them when the worker stops.
//!
//! A stop reserves nothing more and waits for the jobs in flight. With a
//! drain deadline (`[worker] drain_timeout`) the wait is bounded: jobs run
//! on until the last quarter of it (at most its last 2 s); those still
//! running are then told to give up and are released; whatever is still
//! not settled at the deadline (the queue hung, a slow failed hook) is
//! abandoned where it stands, so its job stays reserved and is reclaimed
//! after `retry_after`.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::starts::{Tally, Ticket};
use crate::lifecycle::Pulse;

/// The job tasks not yet ended, and where each stands.
#[derive(Default)]
pub struct InFlight {
    tasks: JoinSet<()>,
    /// The jobs reserved that have not reached their handler yet.
    starts: Tally,
    /// The jobs whose fate is not in the queue yet.
    unsettled: Tally,
    /// The jobs whose task has not finished settling (failed hook included).
    settling: Tally,
}

/// How long a stop may take.
#[derive(Default)]
pub struct Deadline {
    /// How long jobs may run on after a stop; `None` waits for them all.
    pub limit: Option<Duration>,
    /// Tells the jobs in flight that the deadline has passed (the other end
    /// is `Services::drain_deadline`).
    pub passed: Option<watch::Sender<bool>>,
}

impl Deadline {
    /// Takes `spent` off the limit: the stop's time already used before
    /// the drain (see `worker::received`), so the whole stop keeps within it.
    pub fn shorten_by(&mut self, spent: Duration) {
        if let Some(limit) = &mut self.limit {
            *limit = limit.saturating_sub(spent);
        }
    }
}

impl InFlight {
    /// Tickets for a job about to start: `[start, settled]`, dropped as its
    /// handler call begins and once its fate is in the queue, and one held
    /// until its task has finished settling.
    pub fn tickets(&self) -> ([Ticket; 2], Ticket) {
        (
            [self.starts.ticket(), self.unsettled.ticket()],
            self.settling.ticket(),
        )
    }

    /// Runs `task` as one more job task.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Collects the tasks that have ended; true when one had.
    pub fn reap(&mut self) -> bool {
        let mut ended = false;
        while self.tasks.try_join_next().is_some() {
            ended = true;
        }
        ended
    }

    /// No job task is running.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The job tasks running.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Resolves once every job reserved so far has reached its handler.
    pub fn until_all_started(&self) -> impl Future<Output = ()> + use<> {
        let starts = self.starts.clone();
        async move { starts.until_all_reached().await }
    }

    /// With `--stop-when-empty` (`asked`) while jobs run: resolves once
    /// every one of them (and any started meanwhile) has finished
    /// settling; `None` otherwise. A poll made while jobs run does not show
    /// the queues empty: a running job may still push one (a chain's next
    /// job, a dispatch from its handler), which the next poll of Laravel's
    /// one-job loop would find. So the loop's idle waits end as the last of
    /// them settles, for the poll that can tell.
    pub fn ran_out(&self, asked: bool) -> Option<impl Future<Output = ()> + use<>> {
        let settling = self.settling.clone();
        (asked && !self.is_empty()).then_some(async move { settling.until_all_reached().await })
    }

    /// Waits for the jobs in flight within `deadline`, beating `pulse`.
    pub async fn drain(&mut self, deadline: &Deadline, pulse: &Pulse) {
        if !self.is_empty() {
            tracing::info!(
                jobs = self.len(),
                "stopping: waiting for the jobs in flight"
            );
        }
        match deadline.limit {
            Some(limit) => self.drain_within(limit, deadline, pulse).await,
            None => {
                self.wait(None, pulse).await;
            }
        }
    }

    async fn drain_within(&mut self, limit: Duration, deadline: &Deadline, pulse: &Pulse) {
        let release_window = (limit / 4).min(Duration::from_secs(2));
        if self.wait(Some(limit - release_window), pulse).await {
            return;
        }
        tracing::warn!(
            jobs = self.len(),
            "drain deadline passed: releasing the jobs still running"
        );
        if let Some(passed) = &deadline.passed {
            let _ = passed.send(true);
        }
        if self.wait(Some(release_window), pulse).await {
            return;
        }
        let (settling, unsettled) = (self.settling.count(), self.unsettled.count());
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        report_cut(unsettled, settling.saturating_sub(unsettled));
    }

    /// Waits for every job task to end, for at most `limit` (`None`: no
    /// limit); false when the limit passed first.
    async fn wait(&mut self, limit: Option<Duration>, pulse: &Pulse) -> bool {
        let tasks = &mut self.tasks;
        let all = async { while tasks.join_next().await.is_some() {} };
        match limit {
            Some(limit) => pulse
                .during(None, tokio::time::timeout(limit, all))
                .await
                .is_ok(),
            None => {
                pulse.during(None, all).await;
                true
            }
        }
    }
}

/// Logs the job tasks the drain deadline cut: `unsettled` jobs whose fate
/// never reached the queue (they stay reserved), and `hooks` jobs already
/// settled (recorded as failed) whose failed hook was cut short.
fn report_cut(unsettled: usize, hooks: usize) {
    if unsettled > 0 {
        tracing::error!(
            jobs = unsettled,
            "drain deadline passed before these jobs could be settled; \
             they stay reserved and are reclaimed after retry_after \
             (unless a release or delete already sent still reaches the queue)"
        );
    }
    if hooks > 0 {
        tracing::warn!(
            jobs = hooks,
            "drain deadline passed while the failed hook of these jobs ran; \
             they were already recorded as failed and removed from the queue, \
             their hook was cut short"
        );
    }
}
