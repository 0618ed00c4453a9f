//! The driver seam: [`Driver`], what every queue driver implements, and
//! [`Queue`], the handle the rest of the worker holds.
//!
//! The worker loop, the settle, the lease, the listeners and the admin
//! commands reach the queue only through it, and never know which driver
//! runs. Like Laravel's `Queue` and `Job` contracts, the trait has a small
//! required core (reserve, delete, release, hand back, renew, push, later,
//! sizes, clear, describe, retry_after) and, like ripgrep's `Matcher`,
//! defaulted capabilities that one driver has and the others answer with
//! "none": a wake-up on push, failures parked in the queue
//! ([`ParksFailures`]), writes that go with a delete (a settle
//! companion), receives held at stop, the same queue under another prefix.
//!
//! A new driver is a type implementing [`Driver`] in a folder of its own
//! beside `database/` and `sqs/`, opened by `app::open_queue`.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::ReservedJob;
use super::companion::{Ending, SettleCompanion};
use super::error::QueueResult;
use super::handle::QueueHandle;
use super::migrated::Migrated;
use super::redis_queue::elsewhere::QueueElsewhere;
use super::sizes::{HeadAge, QueueSizes};
pub use super::sqs::overflow::PayloadStore;

/// A queue call under way: a boxed future, so that [`Driver`] can be a
/// trait object. The allocation costs far less than any round trip to a
/// queue (a Redis script, a commit, an HTTPS request).
pub type Call<'a, T> = Pin<Box<dyn Future<Output = QueueResult<T>> + Send + 'a>>;

