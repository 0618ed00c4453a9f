//! The Redis calls of a Laravel queue connection (protocol §4).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use redis::{RedisResult, Value};

use super::job::{Popped, ReservedJob};
use super::keys::QueueKeys;
use super::payload::{Payload, PayloadError};
use super::scripts;
use bytes::Bytes;

/// A queue connection: one Redis database, one key prefix, and the
/// connection's `retry_after`, `block_for` and `migration_batch_size`.
///
/// Cloning is cheap; clones share the underlying connections.
#[derive(Clone)]
pub struct RedisQueue {
    /// The command connection. Behind a lock so that it can be replaced
    /// after a large job ([`RedisQueue::renew_connection`]); each call
    /// clones it (a handle) and releases the lock at once.
    conn: Arc<std::sync::Mutex<ConnectionManager>>,
    /// Where `conn` goes.
    url: redis::ConnectionInfo,
    /// A second connection for BLPOP, so a blocked wait never holds up the
    /// deletes and releases of running jobs.
    blocking: Option<ConnectionManager>,
    prefix: String,
    cluster: bool,
    /// Seconds a reservation lasts; `None` turns reclaiming off.
    retry_after: Option<u64>,
    /// Seconds to BLPOP on the notify lists when all queues are empty;
    /// `None` never blocks, `Some(0)` blocks without a time limit.
    block_for: Option<u64>,
    /// Most jobs moved per migrate call; `-1` means all.
    migration_batch_size: i64,
}

/// Settings of a [`RedisQueue`], as in `config/queue.php`.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// The connection key prefix (`REDIS_PREFIX`).
    pub prefix: String,
    /// Wrap queue names in Redis Cluster hash tags (Laravel 13.5+ on clusters).
    pub cluster: bool,
    /// Seconds; `None` disables reclaiming of reserved jobs.
    pub retry_after: Option<u64>,
    /// Seconds; `None` never blocks.
    pub block_for: Option<u64>,
    /// `-1` for no limit.
    pub migration_batch_size: i64,
}

/// The job counts of one queue (`queue:monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QueueSizes {
    /// Jobs in the ready list.
    pub pending: u64,
    /// Jobs in `:delayed`.
    pub delayed: u64,
    /// Jobs in `:reserved`.
    pub reserved: u64,
    /// `createdAt` (UNIX seconds) of the job at the head of the ready list.
    pub oldest_pending: Option<i64>,
}

impl QueueSizes {
    /// Ready + delayed + reserved, as Laravel's `size`.
    pub fn size(&self) -> u64 {
        self.pending + self.delayed + self.reserved
    }
}

