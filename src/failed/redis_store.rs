//! A failed-job store in Redis, for setups with no database, and the
//! fallback of the database store (see [`super::FailedJobStore::log`]).
//!
//! Keys (under the queue connection's prefix):
//! - `{prefix}laravel-worker:failed_jobs`: HASH record key → JSON record
//!   `{uuid, connection, queue, payload, exception, failed_at}` (the columns
//!   of Laravel's table, `failed_at` as `Y-m-d H:i:s` UTC). The record key
//!   is the uuid for the first record of a uuid; a later record with the
//!   same uuid gets `uuid#2`, `uuid#3`, …: a record is never overwritten;
//! - `{prefix}laravel-worker:failed_jobs:index`: ZSET record key scored by
//!   the UNIX time of failure, for listing newest first;
//! - `{prefix}laravel-worker:failed_jobs:duplicates`: HASH uuid → how many
//!   `#N` keys were handed out for it (so a lookup by uuid knows where to
//!   stop).
//!
//! A uuid's records are found by trying its own key and its `#N` keys and
//! keeping those whose stored `uuid` is the one asked for (a payload's uuid
//! may itself end in `#2`). The commands treat them as Laravel's `file`
//! driver treats two entries with one id: `failed` lists each, `forget`
//! deletes them all; `retry` pushes each (see `commands::failed`).
//!
//! Writes keep the hash and the index together (one script or MULTI), so a
//! record never outlives its index entry.
//!
//! On a Redis Cluster the keys carry the hash tag `{laravel-worker:failed_jobs}`
//! so that they share a slot: `{prefix}{laravel-worker:failed_jobs}`, `…:index`
//! and `…:duplicates`.

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{FailedJob, Place, StoredJob, format_failed_at};
use crate::redis::{RedisConn, name_denied_in_scripts};

/// Stores a record under the uuid, or under the next free `uuid#N` when the
/// uuid's key is taken; returns the key used.
/// KEYS: the hash, the index, the duplicates hash. ARGV: uuid, record,
/// UNIX time of failure.
///
/// A record of megabytes comes in pieces instead: a fourth key names them
/// (`KEYS[4]:1`, `KEYS[4]:2`, … set by the worker beforehand) and ARGV\[2\]
/// is their count; they are joined and deleted here. A piece that is gone
/// (expired) fails the script, and nothing is stored.
pub(crate) const LOG: &str = r"
local record = ARGV[2]
if KEYS[4] then
    local parts = {}
    for i = 1, tonumber(ARGV[2]) do
        local piece = redis.call('mget', KEYS[4] .. ':' .. i)[1]
        if not piece then
            return redis.error_reply('a piece of the failure record is gone')
        end
        parts[i] = piece
    end
    record = table.concat(parts)
    for i = 1, #parts do
        redis.call('del', KEYS[4] .. ':' .. i)
    end
end
local key = ARGV[1]
if redis.call('hsetnx', KEYS[1], key, record) == 0 then
    repeat
        local n = redis.call('hincrby', KEYS[3], ARGV[1], 1)
        key = ARGV[1] .. '#' .. (n + 1)
    until redis.call('hsetnx', KEYS[1], key, record) == 1
end
redis.call('zadd', KEYS[2], ARGV[3], key)
return key
";

/// Records whose payload is at least this many bytes (1 MiB) are sent in
/// pieces of this size (see [`LOG`]).
const PIECE: usize = 1024 * 1024;

/// A record as the store writes it, from the failed job's own fields (the
/// payload, megabytes for a large job, is not copied on the way).
#[derive(serde::Serialize)]
struct Written<'a> {
    uuid: &'a str,
    connection: &'a str,
    queue: &'a str,
    payload: &'a str,
    exception: &'a str,
    failed_at: String,
}

impl<'a> Written<'a> {
    fn of(job: &'a FailedJob) -> Self {
        Written {
            uuid: &job.uuid,
            connection: &job.connection,
            queue: &job.queue,
            payload: job.payload.as_str(),
            exception: &job.exception,
            failed_at: format_failed_at(&job.failed_at),
        }
    }
}

/// Deletes the records whose keys are ARGV[3..], and the uuid ARGV[1]'s
/// duplicates count when it still is ARGV[2] ('' = none; a record logged
/// meanwhile changed it). KEYS: the hash, the index, the duplicates hash.
/// Returns how many records were deleted.
pub(crate) const FORGET: &str = r"
local deleted = 0
for i = 3, #ARGV do
    deleted = deleted + redis.call('hdel', KEYS[1], ARGV[i])
    redis.call('zrem', KEYS[2], ARGV[i])
end
local seen = ARGV[2]
if seen == '' then seen = false end
if redis.call('hget', KEYS[3], ARGV[1]) == seen then
    redis.call('hdel', KEYS[3], ARGV[1])
end
return deleted
";

