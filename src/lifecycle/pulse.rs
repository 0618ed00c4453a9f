//! The loop's pulse: when to tell systemd and the heartbeat file that the
//! worker is alive, and what to tell them.
//!
//! The worker loop calls [`Pulse::beat`] at each iteration and runs its
//! long waits (the idle `--sleep`, the fetch with its BLPOP, waiting for a
//! free slot while jobs run, the drain) inside [`Pulse::during`], which
//! beats on schedule while the wait lasts. Beats therefore come from the
//! loop itself: a loop that stops moving stops beating, and systemd's
//! watchdog (or a health check on the heartbeat file) notices. A wait that
//! may wedge (the fetch talks to Redis) is given a limit: once it has
//! lasted longer than it legitimately can, beats stop until it ends.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::heartbeat_file::{self, Heartbeat};
use super::notify::Notifier;

/// Least time between two `STATUS=` updates: 1 second. A busy worker
/// changes its counts hundreds of times a second; systemd needs no more.
pub const STATUS_GAP: Duration = Duration::from_secs(1);

/// Jobs in flight and jobs processed, as shown in `STATUS=` and the
/// heartbeat file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Jobs reserved whose handler and settlement have not finished.
    pub in_flight: u64,
    /// Jobs finished since start, whatever the outcome (done, released,
    /// failed, deleted).
    pub processed: u64,
}

/// A handle the loop uses to count jobs.
#[derive(Debug, Clone)]
pub struct JobCounter(Arc<watch::Sender<Counts>>);

impl JobCounter {
    /// Counts a job as in flight until the returned guard is dropped; then
    /// it counts as processed (also when its task panics).
    pub fn start(&self) -> InFlight {
        self.0.send_modify(|c| c.in_flight += 1);
        InFlight(Arc::clone(&self.0))
    }
}

/// One job in flight (see [`JobCounter::start`]).
#[derive(Debug)]
pub struct InFlight(Arc<watch::Sender<Counts>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|c| {
            c.in_flight = c.in_flight.saturating_sub(1);
            c.processed += 1;
        });
    }
}

/// Which signs of life are due at a given time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Due {
    watchdog: bool,
    heartbeat: bool,
    status: bool,
}

/// The timetable, without any I/O (so it can be tested with explicit
/// times).
#[derive(Debug)]
struct Schedule {
    watchdog_every: Option<Duration>,
    heartbeat_every: Option<Duration>,
    /// Whether `STATUS=` is sent at all.
    status_on: bool,
    next_watchdog: Instant,
    next_heartbeat: Instant,
    next_status: Instant,
    /// The counts last shown in `STATUS=`.
    shown: Option<Counts>,
}

impl Schedule {
    /// Everything due at `now`.
    fn new(
        watchdog_every: Option<Duration>,
        heartbeat_every: Option<Duration>,
        status_on: bool,
        now: Instant,
    ) -> Self {
        Schedule {
            watchdog_every,
            heartbeat_every,
            status_on,
            next_watchdog: now,
            next_heartbeat: now,
            next_status: now,
            shown: None,
        }
    }

    /// What is due at `now` with `counts`, each due item rescheduled.
    fn take(&mut self, now: Instant, counts: Counts) -> Due {
        let mut due = Due::default();
        if let Some(every) = self.watchdog_every
            && now >= self.next_watchdog
        {
            due.watchdog = true;
            self.next_watchdog = now + every;
        }
        if let Some(every) = self.heartbeat_every
            && now >= self.next_heartbeat
        {
            due.heartbeat = true;
            self.next_heartbeat = now + every;
        }
        if self.status_on && self.shown != Some(counts) && now >= self.next_status {
            due.status = true;
            self.shown = Some(counts);
            self.next_status = now + STATUS_GAP;
        }
        due
    }

