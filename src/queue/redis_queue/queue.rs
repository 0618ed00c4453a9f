//! The Redis calls of a Laravel queue connection (protocol §4).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{RedisResult, Value};

use super::batch::{SharedConnection, Write, WriteBatch};
use super::keys::QueueKeys;
use super::member::{DIGEST_AT, MemberRef, RedisReservation};
use super::scripts::{self, name_denied_script_command};
use crate::queue::handle::QueueHandle;
use crate::queue::job::{Lease, Reservation, ReservedJob};
use crate::queue::migrated::{Migrated, MigratedFrom, MigrationLog};
use crate::queue::payload::{Payload, PayloadError};
use crate::queue::sizes::{HeadAge, QueueSizes};
use crate::redis::{COMMAND_TIMEOUT, Purpose, RedisConn, RedisTarget, is_noscript};
use bytes::Bytes;

/// SHA1 of [`scripts::POP`]: the pop goes as `EVALSHA`, so neither the
/// script's 1.3 KB nor Redis's hashing of them is paid per pop.
static POP_SHA: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| redis::Script::new(scripts::POP).get_hash().to_string());

/// One pop's arguments ([`scripts::POP`]): up to `count` jobs of `queue`
/// reserved until `expiry` (UNIX seconds), large ones set aside under
/// `set_aside`.
struct PopCall<'a> {
    queue: &'a QueueKeys,
    set_aside: &'a str,
    expiry: i64,
    count: usize,
}

impl PopCall<'_> {
    /// Adds the pop to `pipe`, the script named `by` SHA1 or whole.
    fn add(&self, pipe: &mut redis::Pipeline, by: ScriptBy) {
        let cmd = match by {
            ScriptBy::Sha => pipe.cmd("EVALSHA").arg(&*POP_SHA),
            ScriptBy::Text => pipe.cmd("EVAL").arg(scripts::POP),
        };
        cmd.arg(4)
            .arg(&self.queue.ready)
            .arg(&self.queue.reserved)
            .arg(&self.queue.notify)
            .arg(self.set_aside)
            .arg(self.expiry)
            .arg(self.count.max(1))
            .arg(DIGEST_AT)
            .arg(SET_ASIDE_PIECE);
    }
}

/// How a script is named to Redis: by its SHA1 (`EVALSHA`), or whole.
#[derive(Debug, Clone, Copy)]
enum ScriptBy {
    Sha,
    Text,
}

/// Redis refused `EVALSHA` itself to this ACL user (not a command inside
/// the script).
fn refuses_evalsha(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        && e.to_string().contains("'evalsha'")
}

/// The size of the pieces a large job's strings are set aside in by the
/// pop script, and read back in (bytes): the largest reply the queue
/// connection reads for a job of any size.
pub(super) const SET_ASIDE_PIECE: usize = 1024 * 1024;

