//! A job's completed or failed record, written by the script that deletes
//! the job, when Horizon's records live on the queue's Redis.
//!
//! The [`writer`](super::writer) writes each record a few milliseconds
//! after Redis did the step, on a thread of its own. A worker killed in
//! between (SIGKILL, the OOM killer, a node lost) would leave the record
//! `reserved` and in the pending list for a job Redis already deleted, and
//! no worker ever reclaims that job to put it right. So the record of a
//! completion (`S`) or a failure (`F`) also goes with the delete: Redis
//! runs it in the delete's script, only when the delete removed the
//! reservation ([`crate::queue::companion`]).
//!
//! The commonest delete, a job without tags or `retry_of` that ran to
//! completion, takes the lean path of [`super::script::COMPANION`]: the
//! final record with the run's own `reserved_at`, in five or six commands, the
//! payload being the member the delete removes (sent once). The writer
//! then only counts that run in the metrics ([`super::ops`]): the record
//! was written twice before, here by the whole batch script and again by
//! the writer.
//! Other endings (a failure, tags, a retry) are written here by the batch
//! script's `S` or `F` op, and by the writer afterwards (the same state
//! again, the ids to watch); an `R` the writer writes late finds the
//! record already final for that reservation and leaves it.
//!
//! Why in the same script rather than after it: nothing else survives a
//! kill between the two writes. Why here and not in the queue: the queue
//! only offers the seam (a [`SettleCompanion`] gives writes, the delete
//! runs them under `pcall`); what they write is Horizon's. Not on a Redis
//! Cluster (the queue's keys and Horizon's are in different slots), nor
//! when Horizon's records go to another Redis (`horizon.use`, `[horizon]
//! url`): the writer alone writes them there.

use crate::queue::ReservedJob;
use crate::queue::companion::{Ending, SettleCompanion, Writes};
use crate::worker::decoupled::JobFacts;

use bytes::{Bytes, BytesMut};

use super::Trim;
use super::keys::Keys;
use super::ops::Extra;
use super::records::{Record, Step, microtime};
use super::script::Batch;
use super::stamp::Stamp;

/// Horizon's part of the deletes.
pub struct Companion {
    /// Horizon's keys.
    pub keys: Keys,
    /// The queue connection's name (`redis`).
    pub connection: String,
    /// The records' expiries.
    pub trim: Trim,
}

impl SettleCompanion for Companion {
    fn body(&self) -> &'static str {
        super::script::COMPANION
    }

    fn on_delete(&self, job: &ReservedJob, ended: Ending<'_>) -> Option<Writes> {
        let facts = JobFacts::of(job);
        let id = facts.id.clone()?;
        let now = microtime(std::time::SystemTime::now());
        let step = match ended {
            Ending::Completed { reserved_at } => {
                let extra = Extra::of_flagged(&facts.reserved, facts.horizon_fields);
                if extra.plain() {
                    return Some(self.done(&id, &facts, &extra, microtime(reserved_at), now));
                }
                // The runtime is measured by the writer's record.
                Step::Completed {
                    runtime_ms: 0.0,
                    deleted: true,
                }
            }
            Ending::Failed { exception } => Step::Failed {
                exception: exception.to_string(),
            },
        };
        let record = Record {
            id,
            name: facts.display_name.unwrap_or_default(),
            queue: facts.queue.name.clone(),
            payload: facts.reserved,
            at: now,
            horizon_fields: facts.horizon_fields,
            step,
        };
        let mut batch = Batch::new(&self.keys, &self.connection);
        super::ops::add_settled(&mut batch, &record, &self.trim);
        let (keys, args) = batch.into_parts();
        Some(Writes { keys, args })
    }
}

impl Companion {
    /// The lean path of [`super::script::COMPANION`] for a job without
    /// tags or `retry_of` that ran from `reserved` to `now` (`microtime`
    /// both); the payload is the member the delete removes.
    fn done(&self, id: &str, facts: &JobFacts, extra: &Extra, reserved: f64, now: f64) -> Writes {
        let list = if extra.silenced() {
            "silenced_jobs"
        } else {
            "completed_jobs"
        };
        let keys = vec![
            self.keys.key(id),
            self.keys.key("recent_jobs"),
            self.keys.key("pending_jobs"),
            self.keys.key(list),
        ];
        let reserved = Stamp::of(reserved);
        let done = Stamp::of(now);
        let expiry = Stamp::whole(now as u64 + self.trim.completed * 60);
        // The arguments share one buffer: one allocation, not ten.
        let mut buffer = BytesMut::with_capacity(256);
        let mut text = |s: &str| {
            buffer.extend_from_slice(s.as_bytes());
            buffer.split().freeze()
        };
        let args = vec![
            Bytes::from_static(b"\0done"),
            text(id),
            text(&self.connection),
            text(&facts.queue.name),
            text(facts.display_name.as_deref().unwrap_or_default()),
            text(reserved.time()),
            text(reserved.score()),
            text(done.time()),
            text(done.score()),
            text(expiry.time()),
        ];
        Writes { keys, args }
    }
}
