//! Production Redis layouts started by the tests: a TLS server with
//! certificates made for the test, ACL users, a master + replica watched by
//! three sentinels, and a six-node Redis Cluster. Every server listens on a
//! free loopback port, keeps its files in the test's temporary directory,
//! and is killed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// True when every program in `binaries` is on the `PATH`; otherwise prints
/// why the test is skipped and returns false.
pub fn require(test: &str, binaries: &[&str]) -> bool {
    for binary in binaries {
        let found = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(binary).is_file()));
        if !found {
            super::skip::note(binary, &format!("{test} needs it"));
            return false;
        }
    }
    true
}

/// A fresh temporary directory named `prefix…`, removed when dropped.
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

/// A six-node cluster in a fresh temporary directory, for `test`; `None`
/// (the skip noted) without `redis-server` or `redis-cli`.
pub fn cluster_for(test: &str) -> Option<(tempfile::TempDir, Cluster)> {
    if !require(test, &["redis-server", "redis-cli"]) {
        return None;
    }
    let dir = temp_dir("lw-cluster-");
    let cluster = Cluster::start(dir.path());
    Some((dir, cluster))
}

/// Writes the executable file `path` with `text`; returns the path.
pub fn executable(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// Writes the executable shell script `path`: a handler that ends at once
/// in failed mode and otherwise runs `body`.
pub fn job_script(path: &Path, body: &str) -> PathBuf {
    executable(
        path,
        &format!("#!/bin/sh\n[ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n{body}\n"),
    )
}

/// `handler.sh` in `dir`: in run mode it appends the line `line` (shell
/// words, expanded) to `dir/jobs.log`, then runs `then`.
pub fn logging_job_script(dir: &Path, line: &str, then: &str) -> PathBuf {
    let log = dir.join("jobs.log");
    job_script(
        &dir.join("handler.sh"),
        &format!("echo \"{line}\" >> '{}'\n{then}", log.display()),
    )
}

/// Writes the config file `path`: `[redis]` opening with `redis` (lines)
/// and the tests' prefix, then `more` (lines, any sections), the tests'
/// cache prefix with its colon, failed jobs kept in Redis, and `handler`
/// for every job. Returns the path.
pub fn write_config(path: &Path, redis: &str, more: &str, handler: &Path) -> PathBuf {
    let text = format!(
        "[redis]\n{redis}prefix = \"laravel_database_\"\n{more}\n\
         [cache]\nprefix = \"laravel_cache\"\ncolon = true\n\
         [failed]\ndriver = \"redis\"\n\
         [[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        handler.display()
    );
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// A TCP port on 127.0.0.1 that was free a moment ago, not handed out
/// before in this test process, and whose cluster bus port (+10000) is
/// neither.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let clashes = |p: u16| {
            handed.iter().any(|&h| {
                h == p || h.checked_add(10_000) == Some(p) || p.checked_add(10_000) == Some(h)
            })
        };
        if port < 55_000
            && !clashes(port)
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            handed.push(port);
            return port;
        }
    }
}

/// How many times a server is started on a new port when its port was
/// taken in the meantime (by another program on the machine).
const START_TRIES: usize = 5;

/// One `redis-server` process (a plain server, a TLS server, a sentinel or
/// a cluster node), with its log in `{dir}/{name}.log`.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub name: String,
    pub log: PathBuf,
}

impl Server {
    /// Starts `redis-server` on a free port, with the arguments (and
    /// optional config file) `setup` gives for that port; tries another
    /// port when the first was taken meanwhile.
    pub fn start_free(
        dir: &Path,
        name: &str,
        setup: impl Fn(u16) -> (Option<PathBuf>, Vec<String>),
    ) -> Self {
        for _ in 0..START_TRIES {
            let port = free_port();
            let (config, args) = setup(port);
            if let Some(server) = Self::try_start(dir, name, port, config.as_deref(), &args) {
                return server;
            }
        }
        panic!("{name}: no free port after {START_TRIES} tries");
    }

