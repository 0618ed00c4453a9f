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

use super::ReservedJob;
use super::clock::now;
use super::companion::{Ending, SettleCompanion};
use super::database::DatabaseQueue;
use super::elsewhere::QueueElsewhere;
use super::error::QueueError;
use super::error::QueueResult;
use super::keys::QueueKeys;
use super::migrated::Migrated;
use super::redis_queue::{HeadAge, QueueSizes, RedisQueue, WaitingForJobs};
use super::sqs::SqsQueue;

/// A queue connection, whichever driver serves it.
///
/// In the calls each job makes (pop, delete, release, hand back, renew),
/// the database's and SQS's futures are boxed: they are many times the
/// Redis ones (sqlx's, the AWS SDK's), and unboxed each job's future on
/// Redis would carry their size, copied whole into every job's task. A
/// commit or an HTTPS request costs far more than the allocation.
// One per worker, held behind `Arc<Services>`: the size never travels.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Queue {
    /// Laravel's `RedisQueue`.
    Redis(RedisQueue),
    /// Laravel's `DatabaseQueue` (the `jobs` table).
    Database(DatabaseQueue),
    /// Laravel's `SqsQueue` (Amazon SQS).
    Sqs(SqsQueue),
}

impl From<SqsQueue> for Queue {
    fn from(queue: SqsQueue) -> Self {
        Queue::Sqs(queue)
    }
}

