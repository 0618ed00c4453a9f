//! What a connection is for ([`Purpose`]), and the time limits every
//! topology shares: connecting, one command, and a master's failover.

use std::time::Duration;

/// How long a connection attempt may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an ordinary command may wait for its answer. The client's own
/// default (500 ms) is too short for a busy server running a large migrate.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a command keeps looking for a reachable master after the one
/// it used went away, before it fails: on Sentinel, the time the sentinels
/// need to notice the loss (`down-after-milliseconds`) and promote a
/// replica should fit in it; on a cluster, on top of the command's own
/// time limit, for the slot map to name the new master.
pub(super) const FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// What a connection is for, which sets how long one of its commands may
/// wait for an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Ordinary commands, pipelines and scripts: each answer within
    /// [`COMMAND_TIMEOUT`].
    Commands,
    /// Blocking waits (`BLPOP` on the notify lists, Laravel's `block_for`):
    /// no limit of the connection's own, since a wait with `block_for = 0`
    /// lasts for ever; each wait sets its own.
    Blocking,
}

impl Purpose {
    /// The response time limit of one command; `None`: none.
    pub(super) fn response_timeout(self) -> Option<Duration> {
        match self {
            Purpose::Commands => Some(COMMAND_TIMEOUT),
            Purpose::Blocking => None,
        }
    }
}