/// A call under way that cannot fail (a wait, a clean-up).
pub type Step<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A queue driver: how one of Laravel's `Queue` classes stores jobs,
/// carried out by this worker.
///
/// Every write that names a reserved job answers `Ok(false)` when the
/// reservation is gone (the job was reclaimed by another worker, deleted,
/// or its lease lapsed) and then changes nothing. Errors carry an
/// [`super::error::ErrorKind`]: the settle tries an
/// [`Unavailable`](super::error::ErrorKind::Unavailable) write again while
/// the reservation lasts, and gives up at once on a
/// [`Refused`](super::error::ErrorKind::Refused) one.
pub trait Driver: Send + Sync + 'static {
    /// Where the queue lives, for logs (never a password).
    fn describe(&self) -> String;

    /// Seconds a reservation lasts before another worker may take the job
    /// again (`retry_after`, SQS's visibility timeout); `None`: never
    /// (Redis with `retry_after => null`).
    fn retry_after(&self) -> Option<u64>;

    /// Reserves up to `count` jobs of `queue` (Laravel's `pop`), the
    /// attempt counted, oldest first.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the reservation; nothing
    /// was reserved then, or what was is reclaimed after `retry_after`.
    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>>;

    /// Deletes `job`, which `ended` so (Laravel's `Job::delete`); a driver
    /// with a settle companion ([`Driver::set_companion`]) writes the
    /// companion's records in the same step. False when the reservation
    /// was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn delete<'a>(&'a self, job: &'a ReservedJob, ended: Ending<'a>) -> Call<'a, bool>;

    /// Releases `job`, its attempt counted, available again in `delay`
    /// seconds (`Job::release`). False when its reservation was already
    /// gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool>;

    /// Hands `job` back uncounted (it never ran: the worker stopped, or no
    /// slot took it), available again in `delay` seconds where the driver
    /// can delay it. False when its reservation was already gone. Ours;
    /// Laravel has no such call.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn hand_back<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool>;

    /// Moves `job`'s reservation forward by `retry_after` (ours; Laravel
    /// never does). False when the reservation is gone.
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool>;

    /// Pushes `payload` to `queue`, available now (`Queue::push`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()>;

    /// Pushes `payload` to `queue`, available at `available_at` (UNIX
    /// seconds; `Queue::later`).
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write (SQS refuses a
    /// delay over 900 s, as AWS refuses Laravel's).
    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()>;

    /// `queue`'s jobs by state, and when `head` is [`HeadAge::Read`] when
    /// the oldest pending one was pushed (`queue:monitor`).
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn sizes<'a>(&'a self, queue: &'a QueueHandle, head: HeadAge) -> Call<'a, QueueSizes>;

    /// Deletes every job of `queue`, reserved ones included
    /// (`queue:clear`); returns how many.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64>;

    /// Whether `queues` exist, where the driver can tell and a queue is not
    /// made by its first push (SQS: Laravel never creates a queue). An
    /// error refuses the start, naming the queue and what to do; a queue
    /// that cannot be reached is no error here (the loop logs it and
    /// backs off). Default: nothing to check.
    ///
    /// # Errors
    /// A queue does not exist, or the driver refuses to read it.
    fn check_queues<'a>(&'a self, _queues: &'a [Arc<QueueHandle>]) -> Call<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    // ---- How the driver names things (defaults: by the queue's name) ----

    /// Where the queue is, in the words of a log line (`Redis at HOST db
    /// N`, `database ENGINE …, table T`; never a password).
    fn at(&self) -> String {
        self.describe()
    }

    /// The handle of queue `name`, built once per queue and passed to
    /// every later call naming it (Redis builds its keys into it; other
    /// drivers read only the name).
    fn handle(&self, name: &str) -> Arc<QueueHandle> {
        Arc::new(QueueHandle::named(name))
    }

    /// Where `queue`'s jobs are, for logs (a key, a table and its `queue`
    /// column, a queue URL).
    fn location(&self, queue: &QueueHandle) -> String {
        queue.name.clone()
    }

    /// The queue a failed job of `queue` is recorded under in
    /// `failed_jobs.queue`, as the driver's `Job::getQueue()` gives it.
    fn failed_queue_name(&self, queue: &QueueHandle) -> String {
        queue.name.clone()
    }

    /// Whether a payload of this driver carries its `id` and `attempts`
    /// (only `RedisQueue::createPayloadArray` adds them).
    fn counts_in_payload(&self) -> bool {
        false
    }

    /// Whether a job's settle write may overlap the next reservation (its
    /// slot given back as the write is sent, see `worker::slot`): only
    /// where both share one multiplexed connection (Redis).
    fn overlaps_settles(&self) -> bool {
        false
    }

    /// Why `job` must fail without running, when its queue says so: a
    /// database row whose `attempts` is at its column's limit (which
    /// Laravel 12.54+ fails with the overflow's error), an SQS overflow
    /// pointer the worker cannot follow.
    fn refusal(&self, _job: &ReservedJob) -> Option<Refusal> {
        None
    }

    // ---- Waiting for jobs (default: sleep the wait out) ----

    /// Seconds an idle fetch blocks waiting for a push (`block_for`);
    /// `None`: the driver has no such wait, or it is off.
    fn block_for(&self) -> Option<u64> {
        None
    }

    /// Waits up to `wait` (`None`: for ever) for a job pushed to any of
    /// `queues`; true when one may have come. A driver without a wake-up
    /// of its own sleeps the wait out. `horizon`: how long a receive may
    /// stay in flight before the worker may stop.
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn block_on_notify<'a>(
        &'a self,
        _queues: &'a [Arc<QueueHandle>],
        wait: Option<Duration>,
        _horizon: Option<Duration>,
    ) -> Call<'a, bool> {
        Box::pin(async move {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending::<()>().await,
            }
            Ok(false)
        })
    }

    /// Marks a fetch as waiting for jobs until the guard is dropped (a job
    /// released meanwhile with no delay then wakes it); `None` where
    /// nothing wakes a wait.
    fn waiting_for_jobs(&self) -> Option<WaitingForJobs> {
        None
    }

    /// What the driver moved to the ready jobs since the last call
    /// (delayed jobs come due, reservations reclaimed), for the `migrated`
    /// event; empty where nothing moves.
    fn take_migrated(&self) -> Vec<Migrated> {
        Vec::new()
    }

    // ---- Capabilities (default: none) ----

    /// Installs `companion`, whose writes go with every later delete of a
    /// finished job; false when the driver takes none or one is installed
    /// already.
    fn set_companion(&self, _companion: Arc<dyn SettleCompanion>) -> bool {
        false
    }

    /// Hands the driver the store its message bodies may point into
    /// (Laravel 13.9+'s SQS overflow payloads: the worker's cache store);
    /// false when the driver has no such pointers.
    fn set_payload_store(&self, _store: Arc<dyn PayloadStore>) -> bool {
        false
    }

    /// Where failures wait while the failed-job store is down; `None`: the
    /// job stays reserved and comes back after `retry_after`.
    fn parking(&self) -> Option<&dyn ParksFailures> {
        None
    }

    /// What the queue received for this worker and holds unstarted, once
    /// its receives in flight have ended (waiting at most `within`): SQS's
    /// long polls in flight at stop. Empty where nothing is held.
    fn take_received<'a>(
        &'a self,
        _queues: &'a [Arc<QueueHandle>],
        _within: Duration,
    ) -> Step<'a, Vec<ReservedJob>> {
        Box::pin(async { Vec::new() })
    }

    /// Where else jobs of `queue` wait (the same queue under another
    /// prefix), for the start-up hint; empty when the driver has no such
    /// place.
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn elsewhere<'a>(&'a self, _queue: &'a QueueHandle) -> Call<'a, Vec<QueueElsewhere>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Gives back the memory a large job left in the connection's buffers.
    fn renew_connection(&self) -> Step<'_, ()> {
        Box::pin(async {})
    }
}