impl From<DatabaseQueue> for Queue {
    fn from(queue: DatabaseQueue) -> Self {
        Queue::Database(queue)
    }
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
            Queue::Database(q) => q.describe(),
            Queue::Sqs(q) => q.describe(),
        }
    }

    /// Where the queue is, in the words of a log line: `Redis at HOST db N`,
    /// or `database ENGINE …, table T` (never a password).
    pub fn at(&self) -> String {
        match self {
            Queue::Redis(q) => format!("Redis at {}", q.describe()),
            Queue::Database(q) => format!("database {}", q.describe()),
            // Its description starts with "SQS" already.
            Queue::Sqs(q) => q.describe(),
        }
    }

    /// The handle of queue `name` (its keys, on Redis), built once.
    pub fn keys(&self, name: &str) -> Arc<QueueKeys> {
        match self {
            Queue::Redis(q) => q.keys(name),
            // The keys are Redis's; the database driver reads only the name.
            Queue::Database(_) | Queue::Sqs(_) => Arc::new(QueueKeys::new("", name, false)),
        }
    }

    /// Whether a job's settle write may overlap the next reservation (its
    /// slot given back as the write is sent, see `worker::slot`): true on
    /// Redis, where both go over the queue's one multiplexed connection
    /// and the reservation no longer waits a round trip for the write's
    /// answer. The database and SQS drivers settle first, as before.
    pub fn overlaps_settles(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// Whether a payload of this driver carries its `id` and `attempts`
    /// (only `RedisQueue::createPayloadArray` adds them).
    pub fn counts_in_payload(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// Where `queue`'s jobs are, for logs: the ready list's full key on
    /// Redis, the table and queue column on the database.
    pub fn location(&self, queue: &QueueKeys) -> String {
        match self {
            Queue::Redis(_) => queue.ready.clone(),
            Queue::Database(q) => format!("{} where queue = '{}'", q.table(), queue.name),
            Queue::Sqs(q) => q.url_of(&queue.name),
        }
    }

    /// The queue a failed job of `queue` is recorded under in
    /// `failed_jobs.queue`, as the driver's `Job::getQueue()` gives it:
    /// the name, or on SQS the queue URL (`SqsJob` is given the URL).
    pub fn failed_queue_name(&self, queue: &QueueKeys) -> String {
        match self {
            Queue::Sqs(q) => q.url_of(&queue.name),
            _ => queue.name.clone(),
        }
    }

    /// Where the connection's overflow payloads are: SQS only (Laravel
    /// 13.9+ moves a large payload to a cache store and sends a pointer
    /// to it); `None` on the other drivers, whose bodies are the payloads.
    pub fn overflow(&self) -> Option<&super::sqs::Overflow> {
        match self {
            Queue::Sqs(q) => Some(q.overflow()),
            Queue::Redis(_) | Queue::Database(_) => None,
        }
    }

    /// Seconds a reservation lasts before another worker may take the job
    /// again; `None`: never (Redis with `retry_after => null`).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Queue::Redis(q) => q.retry_after(),
            Queue::Database(q) => u64::try_from(q.retry_after()).ok(),
            // The visibility timeout every receive asks for.
            Queue::Sqs(q) => Some(q.visibility()),
        }
    }

    /// Seconds an idle fetch blocks waiting for a push (`block_for`);
    /// `None`: the driver has no such wait, or it is off.
    pub fn block_for(&self) -> Option<u64> {
        match self {
            Queue::Redis(q) => q.block_for(),
            Queue::Database(_) => None,
            // Unset: the idle wait lasts --sleep, and long polls (20 s)
            // on every queue run through it (see `sqs::receive`).
            Queue::Sqs(_) => None,
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
            Queue::Database(q) => Ok(Box::pin(q.pop_jobs(queue, count)).await?),
            Queue::Sqs(q) => Ok(Box::pin(q.pop_jobs(queue, count)).await?),
        }
    }

    /// Waits up to `wait` (`None`: for ever) for a job pushed to any of
    /// `queues`; true when one may have come. A driver without a wake-up
    /// of its own sleeps the wait out. `horizon`: how long a receive may
    /// stay in flight before the worker may stop (SQS cuts its long polls
    /// to it, see [`SqsQueue::block_on_notify`]).
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn block_on_notify(
        &self,
        queues: &[Arc<QueueKeys>],
        wait: Option<Duration>,
        horizon: Option<Duration>,
    ) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.block_on_notify(queues, wait).await?),
            // Long polls on every queue at once.
            Queue::Sqs(q) => Ok(Box::pin(q.block_on_notify(queues, wait, horizon)).await?),
            // No wake-up on a table: the wait is `--sleep`, then the next poll.
            Queue::Database(_) => {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending::<()>().await,
                }
                Ok(false)
            }
        }
    }

    /// Marks a fetch as waiting for jobs until the guard is dropped (a job
    /// released meanwhile with no delay then wakes it).
    pub fn waiting_for_jobs(&self) -> Option<WaitingForJobs> {
        match self {
            Queue::Redis(q) => Some(q.waiting_for_jobs()),
            Queue::Database(_) | Queue::Sqs(_) => None,
        }
    }

    /// What the driver moved to the ready list since the last call
    /// (delayed jobs come due, reservations reclaimed).
    pub fn take_migrated(&self) -> Vec<Migrated> {
        match self {
            Queue::Redis(q) => q.take_migrated(),
            Queue::Database(_) | Queue::Sqs(_) => Vec::new(),
        }
    }

    /// Deletes `job`, which `ended` so, with the writes of the settle
    /// companion installed, if any, in the same step (see
    /// [`super::companion`]); as a plain delete on a driver without one. False when the
    /// reservation was already gone (reclaimed by another worker).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn delete_settled(&self, job: &ReservedJob, ended: Ending<'_>) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.delete_settled(job, ended).await?),
            Queue::Database(q) => Ok(Box::pin(q.delete_job(job)).await?),
            Queue::Sqs(q) => Ok(Box::pin(q.delete_job(job)).await?),
        }
    }

    /// Installs `companion`, whose writes go with every later delete of a
    /// finished job; false when the driver takes none (only Redis does) or
    /// one is installed already.
    pub fn set_companion(&self, companion: Arc<dyn SettleCompanion>) -> bool {
        match self {
            Queue::Redis(q) => q.set_companion(companion),
            Queue::Database(_) | Queue::Sqs(_) => false,
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
            Queue::Database(q) => Ok(Box::pin(q.release_job(job, delay)).await?),
            Queue::Sqs(q) => Ok(Box::pin(q.release_job(job, delay)).await?),
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
            Queue::Database(q) => Ok(Box::pin(q.hand_back_job(job)).await?),
            Queue::Sqs(q) => Ok(Box::pin(q.hand_back_job(job, delay)).await?),
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
            Queue::Database(q) => Ok(Box::pin(q.renew_job(job)).await?),
            Queue::Sqs(q) => Ok(Box::pin(q.renew_job(job)).await?),
        }
    }

    /// Replaces `job`'s reservation by its failure `record` (failed at
    /// `at`, UNIX seconds), kept until the failed-job store is back.
    /// False when the reservation was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn park_failure(
        &self,
        job: &ReservedJob,
        record: Bytes,
        at: i64,
    ) -> QueueResult<bool> {
        match self {
            Queue::Redis(q) => Ok(q.park_failure(job, record, at).await?),
            // No place for it in a table: the job stays reserved (the settle
            // tries until its lease runs out) and is reclaimed after
            // retry_after, once the failed store may be back.
            Queue::Database(_) => Err(QueueError::Unsupported(
                "the database queue keeps no failure records while the failed job store is down",
            )),
            // Nor a queue: the message stays in flight and SQS shows it
            // again after its visibility timeout.
            Queue::Sqs(_) => Err(QueueError::Unsupported(
                "the SQS queue keeps no failure records while the failed job store is down",
            )),
        }
    }

    /// What the queue received for this worker and holds unstarted, once
    /// its receives in flight have ended (waiting at most `within`): on
    /// SQS, the messages of long polls still in flight when the loop
    /// stopped (see [`SqsQueue::take_received`]); Redis and the database
    /// hold nothing between pops.
    pub async fn take_received(
        &self,
        queues: &[Arc<QueueKeys>],
        within: Duration,
    ) -> Vec<ReservedJob> {
        match self {
            Queue::Sqs(q) => q.take_received(queues, within).await,
            Queue::Redis(_) | Queue::Database(_) => Vec::new(),
        }
    }

    /// Whether [`Queue::park_failure`] can keep a failure record while the
    /// failed-job store is down: only Redis has a place for it (the
    /// queue's `:unrecorded`); a database row or an SQS message stays
    /// reserved and comes back after `retry_after` (the visibility timeout).
    pub fn parks_failures(&self) -> bool {
        matches!(self, Queue::Redis(_))
    }

    /// Up to `count` failure records parked on `queue`, oldest first.
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn unrecorded(&self, queue: &QueueKeys, count: usize) -> QueueResult<Vec<Vec<u8>>> {
        match self {
            Queue::Redis(q) => Ok(q.unrecorded(queue, count).await?),
            Queue::Database(_) | Queue::Sqs(_) => Ok(Vec::new()),
        }
    }

    /// Forgets a parked failure `record` of `queue` (it reached the store).
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn forget_unrecorded(&self, queue: &QueueKeys, record: &[u8]) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.forget_unrecorded(queue, record).await?),
            Queue::Database(_) | Queue::Sqs(_) => Ok(()),
        }
    }

    /// Pushes `payload` to `queue`, available now (`Queue::push`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn push(&self, queue: &QueueKeys, payload: &str) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.push(queue, payload).await?),
            Queue::Database(q) => {
                q.push(&queue.name, payload, 0, now()).await?;
                Ok(())
            }
            Queue::Sqs(q) => Ok(q.send(&queue.name, payload, 0).await?),
        }
    }

    /// Pushes `payload` to `queue`, available at `available_at` (UNIX
    /// seconds; `Queue::later`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    pub async fn later(
        &self,
        queue: &QueueKeys,
        available_at: i64,
        payload: &str,
    ) -> QueueResult<()> {
        match self {
            Queue::Redis(q) => Ok(q.later(queue, available_at, payload).await?),
            Queue::Database(q) => {
                let at = now();
                let delay = u64::try_from(available_at.saturating_sub(at)).unwrap_or(0);
                q.push(&queue.name, payload, delay, at).await?;
                Ok(())
            }
            // DelaySeconds: at most 900 s, refused above (as AWS refuses
            // Laravel's send).
            Queue::Sqs(q) => {
                let delay = u64::try_from(available_at.saturating_sub(now())).unwrap_or(0);
                Ok(q.send(&queue.name, payload, delay).await?)
            }
        }
    }

    /// `queue`'s jobs by state: pending, delayed (and due), reserved, and,
    /// when `head` is [`HeadAge::Read`], when the oldest pending one was
    /// pushed (on Redis that copies the head job whole; see [`HeadAge`]).
    ///
    /// # Errors
    /// The queue cannot be reached.
    pub async fn sizes(&self, queue: &QueueKeys, head: HeadAge) -> QueueResult<QueueSizes> {
        match self {
            Queue::Redis(q) => Ok(q.sizes(queue, head).await?),
            Queue::Database(q) => {
                let sizes = q.sizes(&queue.name, now()).await?;
                Ok(QueueSizes {
                    pending: sizes.pending,
                    delayed: sizes.delayed,
                    // A due row is pending already: no migration on a table.
                    delayed_due: 0,
                    reserved: sizes.reserved,
                    oldest_pending: sizes.oldest_pending_available_at,
                    head_bytes: 0,
                })
            }
            Queue::Sqs(q) => {
                let sizes = q.sizes(&queue.name).await?;
                Ok(QueueSizes {
                    pending: sizes.pending,
                    delayed: sizes.delayed,
                    delayed_due: 0,
                    reserved: sizes.reserved,
                    // SQS does not say (Laravel gives null too).
                    oldest_pending: None,
                    head_bytes: 0,
                })
            }
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
            Queue::Database(q) => Ok(q.clear(&queue.name).await?),
            Queue::Sqs(q) => Ok(q.purge(&queue.name).await?),
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
            Queue::Database(_) | Queue::Sqs(_) => Ok(Vec::new()),
        }
    }

    /// Why `job` must fail without running, when its queue says so: a
    /// database row whose `attempts` is at its column's limit (a MySQL
    /// `tinyint unsigned` before Laravel 13.6), which Laravel 12.54+ fails
    /// with the overflow's error rather than select it for ever.
    pub fn refusal(&self, job: &ReservedJob) -> Option<String> {
        match (self, &job.reservation) {
            (
                Queue::Database(q),
                super::job::Reservation::Row {
                    at_attempts_limit: true,
                    ..
                },
            ) => Some(q.attempts_limit_exception()),
            _ => None,
        }
    }

    /// Gives back the memory a large job left in the connection's buffers.
    pub async fn renew_connection(&self) {
        match self {
            Queue::Redis(q) => q.renew_connection().await,
            Queue::Database(_) | Queue::Sqs(_) => {}
        }
    }
}
