//! The final state of a job wins over a producer's write that lands after
//! it.
//!
//! Horizon's connector pushes a job, then its `JobPushed` listener writes
//! the job's `pending` record (`pushed()`: `status = pending`, the id back
//! in `pending_jobs`, the pending expiry). This worker wakes on the notify
//! list at once, so a short job dispatched from a fresh PHP process is
//! often reserved, run and recorded as completed or failed before that
//! write lands, and the write then undoes the final state. The same gap
//! exists for a retry: Horizon's `RetryFailedJob` pushes the retry, then
//! adds it to the failed job's `retried_by`.
//!
//! The batch script ([`super::script::RECORDS`]) names the jobs whose
//! final state such a write may still undo: a record the worker created
//! itself (no producer's record yet) for a payload with `pushedAt`, and a
//! retry its parent does not list yet. They are kept here ([`Late`]), and
//! each heartbeat checks those that are due ([`SCRIPT`]): a record that
//! is `pending` again with the payload of that same push (its `pushedAt`)
//! gets its final state back (status, out of `pending_jobs`, the final
//! expiry); a parent that lists the retry now gets the retry's outcome.
//! A job is checked 1 s after it finished, then after 2, 4, 8 s... until
//! both are settled or [`Trim::pending`](super::Trim) minutes have passed
//! (the producer's record would have expired by then). A record that is
//! neither final nor the producer's `pending` (a write still in flight,
//! such as the writer's `reserved` landing late) is looked at again, not
//! taken as settled; only a record that is gone ends the watch early.
//!
//! Why later checks rather than making the first write win: Redis has no
//! conditional `HSET` the producer's `pushed()` could be held by, and the
//! worker cannot tell how late that write will be; the record can only be
//! put right after it landed. The checks cost nothing when no job is
//! watched, which is the usual case under load (a job waiting in a
//! backlog is reserved long after its producer's record landed).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::keys::Keys;
use crate::redis::RedisConn;

/// Jobs watched at once at most; more are not watched (and counted).
pub const CAPACITY: usize = 10_000;

/// Entries checked by one script call at most.
const CHECK_BATCH: usize = 256;

/// The first check after a job finished.
const FIRST: Duration = Duration::from_secs(1);

/// The final state a job must keep.
#[derive(Debug, Clone)]
pub struct Watched {
    /// Horizon's id of the job.
    pub id: String,
    /// `completed` or `failed`.
    pub status: &'static str,
    /// When the final record expires: Unix seconds.
    pub expiry: u64,
    /// The payload's `"pushedAt":"…"` text, when a producer's `pending`
    /// record may still come.
    pub pushed: Option<String>,
    /// The failed job this one retries, when its `retried_by` did not
    /// list this one yet.
    pub parent: Option<String>,
}

struct Entry {
    job: Watched,
    due: Instant,
    every: Duration,
    until: Instant,
}

/// The jobs watched, shared by the writer (which adds them) and the
/// heartbeat (which checks them).
#[derive(Default)]
pub struct Late {
    entries: Mutex<VecDeque<Entry>>,
    /// Jobs not watched because [`CAPACITY`] were.
    pub overflow: std::sync::atomic::AtomicU64,
}

impl Late {
    /// Watches `job` for `minutes` (Horizon's `trim.pending`).
    pub fn watch(&self, job: Watched, minutes: u64) {
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            let missed = self
                .overflow
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            if missed.is_power_of_two() {
                tracing::warn!(
                    watched = CAPACITY,
                    missed,
                    "too many finished jobs wait for their producer's Horizon record: \
                     the newest are not watched, and may show pending"
                );
            }
            return;
        }
        entries.push_back(Entry {
            job,
            due: now + FIRST,
            every: FIRST,
            until: now + Duration::from_secs(minutes.max(1) * 60),
        });
    }

    /// Takes the entries due at `now` (at most [`CHECK_BATCH`]), dropping
    /// those past their time.
    fn due(&self, now: Instant) -> Vec<Entry> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.until > now);
        let mut due = Vec::new();
        let mut kept = VecDeque::with_capacity(entries.len());
        for entry in entries.drain(..) {
            if entry.due <= now && due.len() < CHECK_BATCH {
                due.push(entry);
            } else {
                kept.push_back(entry);
            }
        }
        *entries = kept;
        due
    }

    fn put_back(&self, mut entry: Entry, now: Instant) {
        entry.every *= 2;
        entry.due = now + entry.every;
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(entry);
    }

    /// Checks the jobs that are due (see the module's documentation),
    /// puts back those to check again.
    ///
    /// # Errors
    /// Redis's or the connection's; the jobs checked are put back.
    pub async fn check(&self, keys: &Keys, conn: &mut RedisConn) -> redis::RedisResult<()> {
        let now = Instant::now();
        let due = self.due(now);
        if due.is_empty() {
            return Ok(());
        }
        let script = redis::Script::new(SCRIPT);
        let mut call = script.prepare_invoke();
        call.key(keys.key("pending_jobs"));
        let mut key_count = 1;
        for entry in &due {
            let job = &entry.job;
            call.key(keys.key(&job.id));
            key_count += 1;
            call.arg(key_count)
                .arg(&job.id)
                .arg(job.status)
                .arg(job.expiry);
            call.arg(job.pushed.as_deref().unwrap_or_default());
            match &job.parent {
                Some(parent) => {
                    call.key(keys.key(parent));
                    key_count += 1;
                    call.arg(key_count);
                }
                None => {
                    call.arg(0);
                }
            }
        }
        let settled: Vec<i64> = match call.invoke_async(conn).await {
            Ok(settled) => settled,
            Err(e) => {
                for entry in due {
                    self.put_back(entry, now);
                }
                return Err(e);
            }
        };
        for (entry, settled) in due
            .into_iter()
            .zip(settled.into_iter().chain(std::iter::repeat(0)))
        {
            if settled == 0 {
                self.put_back(entry, now);
            }
        }
        Ok(())
    }
}

/// The check of watched jobs. `KEYS[1]`: `pending_jobs`; ARGV, six per
/// job: its hash (index into `KEYS`), id, final status, final expiry
/// (Unix seconds), its payload's `"pushedAt":…` text (empty: no record
/// to watch), its parent's hash (index, 0: none). Returns, per job, 1 when
/// nothing is left to watch, 0 to check again.
///
/// A record is put back only when it is `pending` with the payload of the
/// same push: a later push of the same id (Laravel's `queue:retry`) has a
/// `pushedAt` of its own and is left pending.
pub const SCRIPT: &str = concat!(
    super::script::retried_lua!(),
    r"
local out = {}
local n = #ARGV / 6
for i = 1, n do
  local at = (i - 1) * 6
  local hash = KEYS[tonumber(ARGV[at + 1])]
  local id, status, expiry, pushed = ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5]
  local parent = tonumber(ARGV[at + 6])
  local done = true
  if pushed ~= '' then
    local now = redis.call('HMGET', hash, 'status', 'payload')
    if now[1] == 'pending' and now[2] and string.find(now[2], pushed, 1, true) then
      redis.call('HSET', hash, 'status', status)
      redis.call('ZREM', KEYS[1], id)
      redis.call('EXPIREAT', hash, expiry)
    elseif now[1] then
      done = false
    end
  end
  if parent > 0 and not retried(KEYS[parent], id, status) then
    done = false
  end
  out[i] = done and 1 or 0
end
return out
"
);