/// A driver that keeps a failure record in the queue while the failed-job
/// store is down (Redis: the queue's `:unrecorded`), until the store is
/// back and the record is written there.
pub trait ParksFailures: Send + Sync {
    /// Where `queue`'s parked failures are, for logs (a key).
    fn parked_at(&self, queue: &QueueHandle) -> String;

    /// Replaces `job`'s reservation by its failure `record` (failed at
    /// `at`, UNIX seconds). False when the reservation was already gone.
    ///
    /// # Errors
    /// The queue cannot be reached or refused the write.
    fn park_failure<'a>(&'a self, job: &'a ReservedJob, record: Bytes, at: i64) -> Call<'a, bool>;

    /// Up to `count` failure records parked on `queue`, oldest first.
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn unrecorded<'a>(&'a self, queue: &'a QueueHandle, count: usize) -> Call<'a, Vec<Vec<u8>>>;

    /// Forgets a parked failure `record` of `queue` (it reached the store).
    ///
    /// # Errors
    /// The queue cannot be reached.
    fn forget_unrecorded<'a>(&'a self, queue: &'a QueueHandle, record: &'a [u8]) -> Call<'a, ()>;
}

/// Why a job fails without running (see [`Driver::refusal`]): the
/// exception recorded, as Laravel would record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The exception's class (`Illuminate\Database\QueryException`, …).
    pub class: &'static str,
    /// Its message, naming what is wrong and what to do.
    pub message: String,
    /// Whether the app's failure logic (`failed()`, through the handler in
    /// failed mode) runs for it, as it would for this failure under
    /// `queue:work`.
    pub failed_hook: bool,
}

/// A fetch under way that a job released with no delay may wake, from
/// [`Driver::waiting_for_jobs`] until dropped (the driver's own guard).
pub struct WaitingForJobs(#[allow(dead_code)] Box<dyn Send + Sync>);

impl WaitingForJobs {
    /// Holds `guard`, which the driver counts fetches by until it is
    /// dropped.
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        WaitingForJobs(Box::new(guard))
    }
}

/// A queue connection, whichever driver serves it: a shared handle to a
/// [`Driver`] (cloning it clones a reference count).
#[derive(Clone)]
pub struct Queue(Arc<dyn Driver>);

impl<D: Driver> From<D> for Queue {
    fn from(driver: D) -> Self {
        Queue(Arc::new(driver))
    }
}

impl Deref for Queue {
    type Target = dyn Driver;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl Queue {
    /// A handle on a driver the caller keeps a handle on too (a test
    /// steering its memory queue).
    #[cfg(test)]
    pub fn shared(driver: Arc<dyn Driver>) -> Self {
        Queue(driver)
    }

    /// Whether the driver can keep a failure record while the failed-job
    /// store is down (see [`ParksFailures`]).
    pub fn parks_failures(&self) -> bool {
        self.0.parking().is_some()
    }
}