/// A queue connection: one Redis database, one key prefix, and the
/// connection's `retry_after`, `block_for` and `migration_batch_size`.
///
/// Cloning is cheap; clones share the underlying connections.
#[derive(Clone)]
pub struct RedisQueue {
    /// The command connection. Behind a lock so that it can be replaced
    /// after a large job ([`RedisQueue::renew_connection`]); each call
    /// clones it (a handle) and releases the lock at once.
    conn: SharedConnection,
    /// Where `conn` goes (one server, Sentinel or Cluster).
    target: RedisTarget,
    /// Where BLPOP waits, apart from `conn`, so a blocked wait never holds
    /// up the deletes and releases of running jobs. It has no response
    /// timeout of its own: each BLPOP bounds its wait (see
    /// [`Self::block_on_notify`]).
    blocking: Blocking,
    /// Deletes and releases, pipelined with those of other jobs.
    writes: WriteBatch,
    /// The writes a listener adds to each delete of a finished job (see
    /// [`crate::queue::companion`]), once installed.
    companion: Arc<std::sync::OnceLock<crate::queue::companion::Installed>>,
    /// When each queue was last migrated (see [`Self::pop`]).
    migrations: Arc<MigrationTicks>,
    /// The pop goes as text from now on: Redis refused `EVALSHA` (an ACL
    /// user allowed `+eval` only, as Laravel needs).
    pop_by_text: Arc<std::sync::atomic::AtomicBool>,
    /// The migrations not yet reported (see [`Self::take_migrated`]).
    migrated: Arc<MigrationLog>,
    /// Fetches in progress that may end in a wait on the notify lists (see
    /// [`Self::waiting_for_jobs`]).
    fetching: Arc<AtomicUsize>,
    /// Names the key each pop may set large jobs aside under.
    set_aside_keys: Arc<super::set_aside::SetAsideKeys>,
    prefix: String,
    /// Seconds a reservation lasts; `None` turns reclaiming off.
    retry_after: Option<u64>,
    /// Seconds to BLPOP on the notify lists when all queues are empty;
    /// `None` never blocks, `Some(0)` blocks without a time limit.
    block_for: Option<u64>,
    /// Most jobs moved per migrate call; `-1` means all.
    migration_batch_size: i64,
    /// Most payload bytes a migrate call returns (see
    /// [`QueueOptions::migrated_payloads`]).
    migrated_payloads: usize,
}

/// Settings of a [`RedisQueue`], as in `config/queue.php`.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// The connection key prefix (`REDIS_PREFIX`).
    pub prefix: String,
    /// Seconds; `None` disables reclaiming of reserved jobs.
    pub retry_after: Option<u64>,
    /// Seconds; `None` never blocks.
    pub block_for: Option<u64>,
    /// `-1` for no limit.
    pub migration_batch_size: i64,
    /// Most payload bytes a migrate call returns for the `migrated` event
    /// (at most [`crate::queue::migrated::REPLY_BUDGET`]); 0 when no listener
    /// reads the payloads, so a migration moves no job over the wire twice.
    pub migrated_payloads: usize,
}

pub use crate::queue::clock::now;

impl RedisQueue {
    /// Connects to the queue database of `target` (one server, Sentinel or
    /// Cluster; see [`crate::redis`]). On a cluster, queue names are
    /// wrapped in hash tags (Laravel 13.5+ on clusters; [`QueueKeys::new`]).
    ///
    /// # Errors
    /// A bad URL, unreadable TLS files, or an unreachable server.
    pub async fn connect(target: &RedisTarget, options: QueueOptions) -> RedisResult<Self> {
        let mut first = crate::redis::open(target, Purpose::Commands).await?;
        // A server that wants a password when none is configured accepts
        // the connection and refuses every command (NOAUTH): ask once, so
        // that start fails as it does for a wrong password. Any other
        // refusal (an ACL user without PING) means the login was accepted.
        if let Err(e) = redis::cmd("PING").query_async::<()>(&mut first).await
            && e.to_string().contains("NOAUTH")
        {
            return Err(e);
        }
        let conn = Arc::new(Mutex::new(first));
        let blocking = if target.is_cluster() {
            Blocking::PerQueue(Arc::new(NotifyWaits::new(target.clone())))
        } else {
            Blocking::One(crate::redis::open(target, Purpose::Blocking).await?)
        };
        tracing::info!(redis = %target.describe(), "connected to the queue Redis");
        Ok(RedisQueue {
            writes: WriteBatch::start(Arc::clone(&conn)),
            companion: Arc::default(),
            conn,
            target: target.clone(),
            blocking,
            migrations: Arc::new(MigrationTicks::default()),
            pop_by_text: Arc::default(),
            migrated: Arc::new(MigrationLog::default()),
            fetching: Arc::new(AtomicUsize::new(0)),
            set_aside_keys: Arc::new(super::set_aside::SetAsideKeys::new()),
            prefix: options.prefix,
            retry_after: options.retry_after,
            block_for: options.block_for,
            migration_batch_size: options.migration_batch_size,
            migrated_payloads: options.migrated_payloads,
        })
    }

