//! Reaching Redis, whatever the arrangement of the servers: one server, the
//! master of a Sentinel-managed replica set, or a Redis Cluster; over TCP,
//! TLS (rustls) or a unix socket.
//!
//! Everything that talks to Redis (the queue, the cache signals, the Redis
//! failed-job store, the Horizon writer, the commands) gets its connection
//! here and nowhere else, in two steps:
//!
//! 1. **Say where.** Configuration builds a [`RedisTarget`]: the URL
//!    (database, user, password, scheme), the TLS files, and one
//!    [`Topology`]. A second connection with its own URL (a separate cache
//!    URL) is made from the first with [`RedisTarget::with_url`], so it
//!    keeps the first one's topology instead of quietly becoming a single
//!    server.
//! 2. **Open.** [`open`] takes the target and a [`Purpose`] (ordinary
//!    commands, or blocking waits) and returns a [`RedisConn`]: one handle
//!    type that implements [`redis::aio::ConnectionLike`], so plain
//!    commands, pipelines and [`redis::Script`] work on it unchanged, on
//!    any topology.
//!
//! The topology is chosen in one place: the `match` in [`open`], one arm
//! per [`Topology`] variant, each handing over to the file that knows that
//! arrangement:
//!
//! - **Single server** (`single`): a connection manager, which reconnects
//!   by itself; a scheme that does not match the server (`rediss://`
//!   against plain Redis, or the reverse) is told apart by a plain-text
//!   probe (`tls_probe`).
//! - **Sentinel** (`sentinel`): the master the sentinels name, looked up
//!   at start and again after a connection error or a `READONLY` answer (a
//!   demoted master), so the worker follows a failover without a restart.
//! - **Cluster** (`cluster`): the `redis` crate's cluster client, which
//!   follows `MOVED` and `ASK` and refreshes its slot map when a master
//!   fails over. Every command and pipeline must keep to the keys of one
//!   slot (protocol §2.3); `MGET` and `DEL` over several slots are split by
//!   the client.
//!
//! Whether keys must share a slot ("is it a cluster") is answered by
//! [`RedisTarget::is_cluster`] alone; a connection answers it from the
//! target it was opened for ([`RedisConn::is_cluster`]), and everyone
//! else (queue key hash tags, Horizon's prefix, the failed store's keys)
//! asks one of the two.
//!
//! TLS files and their errors live in `tls`; the time limits all
//! topologies share, in `purpose`; which errors are worth a retry at start,
//! and how a refused script command is named, in `errors`.
//!
//! In these files `redis::…` names the `redis` crate; this module is
//! `crate::redis`.

mod cluster;
mod conn;
mod errors;
mod purpose;
mod sentinel;
mod single;
mod target;
mod tls;
mod tls_probe;

pub use conn::{RedisConn, open};
pub use errors::{is_noscript, is_permanent, name_denied_in_scripts, speaks_no_redis};
pub use purpose::{COMMAND_TIMEOUT, Purpose};
pub use target::{RedisTarget, SentinelOptions, Topology};
pub use tls::TlsOptions;
