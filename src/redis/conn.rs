//! [`RedisConn`]: the one connection type every caller holds, whatever the
//! topology behind it.

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::sentinel::SentinelConn;
use super::target::RedisTarget;

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
pub(super) enum Link {
    /// One server, reconnecting by itself.
    Single(ConnectionManager),
    /// The current master of a Sentinel-managed replica set.
    Sentinel(SentinelConn),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// `link`, opened for `target`.
    pub(super) fn new(link: Link, target: &RedisTarget) -> Self {
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
