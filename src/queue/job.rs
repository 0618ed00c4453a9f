//! A job the worker has reserved.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::handle::QueueHandle;
use super::payload::{Payload, PayloadError};
use super::redis_queue::member::RedisReservation;

/// One reservation, whichever driver made it: the job handle every later
/// step of the job goes through.
///
/// On Redis, `reserved` is the only handle for delete and release: Redis
/// re-encoded it with cjson, so it is kept byte for byte and never rebuilt
/// (protocol §5.6).
///
/// Both byte strings are [`Bytes`]: the buffers Redis's reply was read into,
/// shared (a clone is a reference count, not a copy) by the parsed payload
/// and by every handler call, however large the job.
#[derive(Debug, Clone)]
pub struct ReservedJob {
    /// The queue the job was popped from.
    pub queue: Arc<QueueHandle>,
    /// The original payload, before the attempt was counted. This is what
    /// Laravel calls the raw body: the source of `attempts` and the text
    /// written to `failed_jobs.payload`.
    pub raw: Bytes,
    /// The member now in `:reserved` (attempts + 1, cjson-encoded): what
    /// a handler is given as the payload. On the database and SQS drivers,
    /// which count attempts outside the payload, the payload as stored
    /// (the same bytes as `raw`).
    pub reserved: Bytes,
    /// The parsed payload, or why it cannot be run (a poison payload, which
    /// the pop script reserved as its own bytes so that it is not lost).
    pub payload: Result<Payload, PayloadError>,
    /// Until when the reservation is surely this worker's.
    pub lease: Lease,
    /// What names this reservation in the queue, per driver.
    pub reservation: Reservation,
}

/// What names a reservation in its queue, for every later write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Redis: the member in `:reserved` ([`ReservedJob::reserved`], or its
    /// digest) and the keys of its queue.
    Redis(RedisReservation),
    /// A row of the database queue: its `id` and the `attempts` the
    /// reserve wrote (on the database driver `reserved` is the payload
    /// column's bytes, as stored).
    Row {
        /// The guard of every later write.
        handle: super::database::ReservationHandle,
        /// The row's `attempts` was already at its column's limit: the job
        /// must fail rather than run (Laravel 12.54+).
        at_attempts_limit: bool,
    },
    /// An SQS message: its queue URL, `MessageId`, receipt handle and
    /// receive count (on the SQS driver `reserved` is the body, as `raw`).
    Message(Arc<super::sqs::MessageHandle>),
    /// A job of any other driver: its id, its attempt, and the driver's
    /// own data, which only that driver reads. A new driver needs no
    /// variant of its own.
    Handle(DriverHandle),
}

/// A reservation of a driver that keeps its own data (see
/// [`Reservation::Handle`]).
#[derive(Clone)]
pub struct DriverHandle {
    /// The job's id, as that driver's `Job::getJobId()` gives it.
    pub id: String,
    /// The number of this attempt (1 on the first run), as that driver's
    /// `Job::attempts()` counts it.
    pub attempt: u64,
    /// What names the reservation to its driver (a token, a job id).
    pub data: Arc<dyn std::any::Any + Send + Sync>,
}

impl DriverHandle {
    /// The driver's data, when it is a `T` (the driver that reserved the
    /// job reads its own; any other gets `None`).
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for DriverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverHandle")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they name the same reservation (the same
/// driver data, not merely equal data).
impl PartialEq for DriverHandle {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && Arc::ptr_eq(&self.data, &other.data)
    }
}

impl Eq for DriverHandle {}

/// Until when a reservation is surely still this worker's: its pop or its
/// last renewal plus `retry_after - 1` seconds (scores are whole seconds
/// and reclaiming is inclusive, so that is the least it lasts; taken as
/// at least one second, since `retry_after = 1` cannot be protected at all).
/// Past it,
/// another worker may have reclaimed the job. Shared by the clones of a
/// [`ReservedJob`].
#[derive(Debug, Clone)]
pub struct Lease {
    retry_after: Option<u64>,
    state: Arc<Mutex<LeaseState>>,
}

