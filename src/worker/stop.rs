//! Why the worker stops, and with which exit status (protocol §6.2): the
//! reasons ([`StopReason`]) and the decision ([`decide`]), a pure function of
//! what the loop saw ([`Seen`]).

use std::time::Duration;

use super::options::WorkerOptions;

/// With `--stop-when-empty`, how many polls in a row may fail to reach
/// the queue before the worker stops (the tries a start gets, too).
pub const UNREACHABLE_POLLS: u32 = 5;

/// A stop condition, in the order [`decide`] checks them after every loop
/// iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGTERM, SIGINT or SIGQUIT.
    Interrupted,
    /// A handler tripped and `[worker] on_handler_tripped = "exit"`.
    HandlerTripped,
    /// Resident memory reached `--memory`.
    Memory,
    /// `illuminate:queue:restart` changed (`queue:restart`).
    Restart,
    /// `--stop-when-empty` and a poll found nothing.
    Empty,
    /// `--stop-when-empty` and the queue could not be reached for
    /// [`UNREACHABLE_POLLS`] polls in a row: whether the queues are empty
    /// cannot be known, and the worker would otherwise never end.
    QueueUnreachable,
    /// `--stop-when-empty-for` and no job has run for that long.
    EmptyFor,
    /// `--max-time` elapsed.
    MaxTime,
    /// `--max-jobs` jobs reserved.
    MaxJobs,
    /// `--once` ran its iteration.
    Once,
}

/// The exit status after a handler tripped with
/// `[worker] on_handler_tripped = "exit"`.
pub const HANDLER_TRIPPED_EXIT: u8 = 4;

impl StopReason {
    /// The process exit status: 12 for memory (as Laravel),
    /// [`HANDLER_TRIPPED_EXIT`] after a handler tripped, 1 when the queue was
    /// unreachable (the fatal status, as for a queue unreachable at start),
    /// 0 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            StopReason::Memory => 12,
            StopReason::HandlerTripped => HANDLER_TRIPPED_EXIT,
            StopReason::QueueUnreachable => 1,
            _ => 0,
        }
    }

    /// Laravel 13's `WorkerStopReason` value, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Interrupted => "interrupted",
            StopReason::Memory => "memory",
            StopReason::Restart => "restart_signal",
            StopReason::Empty => "empty",
            StopReason::EmptyFor => "empty_for",
            StopReason::QueueUnreachable => "lost_connection",
            StopReason::MaxTime => "max_time",
            StopReason::MaxJobs => "max_jobs",
            StopReason::Once => "once",
            // Not one of Laravel's.
            StopReason::HandlerTripped => "handler_tripped",
        }
    }
}

/// What the loop saw before a stop check, read before the decision so that
/// [`decide`] is a pure function of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// SIGTERM, SIGINT or SIGQUIT was received.
    pub quit: bool,
    /// A handler tripped and the worker must stop (`on_handler_tripped = "exit"`).
    pub tripped: bool,
    /// At least one poll has run (Laravel checks at the end of an
    /// iteration: before the first, only a signal stops the worker).
    pub polled: bool,
    /// The worker's resident memory, in bytes (0 when `--memory` is off).
    pub rss_bytes: u64,
    /// The restart marker differs from the one seen at start.
    pub restarted: bool,
    /// The last poll reserved a job, or could not tell (the queue was
    /// unreachable, or a queue was left out while its jobs ran).
    pub found: bool,
    /// Polls in a row that could not reach the queue.
    pub failed_polls: u32,
    /// How long no job has started or ended; `None` while one is in flight
    /// (a job still running counts as work, as in Laravel's one-job loop).
    pub idle_for: Option<Duration>,
    /// How long the loop has run.
    pub ran_for: Duration,
    /// Jobs reserved so far.
    pub reserved: u64,
}

/// Logs why a worker asked to stop when empty stops with
/// [`StopReason::QueueUnreachable`]: the queue at `queue` did not answer.
pub fn explain_unreachable(queue: &str) {
    tracing::error!(
        queue = %queue,
        "the queue did not answer {UNREACHABLE_POLLS} polls in a row; --stop-when-empty and \
         --stop-when-empty-for cannot tell whether the queues are empty, so the worker stops \
         with exit status 1"
    );
}

