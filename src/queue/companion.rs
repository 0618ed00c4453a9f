//! Writes that land with a delete, in the same script.
//!
//! A listener that mirrors the queue in the same Redis (Horizon's job
//! records) writes after Redis did each step, on its own schedule. A
//! worker killed between a delete and that write would leave the mirror
//! wrong for good: no worker reclaims a job Redis deleted. A
//! [`SettleCompanion`] closes that gap: for each delete of a finished job it
//! may give writes of its own, which go to Redis in the delete's script
//! and run only when the delete removed the reservation. The queue knows
//! nothing of what they write; each runs under `pcall`, so an error in
//! them (a wrong key type) never fails the delete, and a script Redis
//! refuses whole (an ACL without the companion's keys) falls back to the
//! plain delete (see [`super::redis_queue::batch`]).

use std::sync::Arc;

use bytes::Bytes;

use super::ReservedJob;

/// How the job a delete settles ended.
#[derive(Debug, Clone, Copy)]
pub enum Ending<'a> {
    /// It ran to completion (Laravel's `JobProcessed`).
    Completed {
        /// When its run started (its reservation), for a record of it.
        reserved_at: std::time::SystemTime,
    },
    /// It failed, and its record is in the failed-job store.
    Failed {
        /// The exception text recorded.
        exception: &'a str,
    },
}

/// A companion's writes for one delete: its keys and arguments, for its
/// [`SettleCompanion::body`].
#[derive(Debug, Clone)]
pub struct Writes {
    /// Its `KEYS`.
    pub keys: Vec<String>,
    /// Its `ARGV`.
    pub args: Vec<Bytes>,
}

/// Gives the writes that must land with a delete (see the module's
/// documentation).
pub trait SettleCompanion: Send + Sync {
    /// The Lua run after the delete removed the reservation, with `KEYS`
    /// and `ARGV` its own (those of [`Writes`]) and `member` the member it
    /// removed (the reserved payload: no need to send it twice). What it
    /// returns is ignored.
    fn body(&self) -> &'static str;

    /// The writes for `job`, deleted because it `ended` so; `None`: none.
    fn on_delete(&self, job: &ReservedJob, ended: Ending<'_>) -> Option<Writes>;
}

/// The delete script made with a companion's body: its text and SHA1.
#[derive(Debug)]
pub struct DeleteScript {
    /// The Lua text (see [`script_with`]).
    pub code: String,
    /// Its SHA1, for `EVALSHA`.
    pub sha: String,
}

/// An installed companion and its delete script.
#[derive(Clone)]
pub struct Installed {
    /// The companion.
    pub companion: Arc<dyn SettleCompanion>,
    /// `ZREM`, then the body when it removed the member.
    pub script: Arc<DeleteScript>,
}

impl Installed {
    /// `companion`, with its delete script.
    pub fn new(companion: Arc<dyn SettleCompanion>) -> Self {
        let code = script_with(companion.body());
        let sha = redis::Script::new(&code).get_hash().to_string();
        Installed {
            companion,
            script: Arc::new(DeleteScript { code, sha }),
        }
    }
}

/// The delete script around `body`: `KEYS[1]` the `:reserved` key,
/// `ARGV[1]` the member; the companion's keys and arguments follow, and
/// the body sees them as its own `KEYS` and `ARGV`, and the member as
/// `member`. Answers what `ZREM` answers.
pub fn script_with(body: &str) -> String {
    format!(
        "local removed = redis.call('ZREM', KEYS[1], ARGV[1])\n\
         if removed == 0 then return 0 end\n\
         local function companion(KEYS, ARGV, member)\n{body}\nend\n\
         pcall(companion, {{unpack(KEYS, 2)}}, {{unpack(ARGV, 2)}}, ARGV[1])\n\
         return removed\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body sees its own keys and arguments, and runs only after the
    /// delete removed the member, under `pcall`.
    #[test]
    fn the_body_runs_after_the_delete_with_its_own_keys() {
        let script = script_with("redis.call('SET', KEYS[1], ARGV[1])");
        let zrem = script.find("ZREM").unwrap();
        let body = script.find("redis.call('SET'").unwrap();
        assert!(zrem < body);
        assert!(script.contains("if removed == 0 then return 0 end"));
        assert!(script.contains("pcall(companion, {unpack(KEYS, 2)}, {unpack(ARGV, 2)}, ARGV[1])"));
    }
}
