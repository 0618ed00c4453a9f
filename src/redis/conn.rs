//! [`RedisConn`]: the one connection type every caller holds, whatever the
//! topology behind it, and [`open`], which makes one: the one place the
//! topology is chosen, a `match` with one arm per [`Topology`] variant, so
//! a new variant does not compile until it is handled here (and in the
//! dispatch of [`ConnectionLike`] below, one arm per [`Link`]).

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::purpose::Purpose;
use super::sentinel::SentinelConn;
use super::target::{RedisTarget, Topology};

/// A connection to Redis, whatever the topology. Cloning is cheap; clones
/// share the underlying sockets. Commands, pipelines and scripts go through
/// [`ConnectionLike`].
#[derive(Clone)]
pub struct RedisConn {
    link: Link,
    /// What it was opened for: answers the questions about the servers.
    target: Arc<RedisTarget>,
}

/// The client connection of each topology.
#[derive(Clone)]
enum Link {
    /// One server, reconnecting by itself.
    Single(ConnectionManager),
    /// The current master of a Sentinel-managed replica set.
    Sentinel(SentinelConn),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// `link`, opened for `target`.
    fn new(link: Link, target: &RedisTarget) -> Self {
        RedisConn {
            link,
            target: Arc::new(target.clone()),
        }
    }

    /// True on a Redis Cluster, where the keys of one command must share a
    /// slot (see [`RedisTarget::is_cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.target.is_cluster()
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
        Topology::Sentinel(options) => SentinelConn::open(target, options, timeout)
            .await
            .map(Link::Sentinel),
        Topology::Cluster { nodes } => super::cluster::open(target, nodes, timeout)
            .await
            .map(Link::Cluster),
    };
    match link {
        Ok(link) => Ok(RedisConn::new(link, target)),
        Err(e) => Err(super::tls::explain_ca_as_server(e)),
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Single(c) => c.req_packed_command(cmd),
            Link::Sentinel(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c) => c.get_db(),
            Link::Sentinel(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}