    /// The next time something will be due, with `counts` as they are now.
    fn next_wake(&self, counts: Counts) -> Option<Instant> {
        [
            self.watchdog_every.map(|_| self.next_watchdog),
            self.heartbeat_every.map(|_| self.next_heartbeat),
            (self.status_on && self.shown != Some(counts)).then_some(self.next_status),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[derive(Debug)]
struct State {
    schedule: Schedule,
    /// The stop reason once draining has started.
    stopping: Option<&'static str>,
    /// A heartbeat write has failed already (warned once).
    heartbeat_failed: bool,
}

/// The worker's signs of life: systemd notifications and the heartbeat
/// file, driven by the loop (see the module docs).
#[derive(Debug)]
pub struct Pulse {
    notifier: Notifier,
    heartbeat: Option<Heartbeat>,
    counts: Arc<watch::Sender<Counts>>,
    state: Mutex<State>,
}

impl Pulse {
    /// A pulse that notifies through `notifier` and rewrites `heartbeat`
    /// every [`heartbeat_file::PERIOD`].
    pub fn new(notifier: Notifier, heartbeat: Option<Heartbeat>) -> Self {
        let schedule = Schedule::new(
            notifier.watchdog_every(),
            heartbeat.as_ref().map(|_| heartbeat_file::PERIOD),
            notifier.is_enabled(),
            Instant::now(),
        );
        Pulse {
            notifier,
            heartbeat,
            counts: Arc::new(watch::Sender::new(Counts::default())),
            state: Mutex::new(State {
                schedule,
                stopping: None,
                heartbeat_failed: false,
            }),
        }
    }

    /// A pulse that tells no one (not under systemd, no heartbeat file).
    pub fn silent() -> Self {
        Pulse::new(Notifier::disabled(), None)
    }

    /// The counter the loop uses for jobs in flight and processed.
    pub fn counter(&self) -> JobCounter {
        JobCounter(Arc::clone(&self.counts))
    }

    /// The counts now.
    pub fn counts(&self) -> Counts {
        *self.counts.borrow()
    }

    /// Whether beats go anywhere.
    fn active(&self) -> bool {
        self.notifier.is_enabled() || self.heartbeat.is_some()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The loop has started: `READY=1` with the first `STATUS=`, a first
    /// `WATCHDOG=1` and heartbeat, and the schedule starts from now.
    pub fn ready(&self) {
        let counts = self.counts();
        let mut state = self.state();
        let schedule = &mut state.schedule;
        *schedule = Schedule::new(
            schedule.watchdog_every,
            schedule.heartbeat_every,
            schedule.status_on,
            Instant::now(),
        );
        // READY=1 carries the first STATUS= itself.
        let due = Due {
            status: false,
            ..schedule.take(Instant::now(), counts)
        };
        self.notifier.ready(&status_line(counts, None));
        self.send(&mut state, due, counts);
    }

    /// One step of the loop: sends what is due now.
    pub fn beat(&self) {
        if !self.active() {
            return;
        }
        let counts = self.counts();
        let mut state = self.state();
        let due = state.schedule.take(Instant::now(), counts);
        self.send(&mut state, due, counts);
    }

    /// Draining starts (for `reason`): `STOPPING=1` and a last status; the
    /// heartbeat says so too. Beats go on while the jobs in flight finish.
    pub fn stopping(&self, reason: &'static str) {
        let counts = self.counts();
        let mut state = self.state();
        state.stopping = Some(reason);
        state.schedule.shown = Some(counts);
        self.notifier.stopping(&status_line(counts, state.stopping));
        let due = Due {
            heartbeat: self.heartbeat.is_some(),
            ..Due::default()
        };
        self.send(&mut state, due, counts);
    }

    /// The worker exits: a last `STATUS=` if the counts changed since the
    /// one shown (however recent), and the heartbeat file is removed.
    pub fn exit(&self) {
        let counts = self.counts();
        let mut state = self.state();
        if state.schedule.status_on && state.schedule.shown != Some(counts) {
            state.schedule.shown = Some(counts);
            self.notifier.status(&status_line(counts, state.stopping));
        }
        if let Some(heartbeat) = &self.heartbeat {
            heartbeat.remove();
        }
    }

    /// Runs `work`, beating on schedule while it is pending; STATUS
    /// follows job starts and ends meanwhile. `limit` is the longest the
    /// wait can legitimately take: past it, beats stop (the loop counts as
    /// stuck) until `work` ends. `None`: the wait may last for ever and
    /// still be healthy (a sleep, jobs running, BLPOP with `block_for = 0`).
    pub async fn during<F: Future>(&self, limit: Option<Duration>, work: F) -> F::Output {
        if !self.active() {
            return work.await;
        }
        let give_up = limit.map(|limit| Instant::now() + limit);
        let mut changes = self.counts.subscribe();
        tokio::pin!(work);
        loop {
            let wake = {
                let state = self.state();
                state.schedule.next_wake(self.counts())
            };
            let wake = match (wake, give_up) {
                (Some(w), Some(g)) => Some(w.min(g)),
                (w, g) => w.or(g),
            };
            tokio::select! {
                biased;
                output = &mut work => return output,
                () = sleep_until(wake) => {}
                Ok(()) = changes.changed() => {}
            }
            if give_up.is_some_and(|g| Instant::now() >= g) {
                tracing::warn!(
                    limit_s = limit.map_or(0, |l| l.as_secs()),
                    "the worker loop has waited longer than it should; \
                     no more watchdog pings or heartbeats until the wait ends"
                );
                return work.await;
            }
            self.beat();
        }
    }

    fn send(&self, state: &mut State, due: Due, counts: Counts) {
        if due.watchdog {
            self.notifier.watchdog();
        }
        if due.status {
            self.notifier.status(&status_line(counts, state.stopping));
        }
        if due.heartbeat
            && let Some(heartbeat) = &self.heartbeat
        {
            let content = serde_json::json!({
                "pid": std::process::id(),
                "in_flight": counts.in_flight,
                "processed": counts.processed,
                "state": if state.stopping.is_some() { "stopping" } else { "running" },
            });
            match heartbeat.write(&content.to_string()) {
                Ok(()) => state.heartbeat_failed = false,
                Err(e) if !state.heartbeat_failed => {
                    state.heartbeat_failed = true;
                    tracing::warn!(
                        path = %heartbeat.path().display(),
                        "cannot write the heartbeat file: {e}"
                    );
                }
                Err(_) => {}
            }
        }
    }
}

/// `STATUS=` text: `2 in flight, 57 processed`, prefixed with
/// `stopping (reason): ` while draining.
fn status_line(counts: Counts, stopping: Option<&str>) -> String {
    let counts = format!(
        "{} in flight, {} processed",
        counts.in_flight, counts.processed
    );
    match stopping {
        Some(reason) => format!("stopping ({reason}): {counts}"),
        None => counts,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(in_flight: u64, processed: u64) -> Counts {
        Counts {
            in_flight,
            processed,
        }
    }

    #[test]
    fn watchdog_and_heartbeat_follow_their_periods() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut schedule = Schedule::new(
            Some(Duration::from_millis(500)),
            Some(Duration::from_secs(5)),
            false,
            t0,
        );
        let c = Counts::default();
        assert_eq!(
            schedule.take(s(0), c),
            Due {
                watchdog: true,
                heartbeat: true,
                status: false
            }
        );
        assert_eq!(schedule.take(s(499), c), Due::default());
        assert_eq!(schedule.next_wake(c), Some(s(500)));
        assert!(schedule.take(s(500), c).watchdog);
        // A late beat reschedules from when it happened.
        assert!(schedule.take(s(1700), c).watchdog);
        assert_eq!(schedule.next_wake(c), Some(s(2200)));
        assert!(!schedule.take(s(4999), c).heartbeat);
        assert!(schedule.take(s(5000), c).heartbeat);
    }

    #[test]
    fn status_is_sent_on_change_at_most_once_a_second() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut schedule = Schedule::new(None, None, true, t0);
        assert!(schedule.take(s(0), counts(0, 0)).status);
        // No change: nothing due, nothing to wake for.
        assert!(!schedule.take(s(2000), counts(0, 0)).status);
        assert_eq!(schedule.next_wake(counts(0, 0)), None);
        // A change is sent at once...
        assert!(schedule.take(s(2100), counts(1, 0)).status);
        // ...the next one waits for the gap, and the latest counts win.
        assert!(!schedule.take(s(2200), counts(0, 1)).status);
        assert!(!schedule.take(s(2300), counts(1, 1)).status);
        assert_eq!(schedule.next_wake(counts(1, 1)), Some(s(3100)));
        assert!(schedule.take(s(3100), counts(1, 1)).status);
        assert_eq!(schedule.shown, Some(counts(1, 1)));
    }

    #[test]
    fn the_counter_counts_jobs_in_flight_and_processed() {
        let pulse = Pulse::silent();
        let counter = pulse.counter();
        let a = counter.start();
        let b = counter.start();
        assert_eq!(pulse.counts(), counts(2, 0));
        drop(a);
        assert_eq!(pulse.counts(), counts(1, 1));
        drop(b);
        assert_eq!(pulse.counts(), counts(0, 2));
        assert_eq!(status_line(counts(0, 2), None), "0 in flight, 2 processed");
        assert_eq!(
            status_line(counts(1, 2), Some("interrupted")),
            "stopping (interrupted): 1 in flight, 2 processed"
        );
    }

    /// Age of the heartbeat file's last write, told by removing it and
    /// seeing whether it comes back.
    fn rewritten(path: &std::path::Path) -> bool {
        let there = path.exists();
        let _ = std::fs::remove_file(path);
        there
    }

    #[tokio::test(start_paused = true)]
    async fn waits_keep_beating_until_their_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heartbeat");
        let pulse = Pulse::new(Notifier::disabled(), Some(Heartbeat::new(path.clone())));
        pulse.ready();
        assert!(rewritten(&path));

        // An endless wait without a limit (jobs running): beats go on.
        let endless = pulse.during(None, tokio::time::sleep(Duration::from_secs(3600)));
        tokio::pin!(endless);
        for _ in 0..5 {
            tokio::select! {
                () = &mut endless => panic!("ended early"),
                () = tokio::time::sleep(heartbeat_file::PERIOD + Duration::from_millis(1)) => {}
            }
            assert!(rewritten(&path), "a beat was missed during the wait");
        }

        // A wait that overstays its 12 s limit: beats until then, none after.
        let wedged = pulse.during(
            Some(Duration::from_secs(12)),
            tokio::time::sleep(Duration::from_secs(3600)),
        );
        tokio::pin!(wedged);
        let mut beats = Vec::new();
        for second in 1..=40 {
            tokio::select! {
                () = &mut wedged => panic!("ended early"),
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if rewritten(&path) {
                beats.push(second);
            }
        }
        assert!(!beats.is_empty());
        assert!(
            beats.iter().all(|&s| s <= 12),
            "beats after the limit: {beats:?}"
        );
    }
}