    /// Where the queue Redis is, for logs: address, db and TLS, never
    /// credentials (see [`RedisTarget::describe`]).
    pub fn describe(&self) -> String {
        self.target.describe()
    }

    /// A handle on the command connection.
    pub(super) fn conn(&self) -> RedisConn {
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
        match crate::redis::open(&self.target, Purpose::Commands).await {
            Ok(fresh) => match self.conn.lock() {
                Ok(mut conn) => *conn = fresh,
                Err(poisoned) => *poisoned.into_inner() = fresh,
            },
            Err(e) => tracing::debug!("cannot open a fresh queue connection: {e}"),
        }
    }

    /// The keys of queue `name` on this connection.
    pub fn keys(&self, name: &str) -> Arc<QueueKeys> {
        Arc::new(QueueKeys::new(&self.prefix, name, self.target.is_cluster()))
    }

    /// The handle of queue `name`, its keys built into it.
    pub fn handle(&self, name: &str) -> Arc<QueueHandle> {
        Arc::new(QueueHandle::with(name, self.keys(name)))
    }

    /// The keys `queue` carries ([`Self::handle`]), or built from its name
    /// for a handle made elsewhere.
    pub fn keys_of(&self, queue: &QueueHandle) -> Arc<QueueKeys> {
        match queue.data::<Arc<QueueKeys>>() {
            Some(keys) => Arc::clone(keys),
            None => self.keys(&queue.name),
        }
    }

    /// Seconds a reservation lasts (`None`: reserved jobs are never reclaimed).
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// Reserves up to `count` jobs from the head of `queue` (Laravel's
    /// `RedisQueue::pop`, `count` times, without the blocking part).
    ///
    /// First, at most once per second per queue (scores are whole seconds,
    /// so a second call within the same second could find nothing new),
    /// due delayed jobs and, unless `retry_after` is null, expired
    /// reservations are migrated to the ready list; a release with delay 0
    /// by this worker makes the next call migrate at once. The migrate
    /// scripts and the pop go out in one pipelined round trip, each atomic.
    ///
    /// # Errors
    /// Any Redis error; nothing was reserved then unless the pop script ran,
    /// in which case its jobs are in `:reserved` and are reclaimed after
    /// `retry_after`.
    pub async fn pop(
        &self,
        handle: &Arc<QueueHandle>,
        count: usize,
    ) -> RedisResult<Vec<ReservedJob>> {
        let queue = &self.keys_of(handle);
        let sent = std::time::Instant::now();
        let now = now();
        let mut pipe = redis::pipe();
        let migrate = self.migrations.due(&queue.ready, now);
        if migrate {
            pipe.add_command(self.migrate(queue, &queue.delayed, now));
            if self.retry_after.is_some() {
                pipe.add_command(self.migrate(queue, &queue.reserved, now));
            }
        }
        let expiry = now + self.retry_after.unwrap_or(0) as i64;
        let set_aside = self.set_aside_keys.next(&queue.ready);
        let call = PopCall {
            queue,
            set_aside: &set_aside,
            expiry,
            count,
        };
        let result = self.send_pop(pipe, &call).await;
        let result = result.map_err(name_denied_script_command);
        if result.is_err() && migrate {
            // The migration may not have run: try again next call.
            self.migrations.expire(&queue.ready);
        }
        let mut replies = result?;
        let mut popped = match replies.pop() {
            Some(Value::Array(popped)) => popped,
            _ => Vec::new(),
        };
        for (reply, from) in replies
            .into_iter()
            .zip([MigratedFrom::Delayed, MigratedFrom::Reserved])
        {
            self.note_migrated(handle, from, reply);
        }
        self.take_set_aside(&set_aside, queue, expiry, &mut popped)
            .await?;
        let reservation = |member: &[u8]| RedisReservation::new(Arc::clone(queue), member, expiry);
        let lease = || Lease::new(self.retry_after, sent);
        Ok(reserved_jobs(handle, popped, reservation, lease))
    }

