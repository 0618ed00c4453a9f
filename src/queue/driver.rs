//! [`Queue`]: the driver seam. The worker loop, the settle, the lease, the
//! listeners and the admin commands reach the queue only through it, and
//! never know which driver runs: each operation is Laravel's (reserve,
//! renew, delete, release, hand back, push, sizes, clear), carried out as
//! that driver's `Queue` class stores it.
//!
//! A new driver is a variant here and a module of its own beside
//! [`redis_queue`](super::redis_queue); nothing outside `queue/` changes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::error::QueueResult;
use super::keys::QueueKeys;
use super::migrated::Migrated;
use super::redis_queue::{QueueSizes, RedisQueue, WaitingForJobs};
use super::ReservedJob;
use super::elsewhere::QueueElsewhere;

/// A queue connection, whichever driver serves it.
#[derive(Clone)]
pub enum Queue {
    /// Laravel's `RedisQueue`.
    Redis(RedisQueue),
}

impl From<RedisQueue> for Queue {
    fn from(queue: RedisQueue) -> Self {
        Queue::Redis(queue)
    }
}

impl Queue {
    /// Where the queue lives, for logs (never a password).
    pub fn describe(&self) -> String {
        match self {
            Queue::Redis(q) => q.describe(),
        }
    }

    /// The handle of queue `name` (its keys, on Redis), built once.
    pub fn keys(&self, name: &str) -> Arc<QueueKeys> {
        match self {
            Queue::Redis(q) => q.keys(name),
        }
    }

    /// Seconds a reservation lasts before another worker may take the job
    /// again; `None`: never (Redis with `retry_after => null`).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Queue::Redis(q) => q.retry_after(),
        }
    }

    /// Seconds an idle fetch blocks waiting for a push (`block_for`);
    /// `None`: the driver has no such wait, or it is off.
    pub fn block_for(&self) -> Option<u64> {
        match self {
            Queue::Redis(q) => q.block_for(),
        }
    }

    /// Reserves up to `count` jobs of `queue` (Laravel's `pop`), the
    /// attempt counted, oldest first.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the reservation; nothing
    /// was reserved then, or what was is reclaimed after `retry_after`.
    pub async fn pop(&self, queue: &Arc<QueueKeys>, count: usize) -> QueueResult<Vec<ReservedJob>> {
        match self {
            Queue::Redis(q) => Ok(q.pop(queue, count).await?),
        }
    }

    /// Waits up to `wait` (`None`: for ever) for a job pushed to any of
    /// `queues`; true when one may have come. A driver without a wake-up
    /// of its own sleeps the wait out.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn block_on_notify(
        &self,
        queues: &[Arc<QueueKeys>],
        wait: Option<Duration>,
    ) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.block_on_notify(queues, wait).await?),
        }
    }

    /// Marks a fetch as waiting for jobs until the guard is dropped (a job
    /// released meanwhile with no delay then wakes it).
    pub fn waiting_for_jobs(&self) -> Option<WaitingForJobs> {
        match self {
            Queue::Redis(q) => Some(q.waiting_for_jobs()),
        }
    }

    /// What the driver moved to the ready list since the last call
    /// (delayed jobs come due, reservations reclaimed).
    pub fn take_migrated(&self) -> Vec<Migrated> {
        match self {
            Queue::Redis(q) => q.take_migrated(),
        }
    }

    /// Deletes `job` (it ran). False when its reservation was already
    /// gone (reclaimed by another worker).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn delete(&self, job: &ReservedJob) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.delete(job).await?),
        }
    }

    /// Releases `job`, its attempt counted, available again in `delay`
    /// seconds. False when its reservation was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn release(&self, job: &ReservedJob, delay: u64) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.release(job, delay).await?),
        }
    }

    /// Hands `job` back uncounted (it never ran), available again in
    /// `delay` seconds. False when its reservation was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn hand_back(&self, job: &ReservedJob, delay: u64) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.hand_back(job, delay).await?),
        }
    }

    /// Moves `job`'s reservation forward by `retry_after` (ours; Laravel
    /// never does). False when the reservation is gone.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn renew(&self, job: &ReservedJob) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.renew(job).await?),
        }
    }

    /// Replaces `job`'s reservation by its failure `record` (failed at
    /// `at`, UNIX seconds), kept until the failed-job store is back.
    /// False when the reservation was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn park_failure(&self, job: &ReservedJob, record: Bytes, at: i64) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.park_failure(job, record, at).await?),
        }
    }

    /// Up to `count` failure records parked on `queue`, oldest first.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn unrecorded(&self, queue: &QueueKeys, count: usize) -> QueueResult<Vec<Vec<u8>>> {
        match self {
            Queue::Redis(q) => Ok(q.unrecorded(queue, count).await?),
        }
    }

    /// Forgets a parked failure `record` of `queue` (it reached the store).
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn forget_unrecorded(&self, queue: &QueueKeys, record: &[u8]) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.forget_unrecorded(queue, record).await?),
        }
    }

    /// Pushes `payload` to `queue`, available now (`Queue::push`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn push(&self, queue: &QueueKeys, payload: &str) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.push(queue, payload).await?),
        }
    }

    /// Pushes `payload` to `queue`, available at `available_at` (UNIX
    /// seconds; `Queue::later`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn later(&self, queue: &QueueKeys, available_at: i64, payload: &str) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.later(queue, available_at, payload).await?),
        }
    }

    /// `queue`'s jobs by state: pending, delayed (and due), reserved, and
    /// when the oldest pending one was pushed.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn sizes(&self, queue: &QueueKeys) -> QueueResult<QueueSizes> {
        match self {
            Queue::Redis(q) => Ok(q.sizes(queue).await?),
        }
    }

    /// Deletes every job of `queue`, reserved ones included (`queue:clear`);
    /// returns how many.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn clear(&self, queue: &QueueKeys) -> QueueResult<u64> {
        match self {
            Queue::Redis(q) => Ok(q.clear(queue).await?),
        }
    }

    /// Where else jobs of `queue` wait (the same queue under another
    /// prefix), for the start-up hint; empty when the driver has no such
    /// place.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn elsewhere(&self, queue: &QueueKeys) -> QueueResult<Vec<QueueElsewhere>> {
        match self {
            Queue::Redis(q) => Ok(q.elsewhere(queue).await?),
        }
    }

    /// Gives back the memory a large job left in the connection's buffers.
    pub async fn renew_connection(&self) {
        match self {
            Queue::Redis(q) => q.renew_connection().await,
        }
    }
}
