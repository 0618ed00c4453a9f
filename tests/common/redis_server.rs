//! A private redis-server on a unix socket, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server private to one scene.
pub struct RedisServer {
    child: Child,
    pub socket: PathBuf,
    /// Its working directory (where `SHUTDOWN SAVE` writes `dump.rdb`).
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server with its socket (`redis.sock`) in `dir`; waits until
    /// it answers (at most 10 s).
    pub fn start(dir: &Path) -> Self {
        let socket = dir.join("redis.sock");
        let server = RedisServer {
            child: Self::spawn(dir, &socket),
            socket,
            dir: dir.to_path_buf(),
        };
        server.wait_ready();
        server
    }

    /// Starts redis-server on `socket` in `dir` (loading `dir/dump.rdb`
    /// when there is one).
    fn spawn(dir: &Path, socket: &Path) -> Child {
        Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocketperm",
                "700",
            ])
            .arg("--unixsocket")
            .arg(socket)
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)")
    }

    /// Waits until the server answers (at most 10 s).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.socket.exists() && self.client().get_connection().is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and commands
    /// wait unanswered, as with a hung Redis. Do not send it commands from
    /// the test until [`RedisServer::thaw`].
    pub fn freeze(&self) {
        self.send(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Resumes a frozen server (SIGCONT); the commands sent meanwhile are
    /// then run.
    pub fn thaw(&self) {
        self.send(nix::sys::signal::Signal::SIGCONT);
    }

    fn send(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// Stops the server with `SHUTDOWN SAVE` (its data written to
    /// `dump.rdb`): clients then get their connections refused until
    /// [`RedisServer::start_again`].
    pub fn shutdown_save(&mut self) {
        // The server closes the connection instead of answering.
        let _ = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query::<()>(&mut self.conn(0));
        let status = self.child.wait().unwrap();
        assert!(status.success(), "redis-server SHUTDOWN SAVE: {status}");
    }

    /// Starts the server again on the same socket, with the data saved by
    /// [`RedisServer::shutdown_save`].
    pub fn start_again(&mut self) {
        self.child = Self::spawn(&self.dir, &self.socket);
        self.wait_ready();
    }

    /// URL of database `db`.
    pub fn url(&self, db: i64) -> String {
        format!("unix://{}?db={db}", self.socket.display())
    }

    /// A client of DB 0.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url(0)).unwrap()
    }

    /// A connection to database `db`.
    pub fn conn(&self, db: i64) -> redis::Connection {
        redis::Client::open(self.url(db))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Runs a command on DB 0.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.cmd_on(0, args)
    }

    /// Runs a command on DB 1 (the cache).
    pub fn cache<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.cmd_on(1, args)
    }

    /// Runs a command on DB `db`.
    pub fn cmd_on<T: redis::FromRedisValue>(&self, db: i64, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.conn(db))
            .unwrap_or_else(|e| panic!("redis {args:?} on DB {db}: {e}"))
    }

    /// LLEN of `key` on DB 0.
    pub fn llen(&self, key: &str) -> i64 {
        self.cmd(&["LLEN", key])
    }

    /// ZCARD of `key` on DB 0.
    pub fn zcard(&self, key: &str) -> i64 {
        self.cmd(&["ZCARD", key])
    }

    /// The whole list `key` on DB 0, head first.
    pub fn lrange(&self, key: &str) -> Vec<String> {
        self.cmd(&["LRANGE", key, "0", "-1"])
    }

    /// Members with scores, ascending.
    pub fn zrange(&self, key: &str) -> Vec<(String, i64)> {
        self.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
    }

    /// Whether `key` exists on DB 0.
    pub fn exists(&self, key: &str) -> bool {
        self.cmd::<i64>(&["EXISTS", key]) == 1
    }

    /// RPUSH a payload and a notify token, as Laravel's push script does.
    pub fn push(&self, queue: &str, payload: &str) {
        self.push_to(&super::q(queue), payload);
    }

    /// As [`RedisServer::push`], onto the ready list `key` (the whole key,
    /// under any prefix).
    pub fn push_to(&self, key: &str, payload: &str) {
        let _: () = redis::pipe()
            .rpush(key, payload)
            .rpush(format!("{key}:notify"), 1)
            .query(&mut self.conn(0))
            .unwrap();
    }

    /// ZADD a payload to `:delayed` at `at`.
    pub fn later(&self, queue: &str, at: i64, payload: &str) {
        let _: () = self.cmd(&[
            "ZADD",
            &format!("{}:delayed", super::q(queue)),
            &at.to_string(),
            payload,
        ]);
    }

    /// Makes every member of a zset due now (score 0), as if its time had come.
    pub fn make_due(&self, key: &str) {
        for (member, _) in self.zrange(key) {
            let _: () = self.cmd(&["ZADD", key, "XX", "0", &member]);
        }
    }

    /// Every key of DB `db`, sorted.
    pub fn keys(&self, db: i64) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.conn(db))
            .unwrap();
        keys.sort();
        keys
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