    /// Starts `redis-server` listening on `port` with `args` (after a
    /// config file path when `config` is given) and waits until the log
    /// says it is ready. `None` when it exits first because a port it
    /// needs is taken; any other early exit fails the test.
    pub fn try_start(
        dir: &Path,
        name: &str,
        port: u16,
        config: Option<&Path>,
        args: &[String],
    ) -> Option<Self> {
        let log = dir.join(format!("{name}-{port}.log"));
        let mut cmd = Command::new("redis-server");
        if let Some(config) = config {
            cmd.arg(config);
        }
        cmd.args(args)
            .arg("--logfile")
            .arg(&log)
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start redis-server");
        let mut server = Server {
            child: Some(child),
            port,
            name: name.to_string(),
            log,
        };
        let deadline = Instant::now() + super::WAIT;
        loop {
            let text = server.log_text();
            if text.contains("Ready to accept connections") || text.contains("Sentinel ID is") {
                return Some(server);
            }
            let exited = server
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                server.child = None;
                if text.contains("Address already in use") {
                    return None;
                }
                panic!("{name} exited at start; log:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "{name} never got ready; log:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log satisfies `pred`.
    pub fn wait_log(&self, pred: impl Fn(&str) -> bool, what: &str) {
        let waited = format!("{} to log {what} (in {})", self.name, self.log.display());
        super::wait_until(&waited, || pred(&self.log_text()));
    }

    /// SIGKILLs the server (a crash, not a shutdown).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs a laravel-worker command to its end with `config`, keeping the
/// machine's Redis variables out.
pub fn cli(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_laravel-worker"));
    cmd.arg("--config").arg(config).args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("REDIS_") || key.starts_with("DB_") || key == "LARAVEL_WORKER_CONFIG" {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run laravel-worker")
}

/// [`cli`] without extra environment, asserted to succeed.
#[track_caller]
pub fn cli_ok(config: &Path, args: &[&str]) -> Output {
    let out = cli(config, args, &[]);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    out
}

/// stdout + stderr of a finished command, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Certificates made with the `openssl` command for one test: a CA, a
/// server certificate for 127.0.0.1 signed by it, a client certificate
/// signed by it, and a second, unrelated CA.
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub other_ca: PathBuf,
}

/// Runs `openssl ARGS` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Certs {
    pub fn generate(dir: &Path) -> Self {
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for ca in ["ca", "other-ca"] {
            let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
            args.extend(ec);
            let key = format!("{ca}.key");
            let pem = format!("{ca}.pem");
            let subject = format!("/CN=laravel-worker test {ca}");
            args.extend(["-keyout", &key, "-out", &pem, "-subj", &subject]);
            args.extend([
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(dir, &args);
        }
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for who in ["server", "client"] {
            let key = format!("{who}.key");
            let csr = format!("{who}.csr");
            let pem = format!("{who}.pem");
            let ext = format!("{who}.ext");
            let subject = format!("/CN=laravel-worker test {who}");
            let mut args = vec!["req", "-nodes"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(dir, &args);
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &pem,
                    "-extfile",
                    &ext,
                ],
            );
        }
        Certs {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_ca: dir.join("other-ca.pem"),
        }
    }

    /// `redis-server` arguments for a TLS-only server on `port`; clients
    /// must show a certificate when `mutual`.
    pub fn server_args(&self, port: u16, mutual: bool) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &path(&self.server_cert),
            "--tls-key-file",
            &path(&self.server_key),
            "--tls-ca-cert-file",
            &path(&self.ca),
            "--tls-auth-clients",
            if mutual { "yes" } else { "no" },
        ]
        .iter()
        .chain(&THROWAWAY)
        .map(|s| s.to_string())
        .collect()
    }

    /// A client for the TLS server on `port` (database `db`), trusting the
    /// test CA and showing the client certificate.
    pub fn client(&self, port: u16, db: i64) -> redis::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::Client::build_with_tls(
            format!("rediss://127.0.0.1:{port}/{db}"),
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: std::fs::read(&self.client_cert).unwrap(),
                    client_key: std::fs::read(&self.client_key).unwrap(),
                }),
                root_cert: Some(std::fs::read(&self.ca).unwrap()),
            },
        )
        .unwrap()
    }
}

/// `redis-server` arguments that keep nothing on disk.
const THROWAWAY: [&str; 4] = ["--save", "", "--appendonly", "no"];

/// Plain `redis-server` arguments for a throwaway server on `port`.
pub fn plain_args(port: u16) -> Vec<String> {
    let port = port.to_string();
    ["--port", &port, "--bind", "127.0.0.1"]
        .iter()
        .chain(&THROWAWAY)
        .map(|s| s.to_string())
        .collect()
}

