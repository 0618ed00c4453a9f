//! Opening Redis connections, whatever the topology: one server, the master
//! of a Sentinel-managed replica set, or a Redis Cluster; over TCP, TLS
//! (rustls) or a unix socket.
//!
//! Everything that talks to Redis (the queue, the cache signals, the Redis
//! failed-job store, the commands) gets a [`RedisConn`] from [`open`]: one
//! handle type that implements [`redis::aio::ConnectionLike`], so plain
//! commands, pipelines and [`redis::Script`] work on it unchanged.
//!
//! - **Single server**: a [`ConnectionManager`], which reconnects by itself.
//! - **Sentinel**: the master the sentinels name, looked up at start and
//!   again after a connection error or a `READONLY` answer (a demoted
//!   master), so the worker follows a failover without a restart.
//! - **Cluster**: the `redis` crate's cluster client, which follows `MOVED`
//!   and `ASK` and refreshes its slot map when a master fails over. Every
//!   command and pipeline must keep to the keys of one slot (protocol §2.3);
//!   `MGET` and `DEL` over several slots are split by the client.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, TlsMode, Value,
};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an ordinary command may wait for its answer. The client's own
/// default (500 ms) is too short for a busy server running a large migrate.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a command on a Sentinel-managed connection keeps looking for a
/// reachable master after the one it used went away, before it fails: the
/// time the sentinels need to notice the loss (`down-after-milliseconds`)
/// and promote a replica should fit in it.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(30);

/// Pause between two master look-ups while a failover is under way.
const LOOKUP_PAUSE: Duration = Duration::from_millis(250);

/// TLS settings (`[redis] tls_*`), used when the URL is `rediss://`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the CA certificate(s) the server's certificate must chain
    /// to; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate (Laravel's `verify_peer => false`).
    /// Encrypts, but no longer proves who the server is.
    pub insecure: bool,
}

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
    /// One server at `info`, with no TLS files.
    pub fn single(info: ConnectionInfo) -> Self {
        RedisTarget {
            info,
            tls: TlsOptions::default(),
            topology: Topology::Single,
        }
    }

    /// The same servers, on database `db`. A cluster has only database 0,
    /// so it stays there (Laravel's cluster connections ignore `database`).
    pub fn with_db(&self, db: i64) -> Self {
        let mut target = self.clone();
        if !matches!(target.topology, Topology::Cluster { .. }) {
            let settings = target.info.redis_settings().clone().set_db(db);
            target.info = target.info.set_redis_settings(settings);
        }
        target
    }

    /// True for a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }

    /// A description for logs, without credentials: `redis 10.0.0.5:6379
    /// db 0 (TLS)`, `sentinel mymaster via 3 sentinels`, `cluster of 6
    /// seed nodes`.
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
        match &self.topology {
            Topology::Single => format!(
                "{} db {}{tls}",
                self.info.addr(),
                self.info.redis_settings().db()
            ),
            Topology::Sentinel(s) => format!(
                "master {:?} via {} sentinel(s), db {}{tls}",
                s.service,
                s.sentinels.len(),
                self.info.redis_settings().db()
            ),
            Topology::Cluster { nodes } => {
                format!("cluster, {} seed node(s){tls}", nodes.len())
            }
        }
    }
}

fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}