/// `Worker::stopIfNecessary`: the first stop condition that holds, in
/// Laravel's order (signal, memory, restart, `--stop-when-empty`,
/// `--stop-when-empty-for`, `--max-time`, `--max-jobs`, `--once`), with
/// ours where they fit: a tripped handler right after the signal, and a
/// queue unreachable for [`UNREACHABLE_POLLS`] polls in a row, which ends a
/// worker asked to stop when empty (it cannot tell whether the queues are,
/// and would otherwise never end).
pub fn decide(options: &WorkerOptions, seen: &Seen) -> Option<StopReason> {
    if seen.quit {
        return Some(StopReason::Interrupted);
    }
    if seen.tripped {
        return Some(StopReason::HandlerTripped);
    }
    if !seen.polled {
        return None;
    }
    let memory_limit = options.memory_mb.saturating_mul(1024 * 1024);
    if options.memory_mb > 0 && seen.rss_bytes >= memory_limit {
        return Some(StopReason::Memory);
    }
    if seen.restarted {
        return Some(StopReason::Restart);
    }
    if options.stop_when_empty && !seen.found {
        return Some(StopReason::Empty);
    }
    if unreachable_while_asked_to_empty(options, seen) {
        return Some(StopReason::QueueUnreachable);
    }
    let limit = options.stop_when_empty_for;
    let idle = seen.idle_for.is_some_and(|idle| idle >= limit);
    if !limit.is_zero() && !seen.found && idle {
        return Some(StopReason::EmptyFor);
    }
    if !options.max_time.is_zero() && seen.ran_for >= options.max_time {
        return Some(StopReason::MaxTime);
    }
    if options.max_jobs > 0 && seen.reserved >= options.max_jobs {
        return Some(StopReason::MaxJobs);
    }
    if options.once {
        return Some(StopReason::Once);
    }
    None
}

