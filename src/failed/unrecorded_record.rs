//! A failure record as the worker keeps it in Redis while the failed-job
//! store is down (the queue's `:unrecorded` zset; see
//! `worker::unrecorded`): the record's fields as JSON, `failed_at` in UNIX
//! seconds, so that it is written to the store unchanged once the store is
//! back, with the job's real exception.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::FailedJob;

/// The stored form of a [`FailedJob`].
#[derive(Serialize, Deserialize)]
struct Kept<'a> {
    #[serde(borrow)]
    uuid: Cow<'a, str>,
    #[serde(borrow)]
    connection: Cow<'a, str>,
    #[serde(borrow)]
    queue: Cow<'a, str>,
    #[serde(borrow)]
    payload: Cow<'a, str>,
    #[serde(borrow)]
    exception: Cow<'a, str>,
    /// UNIX seconds.
    failed_at: i64,
}

/// `job` as the bytes kept in `:unrecorded`.
pub fn encode(job: &FailedJob) -> Vec<u8> {
    let kept = Kept {
        uuid: Cow::Borrowed(&job.uuid),
        connection: Cow::Borrowed(&job.connection),
        queue: Cow::Borrowed(&job.queue),
        payload: Cow::Borrowed(job.payload.as_str()),
        exception: Cow::Borrowed(&job.exception),
        failed_at: job.failed_at.timestamp(),
    };
    // Strings and an integer: serializing cannot fail.
    serde_json::to_vec(&kept).unwrap_or_default()
}

/// The record kept as `bytes`; `None` when they are not one of ours.
pub fn decode(bytes: &[u8]) -> Option<FailedJob> {
    let kept: Kept<'_> = serde_json::from_slice(bytes).ok()?;
    Some(FailedJob {
        uuid: kept.uuid.into_owned(),
        connection: kept.connection.into_owned(),
        queue: kept.queue.into_owned(),
        payload: kept.payload.into_owned().into(),
        exception: kept.exception.into_owned(),
        failed_at: DateTime::<Utc>::from_timestamp(kept.failed_at, 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_the_round_trip() {
        let job = FailedJob {
            uuid: "u-1".into(),
            connection: "redis".into(),
            queue: "default".into(),
            payload: "{\"attempts\":0,\"x\":\"é\\n\"}".into(),
            exception: "RuntimeException: boom\n#0 {main}".into(),
            failed_at: DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
        };
        assert_eq!(decode(&encode(&job)), Some(job));
        assert_eq!(decode(b"not ours"), None);
    }
}
