//! A job the worker has reserved.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::keys::QueueKeys;
use super::payload::{Payload, PayloadError};

/// One reservation, as the pop script returned it.
///
/// `reserved` is the only handle for delete and release: Redis re-encoded it
/// with cjson, so it is kept byte for byte and never rebuilt (protocol §5.6).
///
/// Both byte strings are [`Bytes`]: the buffers Redis's reply was read into,
/// shared (a clone is a reference count, not a copy) by the parsed payload
/// and by every handler call, however large the job.
#[derive(Debug, Clone)]
pub struct ReservedJob {
    /// The queue the job was popped from.
    pub queue: Arc<QueueKeys>,
    /// The original payload, before the attempt was counted. This is what
    /// Laravel calls the raw body: the source of `attempts` and the text
    /// written to `failed_jobs.payload`.
    pub raw: Bytes,
    /// The member now in `:reserved` (attempts + 1, cjson-encoded).
    pub reserved: Bytes,
    /// The parsed payload, or why it cannot be run (a poison payload, which
    /// the pop script reserved as its own bytes so that it is not lost).
    pub payload: Result<Payload, PayloadError>,
    /// Until when the reservation is surely this worker's.
    pub lease: Lease,
}

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
    until: Arc<Mutex<Option<Instant>>>,
}

impl Lease {
    /// A lease confirmed at `sent` (when the pop was sent), for a
    /// connection's `retry_after` seconds (`None`: reservations never
    /// expire).
    pub fn new(retry_after: Option<u64>, sent: Instant) -> Self {
        let lease = Lease {
            retry_after,
            until: Arc::new(Mutex::new(None)),
        };
        lease.confirm(sent);
        lease
    }

    /// The reservation was written or renewed by a command sent at `sent`.
    pub fn confirm(&self, sent: Instant) {
        let until = self
            .retry_after
            .map(|s| sent + Duration::from_secs(s.saturating_sub(1).max(1)));
        if let Ok(mut slot) = self.until.lock() {
            *slot = until;
        }
    }

    /// When the reservation may expire; `None` when it never does.
    pub fn until(&self) -> Option<Instant> {
        self.until.lock().ok().and_then(|until| *until)
    }

    /// True once the reservation may have expired.
    pub fn expired(&self) -> bool {
        self.until().is_some_and(|until| Instant::now() >= until)
    }
}

impl ReservedJob {
    /// The number of this attempt: the original `attempts` + 1, as
    /// `RedisJob::attempts()` counts it. A poison payload counts as attempt 1.
    pub fn attempt(&self) -> u64 {
        self.payload.as_ref().map_or(1, |p| p.attempts() + 1)
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

    /// The payload `id`, or an empty string.
    pub fn id(&self) -> String {
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

    /// The raw body as text (lossy only for payloads that are not UTF-8).
    pub fn raw_text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}
