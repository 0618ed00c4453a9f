//! The master of a replica set watched by Redis Sentinel, followed across
//! failovers.
//!
//! The sentinels are asked which server is the master of the service; the
//! connection goes there. When a command fails with a connection error or
//! `READONLY` (the server it reached is no longer the master), the master is
//! looked up again, so the worker follows a failover without a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};

use super::purpose::{CONNECT_TIMEOUT, FAILOVER_WAIT};
use super::target::{RedisTarget, SentinelOptions};
use super::tls::{certificates, is_tls, tls_mode, with_insecure_addr};

/// Pause between two master look-ups while a failover is under way.
const LOOKUP_PAUSE: Duration = Duration::from_millis(250);

/// The master of a Sentinel-managed replica set, followed across failovers.
///
/// Each command runs on the master found last. When a command fails with a
/// connection error or `READONLY` (the server it reached is no longer the
/// master), the master is looked up again: the next command waits, up to
/// [`FAILOVER_WAIT`], until the sentinels name one that answers as master.
/// The failed command itself is retried only when it cannot have run
/// (`READONLY`, or no connection could be made); otherwise its error goes to
/// the caller, which decides (a job whose settlement failed stays reserved
/// and is reclaimed).
#[derive(Clone)]
pub struct SentinelConn {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    /// Looks the master up; locked so only one look-up runs at a time.
    client: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the master found last, and a generation number
    /// that tells a stale failure from a fresh one.
    master: std::sync::Mutex<Master>,
    config: AsyncConnectionConfig,
    service: String,
    db: i64,
}

#[derive(Default)]
struct Master {
    generation: u64,
    conn: Option<MultiplexedConnection>,
    address: String,
}

impl SentinelConn {
    /// Opens the master the sentinels of `options` name, with the
    /// database, credentials and TLS of `target`; `response_timeout` bounds
    /// each command (`None`: no limit).
    ///
    /// # Errors
    /// As [`super::open`]: no sentinel answers, or no master is named in
    /// time.
    pub(super) async fn open(
        target: &RedisTarget,
        options: &SentinelOptions,
        response_timeout: Option<Duration>,
    ) -> RedisResult<Self> {
        let settings = target.info.redis_settings();
        let master_tls = is_tls(target.info.addr());
        let mut builder = SentinelClientBuilder::new(
            options
                .sentinels
                .iter()
                .cloned()
                .map(|a| with_insecure_addr(a, target.tls.insecure)),
            &options.service,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(settings.db());
        if let Some(user) = settings.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(pass) = settings.password() {
            builder = builder.set_client_to_redis_password(pass);
        }
        if let Some(pass) = &options.password {
            builder = builder.set_client_to_sentinel_password(pass);
        }
        if master_tls {
            builder = builder.set_client_to_redis_tls_mode(tls_mode(&target.tls));
            if let Some(certs) = certificates(&target.tls)? {
                builder = builder.set_client_to_redis_certificates(certs);
            }
        }
        if options.sentinels.iter().any(is_tls)
            && let Some(certs) = certificates(&target.tls)?
        {
            builder = builder.set_client_to_sentinel_certificates(certs);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(response_timeout);
        let conn = SentinelConn {
            shared: Arc::new(SentinelShared {
                client: tokio::sync::Mutex::new(builder.build()?),
                master: std::sync::Mutex::new(Master::default()),
                config,
                service: options.service.clone(),
                db: settings.db(),
            }),
        };
        conn.connection().await?;
        Ok(conn)
    }

    /// The current master connection, looking the master up when there is
    /// none.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let mut client = self.shared.client.lock().await;
        // Another caller may have found it while this one waited.
        if let Some(found) = self.current() {
            return Ok(found);
        }
        let lookup = async {
            let master = client.async_get_client().await?;
            let address = master.get_connection_info().addr().to_string();
            let conn = master
                .get_multiplexed_async_connection_with_config(&self.shared.config)
                .await?;
            Ok::<_, RedisError>((address, conn))
        };
        let (address, conn) = tokio::time::timeout(CONNECT_TIMEOUT * 2, lookup)
            .await
            .map_err(|_| {
                RedisError::from((
                    ErrorKind::Io,
                    "no master found in time",
                    format!("service {:?}", self.shared.service),
                ))
            })??;
        let mut master = self
            .shared
            .master
            .lock()
            .map_err(|_| RedisError::from((ErrorKind::Client, "poisoned lock")))?;
        if master.address != address {
            if master.address.is_empty() {
                tracing::info!(service = %self.shared.service, %address, "Sentinel: master found");
            } else {
                tracing::warn!(
                    service = %self.shared.service,
                    from = %master.address,
                    to = %address,
                    "Sentinel: following the failover to the new master"
                );
            }
        }
        master.generation += 1;
        master.address = address;
        master.conn = Some(conn.clone());
        Ok((master.generation, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        let master = self.shared.master.lock().ok()?;
        master.conn.clone().map(|c| (master.generation, c))
    }

    /// Forgets the connection of `generation` (unless a newer one replaced
    /// it already), so the next command looks the master up.
    fn forget(&self, generation: u64) {
        if let Ok(mut master) = self.shared.master.lock()
            && master.generation == generation
            && master.conn.take().is_some()
        {
            tracing::warn!(
                service = %self.shared.service,
                master = %master.address,
                "Sentinel: lost the master; looking it up again"
            );
        }
    }

    /// Runs `op` on the master, following a failover as described on the
    /// type. The answers come back as a list (one for a single command).
    async fn with_master(&self, op: Op<'_>) -> RedisResult<Vec<Value>> {
        let deadline = Instant::now() + FAILOVER_WAIT;
        loop {
            let (generation, mut conn) = match self.connection().await {
                Ok(found) => found,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("Sentinel: no usable master yet: {e}");
                    tokio::time::sleep(LOOKUP_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let result = match op {
                Op::One(cmd) => conn.req_packed_command(cmd).await.map(|v| vec![v]),
                Op::Many(pipeline, offset, count) => {
                    conn.req_packed_commands(pipeline, offset, count).await
                }
            };
            match result {
                Err(e) if lost_master(&e) => {
                    self.forget(generation);
                    if !(did_not_run(&e) && Instant::now() < deadline) {
                        return Err(e);
                    }
                }
                done => return done,
            }
        }
    }
}

/// What a [`SentinelConn`] is asked to send.
#[derive(Clone, Copy)]
enum Op<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

/// The error of a command sent to a server that is gone or is no longer
/// the master.
fn lost_master(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

/// Errors after which the command certainly did not run.
fn did_not_run(e: &RedisError) -> bool {
    e.is_connection_refusal() || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut answers = self.with_master(Op::One(cmd)).await?;
            answers
                .pop()
                .ok_or_else(|| RedisError::from((ErrorKind::Client, "no answer")))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move { self.with_master(Op::Many(pipeline, offset, count)).await })
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}
