//! The Redis calls of a Laravel queue connection (protocol §4).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{RedisResult, Value};

use super::connect::{COMMAND_TIMEOUT, RedisConn, RedisTarget, name_denied_script_command};
use super::job::{Popped, ReservedJob};
use super::keys::QueueKeys;
use super::payload::{Payload, PayloadError};
use super::scripts;

/// A queue connection: one Redis database, one key prefix, and the
/// connection's `retry_after`, `block_for` and `migration_batch_size`.
///
/// Cloning is cheap; clones share the underlying connections.
#[derive(Clone)]
pub struct RedisQueue {
    conn: RedisConn,
    /// Where BLPOP waits, apart from `conn`, so a blocked wait never holds
    /// up the deletes and releases of running jobs.
    blocking: Option<Blocking>,
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
    /// Connects to the queue database of `target` (one server, Sentinel or
    /// Cluster; see [`super::connect`]).
    ///
    /// # Errors
    /// A bad URL, unreadable TLS files, or an unreachable server.
    pub async fn connect(target: &RedisTarget, options: QueueOptions) -> RedisResult<Self> {
        let conn = super::connect::open(target, Some(COMMAND_TIMEOUT)).await?;
        let blocking = match options.block_for {
            None => None,
            Some(block_for) => {
                // Leave the server time to answer after its own timeout.
                let timeout = (block_for > 0).then(|| Duration::from_secs(block_for + 10));
                Some(if target.is_cluster() {
                    Blocking::PerQueue(Arc::new(NotifyWaits::new(target.clone(), timeout)))
                } else {
                    Blocking::One(super::connect::open(target, timeout).await?)
                })
            }
        };
        tracing::info!(redis = %target.describe(), "connected to the queue Redis");
        Ok(RedisQueue {
            conn,
            blocking,
            prefix: options.prefix,
            cluster: options.cluster,
            retry_after: options.retry_after,
            block_for: options.block_for,
            migration_batch_size: options.migration_batch_size,
        })
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
        let (popped,): (Vec<Value>,) = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)?;
        Ok(reserved_job(queue, popped))
    }

    /// Waits on the notify lists of `queues` (in priority order) for at most
    /// `block_for` seconds. Returns true when a token arrived, false on
    /// time-out or when blocking is off.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn block_on_notify(&self, queues: &[Arc<QueueKeys>]) -> RedisResult<bool> {
        let (Some(blocking), Some(block_for)) = (&self.blocking, self.block_for) else {
            return Ok(false);
        };
        match blocking {
            Blocking::One(conn) => {
                let keys: Vec<&str> = queues.iter().map(|q| q.notify.as_str()).collect();
                let token: Option<(String, String)> = redis::cmd("BLPOP")
                    .arg(&keys)
                    .arg(block_for)
                    .query_async(&mut conn.clone())
                    .await?;
                Ok(token.is_some())
            }
            Blocking::PerQueue(waits) => waits.wait(queues, block_for).await,
        }
    }

    /// Deletes a reserved job: `ZREM` of its reserved string.
    /// Returns false when the reservation was already gone.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn delete(&self, job: &ReservedJob) -> RedisResult<bool> {
        let removed: i64 = redis::cmd("ZREM")
            .arg(&job.queue.reserved)
            .arg(&job.reserved)
            .query_async(&mut self.conn.clone())
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
        self.move_to_delayed(job, delay, &job.reserved).await
    }

    /// Hands a reserved job back *uncounted*: its original string goes to
    /// `:delayed`, so another worker sees the attempts it had before this
    /// reservation. Used when this daemon cannot run the job at all.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn hand_back(&self, job: &ReservedJob, delay: u64) -> RedisResult<bool> {
        self.move_to_delayed(job, delay, &job.raw).await
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
            .arg(&job.reserved)
            .arg(now() + delay as i64)
            .arg(member)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)?;
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
            .arg(&job.reserved)
            .arg(now() + retry_after as i64)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)?;
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
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)
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
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)
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
            .query_async(&mut self.conn.clone())
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
            .query_async(&mut self.conn.clone())
            .await
            .map_err(name_denied_script_command)
    }
}

/// Where [`RedisQueue::block_on_notify`] waits.
#[derive(Clone)]
enum Blocking {
    /// One BLPOP over every queue's notify list (one server, or Sentinel).
    One(RedisConn),
    /// A Redis Cluster: the notify lists of different queues live in
    /// different slots, so one BLPOP cannot cover them. Each queue gets its
    /// own wait on its own connection.
    PerQueue(Arc<NotifyWaits>),
}

/// The per-queue waits on a cluster.
///
/// A BLPOP per queue runs as a task; the first token (or time-out) ends
/// the wait, and the worker then polls every queue in priority order, so
/// the order is kept whichever queue woke it. The BLPOPs of the other
/// queues are not abandoned (Redis would go on blocking the connection, and
/// a token it pops would be lost): they stay pending, and the next wait
/// takes them up again, or uses at once the token one of them got.
struct NotifyWaits {
    target: RedisTarget,
    timeout: Option<Duration>,
    state: tokio::sync::Mutex<WaitState>,
}

struct WaitState {
    /// One connection per notify key, opened on first use.
    conns: std::collections::HashMap<String, RedisConn>,
    /// Notify keys with a BLPOP in flight.
    pending: std::collections::HashSet<String>,
    done_tx: tokio::sync::mpsc::UnboundedSender<(String, RedisResult<bool>)>,
    done_rx: tokio::sync::mpsc::UnboundedReceiver<(String, RedisResult<bool>)>,
}

impl NotifyWaits {
    fn new(target: RedisTarget, timeout: Option<Duration>) -> Self {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        NotifyWaits {
            target,
            timeout,
            state: tokio::sync::Mutex::new(WaitState {
                conns: std::collections::HashMap::new(),
                pending: std::collections::HashSet::new(),
                done_tx,
                done_rx,
            }),
        }
    }

    /// Waits until one of `queues` gets a notify token (true) or a BLPOP
    /// times out after `block_for` seconds (false).
    async fn wait(&self, queues: &[Arc<QueueKeys>], block_for: u64) -> RedisResult<bool> {
        let mut state = self.state.lock().await;
        // A token that arrived since the last wait ends this one at once.
        let mut woken = false;
        while let Ok((key, result)) = state.done_rx.try_recv() {
            state.pending.remove(&key);
            woken |= result?;
        }
        if woken {
            return Ok(true);
        }
        for queue in queues {
            if state.pending.contains(&queue.notify) {
                continue;
            }
            let conn = match state.conns.get(&queue.notify) {
                Some(conn) => conn.clone(),
                None => {
                    let conn = super::connect::open(&self.target, self.timeout).await?;
                    state.conns.insert(queue.notify.clone(), conn.clone());
                    conn
                }
            };
            let key = queue.notify.clone();
            let done = state.done_tx.clone();
            state.pending.insert(key.clone());
            tokio::spawn(async move {
                let token: RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
                    .arg(&key)
                    .arg(block_for)
                    .query_async(&mut conn.clone())
                    .await;
                let _ = done.send((key, token.map(|t| t.is_some())));
            });
        }
        match state.done_rx.recv().await {
            Some((key, result)) => {
                state.pending.remove(&key);
                result
            }
            None => Ok(false),
        }
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
    let raw = bytes()?;
    let reserved = bytes()?;
    let poison = matches!(parts.next(), Some(Value::Int(1)));
    let payload = match Payload::parse(&raw) {
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