/// A connection to Redis, whatever the topology. Cloning is cheap; clones
/// share the underlying sockets. Commands, pipelines and scripts go through
/// [`ConnectionLike`].
#[derive(Clone)]
pub enum RedisConn {
    /// One server, reconnecting by itself.
    Single(ConnectionManager),
    /// The current master of a Sentinel-managed replica set.
    Sentinel(SentinelConn),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// True on a Redis Cluster, where the keys of one command must share a
    /// slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Sentinel(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Sentinel(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// The queue's own Lua scripts, so that an error raised inside one can be
/// traced to its line (see [`name_denied_script_command`]).
const QUEUE_SCRIPTS: &[&str] = &[
    super::scripts::POP,
    super::scripts::MIGRATE_EXPIRED,
    super::scripts::RELEASE,
    super::scripts::PUSH,
    super::scripts::RENEW,
    super::scripts::CLEAR,
    super::scripts::DELETE_BY_DIGEST,
    super::scripts::RELEASE_BY_DIGEST,
    super::scripts::RENEW_BY_DIGEST,
];

/// Redis refuses a command an ACL user may not run inside a script
/// without naming it ("The user executing the script can't run this
/// command or subcommand script: SHA, on @user_script:LINE"). This adds the
/// name, read from that line of the script the worker sent, so the
/// operator knows which permission is missing. Other errors pass through.
pub fn name_denied_script_command(e: RedisError) -> RedisError {
    name_denied_in_scripts(e, QUEUE_SCRIPTS)
}

/// [`name_denied_script_command`] for errors of `scripts` (another
/// module's scripts, such as the Redis failed store's).
pub fn name_denied_in_scripts(e: RedisError, scripts: &[&str]) -> RedisError {
    let text = e.to_string();
    if !text.contains("can't run this command") {
        return e;
    }
    let after = |marker: &str| {
        text.split_once(marker).map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect::<String>()
        })
    };
    let (Some(sha), Some(line)) = (after("script: "), after("@user_script:")) else {
        return e;
    };
    let Some(command) = scripts
        .iter()
        .find(|script| {
            use sha1::Digest;
            hex::encode(sha1::Sha1::digest(script.as_bytes())) == sha
        })
        .and_then(|script| {
            script
                .lines()
                .nth(line.parse::<usize>().ok()?.checked_sub(1)?)
        })
        .and_then(|code| code.split_once("redis.call('"))
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command.to_string())
    else {
        return e;
    };
    RedisError::from((
        e.kind(),
        "a queue script was refused",
        format!(
            "{text}: the user has no permissions to run the '{command}' command that \
             this script runs (ACL +{command})"
        ),
    ))
}

/// Opens a connection to `target`.
///
/// `response_timeout` bounds each command; `None` lets a command wait for
/// ever (a BLPOP with `block_for = 0`).
///
/// # Errors
/// Unreadable TLS files, a server (or no sentinel, or no cluster node) that
/// cannot be reached, a TLS handshake that fails (the message names the
/// cause, such as an unknown issuer), or refused credentials.
pub async fn open(
    target: &RedisTarget,
    response_timeout: Option<Duration>,
) -> RedisResult<RedisConn> {
    let connect = async {
        if !matches!(target.topology, Topology::Single) || !is_tls(target.info.addr()) {
            return open_any(target, response_timeout).await;
        }
        tokio::select! {
            opened = open_any(target, response_timeout) => opened,
            e = super::tls_probe::plain_under_tls(target.info.addr()) => Err(e),
        }
    };
    match connect.await {
        Ok(conn) => Ok(conn),
        Err(e) if is_permanent(&e) || !matches!(target.topology, Topology::Single) => {
            Err(explain_ca_as_server(e))
        }
        Err(e) => Err(super::tls_probe::mismatch(target.info.addr(), e).await),
    }
}

