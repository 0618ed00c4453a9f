//! A job the worker has reserved.

use std::sync::Arc;

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

    /// The payload `uuid`, if any.
    pub fn uuid(&self) -> Option<&str> {
        self.payload.as_ref().ok().and_then(Payload::uuid)
    }

    /// The raw body as text (lossy only for payloads that are not UTF-8).
    pub fn raw_text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}
