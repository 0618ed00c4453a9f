//! The breaker of one handler: a handler that cannot work stops being
//! handed jobs.
//!
//! A transport reports a fault of the handler itself, not of the job, by
//! wrapping its outcome in [`Reply::Fault`](super::Reply::Fault): an
//! answer that breaks the protocol, a fresh process that dies before
//! answering, a program that cannot start, a malformed HTTP answer. The
//! breaker only observes these outcomes:
//!
//! - **closed** (normal): faults are counted; any other outcome (done,
//!   released, failed or an exception *the job* threw, all answered by
//!   the handler) resets the count. `trip_after` faults in a row trip it.
//! - **open** (tripped): one error line says what is wrong and how to fix
//!   it; jobs for the handler are handed back uncounted (their attempt
//!   given back, as for an unmatched job) with the time left before the
//!   next trial as their delay, without starting the handler.
//! - after the wait (`trip_backoff`, doubling at each new trip, at most
//!   [`MAX_BACKOFF_FACTOR`] times it), **half-open**: one job is let
//!   through as a trial. Its first good answer closes the breaker again; a
//!   fault opens it for twice as long.
//!
//! Each fault is logged through a [`RepeatLimiter`]: the first occurrence,
//! then a count at most every interval, as for Redis errors.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::log_limit::RepeatLimiter;

/// Consecutive faults that trip a handler by default.
pub const DEFAULT_TRIP_AFTER: u32 = 5;

/// The wait before the first trial after a trip, by default: 10 seconds.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);

/// The longest wait between two trials, as a multiple of the first.
pub const MAX_BACKOFF_FACTOR: u32 = 32;

/// What kind of fault of the handler itself a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A persistent handler wrote something other than the answer to the
    /// request in flight (most often: no `call` id, the earlier protocol).
    Protocol,
    /// A fresh process ended before answering its first request.
    Died,
    /// The program could not be started (missing, not executable).
    CannotStart,
    /// An HTTP answer that says it is JSON and is not.
    Malformed,
}

impl FaultKind {
    /// The fixed text naming the fault, the site of its rate-limited log.
    pub fn site(self) -> &'static str {
        match self {
            FaultKind::Protocol => "handler protocol error",
            FaultKind::Died => "handler process ended before answering",
            FaultKind::CannotStart => "cannot start handler",
            FaultKind::Malformed => "malformed handler answer",
        }
    }

    /// How to fix it, for the line logged when the handler trips.
    pub fn fix(self) -> &'static str {
        match self {
            FaultKind::Protocol => {
                "each answer on fd 3 must be one JSON line echoing the request's `call` id; \
                 a handler written for the earlier protocol must be updated \
                 (see handlers/persistent, \"Migrating\")"
            }
            FaultKind::Died => {
                "its processes exit before answering their first job: run the command by hand \
                 and read its stderr (a bridge that cannot boot the app, a missing extension)"
            }
            FaultKind::CannotStart => {
                "check the `command` of the [[handlers]] entry: the program must exist and be \
                 executable, and a bare name must be on the handler's PATH"
            }
            FaultKind::Malformed => {
                "a 2xx answer with `Content-Type: application/json` must hold JSON; check \
                 the endpoint's URL and what it answers (see handlers/http)"
            }
        }
    }
}

/// A fault of the handler itself: its kind and what happened, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What kind of fault.
    pub kind: FaultKind,
    /// What happened (for the log).
    pub what: String,
}

/// The settings of one handler's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive faults that trip it; 0 = never.
    pub trip_after: u32,
    /// The wait before the first trial after a trip.
    pub backoff: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            trip_after: DEFAULT_TRIP_AFTER,
            backoff: DEFAULT_BACKOFF,
        }
    }
}

/// Whether a job may go to the handler now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Run it (closed, or as the trial of a half-open breaker).
    Run,
    /// Hand it back uncounted, available again after `delay` seconds.
    Refuse {
        /// Seconds, at least 1.
        delay: u64,
    },
}

/// A change of a breaker's state, for the job events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It tripped (or a trial failed and it opened again).
    Tripped(Trip),
    /// A good answer closed it again.
    Closed {
        /// The handler (its `match` pattern).
        handler: String,
    },
}