    /// Sends `pipe` (the due migrations) with `call`'s pop by SHA1, or as
    /// text once Redis refused `EVALSHA`. The replies are taken one by one,
    /// so that a pop Redis did not run (`NOSCRIPT` after a restart or
    /// `SCRIPT FLUSH`, or `EVALSHA` refused to this ACL user) goes again
    /// alone, as text, and the migrations' replies (they ran) are kept.
    async fn send_pop(
        &self,
        mut pipe: redis::Pipeline,
        call: &PopCall<'_>,
    ) -> RedisResult<Vec<Value>> {
        let by = if self.pop_by_text.load(Ordering::Relaxed) {
            ScriptBy::Text
        } else {
            ScriptBy::Sha
        };
        call.add(&mut pipe, by);
        pipe.ignore_errors();
        let mut replies: Vec<RedisResult<Value>> = pipe.query_async(&mut self.conn()).await?;
        let answer = match replies.pop().unwrap_or(Ok(Value::Nil)) {
            Err(e) if is_noscript(&e) || refuses_evalsha(&e) => {
                if !is_noscript(&e) {
                    tracing::info!("the queue Redis refuses EVALSHA to this user: pops go as EVAL");
                    self.pop_by_text.store(true, Ordering::Relaxed);
                }
                let mut again = redis::pipe();
                call.add(&mut again, ScriptBy::Text);
                let again: RedisResult<Vec<Value>> = again.query_async(&mut self.conn()).await;
                again.map(|mut v| v.pop().unwrap_or(Value::Nil))
            }
            other => other,
        };
        replies.into_iter().chain([answer]).collect()
    }