async fn open_any(
    target: &RedisTarget,
    response_timeout: Option<Duration>,
) -> RedisResult<RedisConn> {
    install_crypto_provider();
    if target.tls.insecure && is_tls(target.info.addr()) {
        warn_insecure();
    }
    match &target.topology {
        Topology::Single => {
            let client = tls_client(target.info.clone(), &target.tls)?;
            Ok(RedisConn::Single(manager(client, response_timeout).await?))
        }
        Topology::Sentinel(options) => Ok(RedisConn::Sentinel(
            SentinelConn::open(target, options, response_timeout).await?,
        )),
        Topology::Cluster { nodes } => {
            let nodes = nodes
                .iter()
                .map(|n| with_insecure(n.clone(), target.tls.insecure));
            let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
                .connection_timeout(CONNECT_TIMEOUT)
                // A BLPOP that may wait for ever still needs a number here.
                .response_timeout(response_timeout.unwrap_or(FOREVER))
                // Slot moves and a master's failover are retried within
                // the command's own time limit, not the default 500 ms.
                .overall_response_timeout(response_timeout.map(|t| t + FAILOVER_WAIT))
                .retries(32)
                .min_retry_wait(100)
                .max_retry_wait(1_000);
            if is_tls(target.info.addr()) {
                builder = builder.tls(if target.tls.insecure {
                    TlsMode::Insecure
                } else {
                    TlsMode::Secure
                });
                if let Some(certs) = certificates(&target.tls)? {
                    builder = builder.certs(certs);
                }
            }
            let client = builder.build()?;
            match client.get_async_connection().await {
                Ok(conn) => Ok(RedisConn::Cluster(conn)),
                Err(e) if e.to_string().contains("cluster support disabled") => {
                    Err(RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "not a Redis Cluster",
                        format!(
                            "[redis] cluster = true (REDIS_CLUSTER=redis) but the server answers \
                             that it is not a cluster node ({e}); remove the setting for a \
                             single server"
                        ),
                    )))
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// A response time limit that never ends in practice (30 days), where the
/// client requires one.
const FOREVER: Duration = Duration::from_secs(30 * 86_400);

async fn manager(
    client: Client,
    response_timeout: Option<Duration>,
) -> RedisResult<ConnectionManager> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(response_timeout)
        .set_number_of_retries(2);
    client.get_connection_manager_with_config(config).await
}

/// True when retrying the same connection at start cannot help: the
/// configuration is wrong (TLS files, a refused certificate, refused
/// credentials), as opposed to a server that is not up yet.
pub fn is_permanent(e: &RedisError) -> bool {
    if speaks_no_redis(e) {
        return true;
    }
    if matches!(
        e.kind(),
        ErrorKind::InvalidClientConfig | ErrorKind::AuthenticationFailed
    ) {
        return true;
    }
    let text = e.to_string();
    [
        "certificate",
        "fatal alert",
        "WRONGPASS",
        "NOAUTH",
        "NOPERM",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// True when the server answered in something other than the Redis
/// protocol (RESP): another service on the port, such as an HTTP server.
pub fn speaks_no_redis(e: &RedisError) -> bool {
    e.to_string().contains("Parse error")
}

/// rustls needs one process-wide crypto provider; the project uses ring.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Logs, once per process, that certificates are not checked.
fn warn_insecure() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "TLS certificate verification is OFF ([redis] tls_insecure = true): the connection \
             is encrypted but the server is not authenticated, so anyone on the path can \
             impersonate it. Use tls_ca_file instead for a self-signed server."
        );
    }
}

/// A client for one server: `tls.insecure` applied to a `rediss://`
/// address, and the CA and client certificate files loaded.
///
/// # Errors
/// A TLS file that cannot be read or parsed.
fn tls_client(info: ConnectionInfo, tls: &TlsOptions) -> RedisResult<Client> {
    let info = with_insecure(info, tls.insecure);
    if !is_tls(info.addr()) {
        return Client::open(info);
    }
    match certificates(tls)? {
        Some(certs) => Client::build_with_tls(info, certs),
        None => Client::open(info),
    }
}

fn with_insecure(info: ConnectionInfo, insecure: bool) -> ConnectionInfo {
    let mut addr = info.addr().clone();
    if let ConnectionAddr::TcpTls { insecure: flag, .. } = &mut addr {
        *flag = insecure;
    }
    info.set_addr(addr)
}

/// A server certificate refused because it is a CA certificate
/// (`CaUsedAsEndEntity`): what `openssl req -x509` makes by default with
/// OpenSSL 3 (`CA:TRUE`), given as `tls_ca_file` for a self-signed server.
/// `redis-cli --cacert` and PHP accept it; the TLS library here cannot, so
/// the error says how to make a certificate it accepts. Other errors pass.
fn explain_ca_as_server(e: RedisError) -> RedisError {
    if !e.to_string().contains("CaUsedAsEndEntity") {
        return e;
    }
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "the server's TLS certificate is a CA certificate",
        format!(
            "{e}. The server presents a certificate marked CA:TRUE as its own (what \
             `openssl req -x509` makes by default), which is refused here although redis-cli \
             and PHP accept it. Give the server a certificate made with \
             `-addext basicConstraints=critical,CA:FALSE` (and its host in subjectAltName) and \
             set that same file as tls_ca_file, or sign a server certificate with your CA and \
             set the CA as tls_ca_file. Turning verification off (tls_insecure) is not needed."
        ),
    ))
}