/// A trip of one handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    /// The handler (its `match` pattern).
    pub handler: String,
    /// The fault that tripped it.
    pub fault: Fault,
    /// The wait before its next trial.
    pub retry_in: Duration,
    /// False for the first trip, true when a trial failed.
    pub again: bool,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Normal: `faults` in a row so far.
    Closed { faults: u32 },
    /// Tripped until `until`; `trips` so far without a good answer.
    Open { until: Instant, trips: u32 },
    /// A trial job is running since `since`.
    Trial { since: Instant, trips: u32 },
}

/// One handler's breaker (see the module docs).
#[derive(Debug)]
pub struct Breaker {
    handler: String,
    settings: BreakerSettings,
    phase: Mutex<Phase>,
    log: Mutex<RepeatLimiter>,
}

impl Breaker {
    /// A closed breaker for the handler named `handler` (its `match`
    /// pattern); repeated faults are summarised every `log_interval`.
    pub fn new(handler: &str, settings: BreakerSettings, log_interval: Duration) -> Self {
        Breaker {
            handler: handler.to_string(),
            settings,
            phase: Mutex::new(Phase::Closed { faults: 0 }),
            log: Mutex::new(RepeatLimiter::new(log_interval)),
        }
    }

    /// The handler's name (its `match` pattern).
    pub fn handler(&self) -> &str {
        &self.handler
    }

