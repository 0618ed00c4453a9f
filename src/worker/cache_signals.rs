//! [`CacheSignals`]: the signals an operator sends through the cache store
//! (`queue:restart`'s marker, `queue:pause`'s keys), as the loop last read
//! them, and the SIGUSR2 pause as last reported.
//!
//! Laravel reads them after every job. At thousands of jobs a second that
//! would be most of the work, so while jobs keep coming they are read at
//! most every [`CHECK_EVERY`]; after an empty poll, every time. A cache
//! that cannot be read neither stops nor pauses the worker: the last values
//! stand, and the error is logged once, then summarised.

use std::time::{Duration, Instant};

use super::Services;
use super::events::{JobEvents, Pause};
use crate::log_limit::RepeatLimiter;

/// How often, at most, the cache signals are read while jobs keep coming.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Log site of the repeated error (see [`RepeatLimiter`]).
const SIGNALS_FAILED: &str = "cannot read the restart and pause signals from the cache";

/// The cache signals as last read.
pub struct CacheSignals {
    /// The restart marker seen at start: `queue:restart` changes it.
    at_start: Option<String>,
    /// The restart marker at the last read.
    restart: Option<String>,
    /// When the signals were last read.
    read_at: Option<Instant>,
    /// Per queue (in `--queue` order), whether its pause key is set.
    paused: Vec<bool>,
    /// Whether SIGUSR2 paused the worker, as last reported.
    signal_paused: bool,
    errors: RepeatLimiter,
}

impl CacheSignals {
    /// Signals for `queues` queues, none paused yet; read errors are
    /// logged through `errors`.
    pub fn new(queues: usize, errors: RepeatLimiter) -> Self {
        CacheSignals {
            at_start: None,
            restart: None,
            read_at: None,
            paused: vec![false; queues],
            signal_paused: false,
            errors,
        }
    }

    /// Notes the restart marker at start (a later change means
    /// `queue:restart`); a cache error is logged and counts as no marker.
    pub async fn start(&mut self, services: &Services) {
        self.at_start = match services.cache.restart_marker().await {
            Ok(marker) => marker,
            Err(e) => {
                tracing::warn!(
                    "cannot read the restart signal from the cache: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                None
            }
        };
        self.restart = self.at_start.clone();
    }

    /// Reads the signals again unless `busy` and read less than
    /// [`CHECK_EVERY`] ago; emits `paused`/`resumed` for each queue whose
    /// pause key changed. True when the pause keys were read.
    pub async fn refresh(&mut self, services: &Services, busy: bool) -> bool {
        if busy && self.read_at.is_some_and(|at| at.elapsed() < CHECK_EVERY) {
            return false;
        }
        self.read_at = Some(Instant::now());
        let queues = &services.options.queues;
        match services.cache.signals(&services.connection, queues).await {
            Ok(signals) => {
                self.errors.log_resolved(SIGNALS_FAILED);
                for ((name, was), now) in queues.iter().zip(&self.paused).zip(&signals.paused) {
                    if was != now {
                        report_queue_pause(services, name, *now);
                    }
                }
                self.paused = signals.paused;
                self.restart = signals.restart;
                true
            }
            Err(e) => {
                let error = crate::error_chain::error_chain(e.as_ref());
                self.errors
                    .log(tracing::Level::WARN, SIGNALS_FAILED, &error);
                false
            }
        }
    }

    /// `queue:restart` ran since the worker started.
    pub fn restarted(&self) -> bool {
        self.restart != self.at_start
    }

    /// Per queue, whether it is paused (`queue:pause`).
    pub fn paused(&self) -> &[bool] {
        &self.paused
    }

    /// Emits `paused` or `resumed` when SIGUSR2 / SIGCONT changed the
    /// worker's state (`paused`) since the last call.
    pub fn report_signal_pause(&mut self, services: &Services, paused: bool) {
        if paused != self.signal_paused {
            self.signal_paused = paused;
            match paused {
                true => services.events.paused(&Pause::Signal),
                false => services.events.resumed(&Pause::Signal),
            }
        }
    }
}

/// Logs and emits a queue's pause key changing to `paused`.
fn report_queue_pause(services: &Services, name: &str, paused: bool) {
    let state = if paused { "paused" } else { "resumed" };
    tracing::info!(queue = %name, "queue {state}");
    let cause = Pause::Queue(name.to_string());
    match paused {
        true => services.events.paused(&cause),
        false => services.events.resumed(&cause),
    }
}
