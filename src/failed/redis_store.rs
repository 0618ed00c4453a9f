//! A failed-job store in Redis, for setups with no database.
//!
//! Keys (under the queue connection's prefix):
//! - `{prefix}laravel-worker:failed_jobs`: HASH uuid → JSON record
//!   `{uuid, connection, queue, payload, exception, failed_at}` (the columns
//!   of Laravel's table, `failed_at` as `Y-m-d H:i:s` UTC);
//! - `{prefix}laravel-worker:failed_jobs:index`: ZSET uuid scored by the
//!   UNIX time of failure, for listing newest first.

use redis::aio::ConnectionManager;
use serde_json::json;

use super::{FailedJob, format_failed_at};

/// Failed jobs kept in Redis.
pub struct RedisFailedStore {
    conn: ConnectionManager,
    hash: String,
    index: String,
}

impl RedisFailedStore {
    /// A store on `conn`, with keys under `prefix`.
    pub fn new(conn: ConnectionManager, prefix: &str) -> Self {
        let hash = format!("{prefix}laravel-worker:failed_jobs");
        RedisFailedStore {
            conn,
            index: format!("{hash}:index"),
            hash,
        }
    }

    /// The hash key holding the records.
    pub fn hash_key(&self) -> &str {
        &self.hash
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
}
