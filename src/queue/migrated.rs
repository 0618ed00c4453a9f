//! What the migrate script moved to a ready list: due delayed jobs and
//! expired reservations (Laravel's `migrateExpiredJobs`, whose returned
//! payloads Horizon's `JobsMigrated` event carries).
//!
//! The script returns the count and, within [`REPLY_BUDGET`] bytes, the
//! payloads it moved (oldest first). Between two readings by the worker
//! ([`MigrationLog::take`]) at most [`LOG_BUDGET`] payload bytes are kept;
//! past that a migration is kept with its count only. Nothing here grows
//! with the queue.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::handle::QueueHandle;

/// Most payload bytes one migrate call returns (1 MiB); the rest of the
/// jobs it moved are counted, not returned.
pub const REPLY_BUDGET: usize = 1024 * 1024;

/// Most payload bytes kept between two readings (4 MiB).
pub const LOG_BUDGET: usize = 4 * 1024 * 1024;

/// Most migrations kept between two readings; more are dropped (and logged
/// at debug level): a reading comes after every poll.
pub const MAX_ENTRIES: usize = 1024;

/// Where the migrated jobs came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigratedFrom {
    /// `:delayed`: released or pushed with a delay, now due.
    Delayed,
    /// `:reserved`: a reservation older than `retry_after`, reclaimed.
    Reserved,
}

impl MigratedFrom {
    /// `delayed` or `reserved`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            MigratedFrom::Delayed => "delayed",
            MigratedFrom::Reserved => "reserved",
        }
    }
}

/// One migrate call that moved jobs.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// The queue whose ready list received them.
    pub queue: Arc<QueueHandle>,
    /// The set they left.
    pub from: MigratedFrom,
    /// How many moved.
    pub count: u64,
    /// The payloads moved, as they now are in the ready list, oldest
    /// first: all of them, or the first ones within the byte budgets.
    pub jobs: Vec<Bytes>,
}

/// The migrations not yet read by the worker, shared by every clone of a
/// queue connection.
#[derive(Debug, Default)]
pub struct MigrationLog {
    entries: Mutex<(Vec<Migrated>, usize)>,
}

impl MigrationLog {
    /// Keeps `migrated` (with its payloads while the budget lasts).
    pub fn note(&self, mut migrated: Migrated) {
        let Ok(mut guard) = self.entries.lock() else {
            return;
        };
        let (entries, bytes) = &mut *guard;
        if entries.len() >= MAX_ENTRIES {
            tracing::debug!(queue = %migrated.queue.name, count = migrated.count,
                "a migration was not reported: too many since the last poll");
            return;
        }
        let size: usize = migrated.jobs.iter().map(Bytes::len).sum();
        if *bytes + size > LOG_BUDGET {
            migrated.jobs.clear();
        } else {
            *bytes += size;
        }
        entries.push(migrated);
    }

    /// The migrations noted since the last call, oldest first.
    pub fn take(&self) -> Vec<Migrated> {
        match self.entries.lock() {
            Ok(mut guard) => {
                guard.1 = 0;
                std::mem::take(&mut guard.0)
            }
            Err(_) => Vec::new(),
        }
    }
}

/// Reads the migrate script's reply (`{count, payload, …}`, or a bare
/// count from an older script) into a [`Migrated`]; `None` when nothing
/// moved or the reply is not one.
pub fn from_reply(
    queue: &Arc<QueueHandle>,
    from: MigratedFrom,
    reply: redis::Value,
) -> Option<Migrated> {
    use redis::Value;
    let (count, jobs) = match reply {
        Value::Int(n) => (n, Vec::new()),
        Value::Array(items) => {
            let mut items = items.into_iter();
            let Some(Value::Int(n)) = items.next() else {
                return None;
            };
            let jobs = items
                .filter_map(|v| match v {
                    Value::BulkString(b) => Some(Bytes::from(b)),
                    _ => None,
                })
                .collect();
            (n, jobs)
        }
        _ => return None,
    };
    (count > 0).then(|| Migrated {
        queue: Arc::clone(queue),
        from,
        count: count as u64,
        jobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Arc<QueueHandle> {
        Arc::new(QueueHandle::named("default"))
    }

    #[test]
    fn replies_become_migrations() {
        let reply = redis::Value::Array(vec![
            redis::Value::Int(3),
            redis::Value::BulkString(b"a".to_vec()),
            redis::Value::BulkString(b"b".to_vec()),
        ]);
        let m = from_reply(&queue(), MigratedFrom::Delayed, reply).unwrap();
        assert_eq!((m.count, m.jobs.len()), (3, 2));
        let none = redis::Value::Array(vec![redis::Value::Int(0)]);
        assert!(from_reply(&queue(), MigratedFrom::Reserved, none).is_none());
    }

    #[test]
    fn the_log_keeps_counts_past_its_budget() {
        let log = MigrationLog::default();
        let big = Bytes::from(vec![b'x'; LOG_BUDGET]);
        for _ in 0..2 {
            log.note(Migrated {
                queue: queue(),
                from: MigratedFrom::Delayed,
                count: 1,
                jobs: vec![big.clone()],
            });
        }
        let taken = log.take();
        assert_eq!(taken.len(), 2);
        assert_eq!((taken[0].jobs.len(), taken[1].jobs.len()), (1, 0));
        assert!(log.take().is_empty());
    }
}
