//! Rate-limited logging of repeated errors.
//!
//! With Redis down, the worker loop meets the same error once a second; a
//! line per occurrence would bury everything else in the log. A
//! [`RepeatLimiter`] lets the first occurrence of an error through, keeps
//! quiet about the copies that follow, and then lets one summary line
//! through at most every `interval`:
//!
//! ```text
//! ERROR cannot reserve a job: Connection refused (os error 111)
//! ERROR cannot reserve a job: Connection refused (os error 111) (repeated 30 times in the last 30 s)
//! INFO  cannot reserve a job: recovered after 47 errors in 46 s
//! ```
//!
//! An error is identified by its *site*: a fixed text naming what failed,
//! such as `"cannot reserve a job"`. The message may vary from one
//! occurrence to the next (a dying Redis says "broken pipe", then
//! "connection refused"): it does not make a new error, so one outage gives
//! one line per site and interval whatever it says; the summary shows the
//! latest message. The set of sites is fixed in the code (they are
//! `&'static str`), so the limiter's table stays small. The limiter decides;
//! [`RepeatLimiter::hit`] takes the time as an argument, so the rules can be
//! tested with a clock the test controls, and [`RepeatLimiter::log`] is the
//! thin wrapper that reads the clock and writes the line.

use std::collections::HashMap;
use std::fmt::Display;
use std::time::{Duration, Instant};

/// Default time between two summaries of the same error: 30 seconds.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// What to do with one occurrence of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// New, or the first again after a quiet `interval`: log it as it is.
    Log,
    /// A copy within `interval` of the last line logged for it: count it,
    /// log nothing.
    Suppress,
    /// `interval` has passed since the last line and copies were hidden:
    /// log it with the count.
    Summary {
        /// Occurrences since the last line logged, this one included.
        repeated: u64,
        /// Time since the last line logged.
        over: Duration,
    },
}

/// What [`RepeatLimiter::resolved`] reports when an error site recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Occurrences since the site started failing (logged or not).
    pub errors: u64,
    /// Time from the first of them to the recovery.
    pub over: Duration,
}

#[derive(Debug)]
struct Entry {
    /// When the last line for this error was logged.
    logged_at: Instant,
    /// Copies hidden since then.
    hidden: u64,
    /// When this site started failing, and how often since.
    first_seen: Instant,
    total: u64,
}

/// Decides which occurrences of repeated errors reach the log (see the
/// module docs). Not shared: each user (the worker loop) owns one.
#[derive(Debug)]
pub struct RepeatLimiter {
    interval: Duration,
    entries: HashMap<&'static str, Entry>,
}

impl RepeatLimiter {
    /// A limiter that logs each error once, then at most one summary per
    /// `interval`. A zero `interval` logs every occurrence.
    pub fn new(interval: Duration) -> Self {
        RepeatLimiter {
            interval,
            entries: HashMap::new(),
        }
    }

    /// Counts one error at `site` at time `now` and says whether and how to
    /// log it.
    pub fn hit(&mut self, site: &'static str, now: Instant) -> Decision {
        if self.interval.is_zero() {
            return Decision::Log;
        }
        if let Some(entry) = self.entries.get_mut(site) {
            entry.total += 1;
            let over = now.saturating_duration_since(entry.logged_at);
            if over < self.interval {
                entry.hidden += 1;
                return Decision::Suppress;
            }
            let hidden = std::mem::take(&mut entry.hidden);
            entry.logged_at = now;
            return if hidden == 0 {
                Decision::Log
            } else {
                Decision::Summary {
                    repeated: hidden + 1,
                    over,
                }
            };
        }
        self.entries.insert(
            site,
            Entry {
                logged_at: now,
                hidden: 0,
                first_seen: now,
                total: 1,
            },
        );
        Decision::Log
    }

    /// The operation at `site` has just succeeded: forgets its errors and,
    /// if there were any, says how many and for how long, so the caller can
    /// log the recovery (which also accounts for copies never summarised).
    pub fn resolved(&mut self, site: &'static str, now: Instant) -> Option<Recovery> {
        self.entries.remove(site).map(|e| Recovery {
            errors: e.total,
            over: now.saturating_duration_since(e.first_seen),
        })
    }

    /// Logs `error` at `site` (as `"{site}: {error}"`) at `level` if
    /// [`RepeatLimiter::hit`] lets it through, with the repeat count when it
    /// is a summary.
    pub fn log(&mut self, level: tracing::Level, site: &'static str, error: &dyn Display) {
        match self.hit(site, Instant::now()) {
            Decision::Suppress => {}
            Decision::Log => emit(level, format_args!("{site}: {error}")),
            Decision::Summary { repeated, over } => emit(
                level,
                format_args!(
                    "{site}: {error} (repeated {repeated} {} in the last {} s)",
                    times(repeated),
                    over.as_secs()
                ),
            ),
        }
    }

