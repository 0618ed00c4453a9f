//! [`DatabaseQueue`] behind the seam: Laravel's `DatabaseQueue` as a
//! [`Driver`]. A table has no wake-up on push (the idle wait is
//! `--sleep`), no place for a failure while the failed-job store is down
//! (the row stays reserved and comes back after `retry_after`) and counts
//! attempts in its `attempts` column, not in the payload.
//!
//! The futures are boxed where the trait boxes them: sqlx's are many times
//! the Redis ones, and one per worker call costs nothing beside a commit.

use std::sync::Arc;

use super::DatabaseQueue;
use crate::exception::QUERY_EXCEPTION;
use crate::queue::ReservedJob;
use crate::queue::clock::now;
use crate::queue::companion::Ending;
use crate::queue::driver::{Call, Driver, Refusal};
use crate::queue::handle::QueueHandle;
use crate::queue::job::Reservation;
use crate::queue::sizes::{HeadAge, QueueSizes};

impl Driver for DatabaseQueue {
    fn describe(&self) -> String {
        DatabaseQueue::describe(self)
    }

    /// `retry_after` (seconds); `None` for a negative one, which never
    /// lets a reservation lapse.
    fn retry_after(&self) -> Option<u64> {
        u64::try_from(DatabaseQueue::retry_after(self)).ok()
    }

    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>> {
        Box::pin(async move { Ok(self.pop_jobs(queue, count).await?) })
    }

    fn delete<'a>(&'a self, job: &'a ReservedJob, _ended: Ending<'a>) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.delete_job(job).await?) })
    }

    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.release_job(job, delay).await?) })
    }

    /// The row is made available at once: its `available_at` is kept (the
    /// job was due), `delay` does not apply.
    fn hand_back<'a>(&'a self, job: &'a ReservedJob, _delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.hand_back_job(job).await?) })
    }

    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.renew_job(job).await?) })
    }

    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            DatabaseQueue::push(self, &queue.name, payload, 0, now()).await?;
            Ok(())
        })
    }

    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            let at = now();
            let delay = crate::queue::clock::seconds_until(available_at, at);
            DatabaseQueue::push(self, &queue.name, payload, delay, at).await?;
            Ok(())
        })
    }

    /// The oldest pending row's `available_at` is read whatever `head`
    /// says: it costs an index lookup, not a copy of the job.
    fn sizes<'a>(&'a self, queue: &'a QueueHandle, _head: HeadAge) -> Call<'a, QueueSizes> {
        Box::pin(async move {
            let sizes = DatabaseQueue::sizes(self, &queue.name, now()).await?;
            Ok(QueueSizes {
                pending: sizes.pending,
                delayed: sizes.delayed,
                // A due row is pending already: no migration on a table.
                delayed_due: 0,
                reserved: sizes.reserved,
                oldest_pending: sizes.oldest_pending_available_at,
                head_bytes: 0,
            })
        })
    }

    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64> {
        Box::pin(async move { Ok(DatabaseQueue::clear(self, &queue.name).await?) })
    }

    fn at(&self) -> String {
        format!("database {}", DatabaseQueue::describe(self))
    }

    /// The table and its `queue` column.
    fn location(&self, queue: &QueueHandle) -> String {
        format!("{} where queue = '{}'", self.table(), queue.name)
    }

    /// A row whose `attempts` is at its column's limit (a MySQL `tinyint
    /// unsigned` before Laravel 13.6) fails with the overflow's error, as
    /// Laravel 12.54+ fails it rather than select it for ever.
    fn refusal(&self, job: &ReservedJob) -> Option<Refusal> {
        match &job.reservation {
            Reservation::Row {
                at_attempts_limit: true,
                ..
            } => Some(Refusal {
                class: QUERY_EXCEPTION,
                message: self.attempts_limit_exception(),
                failed_hook: true,
            }),
            _ => None,
        }
    }
}
