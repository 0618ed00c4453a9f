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
//! reservation ([`crate::queue::companion`]). The writer still writes its
//! ops afterwards (the same state again, the metrics, the ids to watch;
//! an `R` it writes late finds the record already final for that
//! reservation and leaves it).
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

use super::Trim;
use super::keys::Keys;
use super::records::{Record, Step, microtime};
use super::script::Batch;

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
        super::script::RECORDS
    }

    fn on_delete(&self, job: &ReservedJob, ended: Ending<'_>) -> Option<Writes> {
        let facts = JobFacts::of(job);
        let step = match ended {
            // The runtime is measured by the writer's record.
            Ending::Completed => Step::Completed { runtime_ms: 0.0 },
            Ending::Failed { exception } => Step::Failed {
                exception: exception.to_string(),
            },
        };
        let record = Record {
            id: facts.id?,
            name: facts.display_name.unwrap_or_default(),
            queue: facts.queue.name.clone(),
            payload: facts.reserved,
            at: microtime(std::time::SystemTime::now()),
            step,
        };
        let mut batch = Batch::new(&self.keys, &self.connection);
        super::ops::add_settled(&mut batch, &record, &self.trim);
        let (keys, args) = batch.into_parts();
        Some(Writes { keys, args })
    }
}
