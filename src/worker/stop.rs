//! Why the worker stops, and with which exit status (protocol §6.2).

/// With `--stop-when-empty`, how many polls in a row may fail to reach
/// Redis before the worker stops (the tries a start gets, too).
pub const UNREACHABLE_POLLS: u32 = 5;

/// A stop condition, checked after every loop iteration in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGTERM, SIGINT or SIGQUIT.
    Interrupted,
    /// Resident memory reached `--memory`.
    Memory,
    /// `illuminate:queue:restart` changed (`queue:restart`).
    Restart,
    /// `--stop-when-empty` and a poll found nothing.
    Empty,
    /// `--stop-when-empty-for` and no job has run for that long.
    EmptyFor,
    /// `--stop-when-empty` and the queue Redis failed
    /// [`UNREACHABLE_POLLS`] polls in a row: whether the queues are empty
    /// cannot be known, and the worker would otherwise never end.
    RedisUnreachable,
    /// `--max-time` elapsed.
    MaxTime,
    /// `--max-jobs` jobs reserved.
    MaxJobs,
    /// `--once` ran its iteration.
    Once,
    /// A handler tripped and `[worker] on_handler_tripped = "exit"`.
    HandlerTripped,
}

/// The exit status after a handler tripped with
/// `[worker] on_handler_tripped = "exit"`.
pub const HANDLER_TRIPPED_EXIT: u8 = 4;

impl StopReason {
    /// The process exit status: 12 for memory (as Laravel),
    /// [`HANDLER_TRIPPED_EXIT`] after a handler tripped, 1 when Redis was
    /// unreachable (the fatal status, as for Redis unreachable at start),
    /// 0 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            StopReason::Memory => 12,
            StopReason::HandlerTripped => HANDLER_TRIPPED_EXIT,
            StopReason::RedisUnreachable => 1,
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
            StopReason::RedisUnreachable => "lost_connection",
            StopReason::MaxTime => "max_time",
            StopReason::MaxJobs => "max_jobs",
            StopReason::Once => "once",
            // Not one of Laravel's.
            StopReason::HandlerTripped => "handler_tripped",
        }
    }
}
