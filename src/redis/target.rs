//! Where a connection goes: the URL, the TLS files and the [`Topology`],
//! bundled as a [`RedisTarget`]. Configuration builds one; [`super::open`]
//! turns it into a connection. Nothing here opens a socket.

use redis::{ConnectionAddr, ConnectionInfo};

use super::tls::{TlsOptions, is_tls};

/// How the Redis servers are arranged.
#[derive(Debug, Clone)]
pub enum Topology {
    /// One server (or a proxy in front of several): the URL's.
    Single,
    /// The master of a replica set watched by Redis Sentinel.
    Sentinel(SentinelOptions),
    /// A Redis Cluster, discovered from these seed nodes (the URL first).
    Cluster {
        /// Seed nodes; any one that answers gives the whole slot map.
        nodes: Vec<ConnectionInfo>,
    },
}

/// Where the sentinels are and which master to ask them for.
#[derive(Debug, Clone)]
pub struct SentinelOptions {
    /// The sentinels, asked in this order.
    pub sentinels: Vec<ConnectionAddr>,
    /// The master's name in the sentinels' configuration (`mymaster`).
    pub service: String,
    /// The sentinels' own password (`requirepass` of the sentinels), if any.
    pub password: Option<String>,
}

/// One Redis connection's settings: the URL (database, user, password,
/// scheme), TLS, and the topology.
#[derive(Debug, Clone)]
pub struct RedisTarget {
    /// The URL. With Sentinel only its database, credentials and scheme
    /// count (the host is the master the sentinels name); with a cluster it
    /// is the first seed node.
    pub info: ConnectionInfo,
    /// Certificates for `rediss://`.
    pub tls: TlsOptions,
    /// Single server, Sentinel or Cluster.
    pub topology: Topology,
}

impl RedisTarget {
    /// True for a Redis Cluster, where the keys of one command, pipeline
    /// or script must share a slot (so names are wrapped in hash tags).
    /// The one answer to that question: everything else asks here.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }

    /// The same servers, on database `db`. A cluster has only database 0,
    /// so it stays there (Laravel's cluster connections ignore `database`).
    pub fn with_db(&self, db: i64) -> Self {
        let mut target = self.clone();
        if !self.is_cluster() {
            let settings = target.info.redis_settings().clone().set_db(db);
            target.info = target.info.set_redis_settings(settings);
        }
        target
    }

    /// A second connection with its own URL `info` (a separate `[cache]
    /// url`), arranged as this one and with its TLS files: on one server,
    /// the server `info` names; on Sentinel, the master the same sentinels
    /// name, with the database and credentials of `info` (its host is not
    /// used, as for the first URL); on a cluster, the cluster seeded from
    /// `info`.
    pub fn with_url(&self, info: ConnectionInfo) -> Self {
        let topology = match &self.topology {
            Topology::Single => Topology::Single,
            Topology::Sentinel(options) => Topology::Sentinel(options.clone()),
            Topology::Cluster { .. } => Topology::Cluster {
                nodes: vec![info.clone()],
            },
        };
        RedisTarget {
            info,
            tls: self.tls.clone(),
            topology,
        }
    }

    /// A description for logs, without credentials: `10.0.0.5:6379 db 0
    /// (TLS)`, `master "mymaster" via 3 sentinel(s), db 0`, `cluster, 6
    /// seed node(s)`.
    pub fn describe(&self) -> String {
        let tls = if is_tls(self.info.addr()) {
            if self.tls.insecure {
                " (TLS, certificate NOT verified)"
            } else {
                " (TLS)"
            }
        } else {
            ""
        };
        let db = self.info.redis_settings().db();
        match &self.topology {
            Topology::Single => format!("{} db {db}{tls}", self.info.addr()),
            Topology::Sentinel(s) => format!(
                "master {:?} via {} sentinel(s), db {db}{tls}",
                s.service,
                s.sentinels.len(),
            ),
            Topology::Cluster { nodes } => {
                format!("cluster, {} seed node(s){tls}", nodes.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    fn single(url: &str) -> RedisTarget {
        RedisTarget {
            info: url.into_connection_info().unwrap(),
            tls: TlsOptions::default(),
            topology: Topology::Single,
        }
    }

    #[test]
    fn cluster_stays_on_db_0() {
        let single = single("redis://127.0.0.1:7000/0");
        assert_eq!(single.with_db(1).info.redis_settings().db(), 1);
        let cluster = RedisTarget {
            topology: Topology::Cluster {
                nodes: vec![single.info.clone()],
            },
            ..single
        };
        assert!(cluster.is_cluster());
        assert_eq!(cluster.with_db(1).info.redis_settings().db(), 0);
    }

    #[test]
    fn another_url_keeps_the_topology() {
        let queue = RedisTarget {
            topology: Topology::Sentinel(SentinelOptions {
                sentinels: vec![ConnectionAddr::Tcp("10.0.0.1".into(), 26379)],
                service: "mymaster".into(),
                password: None,
            }),
            ..single("redis://unused/0")
        };
        let cache_url = "redis://:pw@cache/3".into_connection_info().unwrap();
        let cache = queue.with_url(cache_url.clone());
        assert!(matches!(&cache.topology, Topology::Sentinel(s) if s.service == "mymaster"));
        assert_eq!(cache.info.redis_settings().db(), 3);
        let cluster = RedisTarget {
            topology: Topology::Cluster { nodes: vec![] },
            ..single("redis://10.0.0.1:7000")
        };
        let seeded = cluster.with_url(cache_url.clone());
        assert!(matches!(&seeded.topology, Topology::Cluster { nodes } if nodes.len() == 1));
        let plain = single("redis://10.0.0.1").with_url(cache_url);
        assert!(matches!(plain.topology, Topology::Single));
    }

    #[test]
    fn descriptions_hold_no_password() {
        let d = single("rediss://u:secret@10.0.0.5:6380/2").describe();
        assert!(!d.contains("secret"), "{d}");
        assert!(d.contains("(TLS)"), "{d}");
    }
}
