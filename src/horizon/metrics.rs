//! Horizon's job and queue metrics: `throughput` and mean `runtime`.
//!
//! Horizon's `UpdateJobMetrics` listener runs its `updateMetrics` script
//! twice for every job deleted after it ran (never for a failed one): on
//! `P queue:{queue}` with the set `P measured_queues`, and on
//! `P job:{displayName}` with `P measured_jobs`. The script below does what
//! Horizon's does: the counter starts at 0, the hash's full key name joins
//! the set, the count goes up by one and the mean runtime (milliseconds)
//! takes the new run in. `horizon:snapshot` reads and deletes the hashes.

use redis::Pipeline;

use super::keys::Keys;

/// KEYS\[1\]: the metrics hash; KEYS\[2\]: the set of measured hashes.
/// ARGV\[1\]: this run's runtime in milliseconds.
pub const UPDATE: &str = r"
redis.call('HSETNX', KEYS[1], 'throughput', 0)
redis.call('SADD', KEYS[2], KEYS[1])
local before = redis.call('HMGET', KEYS[1], 'throughput', 'runtime')
local count = before[1] + 1
local mean = tonumber(ARGV[1])
if before[2] then
  mean = ((before[1] * tonumber(before[2])) + mean) / count
end
redis.call('HMSET', KEYS[1], 'throughput', count, 'runtime', mean)
";

/// Adds to `pipe` the metrics updates of one job of class `name` that
/// ran `runtime_ms` on `queue`.
pub fn add(pipe: &mut Pipeline, keys: &Keys, queue: &str, name: &str, runtime_ms: f64) {
    let runtime = format!("{runtime_ms}");
    for (hash, set) in [
        (
            keys.key(&format!("queue:{queue}")),
            keys.key("measured_queues"),
        ),
        (keys.key(&format!("job:{name}")), keys.key("measured_jobs")),
    ] {
        pipe.cmd("EVAL")
            .arg(UPDATE)
            .arg(2)
            .arg(hash)
            .arg(set)
            .arg(&runtime)
            .ignore();
    }
}
