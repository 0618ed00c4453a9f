//! Reading back the large jobs the pop script set aside (see
//! [`scripts::POP`]): their strings come back piece by piece, so that no
//! reply is larger than one piece.
//!
//! The pieces live 60 seconds under keys with a TTL, which is what Redis
//! evicts first under `maxmemory` with a `volatile-*` policy. A job whose
//! pieces are gone is then read from its member in `:reserved` (named by
//! the length and SHA-1 the pop returned), so eviction never costs it an
//! attempt nor a run; `queue:work`, which reads the job from the pop's own
//! reply, runs it under the same settings.

use std::sync::atomic::{AtomicU64, Ordering};

use redis::{RedisResult, Value};

use super::keys::QueueKeys;
use super::queue::{RedisQueue, SET_ASIDE_PIECE};
use super::scripts;
use super::scripts::name_denied_script_command;

/// Names the key under which one pop may set its large jobs aside:
/// `{ready}:popped:` and 32 hex digits, unique across workers (a random
/// half drawn once per worker) and across this worker's pops (a count).
/// Each pop used to draw a fresh UUID, a `getrandom` system call per pop
/// for a key that only a large job ever uses.
pub(super) struct SetAsideKeys {
    /// Drawn once, when the queue connects.
    worker: u64,
    /// Pops named so far.
    pops: AtomicU64,
}

impl SetAsideKeys {
    /// A fresh random half; the count starts at 0.
    pub(super) fn new() -> Self {
        SetAsideKeys {
            worker: rand::random(),
            pops: AtomicU64::new(0),
        }
    }

    /// The key for the next pop on the queue whose ready list is `ready`
    /// (on a cluster it carries the queue's hash tag, so it lives in the
    /// queue's slot, as the pop script needs).
    pub(super) fn next(&self, ready: &str) -> String {
        let pop = self.pops.fetch_add(1, Ordering::Relaxed);
        format!("{ready}:popped:{:016x}{pop:016x}", self.worker)
    }
}

/// What the pop's reply says of one set-aside job.
struct SetAside {
    /// Length of the original string, bytes.
    raw_len: usize,
    /// Length of the reserved member, bytes.
    reserved_len: usize,
    /// SHA-1 of the reserved member, lower-case hex.
    sha1: Vec<u8>,
}

impl SetAside {
    /// The set-aside job described by `raw` and `reserved` (the first two
    /// places of a job in the pop's reply), or `None` for a job returned
    /// whole.
    fn of(raw: &Value, reserved: &Value) -> Option<Self> {
        let (Value::Int(raw_len), Value::Array(digest)) = (raw, reserved) else {
            return None;
        };
        let [Value::Int(reserved_len), Value::BulkString(sha1)] = digest.as_slice() else {
            return None;
        };
        Some(SetAside {
            raw_len: usize::try_from(*raw_len).ok()?,
            reserved_len: usize::try_from(*reserved_len).ok()?,
            sha1: sha1.clone(),
        })
    }
}

impl RedisQueue {
    /// Puts back into `popped` (the pop's flat reply, three places per
    /// job) the strings of the large jobs the pop script set aside, each
    /// read piece by piece into a buffer of its size, deleting the pieces.
    /// A string whose pieces are gone is read from `:reserved` of `queue`,
    /// where the pop scored its member `expiry`; one that cannot be read
    /// at all is left nil, which `reserved_jobs` reports.
    ///
    /// # Errors
    /// Any Redis error: the jobs popped stay reserved and are reclaimed
    /// after `retry_after`, as after a pop whose answer was lost.
    pub(super) async fn take_set_aside(
        &self,
        set_aside: &str,
        queue: &QueueKeys,
        expiry: i64,
        popped: &mut [Value],
    ) -> RedisResult<()> {
        for (job, places) in popped.chunks_mut(3).enumerate() {
            let [raw, reserved, poison] = places else {
                continue;
            };
            let Some(found) = SetAside::of(raw, reserved) else {
                continue;
            };
            let key = |place: usize| format!("{set_aside}:{}", 3 * job + place);
            let mut raw_text = self.read_pieces(&key(1), found.raw_len).await?;
            let mut reserved_text = self.read_pieces(&key(2), found.reserved_len).await?;
            if raw_text.is_none() || reserved_text.is_none() {
                self.report_eviction(queue).await;
                let poison = matches!(poison, Value::Int(1));
                let member = Member {
                    queue,
                    expiry,
                    found: &found,
                };
                if reserved_text.is_none() {
                    reserved_text = self.read_reserved(&member, false).await?;
                }
                if raw_text.is_none() {
                    raw_text = match poison {
                        true => reserved_text.clone(),
                        false => self.read_reserved(&member, true).await?,
                    };
                }
            }
            *raw = raw_text.map_or(Value::Nil, Value::BulkString);
            *reserved = reserved_text.map_or(Value::Nil, Value::BulkString);
        }
        Ok(())
    }

