//! The record of a failed job that `laravel-worker retry` pushes back.
//!
//! `retry` is Laravel's `queue:retry`: the failed payload goes back on its
//! queue under the same id (`attempts` 0), so the job's next run writes to
//! the record its failure left. In an app with Horizon, `queue:retry`
//! pushes through Horizon's connector, whose `pushed()` writes the record
//! again as a new push (status `pending`, the new payload, `created_at`,
//! the recent and pending entries, the pending expiry). Without that, the
//! record stayed `failed` through the re-run (the reservation found it
//! final for that payload and left it) and kept the first run's
//! `reserved_at`, so the dashboard showed the first run's start as the
//! retry's.
//!
//! So before the push, [`SCRIPT`] does what `pushed()` does to a record
//! Horizon knows, drops the first run's `reserved_at` and `completed_at`
//! (the retry's run writes its own), and records the retry in the
//! record's `retried_by` as Horizon's `RetryFailedJob` does for the job it
//! retries (`{id, status: pending, retried_at}`): here the retry runs
//! under the failed job's own id, so the entry names the record itself,
//! and the worker that runs it sets the entry's status to `completed` or
//! `failed` when it ends ([`super::script::RECORDS`]), as Horizon's
//! `completed()` and `failed()` set a retry's status on its parent. The
//! failure's `exception` and `failed_at` stay, as `pushed()` leaves them,
//! and the job stays in the failed list, as Horizon's retried jobs do.
//!
//! A job Horizon has no record of is left alone: the worker makes its
//! record when it reserves it.

use super::keys::Keys;
use super::records::microtime;
use crate::redis::RedisConn;

/// Resets a failed job's record for its retry. `KEYS`: the record,
/// `recent_jobs`, `pending_jobs`. `ARGV`: id, connection, queue, name,
/// payload, time (`microtime`), pending expiry (Unix seconds), retried at
/// (Unix seconds). Returns 1 when the record existed (and was reset), 0
/// when Horizon had none.
pub const SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local id, conn, queue, name, payload, time, expiry, retried_at = unpack(ARGV, 1, 8)
local retries = {}
local text = redis.call('HGET', KEYS[1], 'retried_by')
if text then
  local ok, list = pcall(cjson.decode, text)
  if ok and type(list) == 'table' then retries = list end
end
retries[#retries + 1] = {id = id, status = 'pending', retried_at = tonumber(retried_at)}
redis.call('HDEL', KEYS[1], 'reserved_at', 'completed_at')
redis.call('HSET', KEYS[1], 'id', id, 'connection', conn, 'queue', queue, 'name', name,
  'status', 'pending', 'payload', payload, 'created_at', time, 'updated_at', time,
  'retried_by', cjson.encode(retries))
redis.call('ZADD', KEYS[2], '-' .. time, id)
redis.call('ZADD', KEYS[3], '-' .. time, id)
redis.call('EXPIREAT', KEYS[1], expiry)
return 1
";

/// A failed job about to be pushed back by `retry`.
pub struct Retried<'a> {
    /// Horizon's id of the job (`uuid`, else `id`).
    pub id: &'a str,
    /// Its queue connection's name (`redis`).
    pub connection: &'a str,
    /// Its queue.
    pub queue: &'a str,
    /// Its `displayName`.
    pub name: &'a str,
    /// The payload pushed back.
    pub payload: &'a str,
}

/// Resets the record of `job` under `keys` as described in the module's
/// documentation, with the record's pending expiry `pending_minutes`
/// (Horizon's `trim.pending`). True when Horizon had a record of it.
///
/// # Errors
/// Redis's or the connection's.
pub async fn reset(
    conn: &mut RedisConn,
    keys: &Keys,
    job: &Retried<'_>,
    pending_minutes: u64,
) -> redis::RedisResult<bool> {
    let now = std::time::SystemTime::now();
    let at = microtime(now);
    let unix = at as u64;
    let found: i64 = redis::Script::new(SCRIPT)
        .key(keys.key(job.id))
        .key(keys.key("recent_jobs"))
        .key(keys.key("pending_jobs"))
        .arg(job.id)
        .arg(job.connection)
        .arg(job.queue)
        .arg(job.name)
        .arg(job.payload)
        .arg(super::stamp::Stamp::of(at).time())
        .arg(unix + pending_minutes * 60)
        .arg(unix)
        .invoke_async(conn)
        .await?;
    Ok(found == 1)
}

/// What `retry` needs to reset the records: a connection to Horizon's
/// Redis and its keys, opened once for all the jobs retried.
pub struct Records {
    conn: RedisConn,
    keys: Keys,
    connection: String,
    pending_minutes: u64,
}

impl Records {
    /// Opens Horizon's Redis, `target` (Horizon's own, else the queue's),
    /// with Horizon's `prefix` (`None`: its default) for the jobs of queue
    /// `connection`, pending records kept `pending_minutes`. A Redis that
    /// cannot be reached is said once and the jobs are retried without
    /// their records: the push is what matters.
    pub async fn open(
        target: &crate::redis::RedisTarget,
        prefix: Option<&str>,
        connection: &str,
        pending_minutes: u64,
    ) -> Option<Self> {
        let prefix = super::keys::prefix(prefix, target.is_cluster());
        match crate::redis::open(target, crate::redis::Purpose::Commands).await {
            Ok(conn) => Some(Records {
                conn,
                keys: Keys::new(prefix),
                connection: connection.to_string(),
                pending_minutes,
            }),
            Err(e) => {
                tracing::warn!(
                    redis = %target.describe(),
                    "cannot reach Horizon's Redis: the retried jobs' Horizon records are left \
                     as they are ({e})"
                );
                None
            }
        }
    }

    /// Resets the record of the job whose `payload` is pushed back onto
    /// `queue` (see [`reset`]); an error is logged, never returned: the
    /// records are an observer.
    pub async fn reset(&mut self, queue: &str, payload: &str) {
        let Ok(fields) = crate::queue::Payload::parse(payload.as_bytes().to_vec()) else {
            return;
        };
        let Some(id) = fields.uuid().map(str::to_string).or_else(|| fields.id()) else {
            return;
        };
        let job = Retried {
            id: &id,
            connection: &self.connection,
            queue,
            name: fields.display_name().unwrap_or_default(),
            payload,
        };
        if let Err(e) = reset(&mut self.conn, &self.keys, &job, self.pending_minutes).await {
            tracing::warn!(id, "cannot reset the retried job's Horizon record: {e}");
        }
    }
}