/// What a [`Lease`] knows, changed together under one lock.
#[derive(Debug, Clone, Copy)]
struct LeaseState {
    /// When the command that last wrote the reservation (the pop, or the
    /// last confirmed renewal) was sent.
    confirmed: Instant,
    /// When the reservation may expire; `None` when it never does.
    until: Option<Instant>,
}

impl Lease {
    /// A lease confirmed at `sent` (when the pop was sent), for a
    /// connection's `retry_after` seconds (`None`: reservations never
    /// expire).
    pub fn new(retry_after: Option<u64>, sent: Instant) -> Self {
        let lease = Lease {
            retry_after,
            state: Arc::new(Mutex::new(LeaseState {
                confirmed: sent,
                until: None,
            })),
        };
        lease.confirm(sent);
        lease
    }

    /// The reservation was written or renewed by a command sent at `sent`.
    pub fn confirm(&self, sent: Instant) {
        let until = self
            .retry_after
            .map(|s| sent + Duration::from_secs(s.saturating_sub(1).max(1)));
        self.update(|state| {
            state.confirmed = sent;
            state.until = until;
        });
    }

    /// When the command that last wrote the reservation (the pop, or the
    /// last confirmed renewal) was sent: the reservation's time runs from
    /// there, however long that command then waited.
    pub fn confirmed(&self) -> Instant {
        self.state().confirmed
    }

    /// When the reservation may expire; `None` when it never does.
    pub fn until(&self) -> Option<Instant> {
        self.state().until
    }

    /// True once the reservation may have expired.
    pub fn expired(&self) -> bool {
        self.until().is_some_and(|until| Instant::now() >= until)
    }

    fn state(&self) -> LeaseState {
        match self.state.lock() {
            Ok(state) => *state,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut LeaseState)) {
        match self.state.lock() {
            Ok(mut state) => change(&mut state),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }
}

impl ReservedJob {
    /// The number of this attempt: the original `attempts` + 1, as
    /// `RedisJob::attempts()` counts it. A poison payload counts as attempt 1.
    pub fn attempt(&self) -> u64 {
        match &self.reservation {
            // The row's column, as `DatabaseJob::attempts()` reads it.
            Reservation::Row { handle, .. } => u64::try_from(handle.attempts).unwrap_or(0),
            // `ApproximateReceiveCount`, as `SqsJob::attempts()` reads it
            // (an `attempts` key a Vapor or Bref payload carries is not).
            Reservation::Message(message) => message.receive_count,
            Reservation::Handle(handle) => handle.attempt,
            Reservation::Redis(_) => self.payload.as_ref().map_or(1, |p| p.attempts() + 1),
        }
    }

    /// The name shown in output and used for routing (`displayName`, else
    /// `job`); Laravel shows "Invalid queue job payload" when it has none.
    pub fn display_name(&self) -> &str {
        self.payload
            .as_ref()
            .ok()
            .and_then(Payload::display_name)
            .unwrap_or("Invalid queue job payload")
    }

    /// The job's id as Laravel's `getJobId()` gives it: the payload `id`
    /// on Redis (or an empty string), the row's `id` on the database,
    /// the `MessageId` on SQS.
    pub fn id(&self) -> String {
        match &self.reservation {
            Reservation::Row { handle, .. } => return handle.id.to_string(),
            Reservation::Message(message) => return message.message_id.to_string(),
            Reservation::Handle(handle) => return handle.id.clone(),
            Reservation::Redis(_) => {}
        }
        self.payload
            .as_ref()
            .ok()
            .and_then(Payload::id)
            .unwrap_or_default()
    }

    /// The payload `uuid`, if any; for a poison payload that is a JSON
    /// object with a string `uuid` but no usable `attempts`, that `uuid`.
    pub fn uuid(&self) -> Option<&str> {
        match &self.payload {
            Ok(payload) => payload.uuid(),
            Err(PayloadError::NoAttempts { uuid }) => uuid.as_deref(),
            Err(PayloadError::NotAnObject(_)) => None,
        }
    }
}
