//! A Redis Cluster, through the `redis` crate's cluster client: it learns
//! the slot map from any seed node, sends each command to the master of its
//! keys' slot, follows `MOVED` and `ASK`, and refreshes the map when a
//! master fails over.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, ErrorKind, RedisError, RedisResult};

use super::purpose::{CONNECT_TIMEOUT, FAILOVER_WAIT};
use super::target::RedisTarget;
use super::tls::{certificates, is_tls, tls_mode, with_insecure};

/// A response time limit that never ends in practice (30 days), where the
/// client requires one.
const FOREVER: Duration = Duration::from_secs(30 * 86_400);

/// Opens the cluster seeded from `nodes`, with the TLS of `target`;
/// `response_timeout` bounds each command (`None`: no limit).
///
/// # Errors
/// As [`super::open`]; a server that is not a cluster node is named as
/// such.
pub async fn open(
    target: &RedisTarget,
    nodes: &[ConnectionInfo],
    response_timeout: Option<Duration>,
) -> RedisResult<ClusterConnection> {
    let nodes = nodes
        .iter()
        .map(|n| with_insecure(n.clone(), target.tls.insecure));
    let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
        .connection_timeout(CONNECT_TIMEOUT)
        // A BLPOP that may wait for ever still needs a number here.
        .response_timeout(response_timeout.unwrap_or(FOREVER))
        // Slot moves and a master's failover are retried within the
        // command's own time limit, not the default 500 ms.
        .overall_response_timeout(response_timeout.map(|t| t + FAILOVER_WAIT))
        .retries(32)
        .min_retry_wait(100)
        .max_retry_wait(1_000);
    if is_tls(target.info.addr()) {
        builder = builder.tls(tls_mode(&target.tls));
        if let Some(certs) = certificates(&target.tls)? {
            builder = builder.certs(certs);
        }
    }
    let client = builder.build()?;
    match client.get_async_connection().await {
        Err(e) if e.to_string().contains("cluster support disabled") => Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "not a Redis Cluster",
            format!(
                "[redis] cluster = true (REDIS_CLUSTER=redis) but the server answers that it \
                 is not a cluster node ({e}); remove the setting for a single server"
            ),
        ))),
        opened => opened,
    }
}