    /// Reads the `len` bytes set aside under `key:1`, `key:2`, … (pieces of
    /// [`SET_ASIDE_PIECE`] bytes), deleting each piece as it is read.
    /// `None` when a piece is missing (the pieces after it are deleted) or
    /// the pieces do not add up to `len`.
    ///
    /// # Errors
    /// Any Redis error.
    async fn read_pieces(&self, key: &str, len: usize) -> RedisResult<Option<Vec<u8>>> {
        let mut text = Vec::with_capacity(len);
        let count = len.div_ceil(SET_ASIDE_PIECE);
        for n in 1..=count {
            let piece = format!("{key}:{n}");
            // MGET and DEL rather than GETDEL: the documented ACL user has them.
            let (mut got,): (Vec<Value>,) = redis::pipe()
                .cmd("MGET")
                .arg(&piece)
                .cmd("DEL")
                .arg(&piece)
                .ignore()
                .query_async(&mut self.conn())
                .await
                .map_err(name_denied_script_command)?;
            match got.pop() {
                Some(Value::BulkString(bytes)) if text.len() + bytes.len() <= len => {
                    text.extend_from_slice(&bytes)
                }
                _ => {
                    // Evicted in part: the pieces left are of no use.
                    let rest: Vec<String> = (n + 1..=count).map(|i| format!("{key}:{i}")).collect();
                    if !rest.is_empty() {
                        let _: RedisResult<()> = redis::cmd("DEL")
                            .arg(&rest)
                            .query_async(&mut self.conn())
                            .await;
                    }
                    return Ok(None);
                }
            }
        }
        Ok((text.len() == len).then_some(text))
    }

    /// Reads a set-aside job's member from `:reserved`, one piece per call
    /// of [`scripts::READ_RESERVED`]; with `uncounted`, the job as it was
    /// before the pop counted its attempt (its original, as cjson encodes
    /// it). `None` when the member is gone (reclaimed, or evicted too).
    ///
    /// # Errors
    /// Any Redis error.
    async fn read_reserved(
        &self,
        member: &Member<'_>,
        uncounted: bool,
    ) -> RedisResult<Option<Vec<u8>>> {
        let len = member.found.reserved_len;
        let mut text = Vec::with_capacity(len);
        loop {
            let piece: Option<Vec<u8>> = redis::cmd("EVAL")
                .arg(scripts::READ_RESERVED)
                .arg(1)
                .arg(&member.queue.reserved)
                .arg(member.expiry)
                .arg(len)
                .arg(&member.found.sha1)
                .arg(text.len() + 1)
                .arg(SET_ASIDE_PIECE)
                .arg(u8::from(uncounted))
                .query_async(&mut self.conn())
                .await
                .map_err(name_denied_script_command)?;
            let Some(piece) = piece.filter(|p| text.len() + p.len() <= len) else {
                return Ok(None);
            };
            text.extend_from_slice(&piece);
            if piece.len() < SET_ASIDE_PIECE {
                return Ok(Some(text));
            }
        }
    }

    /// Logs that Redis evicted the pieces of a large job, naming the
    /// server's `maxmemory-policy` when `CONFIG GET` is allowed.
    async fn report_eviction(&self, queue: &QueueKeys) {
        let policy: RedisResult<(String, String)> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut self.conn())
            .await;
        let policy = eviction_note(policy.ok().map(|(_, policy)| policy).as_deref());
        tracing::warn!(
            queue = %queue.name,
            "Redis evicted the pieces of a large job before the worker read them \
             ({policy}); reading the job from :reserved instead, its attempt is not lost"
        );
    }
}

/// What the server's `maxmemory-policy` (`None`: `CONFIG GET` refused)
/// means for the queue, in words: `volatile-*` evicts keys with a TTL
/// (these pieces) and never the queue's own keys, which have none;
/// `allkeys-*` may evict any key, the queue's lists and zsets among them.
fn eviction_note(policy: Option<&str>) -> String {
    match policy {
        Some(p) if p.starts_with("volatile-") => format!(
            "maxmemory-policy is {p}: under maxmemory Redis evicts only keys with a TTL, \
             such as these pieces, never the queue's own keys"
        ),
        Some(p) if p.starts_with("allkeys-") => format!(
            "maxmemory-policy is {p}: under maxmemory Redis may evict any key, the queue's \
             own lists and sets among them, and jobs with them; a queue's Redis wants \
             noeviction (or a volatile-* policy)"
        ),
        Some(p) => format!("maxmemory-policy is {p}"),
        None => "check maxmemory-policy".to_string(),
    }
}

/// Where a set-aside job's member is in `:reserved`.
struct Member<'a> {
    queue: &'a QueueKeys,
    /// The score the pop gave it, UNIX seconds.
    expiry: i64,
    found: &'a SetAside,
}

#[cfg(test)]
mod tests {
    use super::{SetAsideKeys, eviction_note};

    #[test]
    fn set_aside_keys_differ_per_pop_and_per_worker() {
        let one = SetAsideKeys::new();
        let other = SetAsideKeys::new();
        let ready = "laravel_database_queues:{default}";
        let first = one.next(ready);
        let second = one.next(ready);
        assert_ne!(first, second);
        assert_ne!(first, other.next(ready));
        for key in [&first, &second] {
            let (queue, tail) = key.rsplit_once(":popped:").unwrap();
            assert_eq!(queue, ready);
            assert_eq!(tail.len(), 32, "{key}");
            assert!(tail.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        }
    }

    #[test]
    fn the_eviction_note_says_what_the_policy_evicts() {
        let volatile = eviction_note(Some("volatile-ttl"));
        assert!(volatile.contains("only keys with a TTL"), "{volatile}");
        let allkeys = eviction_note(Some("allkeys-lru"));
        assert!(allkeys.contains("may evict any key"), "{allkeys}");
        assert!(!allkeys.contains("TTL"), "{allkeys}");
        assert_eq!(eviction_note(None), "check maxmemory-policy");
    }
}
