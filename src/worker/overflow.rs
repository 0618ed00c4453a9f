//! Overflow pointer bodies (Laravel 13.9+'s SQS overflow): a payload too
//! large for SQS (or every payload, with `overflow.always`) is put in a
//! cache store under `laravel:sqs-payloads:{uuid}`, and the message body
//! becomes `{"@pointer":"laravel:sqs-payloads:{uuid}"}`. `SqsJob::
//! getRawBody` reads the payload back from the store, and `SqsJob::delete`
//! forgets it once the message is deleted (`delete_after_processing`).
//!
//! Here, before a job is routed: a body that is a pointer is replaced by
//! the payload the worker's cache store (`[cache]`) holds under it, and
//! the job then runs, fails and is recorded as any other, with its real
//! payload (`failed_jobs.payload` included, as Laravel records
//! `getRawBody()`). Once the job is deleted (it ran, or failed), the
//! payload is forgotten; a release keeps it for the next receive.
//!
//! A pointer the worker cannot follow is never run as it is, nor dropped:
//! the job fails at once with `LaravelWorker\OverflowPayloadMissingException`,
//! whose message names the pointer and what is missing (no cache store
//! here, the app's store is not this worker's, the store has no such key,
//! or it holds no string), and its `failed_jobs` row keeps the pointer
//! body, so `retry` sends it again once the payload can be read. A store
//! that cannot be reached is not a verdict on the job: it is handed back,
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

use bytes::Bytes;
use serde::Deserialize;

use super::Services;
use super::settle::Settled;
use super::verdict::Verdict;
use crate::cache::{CacheStore, php};
use crate::exception::{JobException, OVERFLOW_PAYLOAD_MISSING};
use crate::queue::job::Reservation;
use crate::queue::{Payload, ReservedJob};

/// The longest body looked at for a pointer: Laravel's is
/// `{"@pointer":"laravel:sqs-payloads:" + a UUID + "}"`, about 70 bytes;
/// a body longer than this is a payload, never parsed twice.
const MAX_POINTER_BODY: usize = 1024;

/// A job as it comes out of [`open`].
pub struct Opened {
    /// The job, its payload read from the store when its body was a
    /// pointer.
    pub job: ReservedJob,
    /// The cache key the payload was read from, to forget once the job is
    /// deleted (`None`: the body was the payload, or it is kept).
    pub forget: Option<String>,
    /// What becomes of a job that cannot be opened, without running it:
    /// failed (the pointer cannot be followed) or handed back (the store
    /// cannot be reached).
    pub verdict: Option<Verdict>,
}

/// `{"@pointer": "…"}`: the body of a message whose payload is in a cache
/// store. A body with a `job` is a payload, whatever else it holds.
#[derive(Deserialize)]
struct PointerBody {
    #[serde(rename = "@pointer")]
    pointer: String,
    job: Option<serde::de::IgnoredAny>,
}

/// The prefix of the cache keys Laravel's `SqsQueue` puts overflow
/// payloads under; a UUID follows it.
pub const POINTER_PREFIX: &str = "laravel:sqs-payloads:";

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

/// Opens `job`: where overflow is on, a message of the SQS driver whose
/// body is Laravel's overflow pointer gets its payload from the cache
/// store (see the module's notes); any other job is returned as it is.
pub async fn open(job: ReservedJob, services: &Services) -> Opened {
    let Some(overflow) = services.queue.overflow().filter(|o| o.enabled) else {
        return Opened::plain(job);
    };
    let pointer = match job.reservation {
        Reservation::Message(_) => pointer_of(&job.raw),
        _ => None,
    };
    let Some(pointer) = pointer else {
        return Opened::plain(job);
    };
    let cache = &services.cache;
    if let Some(store) = &overflow.elsewhere {
        let what = format!(
            "the app keeps those in its cache store {store:?} (overflow.store, \
             SQS_OVERFLOW_STORE), which this worker does not read: it reads its [cache] \
             store ({}) only",
            cache.kind()
        );
        return Opened::missing(job, &pointer, &what);
    }
    if matches!(cache, CacheStore::None) {
        let what = "this worker has no cache store ([cache] store = \"none\"): set [cache] \
                    to the app's store";
        return Opened::missing(job, &pointer, what);
    }
    match cache.get(&pointer).await {
        Ok(Some(raw)) => match php::unserialize_string(&raw) {
            Some(payload) => {
                let raw = Bytes::from(payload.to_string().into_bytes());
                let job = ReservedJob {
                    payload: Payload::parse_stored(raw.clone()),
                    reserved: raw.clone(),
                    raw,
                    ..job
                };
                Opened {
                    job,
                    forget: overflow.delete_after_processing.then_some(pointer),
                    verdict: None,
                }
            }
            None => {
                let what = format!("{} holds no payload string", cache.locate(&pointer));
                Opened::missing(job, &pointer, &what)
            }
        },
        Ok(None) => {
            let what = format!(
                "the {} cache store has no such key ({} is missing or expired)",
                cache.kind(),
                cache.locate(&pointer)
            );
            Opened::missing(job, &pointer, &what)
        }
        Err(e) => {
            let delay = services.queue.retry_after().unwrap_or(0);
            tracing::warn!(
                id = %job.id(),
                pointer = %pointer,
                "cannot read the job's payload from the cache store ({}): handed back, \
                 visible again in {delay} s",
                crate::error_chain::error_chain(e.as_ref())
            );
            Opened {
                job,
                forget: None,
                verdict: Some(Verdict::HandBack {
                    delay,
                    tripped: false,
                }),
            }
        }
    }
}

impl Opened {
    /// `job` as it is: its body is its payload.
    fn plain(job: ReservedJob) -> Opened {
        Opened {
            job,
            forget: None,
            verdict: None,
        }
    }

    /// `job`, whose body is the overflow `pointer` to a payload the worker
    /// cannot read (`what` says why), failed without running.
    fn missing(job: ReservedJob, pointer: &str, what: &str) -> Opened {
        let message = format!(
            "The job's payload is in a cache store (its SQS message body is the overflow \
             pointer {pointer:?}), and {what}. The failed job keeps the pointer: retry it \
             once the payload can be read."
        );
        tracing::error!(id = %job.id(), pointer = %pointer, "{message}");
        Opened {
            job,
            forget: None,
            verdict: Some(Verdict::Fail {
                exception: JobException::new(OVERFLOW_PAYLOAD_MISSING, message),
                failed_hook: false,
            }),
        }
    }
}

/// Forgets the payload at `key` once the job whose `verdict` was carried
/// out as `settled` is deleted from its queue (it ran, or failed), as
/// `SqsJob::delete` does; a job released, handed back or not settled
/// keeps it. A store error is logged: the payload then stays until the
/// store's own expiry (Laravel's `put` has none) or a flush.
pub async fn forget_after(key: &str, verdict: &Verdict, settled: Settled, services: &Services) {
    let deleted = matches!(verdict, Verdict::Delete | Verdict::Fail { .. })
        && matches!(
            settled,
            Settled::Done
                | Settled::Failed { .. }
                | Settled::Gone {
                    after_failure: true
                }
        );
    if !deleted {
        return;
    }
    if let Err(e) = services.cache.forget(key).await {
        tracing::warn!(
            pointer = key,
            "cannot forget the payload of a deleted SQS job from the cache store: {}",
            crate::error_chain::error_chain(e.as_ref())
        );
    }
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
