//! A failed-job store in Redis, for setups with no database.
//!
//! Keys (under the queue connection's prefix):
//! - `{prefix}laravel-worker:failed_jobs`: HASH uuid → JSON record
//!   `{uuid, connection, queue, payload, exception, failed_at}` (the columns
//!   of Laravel's table, `failed_at` as `Y-m-d H:i:s` UTC);
//! - `{prefix}laravel-worker:failed_jobs:index`: ZSET uuid scored by the
//!   UNIX time of failure, for listing newest first.
//!
//! The commands read and delete both keys together: `forget` and `flush` run
//! as one MULTI or script, so a record never outlives its index entry.
//! On a Redis Cluster both keys carry the hash tag
//! `{laravel-worker:failed_jobs}` so that they share a slot:
//! `{prefix}{laravel-worker:failed_jobs}` and `…:index`.

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use super::{FailedJob, StoredJob, format_failed_at};
use crate::queue::connect::RedisConn;

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

impl From<Record> for StoredJob {
    fn from(r: Record) -> Self {
        StoredJob {
            id: r.uuid,
            connection: r.connection,
            queue: r.queue,
            payload: r.payload,
            exception: r.exception,
            failed_at: r.failed_at,
        }
    }
}

/// Failed jobs kept in Redis.
pub struct RedisFailedStore {
    conn: RedisConn,
    hash: String,
    index: String,
}

impl RedisFailedStore {
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
            hash,
        }
    }

    /// Records `job` (both keys in one MULTI).
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn log(&self, job: &FailedJob) -> anyhow::Result<()> {
        let record = json!({
            "uuid": job.uuid,
            "connection": job.connection,
            "queue": job.queue,
            "payload": job.payload,
            "exception": job.exception,
            "failed_at": format_failed_at(&job.failed_at),
        });
        redis::pipe()
            .atomic()
            .hset(&self.hash, &job.uuid, record.to_string())
            .ignore()
            .zadd(&self.index, &job.uuid, job.failed_at.timestamp())
            .ignore()
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Every record, newest first (descending time of failure; records of
    /// the same second in descending uuid order). A record that is not
    /// valid JSON is skipped with a warning.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        let mut conn = self.conn.clone();
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&self.index)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(100) {
            let records: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&self.hash)
                .arg(chunk)
                .query_async(&mut conn)
                .await?;
            for (id, record) in chunk.iter().zip(records) {
                let Some(record) = record else { continue };
                match serde_json::from_str::<Record>(&record) {
                    Ok(r) => jobs.push(r.into()),
                    Err(e) => tracing::warn!(id, "unreadable failed job record: {e}"),
                }
            }
        }
        Ok(jobs)
    }

    /// The record of uuid `id`.
    ///
    /// # Errors
    /// Any Redis error, or a record that is not valid JSON.
    pub async fn find(&self, id: &str) -> anyhow::Result<Option<StoredJob>> {
        let record: Option<String> = redis::cmd("HGET")
            .arg(&self.hash)
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await?;
        record
            .map(|r| {
                serde_json::from_str::<Record>(&r)
                    .map(StoredJob::from)
                    .with_context(|| format!("unreadable failed job record {id}"))
            })
            .transpose()
    }

    /// Deletes the record of uuid `id` and its index entry (one MULTI);
    /// whether a record was there.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn forget(&self, id: &str) -> anyhow::Result<bool> {
        let (deleted, _): (u64, u64) = redis::pipe()
            .atomic()
            .hdel(&self.hash, id)
            .zrem(&self.index, id)
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
                    .del(&[&self.hash, &self.index])
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
                .map_err(crate::queue::connect::name_denied_script_command)?,
        })
    }
}
