//! Horizon's job and queue metrics: `throughput` and mean `runtime`.
//!
//! Horizon's `UpdateJobMetrics` listener runs its `updateMetrics` script
//! twice for every job deleted after it ran (never for a failed one): on
//! `P queue:{queue}` with the set `P measured_queues`, and on
//! `P job:{displayName}` with `P measured_jobs`. Each run: the counter
//! starts at 0, the hash's full key name joins the set, the count goes up
//! by one and the mean runtime (milliseconds) takes the new run in:
//! `mean = (mean × count + run) / (count + 1)`, or the run itself when the
//! hash has no mean yet. `horizon:snapshot` reads and deletes the hashes.
//!
//! The writer gathers the runs of one batch per hash and sends them as one
//! `T` op of the batch script ([`super::script`]), which applies them one
//! by one in order: the same arithmetic, on the same doubles (a mean is
//! stored with `%.17g`, which reads back exactly), as that many calls of
//! Horizon's script.

use super::script::{Batch, MEASURED_JOBS, MEASURED_QUEUES};

/// The runs of one batch, per metrics hash, in the order they came.
#[derive(Default)]
pub struct Runs {
    /// Per hash: its name's prefix (`queue:`, `job:`) and the rest, its
    /// measured set, its runs (milliseconds, two decimals).
    hashes: Vec<(&'static str, String, usize, Vec<String>)>,
}

impl Runs {
    /// Counts one job of class `name` that ran `runtime_ms` on `queue`.
    pub fn add(&mut self, queue: &str, name: &str, runtime_ms: f64) {
        let runtime = super::stamp::two_places(runtime_ms);
        for (prefix, rest, set) in [
            ("queue:", queue, MEASURED_QUEUES),
            ("job:", name, MEASURED_JOBS),
        ] {
            let found = self
                .hashes
                .iter_mut()
                .find(|(p, r, _, _)| *p == prefix && r == rest);
            match found {
                Some((_, _, _, runs)) => runs.push(runtime.clone()),
                None => self
                    .hashes
                    .push((prefix, rest.to_string(), set, vec![runtime.clone()])),
            }
        }
    }

    /// Adds the updates to `batch`, one op per hash.
    pub fn write(self, batch: &mut Batch<'_>) {
        for (prefix, rest, set, runs) in self.hashes {
            batch
                .op("T")
                .key(&format!("{prefix}{rest}"))
                .text(set)
                .text(runs.len());
            for run in runs {
                batch.text(run);
            }
        }
    }
}