    /// The wait after the `trips`-th trip in a row: the backoff, doubled
    /// each time, at most [`MAX_BACKOFF_FACTOR`] times it.
    fn wait(&self, trips: u32) -> Duration {
        let factor = 1u32 << trips.saturating_sub(1).min(MAX_BACKOFF_FACTOR.ilog2());
        self.settings.backoff * factor
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a job may go to the handler at `now`. An open breaker whose
    /// wait is over lets this job through as its trial; a trial running
    /// for longer than a wait (abandoned, or a long job) lets another.
    pub fn admit(&self, now: Instant) -> Admit {
        let mut phase = self.lock();
        let (until, trips) = match *phase {
            Phase::Closed { .. } => return Admit::Run,
            Phase::Open { until, trips } => (until, trips),
            Phase::Trial { since, trips } => (since + self.wait(trips), trips),
        };
        if now < until {
            let left = until.saturating_duration_since(now);
            return Admit::Refuse {
                delay: left.as_secs_f64().ceil().max(1.0) as u64,
            };
        }
        *phase = Phase::Trial { since: now, trips };
        Admit::Run
    }

    /// Records the outcome of a call admitted earlier: `fault` is the
    /// handler's fault, `None` for a good answer. Logs the fault
    /// (rate-limited) and the change, if any, which it returns.
    pub fn record(&self, fault: Option<&Fault>, now: Instant) -> Option<Change> {
        let Some(fault) = fault else {
            return self.answered();
        };
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let message = format!("handler {:?}: {}", self.handler, fault.what);
        log.log(tracing::Level::ERROR, fault.kind.site(), &message);
        drop(log);
        let mut phase = self.lock();
        let trips = match *phase {
            Phase::Closed { faults } if faults + 1 < self.settings.trip_after => {
                *phase = Phase::Closed { faults: faults + 1 };
                return None;
            }
            Phase::Closed { .. } if self.settings.trip_after == 0 => return None,
            Phase::Closed { .. } => 1,
            Phase::Trial { trips, .. } => trips + 1,
            // A call started before the trip: already counted.
            Phase::Open { .. } => return None,
        };
        let retry_in = self.wait(trips);
        *phase = Phase::Open {
            until: now + retry_in,
            trips,
        };
        let trip = Trip {
            handler: self.handler.clone(),
            fault: fault.clone(),
            retry_in,
            again: trips > 1,
        };
        log_trip(&trip, self.settings.trip_after);
        Some(Change::Tripped(trip))
    }

    /// A good answer: resets the count, closes an open breaker. The fault
    /// log is reset (its recovery logged) only when a trip ends: a handler
    /// that fails now and then between good answers keeps its faults
    /// logged once, then as a count per interval, not once per fault.
    fn answered(&self) -> Option<Change> {
        let mut phase = self.lock();
        let was = std::mem::replace(&mut *phase, Phase::Closed { faults: 0 });
        drop(phase);
        match was {
            Phase::Closed { .. } => None,
            Phase::Open { .. } | Phase::Trial { .. } => {
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                for kind in [
                    FaultKind::Protocol,
                    FaultKind::Died,
                    FaultKind::CannotStart,
                    FaultKind::Malformed,
                ] {
                    log.log_resolved(kind.site());
                }
                drop(log);
                tracing::info!(
                    handler = self.handler,
                    "handler {:?} answered well again: it is no longer tripped and takes jobs",
                    self.handler
                );
                Some(Change::Closed {
                    handler: self.handler.clone(),
                })
            }
        }
    }
}

/// The one line that says a handler tripped, why, and how to fix it.
fn log_trip(trip: &Trip, trip_after: u32) {
    let handler = &trip.handler;
    let seconds = trip.retry_in.as_secs();
    if trip.again {
        tracing::error!(
            handler,
            retry_in = seconds,
            "handler {handler:?} is still tripped: its trial job met the same fault ({}); \
             next trial in {seconds} s. {}",
            trip.fault.kind.site(),
            trip.fault.kind.fix()
        );
    } else {
        tracing::error!(
            handler,
            retry_in = seconds,
            "handler {handler:?} tripped after {trip_after} faults in a row ({}): its jobs are \
             handed back uncounted, and one is tried again in {seconds} s. To fix: {}",
            trip.fault.kind.site(),
            trip.fault.kind.fix()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault() -> Fault {
        Fault {
            kind: FaultKind::Protocol,
            what: "no call id".into(),
        }
    }

    fn breaker(trip_after: u32) -> Breaker {
        let settings = BreakerSettings {
            trip_after,
            backoff: Duration::from_secs(10),
        };
        Breaker::new("App\\Jobs\\*", settings, Duration::from_secs(30))
    }

    #[test]
    fn trips_after_faults_in_a_row_and_a_good_answer_resets_the_count() {
        let b = breaker(3);
        let t = Instant::now();
        assert_eq!(b.record(Some(&fault()), t), None);
        assert_eq!(b.record(Some(&fault()), t), None);
        assert_eq!(b.record(None, t), None, "reset");
        assert_eq!(b.record(Some(&fault()), t), None);
        assert_eq!(b.record(Some(&fault()), t), None);
        let Some(Change::Tripped(trip)) = b.record(Some(&fault()), t) else {
            panic!("third fault in a row trips it");
        };
        assert_eq!(trip.retry_in, Duration::from_secs(10));
        assert!(!trip.again);
        assert_eq!(b.admit(t), Admit::Refuse { delay: 10 });
        assert_eq!(
            b.admit(t + Duration::from_millis(9500)),
            Admit::Refuse { delay: 1 }
        );
    }

    #[test]
    fn half_open_lets_one_trial_through_and_doubles_the_wait_on_a_fault() {
        let b = breaker(1);
        let t = Instant::now();
        assert!(matches!(
            b.record(Some(&fault()), t),
            Some(Change::Tripped(_))
        ));
        let later = t + Duration::from_secs(10);
        assert_eq!(b.admit(later), Admit::Run, "the trial");
        assert_eq!(b.admit(later), Admit::Refuse { delay: 10 }, "one at a time");
        let Some(Change::Tripped(trip)) = b.record(Some(&fault()), later) else {
            panic!("a failed trial opens it again");
        };
        assert_eq!(trip.retry_in, Duration::from_secs(20));
        assert!(trip.again);
        let trial = later + Duration::from_secs(20);
        assert_eq!(b.admit(trial), Admit::Run);
        assert_eq!(
            b.record(None, trial),
            Some(Change::Closed {
                handler: "App\\Jobs\\*".into()
            })
        );
        assert_eq!(b.admit(trial), Admit::Run, "closed");
    }

    #[test]
    fn the_wait_grows_to_its_cap_and_zero_never_trips() {
        let b = breaker(1);
        assert_eq!(b.wait(1), Duration::from_secs(10));
        assert_eq!(b.wait(6), Duration::from_secs(320));
        assert_eq!(b.wait(60), Duration::from_secs(320));
        let never = breaker(0);
        let t = Instant::now();
        for _ in 0..10 {
            assert_eq!(never.record(Some(&fault()), t), None);
        }
        assert_eq!(never.admit(t), Admit::Run);
    }
}