/// Deletes the records indexed at or before ARGV[1] (UNIX seconds).
/// KEYS: the hash, the index. Returns how many were deleted.
pub(crate) const FLUSH_OLDER: &str = r"
local ids = redis.call('zrangebyscore', KEYS[2], '-inf', ARGV[1])
for i = 1, #ids, 100 do
    local chunk = {unpack(ids, i, math.min(i + 99, #ids))}
    redis.call('hdel', KEYS[1], unpack(chunk))
    redis.call('zrem', KEYS[2], unpack(chunk))
end
return #ids
";

/// Keys read per HMGET.
const CHUNK: usize = 100;

/// One record of the hash.
#[derive(Deserialize)]
struct Record {
    uuid: String,
    connection: String,
    queue: String,
    payload: String,
    exception: String,
    failed_at: String,
}

impl Record {
    fn stored(self, key: String) -> StoredJob {
        StoredJob {
            id: self.uuid,
            connection: self.connection,
            queue: self.queue,
            payload: self.payload,
            exception: self.exception,
            failed_at: self.failed_at,
            place: Place::Redis(key),
        }
    }
}

/// Failed jobs kept in Redis.
pub struct RedisFailedStore {
    conn: RedisConn,
    hash: String,
    index: String,
    duplicates: String,
}

impl RedisFailedStore {
    /// Connects to `target` and makes the store there (see [`Self::new`]);
    /// `role` names what the store is for in the error.
    ///
    /// # Errors
    /// Redis cannot be reached, with `role` and the target in the message.
    pub async fn connect(
        target: &crate::redis::RedisTarget,
        prefix: &str,
        role: &str,
    ) -> anyhow::Result<Self> {
        let conn = crate::redis::open(target, crate::redis::Purpose::Commands)
            .await
            .with_context(|| {
                format!("cannot connect to Redis for {role} ({})", target.describe())
            })?;
        Ok(RedisFailedStore::new(conn, prefix))
    }

    /// A store on `conn`, with keys under `prefix` (hash-tagged on a
    /// cluster, so the MULTI and the flush script keep to one slot).
    pub fn new(conn: RedisConn, prefix: &str) -> Self {
        let hash = if conn.is_cluster() {
            format!("{prefix}{{laravel-worker:failed_jobs}}")
        } else {
            format!("{prefix}laravel-worker:failed_jobs")
        };
        RedisFailedStore {
            conn,
            index: format!("{hash}:index"),
            duplicates: format!("{hash}:duplicates"),
            hash,
        }
    }

    /// The hash's full key, for messages.
    pub fn key(&self) -> &str {
        &self.hash
    }

    /// Records `job`, beside any record of the same uuid (one script);
    /// returns the record's key in the hash.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn log(&self, job: &FailedJob) -> anyhow::Result<String> {
        let mut script = redis::cmd("EVAL");
        script.arg(LOG);
        if job.payload.as_str().len() < PIECE {
            let record = serde_json::to_vec(&Written::of(job))?;
            script
                .arg(3)
                .arg(&self.hash)
                .arg(&self.index)
                .arg(&self.duplicates)
                .arg(&job.uuid)
                .arg(&record);
        } else {
            let pieces = format!("{}:incoming:{}", self.hash, uuid::Uuid::new_v4().simple());
            let count = self.send_pieces(&pieces, job).await?;
            script
                .arg(4)
                .arg(&self.hash)
                .arg(&self.index)
                .arg(&self.duplicates)
                .arg(&pieces)
                .arg(&job.uuid)
                .arg(count);
        }
        let key: String = script
            .arg(job.failed_at.timestamp())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(named_in_our_scripts)?;
        Ok(key)
    }

    /// Writes `job`'s record as JSON, made on a blocking thread a piece at a
    /// time, to `pieces:1`, `pieces:2`, … (each `SET … EX 60`, in the
    /// store's hash slot); returns how many. The record (the payload
    /// escaped once more) is never held whole.
    ///
    /// # Errors
    /// Any Redis error; the pieces written expire.
    async fn send_pieces(&self, pieces: &str, job: &FailedJob) -> anyhow::Result<usize> {
        let job = job.clone();
        let (mut made, making) = crate::pieces::make(PIECE, move |sink| {
            serde_json::to_writer(sink, &Written::of(&job)).map_err(std::io::Error::other)
        });
        let mut count = 0;
        while let Some(piece) = made.recv().await {
            count += 1;
            let () = redis::cmd("SET")
                .arg(format!("{pieces}:{count}"))
                .arg(piece)
                .arg("EX")
                .arg(60)
                .query_async(&mut self.conn.clone())
                .await?;
        }
        making.await??;
        Ok(count)
    }

    /// Every record, newest first (descending time of failure; records of
    /// the same second in descending key order). A record that is not
    /// valid JSON is skipped with a warning.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        let mut conn = self.conn.clone();
        let keys: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&self.index)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        let mut jobs = Vec::with_capacity(keys.len());
        for (key, record) in self.records(&keys).await? {
            match serde_json::from_str::<Record>(&record) {
                Ok(r) => jobs.push(r.stored(key)),
                Err(e) => tracing::warn!(key, "unreadable failed job record: {e}"),
            }
        }
        Ok(jobs)
    }

    /// The records of `keys` that exist, in that order.
    async fn records(&self, keys: &[String]) -> anyhow::Result<Vec<(String, String)>> {
        let mut conn = self.conn.clone();
        let mut found = Vec::new();
        for chunk in keys.chunks(CHUNK) {
            let records: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&self.hash)
                .arg(chunk)
                .query_async(&mut conn)
                .await?;
            found.extend(
                chunk
                    .iter()
                    .zip(records)
                    .filter_map(|(key, record)| Some((key.clone(), record?))),
            );
        }
        Ok(found)
    }

    /// The keys of uuid `id`'s records that exist, with each one's record
    /// when it is readable, and the duplicates count read (`None`: none).
    /// The uuid's own key always belongs to it; a `#N` key only when its
    /// record says so.
    async fn keys_of(
        &self,
        id: &str,
    ) -> anyhow::Result<(Vec<(String, Option<Record>)>, Option<u64>)> {
        let count: Option<u64> = redis::cmd("HGET")
            .arg(&self.duplicates)
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await?;
        let candidates: Vec<String> = std::iter::once(id.to_string())
            .chain((2..=count.unwrap_or(0).saturating_add(1)).map(|n| format!("{id}#{n}")))
            .collect();
        let mut mine = Vec::new();
        for (key, text) in self.records(&candidates).await? {
            let record = serde_json::from_str::<Record>(&text).ok();
            let own_key = key == id;
            if own_key || record.as_ref().is_some_and(|r| r.uuid == id) {
                mine.push((key, record));
            }
        }
        Ok((mine, count))
    }

    /// The records of uuid `id`, newest first (later `#N` first within a
    /// second).
    ///
    /// # Errors
    /// Any Redis error, or a record under the uuid's own key that is not
    /// valid JSON.
    pub async fn find_all(&self, id: &str) -> anyhow::Result<Vec<StoredJob>> {
        let (mine, _) = self.keys_of(id).await?;
        let mut jobs = Vec::with_capacity(mine.len());
        for (key, record) in mine {
            let record = record.with_context(|| format!("unreadable failed job record {key}"))?;
            jobs.push(record.stored(key));
        }
        jobs.sort_by(|a, b| {
            b.failed_at
                .cmp(&a.failed_at)
                .then_with(|| suffix(id, &b.place).cmp(&suffix(id, &a.place)))
        });
        Ok(jobs)
    }

    /// Deletes every record of uuid `id` and their index entries (one
    /// script); whether there was one.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn forget(&self, id: &str) -> anyhow::Result<bool> {
        let (mine, count) = self.keys_of(id).await?;
        let mut script = redis::cmd("EVAL");
        script
            .arg(FORGET)
            .arg(3)
            .arg(&self.hash)
            .arg(&self.index)
            .arg(&self.duplicates)
            .arg(id)
            .arg(count.map(|c| c.to_string()).unwrap_or_default());
        for (key, _) in &mine {
            script.arg(key);
        }
        let deleted: u64 = script
            .query_async(&mut self.conn.clone())
            .await
            .map_err(named_in_our_scripts)?;
        Ok(deleted > 0)
    }

    /// Deletes the one record under `key` and its index entry (one MULTI);
    /// whether it was there.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn delete(&self, key: &str) -> anyhow::Result<bool> {
        let (deleted, _): (u64, u64) = redis::pipe()
            .atomic()
            .hdel(&self.hash, key)
            .zrem(&self.index, key)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(deleted > 0)
    }

    /// Deletes every record (`None`), or those that failed at or before
    /// `older_than` by the index; returns how many records went.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn flush(&self, older_than: Option<DateTime<Utc>>) -> anyhow::Result<u64> {
        let mut conn = self.conn.clone();
        Ok(match older_than {
            None => {
                let (count, _): (u64, u64) = redis::pipe()
                    .atomic()
                    .hlen(&self.hash)
                    .del(&[&self.hash, &self.index, &self.duplicates])
                    .query_async(&mut conn)
                    .await?;
                count
            }
            Some(at) => redis::cmd("EVAL")
                .arg(FLUSH_OLDER)
                .arg(2)
                .arg(&self.hash)
                .arg(&self.index)
                .arg(at.timestamp())
                .query_async(&mut conn)
                .await
                .map_err(named_in_our_scripts)?,
        })
    }
}

/// The `N` of uuid `id`'s `id#N` key (1 for its own key), for ordering a
/// uuid's records.
fn suffix(id: &str, place: &Place) -> u64 {
    match place {
        Place::Redis(key) => key
            .strip_prefix(id)
            .and_then(|rest| rest.strip_prefix('#'))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1),
        Place::Table => 0,
    }
}

/// Names the command an ACL refused inside one of this store's scripts.
fn named_in_our_scripts(e: redis::RedisError) -> redis::RedisError {
    name_denied_in_scripts(e, &[LOG, FORGET, FLUSH_OLDER])
}
