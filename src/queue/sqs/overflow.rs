//! Overflow pointer bodies (Laravel 13.9+'s SQS overflow): a payload too
//! large for SQS (or every payload, with `overflow.always`) is put in a
//! cache store under `laravel:sqs-payloads:{uuid}`, and the message body
//! becomes `{"@pointer":"laravel:sqs-payloads:{uuid}"}`. `SqsJob::
//! getRawBody` reads the payload back from the store, and `SqsJob::delete`
//! forgets it once the message is deleted (`delete_after_processing`).
//!
//! Here, as Laravel keeps both ends inside its SQS job, inside the SQS
//! driver: the worker hands the queue its payload store at start (its
//! `[cache]` store, see [`PayloadStore`]); a popped message whose body is
//! a pointer gets the payload the store holds under it, and the job then
//! runs, fails and is recorded as any other, with its real payload
//! (`failed_jobs.payload` included, as Laravel records `getRawBody()`).
//! Once the message is deleted (the job ran, or failed), the payload is
//! forgotten; a release keeps it for the next receive.
//!
//! A pointer the worker cannot follow is never run as it is, nor dropped:
//! the job fails at once with `LaravelWorker\OverflowPayloadMissingException`
//! (the driver's [`refusal`](crate::queue::driver::Driver::refusal)), whose
//! message names the pointer and what is missing (no payload store, the
//! app's store is not this worker's, the store has no such key, or it
//! holds no string), and its `failed_jobs` row keeps the pointer body, so
//! `retry` sends it again once the payload can be read. A store that cannot
//! be reached is not a verdict on the job: the message is left in flight,
//! visible again after the visibility timeout.
//!
//! Only Laravel's own pointers are followed, and only where overflow is on
//! (the app's `overflow.enabled`, `SQS_OVERFLOW_ENABLED` or `[sqs]
//! overflow_enabled`; off by default, as in Laravel): anyone who may send
//! to the queue could otherwise name any cache entry (a lock, a session,
//! a secret) and have the worker read it into a handler or `failed_jobs`
//! and then forget it. A pointer is Laravel's when its key is
//! `laravel:sqs-payloads:` and a UUID, the only keys `SqsQueue` writes. Any
//! other body holding `@pointer`, and every pointer where overflow is off,
//! is a payload like any other, as Laravel reads it: it names no job, so
//! it fails as a job that cannot be resolved; no cache entry is read nor
//! forgotten for it.

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

use super::SqsQueue;
use super::receive::MessageHandle;
use crate::queue::ReservedJob;
use crate::queue::driver::Step;
use crate::queue::job::Reservation;
use crate::queue::payload::Payload;

/// The longest body looked at for a pointer: Laravel's is
/// `{"@pointer":"laravel:sqs-payloads:" + a UUID + "}"`, about 70 bytes;
/// a body longer than this is a payload, never parsed twice.
const MAX_POINTER_BODY: usize = 1024;

/// The prefix of the cache keys Laravel's `SqsQueue` puts overflow
/// payloads under; a UUID follows it.
pub const POINTER_PREFIX: &str = "laravel:sqs-payloads:";

/// What a payload store holds under a pointer's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// The payload (the store's value, a PHP string, unserialized).
    Payload(String),
    /// A value that is not a string: no payload.
    NotAString,
    /// No such key, or it expired.
    Missing,
}

/// Where a connection's overflow payloads are: the worker's `[cache]`
/// store, handed to the SQS queue at start (Laravel's `SqsQueue` holds its
/// own store the same way).
pub trait PayloadStore: Send + Sync {
    /// The store's driver (`redis`, `file`, `database`), for messages.
    fn kind(&self) -> &'static str;

    /// Where `key` is in the store, for messages (never a password).
    fn locate(&self, key: &str) -> String;

    /// What the store holds under `key`.
    ///
    /// # Errors
    /// The store cannot be reached.
    fn read<'a>(&'a self, key: &'a str) -> Step<'a, anyhow::Result<Stored>>;

    /// Forgets `key`.
    ///
    /// # Errors
    /// The store cannot be reached.
    fn forget<'a>(&'a self, key: &'a str) -> Step<'a, anyhow::Result<()>>;
}

