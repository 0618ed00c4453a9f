//! A batch's records, as the ops of the batch script ([`super::script`]).
//!
//! Each [`Record`] becomes the op that writes what Horizon's listener for
//! that step writes, except one common case: a job reserved and deleted
//! after it ran within one batch (most short jobs, at any pace) becomes one
//! `D` op that leaves exactly what Horizon's `reserved` then `completed`
//! leave (the hash with both steps' fields and the completed expiry, the
//! `recent_jobs` entry, the completed or silenced entry, no `pending_jobs`
//! entry), with half the Redis commands. A job with tags or a `retry_of`
//! keeps its two ops: monitored tags and the retried job's `retried_by`
//! are written by them.

use std::collections::HashMap;
use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde::Deserialize;

use super::Trim;
use super::metrics::Runs;
use super::records::{Record, Step};
use super::script::Batch;
use super::stamp::Stamp;

/// The payload fields Horizon's records need beyond those the worker
/// parsed, read only from a payload that has one of them.
///
/// Each is read on its own and accepts what Laravel's pop script leaves:
/// it re-encodes the reserved copy with Lua's cjson, which writes PHP's
/// empty array (`"tags":[]`) as an empty object (`"tags":{}`). A field of
/// an unexpected type is taken as absent; it never costs the others.
#[derive(Deserialize, Default)]
pub struct Extra {
    #[serde(default)]
    tags: Option<serde_json::Value>,
    #[serde(default)]
    silenced: Option<serde_json::Value>,
    #[serde(default)]
    retry_of: Option<serde_json::Value>,
    #[serde(default, rename = "pushedAt")]
    pushed_at: Option<serde_json::Value>,
}

/// The searchers for Horizon's payload fields, built once: a job's
/// payload is searched for them a few times per step, and a searcher
/// built at each search (`memmem::find`) cost more than the search.
static FIELDS: LazyLock<[Finder<'static>; 4]> = LazyLock::new(|| {
    [
        Finder::new(b"\"tags\""),
        Finder::new(b"\"silenced\""),
        Finder::new(b"\"retry_of\""),
        Finder::new(b"\"pushedAt\""),
    ]
});

impl Extra {
    /// The fields of `record`'s payload: none without a read when its
    /// parse saw none ([`Record::horizon_fields`]).
    pub fn of_record(record: &Record) -> Self {
        Self::of_flagged(&record.payload, record.horizon_fields)
    }

    /// The fields of `payload`, read only when `flagged` (it may have
    /// one: see [`Record::horizon_fields`]).
    pub fn of_flagged(payload: &[u8], flagged: bool) -> Self {
        if flagged {
            Self::of(payload)
        } else {
            Extra::default()
        }
    }

    /// The fields of `payload`; a payload that names none of them (one
    /// pushed without Horizon) is not parsed again.
    pub fn of(payload: &[u8]) -> Self {
        if !FIELDS.iter().any(|field| field.find(payload).is_some()) {
            return Extra::default();
        }
        serde_json::from_slice(payload).unwrap_or_default()
    }

    /// The tags: a list (`[]` as PHP writes it), or an object (`{}`, the
    /// same empty list after cjson; a keyed one gives its values).
    fn tags(&self) -> Vec<&str> {
        let values: Box<dyn Iterator<Item = &serde_json::Value>> = match &self.tags {
            Some(serde_json::Value::Array(list)) => Box::new(list.iter()),
            Some(serde_json::Value::Object(map)) => Box::new(map.values()),
            _ => Box::new(std::iter::empty()),
        };
        values.filter_map(|t| t.as_str()).collect()
    }

