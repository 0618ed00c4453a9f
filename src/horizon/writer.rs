//! The task that writes Horizon's job records, as `RedisJobRepository`
//! writes them, from the records [`super::records`] queued.
//!
//! It takes whatever is queued within [`LINGER`] (up to [`BATCH`] records)
//! and sends it as one pipeline on its own connection. A Redis error is logged (once per
//! interval, see [`crate::log_limit`]), counted, and the batch dropped:
//! never retried, so a Redis that refuses the records costs one round trip
//! per batch and nothing more.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Pipeline;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::HorizonSettings;
use super::keys::Keys;
use super::records::{Record, Step};
use crate::log_limit::RepeatLimiter;
use crate::redis::RedisConn;

/// Records sent in one pipeline at most.
pub const BATCH: usize = 256;

/// How long a batch that is not full waits for more records before it is
/// sent: one round trip for the records of a few milliseconds, not one
/// per record, whatever the pace of the jobs.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// The few payload fields Horizon's records need.
#[derive(Deserialize, Default)]
struct Fields {
    uuid: Option<String>,
    id: Option<serde_json::Value>,
    #[serde(rename = "displayName")]
    display_name: Option<String>,
    #[serde(default)]
    tags: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    silenced: Option<serde_json::Value>,
}

impl Fields {
    /// `JobPayload::id()`: `uuid`, else `id`.
    fn job_id(&self) -> Option<String> {
        match (&self.uuid, &self.id) {
            (Some(uuid), _) => Some(uuid.clone()),
            (None, Some(serde_json::Value::String(id))) => Some(id.clone()),
            (None, Some(serde_json::Value::Number(n))) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// What one batch needs besides the records.
pub struct Writer {
    /// Horizon's keys.
    pub keys: Keys,
    /// The queue connection's name (`redis`), the hashes' `connection`.
    pub connection: String,
    /// Trim settings (TTLs of the hashes and tag sets).
    pub settings: HorizonSettings,
    /// Batches Redis refused.
    pub failed_batches: Arc<AtomicU64>,
}

impl Writer {
    /// Drains `records` until every sender is gone, writing on `conn`.
    pub async fn run(self, mut records: mpsc::Receiver<Record>, mut conn: RedisConn) {
        let mut limiter = RepeatLimiter::new(crate::log_limit::DEFAULT_INTERVAL);
        let mut batch = Vec::with_capacity(BATCH);
        while records.recv_many(&mut batch, BATCH).await > 0 {
            if batch.len() < BATCH {
                tokio::time::sleep(LINGER).await;
                while batch.len() < BATCH {
                    match records.try_recv() {
                        Ok(record) => batch.push(record),
                        Err(_) => break,
                    }
                }
            }
            let mut pipe = redis::pipe();
            let mut runs = super::metrics::Runs::default();
            // A job's records share its payload: it is parsed once a batch.
            let mut parsed: HashMap<(usize, usize), Fields> = HashMap::new();
            for record in batch.drain(..) {
                let fields = parsed
                    .entry((record.payload.as_ptr() as usize, record.payload.len()))
                    .or_insert_with(|| serde_json::from_slice(&record.payload).unwrap_or_default());
                self.add(&mut pipe, &mut runs, &record, fields);
            }
            runs.write(&mut pipe, &self.keys);
            match pipe.query_async::<()>(&mut conn).await {
                Ok(()) => limiter.log_resolved(SITE),
                Err(e) => {
                    self.failed_batches.fetch_add(1, Ordering::Relaxed);
                    limiter.log(tracing::Level::WARN, SITE, &e);
                }
            }
        }
    }

    /// Adds `record`'s commands to `pipe`; a payload without an id (or
    /// not JSON) has no Horizon record and adds none.
    fn add(
        &self,
        pipe: &mut Pipeline,
        runs: &mut super::metrics::Runs,
        record: &Record,
        fields: &Fields,
    ) {
        let Some(id) = fields.job_id() else { return };
        let name = fields.display_name.as_deref().unwrap_or("");
        let hash = self.keys.key(&id);
        let time = format!("{:.4}", record.at);
        let score = format!("-{time}");
        let until = |minutes: u64| record.at as u64 + minutes * 60;
        let trim = &self.settings.trim;
        match &record.step {
            Step::Reserved => {
                pipe.cmd("EVAL")
                    .arg(RESERVED)
                    .arg(3)
                    .arg(&hash)
                    .arg(self.keys.key("recent_jobs"))
                    .arg(self.keys.key("pending_jobs"))
                    .arg(&id)
                    .arg(&self.connection)
                    .arg(&record.queue)
                    .arg(name)
                    .arg(&record.payload[..])
                    .arg(&time)
                    .arg(until(trim.pending))
                    .arg(&score)
                    .ignore();
            }
            Step::Released => {
                pipe.hset_multiple(
                    &hash,
                    &[
                        ("status", "pending".as_bytes()),
                        ("updated_at", time.as_bytes()),
                    ],
                )
                .ignore()
                .hset(&hash, "payload", &record.payload[..])
                .ignore();
            }
            Step::Completed { runtime_ms } => {
                let silenced = fields.silenced.as_ref().is_some_and(truthy);
                let list = if silenced {
                    "silenced_jobs"
                } else {
                    "completed_jobs"
                };
                pipe.zadd(self.keys.key(list), &id, &score)
                    .ignore()
                    .zrem(self.keys.key("pending_jobs"), &id)
                    .ignore()
                    .hset_multiple(&hash, &[("status", "completed"), ("completed_at", &time)])
                    .ignore()
                    .expire_at(&hash, until(trim.completed) as i64)
                    .ignore();
                runs.add(&self.keys, &record.queue, name, *runtime_ms);
            }
            Step::Failed { exception } => {
                self.add_failed(pipe, record, fields, &id, exception);
            }
        }
    }

    /// `RedisJobRepository::failed` and `StoreTagsForFailedJob`.
    fn add_failed(
        &self,
        pipe: &mut Pipeline,
        record: &Record,
        fields: &Fields,
        id: &str,
        exception: &str,
    ) {
        let hash = self.keys.key(id);
        let time = format!("{:.4}", record.at);
        let score = format!("-{time}");
        let minutes = self.settings.trim.failed;
        for list in ["failed_jobs", "recent_failed_jobs"] {
            pipe.zadd(self.keys.key(list), id, &score).ignore();
        }
        for list in ["pending_jobs", "completed_jobs", "silenced_jobs"] {
            pipe.zrem(self.keys.key(list), id).ignore();
        }
        let name = fields.display_name.as_deref().unwrap_or("");
        pipe.hset_multiple(
            &hash,
            &[
                ("id", id.as_bytes()),
                ("connection", self.connection.as_bytes()),
                ("queue", record.queue.as_bytes()),
                ("name", name.as_bytes()),
                ("status", b"failed"),
                ("payload", &record.payload[..]),
                ("exception", exception.as_bytes()),
                ("failed_at", time.as_bytes()),
            ],
        )
        .ignore()
        .expire_at(&hash, (record.at as u64 + minutes * 60) as i64)
        .ignore();
        for tag in fields.tags.iter().flatten().filter_map(|t| t.as_str()) {
            let key = self.keys.key(&format!("failed:{tag}"));
            pipe.zadd(&key, id, &time)
                .ignore()
                .expire(&key, (minutes * 60) as i64)
                .ignore();
        }
    }
}

/// The log site of a refused batch.
const SITE: &str = "cannot write Horizon's job records";

/// PHP's truthiness of a JSON value, for `silenced`.
fn truthy(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        serde_json::Value::String(s) => !s.is_empty() && s != "0",
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(_) => true,
        serde_json::Value::Null => false,
    }
}

/// `reserved()`, and for a hash the producer did not write (a job pushed
/// without Horizon, or whose record expired) what `pushed()` would have
/// written: `id, connection, queue, name, created_at`, the recent and
/// pending entries, and the pending expiry.
///
/// KEYS: hash, recent_jobs, pending_jobs. ARGV: id, connection, queue,
/// name, payload, time, expiry (UNIX seconds), score (-time).
const RESERVED: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'connection', ARGV[2], 'queue', ARGV[3],
    'name', ARGV[4], 'created_at', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[8], ARGV[1])
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[1])
  redis.call('EXPIREAT', KEYS[1], ARGV[7])
end
redis.call('HSET', KEYS[1], 'status', 'reserved', 'payload', ARGV[5], 'updated_at', ARGV[6],
  'reserved_at', ARGV[6])
";