/// Runs one command on a plain connection.
pub fn cmd<T: redis::FromRedisValue>(conn: &mut redis::Connection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(conn)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// A master, one replica and three sentinels watching them as `mymaster`.
pub struct SentinelSet {
    pub master: Server,
    pub replica: Server,
    pub sentinels: Vec<Server>,
}

impl SentinelSet {
    /// The master's name in the sentinels' configuration.
    pub const SERVICE: &'static str = "mymaster";

    /// Starts the five servers and waits until every sentinel knows the
    /// replica and the two other sentinels (so that a failover can be
    /// agreed on at once). The sentinels call the master down after 1 s.
    pub fn start(dir: &Path) -> Self {
        let master = Server::start_free(dir, "master", |port| (None, plain_args(port)));
        let master_port = master.port;
        let replica = Server::start_free(dir, "replica", |port| {
            let mut args = plain_args(port);
            args.extend([
                "--replicaof".to_string(),
                "127.0.0.1".to_string(),
                master_port.to_string(),
            ]);
            (None, args)
        });
        replica.wait_log(
            |t| t.contains("MASTER <-> REPLICA sync: Finished"),
            "in sync",
        );
        let sentinels = (0..3)
            .map(|i| {
                Server::start_free(dir, &format!("sentinel-{i}"), |port| {
                    let config = dir.join(format!("sentinel-{port}.conf"));
                    std::fs::write(
                        &config,
                        format!(
                            "port {port}\nbind 127.0.0.1\n\
                             sentinel monitor {service} 127.0.0.1 {master_port} 2\n\
                             sentinel down-after-milliseconds {service} 1000\n\
                             sentinel failover-timeout {service} 10000\n\
                             sentinel parallel-syncs {service} 1\n",
                            service = Self::SERVICE
                        ),
                    )
                    .unwrap();
                    (Some(config), vec!["--sentinel".to_string()])
                })
            })
            .collect::<Vec<_>>();
        let set = SentinelSet {
            master,
            replica,
            sentinels,
        };
        for sentinel in &set.sentinels {
            let waited = format!("sentinel on {} to see the whole set", sentinel.port);
            super::wait_until(&waited, || {
                let state = set.sentinel_view(sentinel.port);
                let field = |name: &str| state.get(name).cloned().unwrap_or_default();
                field("num-slaves") == "1" && field("num-other-sentinels") == "2"
            });
        }
        set
    }

    /// `SENTINEL MASTER mymaster` as asked of the sentinel on `port`.
    pub fn sentinel_view(&self, port: u16) -> std::collections::HashMap<String, String> {
        let Ok(mut conn) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
        else {
            return Default::default();
        };
        redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(Self::SERVICE)
            .query(&mut conn)
            .unwrap_or_default()
    }

    /// The sentinels as `[redis] sentinels` lists them.
    pub fn addresses(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The port of the master the sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        let mut conn =
            redis::Client::open(format!("redis://127.0.0.1:{}/", self.sentinels[0].port))
                .ok()?
                .get_connection()
                .ok()?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Self::SERVICE)
            .query(&mut conn)
            .ok()?;
        Some(port)
    }
}