/// `{"@pointer": "…"}`: the body of a message whose payload is in a cache
/// store. A body with a `job` is a payload, whatever else it holds.
#[derive(Deserialize)]
struct PointerBody {
    #[serde(rename = "@pointer")]
    pointer: String,
    job: Option<serde::de::IgnoredAny>,
}

/// The cache key `raw` points at, when it is an overflow pointer body of
/// Laravel's: `{"@pointer":"laravel:sqs-payloads:{uuid}"}` (see
/// [`is_laravel_pointer_key`]).
pub fn pointer_of(raw: &[u8]) -> Option<String> {
    if raw.len() > MAX_POINTER_BODY || !raw.windows(10).any(|w| w == b"\"@pointer\"") {
        return None;
    }
    let body: PointerBody = serde_json::from_slice(raw).ok()?;
    (body.job.is_none() && is_laravel_pointer_key(&body.pointer)).then_some(body.pointer)
}

/// Whether `key` is one `SqsQueue` writes: [`POINTER_PREFIX`] and a UUID
/// as `Str::uuid()` spells it (36 characters, hex digits in groups of 8,
/// 4, 4, 4 and 12 split by `-`; either case).
pub fn is_laravel_pointer_key(key: &str) -> bool {
    let Some(uuid) = key.strip_prefix(POINTER_PREFIX) else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// What opening a pointer body gave.
enum Opened {
    /// The payload, and the key to forget once the message is deleted.
    Payload(String),
    /// The pointer cannot be followed: why, to fail the job with.
    Unfollowed(String),
    /// The store cannot be reached: leave the message to SQS.
    StoreDown,
}

impl SqsQueue {
    /// Opens the overflow pointers among `jobs` (just received, so this
    /// queue holds the only reference to their handles): a pointer's job
    /// gets its payload from the store, or the reason it must fail; a job
    /// whose store cannot be reached is left in flight and not returned.
    /// Any other job is returned as it is.
    pub(super) async fn open_pointers(&self, jobs: Vec<ReservedJob>) -> Vec<ReservedJob> {
        if !self.overflow().enabled {
            return jobs;
        }
        let mut opened = Vec::with_capacity(jobs.len());
        for job in jobs {
            let Some(pointer) = pointer_of(&job.raw) else {
                opened.push(job);
                continue;
            };
            if let Some(job) = self.open_pointer(job, pointer).await {
                opened.push(job);
            }
        }
        opened
    }

    async fn open_pointer(&self, job: ReservedJob, pointer: String) -> Option<ReservedJob> {
        let Reservation::Message(handle) = job.reservation else {
            return Some(job);
        };
        let mut handle = Arc::try_unwrap(handle).unwrap_or_else(|shared| (*shared).clone());
        match self.read_pointer(&pointer).await {
            Opened::Payload(payload) => {
                let raw = Bytes::from(payload.into_bytes());
                let delete_after = self.overflow().delete_after_processing;
                handle.forget = delete_after.then_some(pointer);
                Some(ReservedJob {
                    payload: Payload::parse_stored(raw.clone()),
                    reserved: raw.clone(),
                    raw,
                    reservation: Reservation::Message(Arc::new(handle)),
                    ..job
                })
            }
            Opened::Unfollowed(message) => {
                tracing::error!(id = %handle.message_id, pointer = %pointer, "{message}");
                handle.unfollowed = Some(message);
                Some(ReservedJob {
                    reservation: Reservation::Message(Arc::new(handle)),
                    ..job
                })
            }
            Opened::StoreDown => {
                // No delete of this message comes: other deletes stop waiting for it.
                handle.unsettled.settle();
                None
            }
        }
    }

    /// What the payload store says of `pointer`.
    async fn read_pointer(&self, pointer: &str) -> Opened {
        if let Some(store) = &self.overflow().elsewhere {
            return unfollowed(
                pointer,
                &format!(
                    "the app keeps those in its cache store {store:?} (overflow.store, \
                     SQS_OVERFLOW_STORE), which this worker does not read: it reads its \
                     [cache] store ({}) only",
                    self.payloads().map_or("none", |s| s.kind())
                ),
            );
        }
        let Some(store) = self.payloads() else {
            return unfollowed(
                pointer,
                "this worker has no cache store ([cache] store = \"none\"): set [cache] to \
                 the app's store",
            );
        };
        match store.read(pointer).await {
            Ok(Stored::Payload(payload)) => Opened::Payload(payload),
            Ok(Stored::NotAString) => unfollowed(
                pointer,
                &format!("{} holds no payload string", store.locate(pointer)),
            ),
            Ok(Stored::Missing) => unfollowed(
                pointer,
                &format!(
                    "the {} cache store has no such key ({} is missing or expired)",
                    store.kind(),
                    store.locate(pointer)
                ),
            ),
            Err(e) => {
                tracing::warn!(
                    pointer = %pointer,
                    "cannot read the job's payload from the cache store ({}): the message is \
                     left to SQS, visible again in {} s",
                    crate::error_chain::error_chain(e.as_ref()),
                    self.visibility()
                );
                Opened::StoreDown
            }
        }
    }

    /// Forgets the payload of `handle`'s message, now deleted, as
    /// `SqsJob::delete` does. A store error is logged: the payload then
    /// stays until the store's own expiry (Laravel's `put` has none) or a
    /// flush.
    pub(super) async fn forget_payload(&self, handle: &MessageHandle) {
        let (Some(key), Some(store)) = (&handle.forget, self.payloads()) else {
            return;
        };
        if let Err(e) = store.forget(key).await {
            tracing::warn!(
                pointer = %key,
                "cannot forget the payload of a deleted SQS job from the cache store: {}",
                crate::error_chain::error_chain(e.as_ref())
            );
        }
    }
}

/// A pointer that cannot be followed, and `what` is missing.
fn unfollowed(pointer: &str, what: &str) -> Opened {
    Opened::Unfollowed(format!(
        "The job's payload is in a cache store (its SQS message body is the overflow pointer \
         {pointer:?}), and {what}. The failed job keeps the pointer: retry it once the payload \
         can be read."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only `laravel:sqs-payloads:` and a UUID is a pointer: any other key
    /// (a lock, a session, an empty one) leaves the body a payload.
    #[test]
    fn only_laravel_s_own_keys_are_pointers() {
        for key in [
            "laravel:sqs-payloads:0C4BD4D6-3C2E-4B1A-9D64-5A5B7E6F0A11",
            "laravel:sqs-payloads:00000000-0000-0000-0000-000000000000",
        ] {
            assert!(is_laravel_pointer_key(key), "{key}");
        }
        for key in [
            "",
            "secret",
            "laravel:sqs-payloads:",
            "laravel:sqs-payloads:u-gone",
            "laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11x",
            "laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a1g",
            "laravel:sqs-payloads:0c4bd4d63c2e-4b1a-9d64-5a5b-7e6f0a11",
            "laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11-0000",
            "illuminate:queue:restart",
            "xlaravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11",
        ] {
            assert!(!is_laravel_pointer_key(key), "{key}");
            let body = serde_json::json!({ "@pointer": key }).to_string();
            assert_eq!(pointer_of(body.as_bytes()), None, "{body}");
        }
    }

    #[test]
    fn pointer_bodies_as_laravel_writes_them() {
        assert_eq!(
            pointer_of(
                br#"{"@pointer":"laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11"}"#
            ),
            Some("laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11".to_string())
        );
        assert_eq!(
            pointer_of(
                br#"{"uuid":"u","job":"X","@pointer":"laravel:sqs-payloads:0c4bd4d6-3c2e-4b1a-9d64-5a5b7e6f0a11"}"#
            ),
            None
        );
        assert_eq!(pointer_of(br#"{"@pointer":""}"#), None);
        assert_eq!(pointer_of(br#"{"@pointer":5}"#), None);
        assert_eq!(pointer_of(br#"{"uuid":"u","job":"X"}"#), None);
        assert_eq!(pointer_of(b"not json \"@pointer\""), None);
    }
}
