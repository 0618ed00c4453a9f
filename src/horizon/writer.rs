//! The consumer that writes Horizon's job records, as `RedisJobRepository`
//! writes them, from the worker's events (see [`super::records`]).
//!
//! It runs behind a [`Decoupled`](crate::worker::decoupled::Decoupled)
//! listener, on a thread and a connection of its own: each batch of events
//! (what came within [`LINGER`], up to [`BATCH`]) becomes one call of the
//! batch script ([`super::script`]). A Redis error is logged (once per
//! interval, see [`crate::log_limit`]), the records it cost are counted,
//! and the batch is dropped: never retried. After a batch Redis refused
//! whole, the writer drops (and counts) what comes for [`QUIET`] without
//! sending it, so a Redis that refuses every record costs one round trip
//! per [`QUIET`], not one per batch.

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
        super::ops::add_all(&mut batch, &records, &self.settings.trim);
        let cmd = batch.command(&self.script);
        let written: redis::RedisResult<(u64, String)> =
            super::script::call(&cmd, &self.script, &mut self.conn).await;
        match written {
            Ok((0, _)) => self.limiter.log_resolved(SITE),
            Ok((refused, first)) => {
                self.refused.fetch_add(refused, Ordering::Relaxed);
                self.limiter.log(tracing::Level::WARN, SITE, &first);
                if refused >= batch.len() as u64 {
                    self.quiet_until = Some(std::time::Instant::now() + QUIET);
                }
            }
            Err(e) => {
                self.refused
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.limiter.log(tracing::Level::WARN, SITE, &e);
                self.quiet_until = Some(std::time::Instant::now() + QUIET);
            }
        }
    }
}

/// The log site of a refused batch.
const SITE: &str = "cannot write Horizon's job records";
