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

use serde::Deserialize;

use super::HorizonSettings;
use super::keys::Keys;
use super::records::{Record, Step};
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

/// The payload fields Horizon's records need beyond those the worker
/// parsed, read only from a payload that has one of them.
#[derive(Deserialize, Default)]
struct Extra {
    #[serde(default)]
    tags: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    silenced: Option<serde_json::Value>,
    #[serde(default)]
    retry_of: Option<serde_json::Value>,
}

impl Extra {
    /// The fields of `payload`; a payload that names none of them (one
    /// pushed without Horizon) is not parsed again.
    fn of(payload: &[u8]) -> Self {
        let named = |field: &[u8]| payload.windows(field.len()).any(|w| w == field);
        if !(named(b"\"tags\"") || named(b"\"silenced\"") || named(b"\"retry_of\"")) {
            return Extra::default();
        }
        serde_json::from_slice(payload).unwrap_or_default()
    }

    fn tags(&self) -> Vec<&str> {
        self.tags
            .iter()
            .flatten()
            .filter_map(|t| t.as_str())
            .collect()
    }

    fn retry_of(&self) -> Option<String> {
        match &self.retry_of {
            Some(serde_json::Value::String(id)) => Some(id.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    }
}

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
        let mut runs = super::metrics::Runs::default();
        for record in &records {
            add(&mut batch, &mut runs, record, &self.settings);
        }
        runs.write(&mut batch);
        let written: redis::RedisResult<(u64, String)> = batch
            .invocation(&self.script)
            .invoke_async(&mut self.conn)
            .await;
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

/// Adds `record`'s op to `batch` (and its run to `runs`).
fn add(
    batch: &mut Batch<'_>,
    runs: &mut super::metrics::Runs,
    record: &Record,
    settings: &HorizonSettings,
) {
    let extra = Extra::of(&record.payload);
    let tags = extra.tags();
    let time = format!("{:.4}", record.at);
    let score = format!("-{time}");
    let until = |minutes: u64| record.at as u64 + minutes * 60;
    let trim = &settings.trim;
    let parent = |batch: &mut Batch<'_>| extra.retry_of().map_or(0, |id| batch.key_index(&id));
    let id = &record.id;
    match &record.step {
        Step::Reserved | Step::Released | Step::Migrated => {
            let code = match record.step {
                Step::Reserved => "R",
                Step::Released => "L",
                _ => "M",
            };
            batch
                .op(code)
                .key(id)
                .text(id)
                .text(&record.queue)
                .text(&record.name);
            batch
                .payload(&record.payload)
                .text(&time)
                .text(until(trim.pending));
            batch.text(&score).text(tags.len());
            for tag in &tags {
                batch.text(tag).key(tag);
            }
        }
        Step::Completed { runtime_ms } => {
            let silenced = extra.silenced.as_ref().is_some_and(truthy);
            let parent = parent(batch);
            batch
                .op("C")
                .key(id)
                .text(id)
                .text(&time)
                .text(until(trim.completed));
            batch
                .text(&score)
                .text(u8::from(silenced))
                .text(parent)
                .text(tags.len());
            for tag in &tags {
                batch.text(tag);
            }
            if !tags.is_empty() {
                batch
                    .text(&record.queue)
                    .text(&record.name)
                    .payload(&record.payload);
                batch.text(until(trim.monitored));
            }
            runs.add(&record.queue, &record.name, *runtime_ms);
        }
        Step::Failed { exception } => {
            let parent = parent(batch);
            batch
                .op("F")
                .key(id)
                .text(id)
                .text(&record.queue)
                .text(&record.name);
            batch.payload(&record.payload).text(exception).text(&time);
            batch.text(until(trim.failed)).text(&score).text(parent);
            batch.text(trim.failed * 60).text(tags.len());
            for tag in &tags {
                batch.key(&format!("failed:{tag}"));
            }
        }
    }
}

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