/// Current UNIX time in whole seconds, the unit of every queue score.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl RedisQueue {
    /// Connects to the queue database described by `url`.
    ///
    /// # Errors
    /// A bad URL or an unreachable server.
    pub async fn connect(url: &redis::ConnectionInfo, options: QueueOptions) -> RedisResult<Self> {
        let conn =
            super::connect::connect(url.clone(), Some(super::connect::COMMAND_TIMEOUT)).await?;
        let blocking = match options.block_for {
            None => None,
            // Leave the server time to answer after its own timeout.
            Some(0) => Some(super::connect::connect(url.clone(), None).await?),
            Some(s) => {
                Some(super::connect::connect(url.clone(), Some(Duration::from_secs(s + 10))).await?)
            }
        };
        Ok(RedisQueue {
            conn: Arc::new(std::sync::Mutex::new(conn)),
            url: url.clone(),
            blocking,
            prefix: options.prefix,
            cluster: options.cluster,
            retry_after: options.retry_after,
            block_for: options.block_for,
            migration_batch_size: options.migration_batch_size,
        })
    }

    /// A handle on the command connection.
    fn conn(&self) -> ConnectionManager {
        match self.conn.lock() {
            Ok(conn) => conn.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the command connection with a new one. The client library
    /// keeps its read and write buffers at the size of the largest reply or
    /// command it has seen, so after a job of many megabytes the daemon would
    /// otherwise hold that much for ever. Calls in flight finish on the old
    /// connection, which closes when they are done. On failure the old
    /// connection stays.
    pub async fn renew_connection(&self) {
        match super::connect::connect(self.url.clone(), Some(super::connect::COMMAND_TIMEOUT)).await
        {
            Ok(fresh) => match self.conn.lock() {
                Ok(mut conn) => *conn = fresh,
                Err(poisoned) => *poisoned.into_inner() = fresh,
            },
            Err(e) => tracing::debug!("cannot open a fresh queue connection: {e}"),
        }
    }

    /// The keys of queue `name` on this connection.
    pub fn keys(&self, name: &str) -> Arc<QueueKeys> {
        Arc::new(QueueKeys::new(&self.prefix, name, self.cluster))
    }

    /// Seconds a reservation lasts (`None`: reserved jobs are never reclaimed).
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Migrates due delayed jobs (and, unless `retry_after` is null, expired
    /// reservations) to the ready list, then reserves the head of the list.
    ///
    /// This is Laravel's `RedisQueue::pop` without the blocking part: the
    /// three scripts go out in one pipelined round trip, each still atomic.
    ///
    /// # Errors
    /// Any Redis error; nothing was reserved then unless the pop script ran,
    /// in which case the job is in `:reserved` and is reclaimed after
    /// `retry_after`.
    pub async fn pop(&self, queue: &Arc<QueueKeys>) -> RedisResult<Popped> {
        let now = now();
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(scripts::MIGRATE_EXPIRED)
            .arg(3)
            .arg(&queue.delayed)
            .arg(&queue.ready)
            .arg(&queue.notify)
            .arg(now)
            .arg(self.migration_batch_size)
            .ignore();
        if self.retry_after.is_some() {
            pipe.cmd("EVAL")
                .arg(scripts::MIGRATE_EXPIRED)
                .arg(3)
                .arg(&queue.reserved)
                .arg(&queue.ready)
                .arg(&queue.notify)
                .arg(now)
                .arg(self.migration_batch_size)
                .ignore();
        }
        pipe.cmd("EVAL")
            .arg(scripts::POP)
            .arg(3)
            .arg(&queue.ready)
            .arg(&queue.reserved)
            .arg(&queue.notify)
            .arg(now + self.retry_after.unwrap_or(0) as i64);
        let (popped,): (Vec<Value>,) = pipe.query_async(&mut self.conn()).await?;
        Ok(reserved_job(queue, popped))
    }

    /// Waits on the notify lists of `queues` (in priority order) for at most
    /// `block_for` seconds. Returns true when a token arrived, false on
    /// time-out or when blocking is off.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn block_on_notify(&self, queues: &[Arc<QueueKeys>]) -> RedisResult<bool> {
        let (Some(conn), Some(block_for)) = (&self.blocking, self.block_for) else {
            return Ok(false);
        };
        let keys: Vec<&str> = queues.iter().map(|q| q.notify.as_str()).collect();
        let token: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&keys)
            .arg(block_for)
            .query_async(&mut conn.clone())
            .await?;
        Ok(token.is_some())
    }

    /// Deletes a reserved job: `ZREM` of its reserved string.
    /// Returns false when the reservation was already gone.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn delete(&self, job: &ReservedJob) -> RedisResult<bool> {
        let removed: i64 = redis::cmd("ZREM")
            .arg(&job.queue.reserved)
            .arg(&job.reserved[..])
            .query_async(&mut self.conn())
            .await?;
        Ok(removed > 0)
    }

    /// Releases a reserved job back to `:delayed`, available `delay` seconds
    /// from now, with its attempt counted (the reserved string moves).
    /// Returns false when the reservation was already gone.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn release(&self, job: &ReservedJob, delay: u64) -> RedisResult<bool> {
        self.move_to_delayed(job, delay, &job.reserved[..]).await
    }

    /// Hands a reserved job back *uncounted*: its original string goes to
    /// `:delayed`, so another worker sees the attempts it had before this
    /// reservation. Used when this daemon cannot run the job at all.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn hand_back(&self, job: &ReservedJob, delay: u64) -> RedisResult<bool> {
        self.move_to_delayed(job, delay, &job.raw[..]).await
    }

    async fn move_to_delayed(
        &self,
        job: &ReservedJob,
        delay: u64,
        member: &[u8],
    ) -> RedisResult<bool> {
        let released: i64 = redis::cmd("EVAL")
            .arg(scripts::RELEASE)
            .arg(2)
            .arg(&job.queue.delayed)
            .arg(&job.queue.reserved)
            .arg(&job.reserved[..])
            .arg(now() + delay as i64)
            .arg(member)
            .query_async(&mut self.conn())
            .await?;
        Ok(released == 1)
    }

    /// Pushes the reservation of a running job to now + `retry_after`.
    /// Returns false when it was lost (the job was reclaimed elsewhere).
    /// Does nothing and returns true when `retry_after` is null.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn renew(&self, job: &ReservedJob) -> RedisResult<bool> {
        let Some(retry_after) = self.retry_after else {
            return Ok(true);
        };
        let renewed: i64 = redis::cmd("EVAL")
            .arg(scripts::RENEW)
            .arg(1)
            .arg(&job.queue.reserved)
            .arg(&job.reserved[..])
            .arg(now() + retry_after as i64)
            .query_async(&mut self.conn())
            .await?;
        Ok(renewed == 1)
    }

    /// Pushes a payload onto the ready list with a notify token (Laravel's
    /// `pushRaw`).
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn push(&self, queue: &QueueKeys, payload: &str) -> RedisResult<()> {
        redis::cmd("EVAL")
            .arg(scripts::PUSH)
            .arg(2)
            .arg(&queue.ready)
            .arg(&queue.notify)
            .arg(payload)
            .query_async::<()>(&mut self.conn())
            .await
    }

    /// Adds a payload to `:delayed`, available at `available_at` (UNIX
    /// seconds). No notify token: one is pushed when the job is migrated.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn later(
        &self,
        queue: &QueueKeys,
        available_at: i64,
        payload: &str,
    ) -> RedisResult<()> {
        redis::cmd("ZADD")
            .arg(&queue.delayed)
            .arg(available_at)
            .arg(payload)
            .query_async::<()>(&mut self.conn())
            .await
    }

    /// Ready, delayed and reserved counts of a queue, and the `createdAt`
    /// of the oldest ready job (Laravel 12.11+ payloads), in one round trip.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn sizes(&self, queue: &QueueKeys) -> RedisResult<QueueSizes> {
        let (pending, delayed, reserved, oldest): (u64, u64, u64, Option<Vec<u8>>) = redis::pipe()
            .llen(&queue.ready)
            .zcard(&queue.delayed)
            .zcard(&queue.reserved)
            .lindex(&queue.ready, 0)
            .query_async(&mut self.conn())
            .await?;
        let oldest_pending = oldest
            .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
            .and_then(|v| v.get("createdAt").and_then(serde_json::Value::as_i64));
        Ok(QueueSizes {
            pending,
            delayed,
            reserved,
            oldest_pending,
        })
    }

    /// Deletes every job of a queue; returns how many there were.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn clear(&self, queue: &QueueKeys) -> RedisResult<u64> {
        redis::cmd("EVAL")
            .arg(scripts::CLEAR)
            .arg(4)
            .arg(&queue.ready)
            .arg(&queue.delayed)
            .arg(&queue.reserved)
            .arg(&queue.notify)
            .query_async(&mut self.conn())
            .await
    }
}

/// Turns the pop script's `{original, reserved, poison}` into a job.
///
/// The script's poison flag is authoritative: a payload the script could not
/// count an attempt on is never run, whatever the Rust parser makes of it.
fn reserved_job(queue: &Arc<QueueKeys>, popped: Vec<Value>) -> Popped {
    let mut parts = popped.into_iter();
    let mut bytes = || match parts.next() {
        Some(Value::BulkString(b)) => Some(b),
        _ => None,
    };
    let raw = Bytes::from(bytes()?);
    let reserved = Bytes::from(bytes()?);
    let poison = matches!(parts.next(), Some(Value::Int(1)));
    let payload = match Payload::parse(raw.clone()) {
        Ok(_) if poison => Err(PayloadError::NoAttempts),
        parsed => parsed,
    };
    Some(ReservedJob {
        queue: Arc::clone(queue),
        raw,
        reserved,
        payload,
    })
}
