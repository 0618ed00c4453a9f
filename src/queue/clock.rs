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