    /// Waits on the notify lists of `queues` (in priority order) for at most
    /// `wait` (`None`: without a time limit). Returns true when a token
    /// arrived, false on time-out.
    ///
    /// BLPOP takes whole or (Redis 6+) decimal seconds; a `wait` under a
    /// millisecond returns false at once without asking Redis.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn block_on_notify(
        &self,
        queues: &[Arc<QueueHandle>],
        wait: Option<Duration>,
    ) -> RedisResult<bool> {
        if wait.is_some_and(|w| w < Duration::from_millis(1)) {
            return Ok(false);
        }
        let queues: Vec<Arc<QueueKeys>> = queues.iter().map(|q| self.keys_of(q)).collect();
        let queues = &queues[..];
        match &self.blocking {
            Blocking::One(conn) => {
                let keys: Vec<&str> = queues.iter().map(|q| q.notify.as_str()).collect();
                blpop(conn.clone(), &keys, wait).await
            }
            Blocking::PerQueue(waits) => waits.wait(queues, wait).await,
        }
    }

    /// The connection's `block_for` (seconds; `None`: the connection does
    /// not ask to block, `Some(0)`: block without a time limit).
    pub fn block_for(&self) -> Option<u64> {
        self.block_for
    }

    /// Deletes a reserved job: `ZREM` of its reserved string.
    /// Returns false when the reservation was already gone.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn delete(&self, job: &ReservedJob) -> RedisResult<bool> {
        let held = held(job)?;
        self.writes
            .send(Write::Delete {
                reserved: held.keys.reserved.clone(),
                member: held.member(&job.reserved),
            })
            .await
    }

    /// Installs `companion`: its writes go with every later delete of a
    /// finished job ([`Self::delete_settled`]) of this queue connection
    /// and its clones. Only the first companion installed is kept; false
    /// for a later one.
    pub fn set_companion(
        &self,
        companion: Arc<dyn crate::queue::companion::SettleCompanion>,
    ) -> bool {
        self.companion
            .set(crate::queue::companion::Installed::new(companion))
            .is_ok()
    }

    /// Deletes a reserved job that `ended` so, as [`Self::delete`] does,
    /// with the writes of the installed companion, if any, in the same
    /// script (none for a large member named by digest).
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn delete_settled(
        &self,
        job: &ReservedJob,
        ended: crate::queue::companion::Ending<'_>,
    ) -> RedisResult<bool> {
        let held = held(job)?;
        let companion = self.companion.get().filter(|_| held.digest.is_none());
        let Some(installed) = companion else {
            return self.delete(job).await;
        };
        let Some(writes) = installed.companion.on_delete(job, ended) else {
            return self.delete(job).await;
        };
        self.writes
            .send(Write::DeleteWith {
                reserved: held.keys.reserved.clone(),
                member: job.reserved.clone(),
                script: Arc::clone(&installed.script),
                writes,
                text: false,
            })
            .await
    }

    /// Releases a reserved job back to `:delayed`, available `delay` seconds
    /// from now, with its attempt counted (the reserved string moves).
    /// Returns false when the reservation was already gone.
    ///
    /// With delay 0 the job is due at once: the next pop migrates it
    /// without waiting for the next second. If a fetch that may wait on the
    /// notify lists is under way ([`Self::waiting_for_jobs`]), the job is
    /// migrated now instead, so that its notify token ends that wait: a
    /// job in `:delayed` has none, and would otherwise wait as long as the
    /// wait lasts (`--sleep` with `block_for` unset, `block_for` seconds
    /// otherwise).
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn release(&self, job: &ReservedJob, delay: u64) -> RedisResult<bool> {
        let released = self.move_to_delayed(job, delay, None).await?;
        if delay == 0 {
            let keys = &held(job)?.keys;
            self.migrations.expire(&keys.ready);
            if released && self.fetching.load(Ordering::SeqCst) > 0 {
                self.migrate_delayed(&job.queue, keys).await;
            }
        }
        Ok(released)
    }

    /// Marks a fetch that may end in a wait on the notify lists as under
    /// way until the guard is dropped (see [`Self::release`]). Take it
    /// before the fetch's first pop: a release with delay 0 that lands
    /// after that pop then pushes the token the wait will see.
    pub fn waiting_for_jobs(&self) -> FetchUnderWay {
        self.fetching.fetch_add(1, Ordering::SeqCst);
        FetchUnderWay(Arc::clone(&self.fetching))
    }

    /// The migrate script moving the jobs of `source` (`:delayed` or
    /// `:reserved`) due at `now` to `queue`'s ready list (Laravel's
    /// `migrateExpiredJobs`).
    fn migrate(&self, queue: &QueueKeys, source: &str, now: i64) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(scripts::MIGRATE_EXPIRED)
            .arg(3)
            .arg(source)
            .arg(&queue.ready)
            .arg(&queue.notify)
            .arg(now)
            .arg(self.migration_batch_size)
            .arg(self.migrated_payloads);
        cmd
    }

    /// Moves the due jobs of `queue`'s `:delayed` to its ready list now,
    /// with their notify tokens (the migration a pop would run). A failure
    /// is only logged: the next pop migrates them anyway.
    async fn migrate_delayed(&self, handle: &Arc<QueueHandle>, queue: &QueueKeys) {
        let moved = self
            .migrate(queue, &queue.delayed, now())
            .query_async::<Value>(&mut self.conn())
            .await;
        match moved {
            Ok(reply) => self.note_migrated(handle, MigratedFrom::Delayed, reply),
            Err(e) => {
                tracing::debug!(queue = %queue.name, "cannot migrate the delayed jobs now: {e}")
            }
        }
    }

    /// Keeps what a migrate call moved for [`Self::take_migrated`].
    fn note_migrated(&self, queue: &Arc<QueueHandle>, from: MigratedFrom, reply: Value) {
        if let Some(migrated) = crate::queue::migrated::from_reply(queue, from, reply) {
            self.migrated.note(migrated);
        }
    }

    /// The jobs the migrate script moved to a ready list (due delayed jobs,
    /// expired reservations) since the last call, on every clone of this
    /// connection, oldest first (see [`crate::queue::migrated`]).
    pub fn take_migrated(&self) -> Vec<Migrated> {
        self.migrated.take()
    }

    /// Hands a reserved job back *uncounted*: its original string goes to
    /// `:delayed`, so another worker sees the attempts it had before this
    /// reservation. Used when this daemon cannot run the job at all.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn hand_back(&self, job: &ReservedJob, delay: u64) -> RedisResult<bool> {
        self.move_to_delayed(job, delay, Some(job.raw.clone()))
            .await
    }

    /// Moves the reservation to `:delayed` at now + `delay`: the reserved
    /// member itself, or `instead` (the original string) when given. A
    /// delay past the end of time (a payload's `backoff` of `PHP_INT_MAX`)
    /// stays in the future: the score saturates instead of wrapping to a
    /// time already due.
    async fn move_to_delayed(
        &self,
        job: &ReservedJob,
        delay: u64,
        instead: Option<Bytes>,
    ) -> RedisResult<bool> {
        let held = held(job)?;
        self.writes
            .send(Write::Release {
                delayed: held.keys.delayed.clone(),
                reserved: held.keys.reserved.clone(),
                member: held.member(&job.reserved),
                at: now().saturating_add(i64::try_from(delay).unwrap_or(i64::MAX)),
                instead,
            })
            .await
    }

    /// Replaces a failed job's reservation with its failure `record` in
    /// the queue's `:unrecorded` zset, scored `failed_at` (UNIX seconds),
    /// in one atomic step: for when the failed-job store is down, so the
    /// job is neither lost nor run again (see `worker::unrecorded`).
    /// Returns false when the reservation was already gone.
    ///
    /// # Errors
    /// Any Redis error; the job then stays reserved and is reclaimed later.
    pub async fn park_failure(
        &self,
        job: &ReservedJob,
        record: Bytes,
        failed_at: i64,
    ) -> RedisResult<bool> {
        let held = held(job)?;
        self.writes
            .send(Write::Park {
                unrecorded: held.keys.unrecorded.clone(),
                reserved: held.keys.reserved.clone(),
                member: held.member(&job.reserved),
                at: failed_at,
                record,
            })
            .await
    }

    /// Up to `count` failure records waiting in `queue`'s `:unrecorded`,
    /// oldest first.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn unrecorded(&self, queue: &QueueKeys, count: usize) -> RedisResult<Vec<Vec<u8>>> {
        // ZRANGEBYSCORE rather than ZRANGE: the documented ACL user has it.
        redis::cmd("ZRANGEBYSCORE")
            .arg(&queue.unrecorded)
            .arg("-inf")
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query_async(&mut self.conn())
            .await
    }

    /// Removes a failure record from `queue`'s `:unrecorded` once the
    /// failed-job store holds it.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn forget_unrecorded(&self, queue: &QueueKeys, record: &[u8]) -> RedisResult<()> {
        redis::cmd("ZREM")
            .arg(&queue.unrecorded)
            .arg(record)
            .query_async(&mut self.conn())
            .await
    }

    /// Pushes the reservation of a running job to now + `retry_after`, and
    /// its [`Lease`] with it. Returns false when it was lost (the job was
    /// reclaimed elsewhere).
    /// Does nothing and returns true when `retry_after` is null.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn renew(&self, job: &ReservedJob) -> RedisResult<bool> {
        let Some(retry_after) = self.retry_after else {
            return Ok(true);
        };
        let sent = std::time::Instant::now();
        let expiry = now() + retry_after as i64;
        let held = held(job)?;
        let mut renew = redis::cmd("EVAL");
        match held.member(&job.reserved) {
            MemberRef::Exact(member) => renew
                .arg(scripts::RENEW)
                .arg(1)
                .arg(&held.keys.reserved)
                .arg(&member[..])
                .arg(expiry),
            MemberRef::Digest { digest, scores } => renew
                .arg(scripts::RENEW_BY_DIGEST)
                .arg(1)
                .arg(&held.keys.reserved)
                .arg(scores.0)
                .arg(scores.1)
                .arg(digest.len)
                .arg(&*digest.sha1)
                .arg(expiry),
        };
        // Until the answer arrives the member may have either score.
        held.renewing(expiry);
        let renewed: i64 = renew
            .query_async(&mut self.conn())
            .await
            .map_err(name_denied_script_command)?;
        if renewed == 1 {
            job.lease.confirm(sent);
            held.confirm(expiry);
        }
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
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(name_denied_script_command)
    }

    /// Ready + delayed + reserved jobs of a queue, without reading any of
    /// them.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn count(&self, queue: &QueueKeys) -> RedisResult<u64> {
        let (pending, delayed, reserved): (u64, u64, u64) = redis::pipe()
            .llen(&queue.ready)
            .zcard(&queue.delayed)
            .zcard(&queue.reserved)
            .query_async(&mut self.conn())
            .await?;
        Ok(pending + delayed + reserved)
    }

    /// Ready, delayed (and due) and reserved counts of a queue, and when
    /// its oldest ready job was pushed (when `head` says
    /// [`HeadAge::Read`]), in one script ([`scripts::QUEUE_SIZES`]): no job
    /// crosses the wire.
    ///
    /// # Errors
    /// Any Redis error (a user without `zcount` gets a NOPERM one).
    pub async fn sizes(&self, queue: &QueueKeys, head: HeadAge) -> RedisResult<QueueSizes> {
        let (pending, delayed, delayed_due, reserved, pushed, head_bytes): (
            u64,
            u64,
            u64,
            u64,
            Option<String>,
            u64,
        ) = redis::cmd("EVAL")
            .arg(scripts::QUEUE_SIZES)
            .arg(3)
            .arg(&queue.ready)
            .arg(&queue.delayed)
            .arg(&queue.reserved)
            .arg(now())
            .arg(if head == HeadAge::Read { "1" } else { "0" })
            .query_async(&mut self.conn())
            .await?;
        Ok(QueueSizes {
            pending,
            delayed,
            delayed_due,
            reserved,
            oldest_pending: pushed.and_then(|at| at.parse().ok()),
            head_bytes,
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
            .map_err(name_denied_script_command)
    }
}

/// A fetch under way that may wait on the notify lists, from
/// [`RedisQueue::waiting_for_jobs`] until dropped.
pub struct FetchUnderWay(Arc<AtomicUsize>);

impl Drop for FetchUnderWay {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
    fn new(target: RedisTarget) -> Self {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        NotifyWaits {
            target,
            state: tokio::sync::Mutex::new(WaitState {
                conns: std::collections::HashMap::new(),
                pending: std::collections::HashSet::new(),
                done_tx,
                done_rx,
            }),
        }
    }

    /// Waits until one of `queues` gets a notify token (true) or a BLPOP
    /// times out after `wait` (false; `None`: no time limit).
    async fn wait(&self, queues: &[Arc<QueueKeys>], wait: Option<Duration>) -> RedisResult<bool> {
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
                    let conn = crate::redis::open(&self.target, Purpose::Blocking).await?;
                    state.conns.insert(queue.notify.clone(), conn.clone());
                    conn
                }
            };
            let key = queue.notify.clone();
            let done = state.done_tx.clone();
            state.pending.insert(key.clone());
            tokio::spawn(async move {
                let token = blpop(conn, &[key.as_str()], wait).await;
                let _ = done.send((key, token));
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

/// BLPOP on `keys` for at most `wait` (`None`: no limit); true when a
/// token came. BLPOP takes whole or (Redis 6+) decimal seconds. The server
/// answers at the end of its own timeout; the socket is given the command
/// timeout on top before the wait counts as failed.
async fn blpop(mut conn: RedisConn, keys: &[&str], wait: Option<Duration>) -> RedisResult<bool> {
    let seconds = wait.map_or(0.0, |w| (w.as_secs_f64() * 1000.0).round() / 1000.0);
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(keys);
    if seconds.fract() == 0.0 {
        // Whole seconds as an integer, for servers older than Redis 6.
        cmd.arg(seconds as u64);
    } else {
        cmd.arg(seconds);
    }
    let query = cmd.query_async::<Option<(String, String)>>(&mut conn);
    let token = match wait {
        None => query.await?,
        Some(w) => tokio::time::timeout(w + COMMAND_TIMEOUT, query)
            .await
            .map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "BLPOP on the notify lists got no answer",
                ))
            })??,
    };
    Ok(token.is_some())
}