    /// The id of the failed job this one retries (`retry_of`).
    pub fn retry_of(&self) -> Option<String> {
        match &self.retry_of {
            Some(serde_json::Value::String(id)) if !id.is_empty() => Some(id.clone()),
            Some(serde_json::Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    }

    /// Horizon's `pushedAt` as the payload's text holds it
    /// (`"pushedAt":"1700000000.1234"`, as Horizon's connector writes it):
    /// the job was pushed through that connector, whose `JobPushed`
    /// listener writes a `pending` record of its own, maybe after this
    /// worker finished the job (see [`super::late`]). The text tells that
    /// write from a later push of the same id, which has a `pushedAt` of
    /// its own.
    pub fn pushed_at(&self) -> Option<String> {
        match &self.pushed_at {
            Some(serde_json::Value::String(at)) if !at.is_empty() => Some(format!(
                "\"pushedAt\":{}",
                serde_json::Value::String(at.clone())
            )),
            _ => None,
        }
    }

    /// Whether the job's two ops may become one `D` op: no tag lists to
    /// keep, no retried job to update.
    pub fn plain(&self) -> bool {
        self.tags().is_empty() && self.retry_of().is_none()
    }

    /// Whether the job is listed under *Silenced* (`silenced`, PHP's
    /// truthiness).
    pub fn silenced(&self) -> bool {
        self.silenced.as_ref().is_some_and(truthy)
    }
}

/// What one op writes.
enum Write<'r> {
    /// One record's step.
    One(&'r Record, Extra),
    /// A job's reservation and its completion.
    Done {
        reserved: &'r Record,
        completed: &'r Record,
        extra: Extra,
    },
    /// A completion whose record went with its delete: only its run is
    /// counted (the metrics).
    Ran(&'r Record),
}

/// Adds the ops for `records` (oldest first) to `batch`, and the metrics
/// of the completed jobs among them. `companion`: Horizon's companion
/// writes the final record with each delete ([`super::companion`]).
pub fn add_all(batch: &mut Batch<'_>, records: &[Record], trim: &Trim, companion: bool) {
    let mut runs = Runs::default();
    for write in plan(records, companion) {
        match write {
            Write::One(record, extra) => add(batch, &mut runs, record, &extra, trim),
            Write::Done {
                reserved,
                completed,
                extra,
            } => add_done(batch, &mut runs, [reserved, completed], &extra, trim),
            Write::Ran(record) => {
                if let Step::Completed { runtime_ms, .. } = record.step {
                    runs.add(&record.queue, &record.name, runtime_ms);
                }
            }
        }
    }
    runs.write(batch);
}

/// The writes for `records`: a plain job's `Reserved` and its next record
/// when that is `Completed` become one [`Write::Done`], in the place of
/// the reservation (the ops between them are other jobs').
///
/// With a `companion`, the delete of a plain job that ran to completion
/// already wrote its final record ([`super::script::COMPANION`]'s lean
/// path), with the run's `reserved_at`: that completion is only counted
/// ([`Write::Ran`]), and its reservation in the same batch is not written
/// at all (the final record is there already). A payload with `pushedAt`
/// keeps its ops: the writer's `D` or `C` then names it for
/// [`super::late`] when its producer's record has not landed yet, and puts
/// the final state back if that record landed in between.
fn plan(records: &[Record], companion: bool) -> Vec<Write<'_>> {
    let mut writes: Vec<Option<Write<'_>>> = Vec::with_capacity(records.len());
    let mut open: HashMap<&str, usize> = HashMap::new();
    for record in records {
        let paired = open.remove(record.id.as_str());
        if companion && matches!(record.step, Step::Completed { deleted: true, .. }) {
            let with_delete = match paired {
                // Only plain reservations are paired.
                Some(at) => {
                    matches!(&writes[at], Some(Write::One(_, extra)) if extra.pushed_at().is_none())
                }
                None => {
                    let extra = Extra::of_record(record);
                    extra.plain() && extra.pushed_at().is_none()
                }
            };
            if with_delete {
                if let Some(at) = paired {
                    writes[at] = None;
                }
                writes.push(Some(Write::Ran(record)));
                continue;
            }
        }
        if let (Some(at), Step::Completed { .. }) = (paired, &record.step)
            && let Some(Write::One(reserved, extra)) = writes[at].take()
        {
            writes[at] = Some(Write::Done {
                reserved,
                completed: record,
                extra,
            });
            continue;
        }
        let extra = Extra::of_record(record);
        if record.step == Step::Reserved && extra.plain() {
            open.insert(&record.id, writes.len());
        }
        writes.push(Some(Write::One(record, extra)));
    }
    writes.into_iter().flatten().collect()
}

/// Adds the op that writes `record`, a job's completion or failure, with
/// the delete that settles it ([`super::companion`]): `S` for a completion
/// (no metrics: the writer counts the run), `F` for a failure.
pub fn add_settled(batch: &mut Batch<'_>, record: &Record, trim: &Trim) {
    let extra = Extra::of_record(record);
    match record.step {
        Step::Completed { .. } => {
            let stamp = Stamp::of(record.at);
            let id = &record.id;
            batch
                .op("S")
                .key(id)
                .text(id)
                .text(&record.queue)
                .text(&record.name);
            let parent = extra.retry_of().map_or(0, |id| batch.key_index(&id));
            batch
                .payload(&record.payload)
                .text(stamp.time())
                .text(stamp.score())
                .text(until(record.at, trim.completed))
                .text(u8::from(extra.silenced()))
                .text(parent);
            let tags = extra.tags();
            batch.text(tags.len());
            for tag in &tags {
                batch.text(tag).key(tag);
            }
            batch.text(until(record.at, trim.monitored));
        }
        _ => add(batch, &mut Runs::default(), record, &extra, trim),
    }
}

/// Unix seconds `minutes` after `at`.
fn until(at: f64, minutes: u64) -> u64 {
    at as u64 + minutes * 60
}

/// Adds the `D` op of a job reserved and completed in this batch.
fn add_done(
    batch: &mut Batch<'_>,
    runs: &mut Runs,
    [reserved, completed]: [&Record; 2],
    extra: &Extra,
    trim: &Trim,
) {
    let Step::Completed { runtime_ms, .. } = completed.step else {
        return;
    };
    let reserved_at = Stamp::of(reserved.at);
    let completed_at = Stamp::of(completed.at);
    let id = &reserved.id;
    batch
        .op_of("D", 2)
        .key(id)
        .text(id)
        .text(&reserved.queue)
        .text(&reserved.name);
    batch
        .payload(&reserved.payload)
        .text(reserved_at.time())
        .text(reserved_at.score());
    batch
        .text(completed_at.time())
        .text(completed_at.score())
        .text(until(completed.at, trim.completed))
        .text(u8::from(extra.silenced()))
        .text(extra.pushed_at().unwrap_or_default());
    runs.add(&reserved.queue, &reserved.name, runtime_ms);
}

/// Adds `record`'s op to `batch` (and its run to `runs`).
fn add(batch: &mut Batch<'_>, runs: &mut Runs, record: &Record, extra: &Extra, trim: &Trim) {
    let tags = extra.tags();
    let stamp = Stamp::of(record.at);
    let (time, score) = (stamp.time(), stamp.score());
    let until = |minutes: u64| until(record.at, minutes);
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
                .text(time)
                .text(until(trim.pending));
            batch.text(score).text(tags.len());
            for tag in &tags {
                batch.text(tag).key(tag);
            }
        }
        Step::Completed { runtime_ms, .. } => {
            let parent = parent(batch);
            batch
                .op("C")
                .key(id)
                .text(id)
                .text(time)
                .text(until(trim.completed));
            batch
                .text(score)
                .text(u8::from(extra.silenced()))
                .text(parent)
                .text(extra.pushed_at().unwrap_or_default())
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
            batch.payload(&record.payload).text(exception).text(time);
            batch.text(until(trim.failed)).text(score).text(parent);
            batch
                .text(trim.failed * 60)
                .text(extra.pushed_at().unwrap_or_default())
                .text(tags.len());
            for tag in &tags {
                batch.text(tag).key(tag).key(&format!("failed:{tag}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, step: Step, payload: &str) -> Record {
        Record {
            horizon_fields: true,
            id: id.into(),
            name: "App\\Jobs\\Noop".into(),
            queue: "default".into(),
            payload: bytes::Bytes::copy_from_slice(payload.as_bytes()),
            at: 1.0,
            step,
        }
    }

    fn shape_with(records: &[Record], companion: bool) -> Vec<String> {
        plan(records, companion)
            .iter()
            .map(|w| match w {
                Write::One(r, _) => format!("{:?} {}", r.step, r.id),
                Write::Done { reserved, .. } => format!("Done {}", reserved.id),
                Write::Ran(r) => format!("Ran {}", r.id),
            })
            .collect()
    }

    fn shape(records: &[Record]) -> Vec<String> {
        shape_with(records, false)
    }

    /// With Horizon's companion, a plain job's delete wrote its final
    /// record: the writer counts its run and writes nothing else for it;
    /// a job with tags, a `pushedAt`, or a completion whose delete did not
    /// carry the record (a lost answer, a large job) keeps its ops.
    #[test]
    fn with_the_companion_a_plain_completion_is_only_counted() {
        let done = |deleted| Step::Completed {
            runtime_ms: 1.0,
            deleted,
        };
        let pushed = r#"{"pushedAt":"1700000000.1234"}"#;
        let records = [
            record("a", Step::Reserved, "{}"),
            record("a", done(true), "{}"),
            record("b", done(true), "{}"),
            record("c", Step::Reserved, r#"{"tags":["x"]}"#),
            record("c", done(true), r#"{"tags":["x"]}"#),
            record("d", Step::Reserved, pushed),
            record("d", done(true), pushed),
            record("e", Step::Reserved, "{}"),
            record("e", done(false), "{}"),
        ];
        assert_eq!(
            shape_with(&records, true),
            [
                "Ran a",
                "Ran b",
                "Reserved c",
                "Completed { runtime_ms: 1.0, deleted: true } c",
                "Done d",
                "Done e",
            ]
        );
        assert_eq!(
            shape_with(&records, false),
            [
                "Done a",
                "Completed { runtime_ms: 1.0, deleted: true } b",
                "Reserved c",
                "Completed { runtime_ms: 1.0, deleted: true } c",
                "Done d",
                "Done e",
            ]
        );
    }

    #[test]
    fn a_plain_job_reserved_and_completed_in_one_batch_is_one_op() {
        let done = || Step::Completed {
            runtime_ms: 1.0,
            deleted: true,
        };
        let records = [
            record("a", Step::Reserved, "{}"),
            record("b", Step::Reserved, "{}"),
            record("b", done(), "{}"),
            record("a", Step::Released, "{}"),
            record("c", Step::Reserved, r#"{"tags":["x"]}"#),
            record("c", done(), r#"{"tags":["x"]}"#),
            record("d", done(), "{}"),
        ];
        assert_eq!(
            shape(&records),
            [
                "Reserved a",
                "Done b",
                "Released a",
                "Reserved c",
                "Completed { runtime_ms: 1.0, deleted: true } c",
                "Completed { runtime_ms: 1.0, deleted: true } d",
            ]
        );
    }

    /// Issue 30 item 2: Laravel's pop script re-encodes the reserved copy
    /// with cjson, which writes PHP's `[]` as `{}`; `silenced`, `retry_of`
    /// and `pushedAt` are still read, and each field on its own.
    #[test]
    fn tags_as_cjson_leaves_them_cost_no_other_field() {
        let popped = br#"{"tags":{},"silenced":true,"retry_of":"p1","pushedAt":"1700000000.1234"}"#;
        let extra = Extra::of(popped);
        assert!(extra.tags().is_empty());
        assert!(extra.silenced());
        assert_eq!(extra.retry_of().as_deref(), Some("p1"));
        assert_eq!(
            extra.pushed_at().as_deref(),
            Some(r#""pushedAt":"1700000000.1234""#)
        );
        let pushed = Extra::of(br#"{"tags":[],"silenced":false,"retry_of":null}"#);
        assert!(pushed.tags().is_empty() && !pushed.silenced() && pushed.plain());
        let odd = Extra::of(br#"{"tags":"x","silenced":1,"retry_of":"p2"}"#);
        assert!(odd.tags().is_empty() && odd.silenced());
        assert_eq!(odd.retry_of().as_deref(), Some("p2"));
        let keyed = Extra::of(br#"{"tags":{"0":"a","1":"b"}}"#);
        assert_eq!(keyed.tags(), ["a", "b"]);
    }
}
