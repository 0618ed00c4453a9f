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
//! The writer gathers the runs of one batch per hash and sends them in one
//! call, which applies them one by one in order: the same arithmetic, on
//! the same doubles (a mean is stored with `%.17g`, which reads back
//! exactly), as that many calls of Horizon's script.

use redis::Pipeline;

use super::keys::Keys;

/// KEYS\[1\]: the metrics hash; KEYS\[2\]: the set of measured hashes.
/// ARGV: the runtimes in milliseconds, oldest first.
pub const UPDATE: &str = r"
redis.call('HSETNX', KEYS[1], 'throughput', 0)
redis.call('SADD', KEYS[2], KEYS[1])
local before = redis.call('HMGET', KEYS[1], 'throughput', 'runtime')
local count = tonumber(before[1])
local mean = before[2] and tonumber(before[2])
for i = 1, #ARGV do
  local run = tonumber(ARGV[i])
  if mean then
    mean = ((count * mean) + run) / (count + 1)
  else
    mean = run
  end
  count = count + 1
end
redis.call('HMSET', KEYS[1], 'throughput', count, 'runtime', mean)
";

/// The runs of one batch, per metrics hash, in the order they came.
#[derive(Default)]
pub struct Runs {
    hashes: Vec<(String, &'static str, Vec<String>)>,
}

impl Runs {
    /// Counts one job of class `name` that ran `runtime_ms` on `queue`.
    pub fn add(&mut self, keys: &Keys, queue: &str, name: &str, runtime_ms: f64) {
        let runtime = format!("{runtime_ms}");
        for (hash, set) in [
            (keys.key(&format!("queue:{queue}")), "measured_queues"),
            (keys.key(&format!("job:{name}")), "measured_jobs"),
        ] {
            match self.hashes.iter_mut().find(|(h, _, _)| *h == hash) {
                Some((_, _, runs)) => runs.push(runtime.clone()),
                None => self.hashes.push((hash, set, vec![runtime.clone()])),
            }
        }
    }

    /// Adds the updates to `pipe`, one call per hash.
    pub fn write(self, pipe: &mut Pipeline, keys: &Keys) {
        for (hash, set, runs) in self.hashes {
            pipe.cmd("EVAL")
                .arg(UPDATE)
                .arg(2)
                .arg(hash)
                .arg(keys.key(set))
                .arg(runs)
                .ignore();
        }
    }
}