    /// Calls [`RepeatLimiter::resolved`] and logs the recovery at info
    /// level when `site` had failed.
    pub fn log_resolved(&mut self, site: &'static str) {
        if let Some(Recovery { errors, over }) = self.resolved(site, Instant::now()) {
            tracing::info!(
                "{site}: recovered after {errors} {} in {} s",
                if errors == 1 { "error" } else { "errors" },
                over.as_secs()
            );
        }
    }
}

fn times(n: u64) -> &'static str {
    if n == 1 { "time" } else { "times" }
}

/// Writes one line at a level chosen at run time (tracing's macros want a
/// constant one).
fn emit(level: tracing::Level, line: std::fmt::Arguments<'_>) {
    match level {
        tracing::Level::ERROR => tracing::error!("{line}"),
        tracing::Level::WARN => tracing::warn!("{line}"),
        tracing::Level::INFO => tracing::info!("{line}"),
        tracing::Level::DEBUG => tracing::debug!("{line}"),
        _ => tracing::trace!("{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: &str = "cannot reserve a job";
    /// A clock the test moves by hand.
    struct Clock(Instant);

    impl Clock {
        fn at(&self, seconds: f64) -> Instant {
            self.0 + Duration::from_secs_f64(seconds)
        }
    }

    fn clock() -> Clock {
        Clock(Instant::now())
    }

    #[test]
    fn first_occurrence_is_logged_and_copies_are_counted_into_one_summary() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(30));
        assert_eq!(limiter.hit(SITE, t.at(0.0)), Decision::Log);
        // One a second for 29 s: all hidden.
        for s in 1..30 {
            assert_eq!(
                limiter.hit(SITE, t.at(s as f64)),
                Decision::Suppress,
                "at {s} s"
            );
        }
        // At 30 s: one summary covering the 29 hidden copies and this one.
        assert_eq!(
            limiter.hit(SITE, t.at(30.0)),
            Decision::Summary {
                repeated: 30,
                over: Duration::from_secs(30)
            }
        );
        // The next window starts from the summary.
        assert_eq!(limiter.hit(SITE, t.at(31.0)), Decision::Suppress);
        assert_eq!(
            limiter.hit(SITE, t.at(60.5)),
            Decision::Summary {
                repeated: 2,
                over: Duration::from_millis(30_500)
            }
        );
    }

    #[test]
    fn a_flood_is_bounded_by_the_interval() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(30));
        // 100 errors a second for 10 minutes.
        let logged = (0..60_000)
            .filter(|i| limiter.hit(SITE, t.at(*i as f64 / 100.0)) != Decision::Suppress)
            .count();
        // The first line, then one summary per 30 s.
        assert_eq!(logged, 1 + 19);
    }

    #[test]
    fn an_error_after_a_quiet_interval_is_logged_as_new() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(30));
        assert_eq!(limiter.hit(SITE, t.at(0.0)), Decision::Log);
        assert_eq!(limiter.hit(SITE, t.at(45.0)), Decision::Log);
        assert_eq!(limiter.hit(SITE, t.at(46.0)), Decision::Suppress);
    }

    #[test]
    fn sites_are_limited_separately() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(30));
        let cache = "cannot read the cache signals";
        assert_eq!(limiter.hit(SITE, t.at(0.0)), Decision::Log);
        assert_eq!(limiter.hit(cache, t.at(0.1)), Decision::Log);
        assert_eq!(limiter.hit(SITE, t.at(0.3)), Decision::Suppress);
        assert_eq!(limiter.hit(cache, t.at(0.4)), Decision::Suppress);
    }

    #[test]
    fn recovery_reports_every_occurrence_and_forgets_the_site() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::from_secs(30));
        assert_eq!(limiter.resolved(SITE, t.at(0.0)), None);
        for s in 1..12 {
            limiter.hit(SITE, t.at(s as f64));
        }
        limiter.hit("other", t.at(5.0));
        assert_eq!(
            limiter.resolved(SITE, t.at(12.0)),
            Some(Recovery {
                errors: 11,
                over: Duration::from_secs(11)
            })
        );
        assert_eq!(limiter.resolved(SITE, t.at(13.0)), None);
        // The same error again is news, and the other site is untouched.
        assert_eq!(limiter.hit(SITE, t.at(14.0)), Decision::Log);
        assert_eq!(limiter.hit("other", t.at(14.0)), Decision::Suppress);
    }

    #[test]
    fn zero_interval_logs_everything() {
        let t = clock();
        let mut limiter = RepeatLimiter::new(Duration::ZERO);
        for s in 0..5 {
            assert_eq!(limiter.hit(SITE, t.at(s as f64)), Decision::Log);
        }
    }
}