/// A Redis Cluster of three masters and three replicas
/// (`redis-cli --cluster create … --cluster-replicas 1`). A node is called
/// failed after 2 s without an answer.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Six cluster-enabled servers that are not a cluster yet, and their
    /// ports; all six are started again on new ports when one's port (or
    /// bus port) was taken meanwhile.
    fn start_nodes(dir: &Path) -> (Vec<Server>, Vec<u16>) {
        'attempt: for _ in 0..START_TRIES {
            let mut nodes = Vec::new();
            for _ in 0..6 {
                let port = free_port();
                let mut args = plain_args(port);
                args.extend(
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                        "--cluster-node-timeout",
                        "2000",
                    ]
                    .iter()
                    .map(|s| s.to_string()),
                );
                match Server::try_start(dir, "node", port, None, &args) {
                    Some(node) => nodes.push(node),
                    None => continue 'attempt,
                }
            }
            let ports = nodes.iter().map(|n| n.port).collect();
            return (nodes, ports);
        }
        panic!("no six free ports for a cluster after {START_TRIES} tries");
    }

    pub fn start(dir: &Path) -> Self {
        let (nodes, ports) = Self::start_nodes(dir);
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for port in &ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        let deadline = Instant::now() + super::WAIT;
        for node in &cluster.nodes {
            loop {
                let info = cluster.node_cmd::<String>(node.port, &["CLUSTER", "INFO"]);
                let replication = cluster.node_cmd::<String>(node.port, &["INFO", "replication"]);
                // Ok, and each master has its replica attached and in sync.
                let ready = info.is_some_and(|i| i.contains("cluster_state:ok"))
                    && replication.is_some_and(|r| {
                        r.contains("role:slave") && r.contains("master_link_status:up")
                            || r.contains("role:master") && r.contains("connected_slaves:1")
                    });
                if ready {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster never became ok");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        cluster
    }

    /// Runs a command on the node at `port` (no redirection).
    pub fn node_cmd<T: redis::FromRedisValue>(&self, port: u16, args: &[&str]) -> Option<T> {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut conn).ok()
    }

    /// A cluster client for the test's own reads.
    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.alive())
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        redis::cluster::ClusterClient::new(nodes)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The port of the master that serves `key` now, as a live node sees it.
    pub fn master_of(&self, key: &str) -> u16 {
        let live = self.nodes.iter().find(|n| n.alive()).unwrap().port;
        let slot: i64 = self.node_cmd(live, &["CLUSTER", "KEYSLOT", key]).unwrap();
        let slots: Vec<redis::Value> = self.node_cmd(live, &["CLUSTER", "SLOTS"]).unwrap();
        for range in slots {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(i) => *i,
                _ => -1,
            };
            if int(&parts[0]) <= slot && slot <= int(&parts[1]) {
                let redis::Value::Array(master) = &parts[2] else {
                    panic!("unexpected CLUSTER SLOTS answer")
                };
                return int(&master[1]) as u16;
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// The ports of the nodes that are masters now.
    pub fn masters(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.alive())
            .filter(|n| {
                self.node_cmd::<Vec<redis::Value>>(n.port, &["ROLE"])
                    .is_some_and(|r| {
                        matches!(r.first(), Some(redis::Value::BulkString(b)) if b == b"master")
                    })
            })
            .map(|n| n.port)
            .collect()
    }

    /// The node listening on `port`.
    pub fn node(&mut self, port: u16) -> &mut Server {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}

impl Cluster {
    /// Moves the (empty) slot of `key` to the master at `to`, as
    /// `redis-cli --cluster reshard` would for a slot with no keys, and
    /// waits until every node agrees.
    pub fn move_slot_of(&self, key: &str, to: u16) {
        let from = self.master_of(key);
        if from == to {
            return;
        }
        let slot: i64 = self.node_cmd(to, &["CLUSTER", "KEYSLOT", key]).unwrap();
        let slot = slot.to_string();
        let id = |port: u16| self.node_cmd::<String>(port, &["CLUSTER", "MYID"]).unwrap();
        let (from_id, to_id) = (id(from), id(to));
        for (port, args) in [
            (to, ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            (from, ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            (to, ["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
            (from, ["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
        ] {
            let _: () = self
                .node_cmd::<redis::Value>(port, &args)
                .map(|_| ())
                .unwrap_or_else(|| panic!("{args:?} on :{port} failed"));
        }
        let deadline = Instant::now() + super::WAIT;
        for node in &self.nodes {
            loop {
                let owner = self.node_cmd::<Vec<redis::Value>>(node.port, &["CLUSTER", "SLOTS"]);
                let agrees = owner.is_some_and(|slots| {
                    slots.iter().any(|range| {
                        let redis::Value::Array(parts) = range else {
                            return false;
                        };
                        let int = |v: &redis::Value| match v {
                            redis::Value::Int(i) => *i,
                            _ => -1,
                        };
                        let n: i64 = slot.parse().unwrap();
                        int(&parts[0]) <= n
                            && n <= int(&parts[1])
                            && matches!(&parts[2], redis::Value::Array(m) if int(&m[1]) == i64::from(to))
                    })
                });
                if agrees {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    ":{} never saw slot {slot} move",
                    node.port
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
