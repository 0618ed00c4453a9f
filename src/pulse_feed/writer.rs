//! The consumer that turns settled jobs into Pulse entries and writes
//! them, on a thread and a connection of its own (behind a
//! [`Decoupled`](crate::worker::decoupled::Decoupled) listener): one
//! pipeline of `XADD`s, or one transaction, per batch of events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::record::{self, Recorders};
use super::storage::Storage;
use crate::log_limit::RepeatLimiter;
use crate::redis::RedisConn;
use crate::worker::decoupled::{Buffer, Consumer, Event, Stamped};

/// The writer's buffer: 8192 events, batches of up to 512 after 20 ms.
pub const BUFFER: Buffer = Buffer {
    capacity: 8192,
    batch: 512,
    linger: std::time::Duration::from_millis(20),
};

/// Where the entries go.
pub enum Sink {
    /// The Redis ingest stream (`PULSE_INGEST_DRIVER=redis`).
    Redis {
        /// Its own connection.
        conn: RedisConn,
        /// `{prefix}laravel:pulse:ingest`.
        key: String,
    },
    /// Pulse's tables (the `storage` ingest).
    Storage(Storage),
}

/// The writer.
pub struct Writer {
    /// Where to write.
    pub sink: Sink,
    /// What to record.
    pub recorders: Recorders,
    /// Entries that did not reach the sink.
    pub lost: Arc<AtomicU64>,
    /// Failed writes, logged once per interval.
    pub limiter: RepeatLimiter,
}

impl Consumer for Writer {
    async fn consume(&mut self, events: &mut Vec<Stamped>) {
        let mut entries = Vec::new();
        for stamped in events.iter() {
            if let Event::Settled {
                job,
                verdict,
                settled,
                took,
            } = &stamped.event
            {
                entries.extend(record::entries(
                    &self.recorders,
                    job,
                    verdict,
                    *settled,
                    *took,
                    stamped.at,
                ));
            }
        }
        if entries.is_empty() {
            return;
        }
        let written = match &mut self.sink {
            Sink::Redis { conn, key } => super::ingest::add(conn, key, &entries)
                .await
                .map_err(anyhow::Error::from),
            Sink::Storage(storage) => storage.store(&entries, now()).await,
        };
        match written {
            Ok(()) => self.limiter.log_resolved(SITE),
            Err(e) => {
                self.lost.fetch_add(entries.len() as u64, Ordering::Relaxed);
                let e = crate::error_chain::error_chain(e.as_ref());
                self.limiter.log(tracing::Level::WARN, SITE, &e);
            }
        }
    }
}

/// UNIX seconds now.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The log site of a failed write.
const SITE: &str = "cannot write Laravel Pulse's entries";
