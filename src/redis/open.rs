//! [`open`]: a [`RedisTarget`] in, a [`RedisConn`] out. The one place the
//! topology is chosen: a `match` with one arm per [`Topology`] variant, so
//! a new variant does not compile until it is handled here.

use std::time::Duration;

use redis::RedisResult;

use super::conn::{Link, RedisConn};
use super::target::{RedisTarget, Topology};

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
    fn response_timeout(self) -> Option<Duration> {
        match self {
            Purpose::Commands => Some(COMMAND_TIMEOUT),
            Purpose::Blocking => None,
        }
    }
}

/// Opens a connection to `target`, for `purpose`.
///
/// # Errors
/// Unreadable TLS files, a server (or no sentinel, or no cluster node) that
/// cannot be reached, a TLS handshake that fails (the message names the
/// cause, such as an unknown issuer), a scheme that does not match the
/// server, or refused credentials.
pub async fn open(target: &RedisTarget, purpose: Purpose) -> RedisResult<RedisConn> {
    super::tls::prepare(&target.info, &target.tls);
    let timeout = purpose.response_timeout();
    let link = match &target.topology {
        Topology::Single => super::single::open(target, timeout).await.map(Link::Single),
        Topology::Sentinel(options) => {
            super::sentinel::SentinelConn::open(target, options, timeout)
                .await
                .map(Link::Sentinel)
        }
        Topology::Cluster { nodes } => super::cluster::open(target, nodes, timeout)
            .await
            .map(Link::Cluster),
    };
    match link {
        Ok(link) => Ok(RedisConn::new(link, target)),
        Err(e) => Err(super::tls::explain_ca_as_server(e)),
    }
}
