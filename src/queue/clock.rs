//! The queue's clock: UNIX time in whole seconds, the unit of every time
//! Laravel's queues store (Redis scores, `available_at` and `reserved_at`
//! columns, `createdAt`, cache expiries).

use std::time::{SystemTime, UNIX_EPOCH};

/// Current UNIX time in whole seconds (0 if the clock is before 1970).
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whole seconds from `now` until `at` (both UNIX seconds), 0 for a time
/// already past: the delay a `Queue::later(available_at)` asks a driver
/// that takes delays rather than times (the table's `available_at` is
/// written from it, SQS's `DelaySeconds`, beanstalkd's `put` delay).
pub fn seconds_until(at: i64, now: i64) -> u64 {
    u64::try_from(at.saturating_sub(now)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_time_already_past_is_no_delay() {
        assert_eq!(super::seconds_until(100, 40), 60);
        assert_eq!(super::seconds_until(40, 100), 0);
        assert_eq!(super::seconds_until(i64::MIN, i64::MAX), 0);
    }
}
