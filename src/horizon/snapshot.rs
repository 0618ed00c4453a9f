//! `horizon:snapshot` and the trimming of the job lists, for deployments
//! with no PHP Horizon left (`[horizon] snapshot = true`).
//!
//! Every [`EVERY`], under Horizon's own lock (`P metrics:snapshot`, `SET NX`
//! for 270 s, so that the daemons of a fleet and a scheduled
//! `horizon:snapshot` take turns), as `RedisMetricsRepository::snapshot`:
//! each measured job's and queue's hash is read and deleted in one
//! `MULTI`, its `{throughput, runtime[, wait], time}` added to
//! `P snapshot:job:{name}` / `P snapshot:queue:{name}` (24 kept), and
//! `P last_snapshot_at` set. `wait` is computed as Horizon does, after the
//! delete: the ready list's length times the queue's runtime read again
//! (0 unless a job completed in between), per process, in seconds.
//!
//! Then, as the PHP master's trim listeners do, the recent, recent-failed,
//! pending, completed, silenced, failed and monitored lists lose the ids
//! older than their `horizon.trim` minutes.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;

use super::Trim;
use super::keys::Keys;
use crate::queue::{HeadAge, Queue};
use crate::redis::RedisConn;

/// Time between two snapshots: Horizon's documented schedule (every five
/// minutes).
pub const EVERY: Duration = Duration::from_secs(300);

/// Snapshots to keep per job and per queue (`horizon.metrics.trim_snapshots`).
const KEEP: isize = 24;

/// What a snapshot needs.
pub struct Snapshots {
    /// Horizon's keys.
    pub keys: Keys,
    /// Its prefix, to turn a measured hash's name into its snapshot's.
    pub prefix: String,
    /// The queue connection, for the ready lists' lengths.
    pub queue: Queue,
    /// `horizon.trim`.
    pub trim: Trim,
    /// The worker's job slots (the processes `wait` is divided by).
    pub processes: usize,
}

impl Snapshots {
    /// Takes a snapshot every [`EVERY`], the first at once, until aborted.
    pub async fn run(self, mut conn: RedisConn) {
        let mut limiter = crate::log_limit::RepeatLimiter::new(crate::log_limit::DEFAULT_INTERVAL);
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            match self.once(&mut conn).await {
                Ok(_) => limiter.log_resolved(SITE),
                Err(e) => limiter.log(tracing::Level::WARN, SITE, &e),
            }
        }
    }

    /// One `horizon:snapshot` and trim; false when another holder had the
    /// lock.
    ///
    /// # Errors
    /// Any Redis error; the rest of this round is skipped.
    pub async fn once(&self, conn: &mut RedisConn) -> redis::RedisResult<bool> {
        let locked: Option<String> = redis::cmd("SET")
            .arg(self.keys.key("metrics:snapshot"))
            .arg(1)
            .arg("EX")
            .arg(270)
            .arg("NX")
            .query_async(conn)
            .await?;
        if locked.is_none() {
            return Ok(false);
        }
        let now = crate::queue::now();
        let jobs: Vec<String> = conn.smembers(self.keys.key("measured_jobs")).await?;
        for hash in jobs {
            self.store(conn, &hash, None, now).await?;
        }
        let queues: Vec<String> = conn.smembers(self.keys.key("measured_queues")).await?;
        for hash in queues {
            let name = hash.rsplit_once("queue:").map(|(_, n)| n.to_string());
            self.store(conn, &hash, name.as_deref(), now).await?;
        }
        let () = conn.set(self.keys.key("last_snapshot_at"), now).await?;
        self.trim(conn, now).await?;
        Ok(true)
    }

    /// Reads and deletes `hash`, and adds its snapshot (with `wait` for
    /// `queue`).
    async fn store(
        &self,
        conn: &mut RedisConn,
        hash: &str,
        queue: Option<&str>,
        now: i64,
    ) -> redis::RedisResult<()> {
        let Some(rest) = hash.strip_prefix(&self.prefix) else {
            return Ok(());
        };
        let ((throughput, runtime),): ((Option<String>, Option<String>),) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(hash)
            .arg("throughput")
            .arg("runtime")
            .del(hash)
            .ignore()
            .query_async(conn)
            .await?;
        // In `json_encode`'s order, the values as HMGET gave them (strings).
        let text = |v: &Option<String>| json!(v).to_string();
        let wait = match queue {
            Some(name) => format!(",\"wait\":{}", self.wait(conn, hash, name).await?),
            None => String::new(),
        };
        let snapshot = format!(
            "{{\"throughput\":{},\"runtime\":{}{wait},\"time\":{now}}}",
            text(&throughput),
            text(&runtime)
        );
        let key = self.keys.key(&format!("snapshot:{rest}"));
        redis::pipe()
            .zadd(&key, snapshot, now)
            .ignore()
            .zremrangebyrank(&key, 0, -(KEEP + 1))
            .ignore()
            .query_async(conn)
            .await
    }

    /// `WaitTimeCalculator`: ready jobs × mean runtime (ms) ÷ processes, in
    /// whole seconds.
    async fn wait(&self, conn: &mut RedisConn, hash: &str, queue: &str) -> redis::RedisResult<i64> {
        let runtime: Option<f64> = conn.hget(hash, "runtime").await?;
        let ready = match self
            .queue
            .sizes(&self.queue.handle(queue), HeadAge::Skip)
            .await
        {
            Ok(sizes) => sizes.pending,
            // Horizon runs only on Redis queues (refused at start otherwise).
            Err(crate::queue::QueueError::Redis(e)) => return Err(e),
            // Never: Horizon's records are refused at start on other drivers.
            Err(_) => 0,
        };
        let ms = ready as f64 * runtime.unwrap_or(0.0);
        Ok((ms / self.processes.max(1) as f64 / 1000.0).round() as i64)
    }

    /// The master's trim listeners: ids older than each list's minutes go.
    async fn trim(&self, conn: &mut RedisConn, now: i64) -> redis::RedisResult<()> {
        let t = &self.trim;
        let mut pipe = redis::pipe();
        for (list, minutes) in [
            ("recent_jobs", t.recent),
            ("recent_failed_jobs", t.recent_failed),
            ("pending_jobs", t.pending),
            ("completed_jobs", t.completed),
            ("silenced_jobs", t.completed),
            ("failed_jobs", t.failed),
            ("monitored_jobs", t.monitored),
        ] {
            let oldest = -(now - minutes as i64 * 60);
            pipe.zrembyscore(self.keys.key(list), oldest, "+inf")
                .ignore();
        }
        pipe.query_async(conn).await
    }
}

/// The log site of a failed snapshot.
const SITE: &str = "cannot take Horizon's metrics snapshot";
