//! A private redis-server on a unix socket, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server private to one scene.
pub struct RedisServer {
    child: Child,
    pub socket: PathBuf,
}

impl RedisServer {
    /// Starts a server with its socket (`redis.sock`) in `dir`; waits until
    /// it answers (at most 10 s).
    pub fn start(dir: &Path) -> Self {
        let socket = dir.join("redis.sock");
        let child = Command::new("redis-server")
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
            .arg(&socket)
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let server = RedisServer { child, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if server.socket.exists() && server.client().get_connection().is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        server
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
        let key = super::q(queue);
        let _: () = redis::pipe()
            .rpush(&key, payload)
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