/// The Redis reservation of `job`; an error for a job another driver
/// reserved (never passed here: each driver settles its own jobs).
fn held(job: &ReservedJob) -> RedisResult<&RedisReservation> {
    match &job.reservation {
        Reservation::Redis(held) => Ok(held),
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "not a Redis reservation",
        ))),
    }
}

/// Turns the pop script's flat `{original, reserved, poison, …}` into jobs.
///
/// The script's poison flag is authoritative: a payload the script could not
/// count an attempt on is never run, whatever the Rust parser makes of it.
///
/// Each job gets a lease of its own from `lease` (the pop's: sent when,
/// for how long) and its reservation from `reservation` (the queue's keys,
/// the score the pop wrote; a large member's digest).
fn reserved_jobs(
    queue: &Arc<QueueHandle>,
    popped: Vec<Value>,
    reservation: impl Fn(&[u8]) -> RedisReservation,
    lease: impl Fn() -> Lease,
) -> Vec<ReservedJob> {
    let mut parts = popped.into_iter();
    let mut jobs = Vec::new();
    loop {
        let (raw, reserved, poison) = (parts.next(), parts.next(), parts.next());
        let nil = |v: &Option<Value>| matches!(v, Some(Value::Nil));
        if (nil(&raw) || nil(&reserved)) && matches!(poison, Some(Value::Int(_))) {
            // A large job set aside by the pop whose pieces are gone and
            // whose member is no longer in `:reserved` either (see
            // `take_set_aside`): nothing is left to run here.
            tracing::error!(
                queue = %queue.name,
                "a large job could not be read back after its pop, neither from its \
                 pieces nor from :reserved; if it is still reserved it is reclaimed \
                 after retry_after"
            );
            continue;
        }
        let (Some(Value::BulkString(raw)), Some(Value::BulkString(reserved))) = (raw, reserved)
        else {
            if poison.is_some() || parts.next().is_some() {
                // Not what the pop script returns: the jobs it describes
                // stay in `:reserved` and are reclaimed after retry_after.
                tracing::error!(
                    queue = %queue.name,
                    "unexpected answer from the pop script; the jobs it reserved \
                     are reclaimed after retry_after"
                );
            }
            return jobs;
        };
        let (raw, reserved) = (Bytes::from(raw), Bytes::from(reserved));
        let poison = matches!(poison, Some(Value::Int(1)));
        let payload = match Payload::parse(raw.clone()) {
            Ok(parsed) if poison => Err(PayloadError::NoAttempts {
                uuid: parsed.uuid().map(str::to_string),
            }),
            parsed => parsed,
        };
        jobs.push(ReservedJob {
            queue: Arc::clone(queue),
            raw,
            payload,
            lease: lease(),
            reservation: Reservation::Redis(reservation(&reserved)),
            reserved,
        });
    }
}

/// The second (UNIX time) each queue was last migrated, by ready-list key,
/// shared by every clone of a [`RedisQueue`].
#[derive(Debug, Default)]
struct MigrationTicks(Mutex<HashMap<String, i64>>);

impl MigrationTicks {
    /// True, and noted, when `queue` was not migrated during second `now`.
    fn due(&self, queue: &str, now: i64) -> bool {
        let Ok(mut ticks) = self.0.lock() else {
            return true;
        };
        match ticks.get_mut(queue) {
            Some(last) if *last == now => false,
            Some(last) => {
                *last = now;
                true
            }
            None => {
                ticks.insert(queue.to_string(), now);
                true
            }
        }
    }

    /// Makes the next [`Self::due`] of `queue` true.
    fn expire(&self, queue: &str) {
        if let Ok(mut ticks) = self.0.lock() {
            ticks.remove(queue);
        }
    }
}