/// How long a receive of the idle wait may stay in flight before a stop
/// condition may end the worker: `--sleep` with `--stop-when-empty` (the
/// stop comes right after that wait), the rest of `--stop-when-empty-for`
/// (`idle_for`: how long no job has run) and of `--max-time` (`ran_for`:
/// how long the loop has run). `None` when no stop is foreseen: a signal
/// or a restart comes when it comes. An SQS long poll longer than this
/// would outlive the worker (see `worker::received`).
pub fn poll_horizon(
    options: &WorkerOptions,
    idle_for: Duration,
    ran_for: Duration,
) -> Option<Duration> {
    let empty_for = options.stop_when_empty_for;
    [
        options.stop_when_empty.then_some(options.sleep),
        (!empty_for.is_zero()).then(|| empty_for.saturating_sub(idle_for)),
        (!options.max_time.is_zero()).then(|| options.max_time.saturating_sub(ran_for)),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Whether any stop condition can be foreseen in time (see
/// [`poll_horizon`]): without one, the loop need not read the clock for it.
pub fn foresees_a_stop(options: &WorkerOptions) -> bool {
    options.stop_when_empty || !options.stop_when_empty_for.is_zero() || !options.max_time.is_zero()
}

/// `--stop-when-empty`, or `--stop-when-empty-for` with no job in flight
/// for that long, while the queue has been unreachable for
/// [`UNREACHABLE_POLLS`] polls in a row.
fn unreachable_while_asked_to_empty(options: &WorkerOptions, seen: &Seen) -> bool {
    if seen.failed_polls < UNREACHABLE_POLLS {
        return false;
    }
    let limit = options.stop_when_empty_for;
    let idle = seen.idle_for.is_some_and(|idle| idle >= limit);
    options.stop_when_empty || (!limit.is_zero() && idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that polled once and found a job, with nothing else to say.
    fn busy() -> Seen {
        Seen {
            quit: false,
            tripped: false,
            polled: true,
            rss_bytes: 0,
            restarted: false,
            found: true,
            failed_polls: 0,
            idle_for: Some(Duration::ZERO),
            ran_for: Duration::ZERO,
            reserved: 1,
        }
    }

    fn options(change: impl FnOnce(&mut WorkerOptions)) -> WorkerOptions {
        let mut options = WorkerOptions::default();
        change(&mut options);
        options
    }

    #[test]
    fn nothing_stops_a_busy_worker_without_limits() {
        assert_eq!(decide(&WorkerOptions::default(), &busy()), None);
    }

    #[test]
    fn only_a_signal_or_a_trip_stops_a_worker_before_its_first_poll() {
        let once = options(|o| o.once = true);
        let fresh = Seen {
            polled: false,
            restarted: true,
            ..busy()
        };
        assert_eq!(decide(&once, &fresh), None);
        let quit = Seen {
            quit: true,
            ..fresh
        };
        assert_eq!(decide(&once, &quit), Some(StopReason::Interrupted));
        let tripped = Seen {
            tripped: true,
            ..fresh
        };
        assert_eq!(decide(&once, &tripped), Some(StopReason::HandlerTripped));
    }

    #[test]
    fn conditions_are_checked_in_laravels_order() {
        let all = options(|o| {
            o.memory_mb = 1;
            o.stop_when_empty = true;
            o.stop_when_empty_for = Duration::from_secs(1);
            o.max_time = Duration::from_secs(1);
            o.max_jobs = 1;
            o.once = true;
        });
        let mut seen = Seen {
            quit: true,
            rss_bytes: 2 * 1024 * 1024,
            restarted: true,
            found: false,
            idle_for: Some(Duration::from_secs(5)),
            ran_for: Duration::from_secs(5),
            ..busy()
        };
        let order = [
            StopReason::Interrupted,
            StopReason::Memory,
            StopReason::Restart,
            StopReason::Empty,
        ];
        for reason in order {
            assert_eq!(decide(&all, &seen), Some(reason));
            match reason {
                StopReason::Interrupted => seen.quit = false,
                StopReason::Memory => seen.rss_bytes = 0,
                StopReason::Restart => seen.restarted = false,
                _ => {}
            }
        }
        let later = options(|o| {
            o.stop_when_empty_for = Duration::from_secs(1);
            o.max_time = Duration::from_secs(1);
            o.max_jobs = 1;
            o.once = true;
        });
        assert_eq!(decide(&later, &seen), Some(StopReason::EmptyFor));
        seen.found = true;
        assert_eq!(decide(&later, &seen), Some(StopReason::MaxTime));
        seen.ran_for = Duration::ZERO;
        assert_eq!(decide(&later, &seen), Some(StopReason::MaxJobs));
        seen.reserved = 0;
        assert_eq!(decide(&later, &seen), Some(StopReason::Once));
    }

    #[test]
    fn stop_when_empty_for_waits_for_the_jobs_in_flight_and_the_time() {
        let o = options(|o| o.stop_when_empty_for = Duration::from_secs(3));
        let empty = Seen {
            found: false,
            ..busy()
        };
        let short = Seen {
            idle_for: Some(Duration::from_secs(2)),
            ..empty
        };
        let running = Seen {
            idle_for: None,
            ..empty
        };
        let long = Seen {
            idle_for: Some(Duration::from_secs(3)),
            ..empty
        };
        assert_eq!(decide(&o, &short), None);
        assert_eq!(decide(&o, &running), None);
        assert_eq!(decide(&o, &long), Some(StopReason::EmptyFor));
    }

    /// Issue 32 item 7: an unreachable queue says nothing about the queues
    /// (`found` stays true), so `--stop-when-empty-for` alone would never
    /// stop; after the unreachable polls and the time, it does, as
    /// `--stop-when-empty` does.
    #[test]
    fn an_unreachable_queue_ends_a_worker_asked_to_stop_when_empty() {
        let unreachable = Seen {
            found: true,
            failed_polls: UNREACHABLE_POLLS,
            idle_for: Some(Duration::from_secs(10)),
            ..busy()
        };
        let empty = options(|o| o.stop_when_empty = true);
        let empty_for = options(|o| o.stop_when_empty_for = Duration::from_secs(3));
        for o in [&empty, &empty_for] {
            assert_eq!(decide(o, &unreachable), Some(StopReason::QueueUnreachable));
        }
        let fewer = Seen {
            failed_polls: UNREACHABLE_POLLS - 1,
            ..unreachable
        };
        assert_eq!(decide(&empty_for, &fewer), None);
        let running = Seen {
            idle_for: None,
            ..unreachable
        };
        assert_eq!(decide(&empty_for, &running), None);
        assert_eq!(decide(&WorkerOptions::default(), &unreachable), None);
    }

    #[test]
    fn the_poll_horizon_is_the_nearest_foreseen_stop() {
        let secs = Duration::from_secs;
        let none = options(|_| {});
        assert_eq!(poll_horizon(&none, secs(5), secs(50)), None);
        let empty = options(|o| {
            o.stop_when_empty = true;
            o.sleep = secs(3);
        });
        assert_eq!(poll_horizon(&empty, secs(5), secs(50)), Some(secs(3)));
        let all = options(|o| {
            o.stop_when_empty_for = secs(10);
            o.max_time = secs(60);
        });
        assert_eq!(poll_horizon(&all, secs(4), secs(50)), Some(secs(6)));
        assert_eq!(poll_horizon(&all, secs(4), secs(58)), Some(secs(2)));
        assert_eq!(poll_horizon(&all, secs(40), secs(70)), Some(secs(0)));
    }
}
