//! The consumer that writes Horizon's job records, as `RedisJobRepository`
//! writes them, from the worker's events (see [`super::records`]).
//!
//! It runs behind a [`Decoupled`](crate::worker::decoupled::Decoupled)
//! listener, on a thread and a connection of its own: each batch of events
//! (what came within [`LINGER`], up to [`BATCH`]) becomes one call of the
//! batch script ([`super::script`]). A batch that did not reach Redis (the
//! connection dropped: a restart, a failover, a killed client) is sent
//! again once the connection is back ([`Writer::send`]). A batch Redis
//! refused is logged (once per interval, see [`crate::log_limit`]), the
//! records it cost are counted, and it is dropped: never retried. After a
//! batch Redis refused whole, the writer drops (and counts) what comes for
//! [`QUIET`] without sending it, so a Redis that refuses every record
//! costs one round trip per [`QUIET`], not one per batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::HorizonSettings;
use super::keys::Keys;
use super::script::Batch;
use crate::log_limit::RepeatLimiter;
use crate::redis::RedisConn;
use crate::worker::decoupled::{Buffer, Consumer, Stamped};

/// Events handed to the writer at once at most.
pub const BATCH: usize = 512;

/// How long a batch that is not full waits for more events before it is
/// written: one round trip for the records of a few milliseconds, not one
/// per record, whatever the pace of the jobs.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// How long the writer sends nothing after a batch Redis refused whole.
pub const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// The writer's buffer: [`super::records::CAPACITY`] events, batches of
/// [`BATCH`] after [`LINGER`].
pub const BUFFER: Buffer = Buffer {
    capacity: super::records::CAPACITY,
    batch: BATCH,
    linger: LINGER,
};

/// The writer: what one batch needs besides the events.
pub struct Writer {
    /// Horizon's keys.
    pub keys: Keys,
    /// The queue connection's name (`redis`), the hashes' `connection`.
    pub connection: String,
    /// Trim settings (TTLs of the hashes and tag sets).
    pub settings: HorizonSettings,
    /// Its own connection to Horizon's Redis.
    pub conn: RedisConn,
    /// Records Redis refused (or never got).
    pub refused: Arc<AtomicU64>,
    /// The batch script, called by its SHA1.
    pub script: redis::Script,
    /// Refusals, logged once per interval.
    pub limiter: RepeatLimiter,
    /// Until when batches are dropped unsent (see [`QUIET`]).
    pub quiet_until: Option<std::time::Instant>,
    /// The jobs whose final state a late producer's write may undo.
    pub late: Arc<super::late::Late>,
    /// Horizon's companion writes the final record with each delete
    /// ([`super::companion`]): the writer then only counts those runs.
    pub companion: bool,
}

impl Consumer for Writer {
    async fn consume(&mut self, events: &mut Vec<Stamped>) {
        let mut records = Vec::new();
        for event in events.iter() {
            super::records::from_event(event, &mut records);
        }
        if records.is_empty() {
            return;
        }
        if self
            .quiet_until
            .is_some_and(|until| std::time::Instant::now() < until)
        {
            self.refused
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            return;
        }
        let mut batch = Batch::new(&self.keys, &self.connection);
        super::ops::add_all(&mut batch, &records, &self.settings.trim, self.companion);
        let cmd = batch.command(&self.script);
        let sent = batch.len() as u64;
        drop(batch);
        match self.send(&cmd).await {
            Ok((0, _, watched)) => {
                self.limiter.log_resolved(SITE);
                self.watch(&records, &watched);
            }
            Ok((refused, first, watched)) => {
                self.refused.fetch_add(refused, Ordering::Relaxed);
                self.limiter.log(tracing::Level::WARN, SITE, &first);
                if refused >= sent {
                    self.quiet_until = Some(std::time::Instant::now() + QUIET);
                }
                self.watch(&records, &watched);
            }
            Err(e) => {
                self.refused.fetch_add(sent, Ordering::Relaxed);
                self.limiter.log(tracing::Level::WARN, SITE, &e);
                self.quiet_until = Some(std::time::Instant::now() + QUIET);
            }
        }
    }
}

/// What the batch script answers: ops refused, the first refusal, the
/// ids to watch ([`super::late`]).
type Answer = (u64, String, Vec<String>);

impl Writer {
    /// Sends `cmd` until Redis answers: a connection that dropped (a
    /// restart, a failover, a killed client) is not a refusal, and the
    /// batch is sent again, after 100 ms, doubling up to 2 s, once the
    /// connection is back. Meanwhile the events wait in the channel (and
    /// those past its capacity are dropped and counted, as when the
    /// writer falls behind). Only an answer from Redis, an error reply
    /// included, ends the tries.
    ///
    /// Sending a batch twice is harmless for the job records (each op
    /// sets a state); a batch whose answer was lost after Redis ran it
    /// counts its jobs' runs twice in the metrics.
    async fn send(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<Answer> {
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            match super::script::call(cmd, &self.script, &mut self.conn).await {
                Err(e) if lost_connection(&e) => {
                    self.limiter.log(tracing::Level::WARN, SITE, &e);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(2));
                }
                other => return other,
            }
        }
    }

    /// Hands the jobs the script named to [`super::late`], with the final
    /// state each must keep.
    fn watch(&self, records: &[super::records::Record], ids: &[String]) {
        for id in ids {
            let Some(last) = records.iter().rev().find(|r| &r.id == id) else {
                continue;
            };
            let (status, minutes) = match last.step {
                super::records::Step::Completed { .. } => {
                    ("completed", self.settings.trim.completed)
                }
                super::records::Step::Failed { .. } => ("failed", self.settings.trim.failed),
                _ => continue,
            };
            let extra = super::ops::Extra::of_record(last);
            let job = super::late::Watched {
                id: id.clone(),
                status,
                expiry: last.at as u64 + minutes * 60,
                pushed: extra.pushed_at(),
                parent: extra.retry_of(),
            };
            self.late.watch(job, self.settings.trim.pending);
        }
    }
}

/// Whether `e` says the connection was lost or never made (not an answer
/// from Redis).
fn lost_connection(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        // A server still loading its data after a restart, or a cluster
        // or replica set between two masters: it will take the batch.
        || matches!(
            e.code(),
            Some("LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN")
        )
}

/// The log site of a refused batch.
const SITE: &str = "cannot write Horizon's job records";