/// The largest TLS file read (certificates and keys are a few KiB).
const TLS_FILE_LIMIT: u64 = 1024 * 1024;

/// Reads TLS file `path` (setting `what`): a regular file of at most
/// [`TLS_FILE_LIMIT`] bytes, so that a device or a FIFO (`/dev/zero`) is
/// refused rather than read without end.
///
/// # Errors
/// Not a regular file, too large, or unreadable, naming the setting.
fn read_tls_file(what: &str, path: &Path) -> RedisResult<Vec<u8>> {
    let refuse = |why: String| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "cannot read a TLS file",
            format!("{what} {}: {why}", path.display()),
        ))
    };
    let meta = std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse(
            "not a regular file (give the path of a PEM file)".into(),
        ));
    }
    if meta.len() > TLS_FILE_LIMIT {
        return Err(refuse(format!(
            "{} bytes, more than the {TLS_FILE_LIMIT} a PEM certificate or key may have",
            meta.len()
        )));
    }
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| refuse(e.to_string()))?,
            TLS_FILE_LIMIT,
        ),
        &mut text,
    )
    .map_err(|e| refuse(e.to_string()))?;
    Ok(text)
}

/// The CA and client certificate files as the client takes them; `None`
/// when neither is set (system roots, no client certificate).
///
/// # Errors
/// A file that cannot be read, naming the setting and the path.
fn certificates(tls: &TlsOptions) -> RedisResult<Option<TlsCertificates>> {
    let read = read_tls_file;
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|p| read("tls_ca_file", p))
        .transpose()?;
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("tls_cert_file", cert)?,
            client_key: read("tls_key_file", key)?,
        }),
        (None, None) => None,
        _ => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "tls_cert_file and tls_key_file go together (mutual TLS)",
            )));
        }
    };
    Ok(
        (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    )
}

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
    async fn open(
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
            builder = builder.set_client_to_redis_tls_mode(if target.tls.insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            });
            if let Some(certs) = certificates(&target.tls)? {
                builder = builder.set_client_to_redis_certificates(certs);
            }
        }
        if options
            .sentinels
            .iter()
            .any(|a| matches!(a, ConnectionAddr::TcpTls { .. }))
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

/// A `rediss://` sentinel address with `insecure` applied.
fn with_insecure_addr(mut addr: ConnectionAddr, insecure: bool) -> ConnectionAddr {
    if let ConnectionAddr::TcpTls { insecure: flag, .. } = &mut addr {
        *flag = insecure;
    }
    addr
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

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[test]
    fn cluster_stays_on_db_0() {
        let info = "redis://127.0.0.1:7000/0".into_connection_info().unwrap();
        let single = RedisTarget::single(info.clone());
        assert_eq!(single.with_db(1).info.redis_settings().db(), 1);
        let cluster = RedisTarget {
            topology: Topology::Cluster {
                nodes: vec![info.clone()],
            },
            ..single
        };
        assert_eq!(cluster.with_db(1).info.redis_settings().db(), 0);
    }

    #[test]
    fn descriptions_hold_no_password() {
        let info = "rediss://u:secret@10.0.0.5:6380/2"
            .into_connection_info()
            .unwrap();
        let d = RedisTarget::single(info).describe();
        assert!(!d.contains("secret"), "{d}");
        assert!(d.contains("(TLS)"), "{d}");
    }

    #[test]
    fn half_a_client_certificate_is_refused() {
        let tls = TlsOptions {
            cert_file: Some("/x.pem".into()),
            ..TlsOptions::default()
        };
        let e = certificates(&tls).err().unwrap();
        assert!(e.to_string().contains("go together"), "{e}");
        assert!(is_permanent(&e));
    }
}
