//! The daemon's config file, built with a setter per key the tests use and
//! written as TOML (so quoting is never done by hand).
//!
//! Defaults (the scene's): `[redis]` on the scene's DB 0 with prefix
//! `laravel_database_`, `[cache]` on DB 1 with prefix `laravel_cache` and
//! the Laravel ≤ 10 colon, and failed jobs in the scene's SQLite
//! `failed.sqlite` unless another `[failed]` setting is given.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::Scene;

/// One `[[handlers]]` entry.
#[derive(Clone)]
pub struct Handler(Table);

impl Handler {
    fn new(key: &str, value: Value) -> Self {
        let mut t = Table::new();
        t.insert("match".into(), "*".into());
        t.insert(key.into(), value);
        Handler(t)
    }

    /// Runs `program` (no arguments) for every job.
    pub fn command(program: &Path) -> Self {
        Self::argv(&[program.to_str().unwrap()])
    }

    /// Runs the command line `argv` for every job.
    pub fn argv(argv: &[&str]) -> Self {
        let argv: Vec<Value> = argv.iter().map(|a| Value::from(*a)).collect();
        Self::new("command", argv.into())
    }

    /// POSTs every job to `url`.
    pub fn url(url: &str) -> Self {
        Self::new("url", url.into())
    }

    fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// `decode_command = decode`: whether the handler gets `data.command`
    /// as JSON.
    pub fn decode_command(self, decode: bool) -> Self {
        self.set("decode_command", decode)
    }

    /// `scheduling = policy`: the Linux scheduling policy of the handler's
    /// processes ("batch", "other", "idle").
    pub fn scheduling(self, policy: &str) -> Self {
        self.set("scheduling", policy)
    }

    /// Only jobs whose name matches `pattern` (default `*`).
    pub fn matching(self, pattern: &str) -> Self {
        self.set("match", pattern)
    }

    /// Only jobs from these queues.
    pub fn queues(self, queues: &[&str]) -> Self {
        let list: Vec<Value> = queues.iter().map(|q| Value::from(*q)).collect();
        self.set("queues", list)
    }

    /// `mode = "persistent"`: warm processes speaking NDJSON.
    pub fn persistent(self) -> Self {
        self.set("mode", "persistent")
    }

    /// `processes`: how many warm processes.
    pub fn processes(self, n: i64) -> Self {
        self.set("processes", n)
    }

    /// `reserve_ahead`: jobs reserved ahead of the free processes.
    pub fn reserve_ahead(self, n: i64) -> Self {
        self.set("reserve_ahead", n)
    }

    /// `pipeline = true`: a busy process gets its next request before it
    /// answers.
    pub fn pipeline(self) -> Self {
        self.set("pipeline", true)
    }

    /// `min_processes`: warm processes started at once and kept.
    pub fn min_processes(self, n: i64) -> Self {
        self.set("min_processes", n)
    }

    /// `idle_timeout`: seconds a warm process may stay idle.
    pub fn idle_timeout(self, seconds: i64) -> Self {
        self.set("idle_timeout", seconds)
    }

    /// `max_jobs`: calls before a warm process is recycled.
    pub fn max_jobs(self, n: i64) -> Self {
        self.set("max_jobs", n)
    }

    /// `max_memory`: MB of RSS above which a warm process is recycled.
    pub fn max_memory(self, mb: i64) -> Self {
        self.set("max_memory", mb)
    }

    /// `timeout`: seconds an HTTP handler may take when the job sets none.
    pub fn timeout(self, seconds: i64) -> Self {
        self.set("timeout", seconds)
    }

    /// `connect_timeout`: seconds to connect to an HTTP handler.
    pub fn connect_timeout(self, seconds: i64) -> Self {
        self.set("connect_timeout", seconds)
    }

    /// `token_env`: the variable holding the bearer token.
    pub fn token_env(self, name: &str) -> Self {
        self.set("token_env", name)
    }

    /// `secret_env`: the variable holding the signing secret.
    pub fn secret_env(self, name: &str) -> Self {
        self.set("secret_env", name)
    }

    /// `env`: variables added to the handler's environment.
    pub fn env(self, vars: &[(&str, &str)]) -> Self {
        let table: Table = vars
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        self.set("env", table)
    }

    /// `env_clear = true`: the handler starts from an empty environment
    /// (plus `env` and the daemon's own variables).
    pub fn env_clear(self) -> Self {
        self.set("env_clear", true)
    }
}

/// A config file under construction; [`Config::write`] writes it.
pub struct Config<'s> {
    scene: &'s Scene,
    root: Table,
    handlers: Vec<Value>,
    failed_set: bool,
}

impl<'s> Config<'s> {
    pub(super) fn new(scene: &'s Scene) -> Self {
        let mut root = Table::new();
        let mut redis = Table::new();
        redis.insert("url".into(), scene.redis.url(0).into());
        redis.insert("prefix".into(), "laravel_database_".into());
        let mut cache = Table::new();
        cache.insert("url".into(), scene.redis.url(1).into());
        cache.insert("prefix".into(), "laravel_cache".into());
        cache.insert("colon".into(), true.into());
        root.insert("redis".into(), redis.into());
        root.insert("cache".into(), cache.into());
        Config {
            scene,
            root,
            handlers: vec![],
            failed_set: false,
        }
    }

    /// Sets `key` in `[section]` (`""`: at the top level). For keys with
    /// no setter of their own, such as misspelt ones.
    pub fn set(mut self, section: &str, key: &str, value: impl Into<Value>) -> Self {
        if section == "failed" {
            self.failed_set = true;
        }
        let table = if section.is_empty() {
            &mut self.root
        } else {
            self.root
                .entry(section)
                .or_insert_with(|| Table::new().into())
                .as_table_mut()
                .unwrap()
        };
        table.insert(key.into(), value.into());
        self
    }

    /// Drops `[section]` entirely.
    pub fn without(mut self, section: &str) -> Self {
        self.root.remove(section);
        self
    }

    /// Adds a `[[handlers]]` entry (they are matched in order).
    pub fn handler(mut self, handler: Handler) -> Self {
        self.handlers.push(handler.0.into());
        self
    }

    /// Adds a catch-all handler running `program`.
    pub fn command(self, program: &Path) -> Self {
        self.handler(Handler::command(program))
    }

    /// Adds a catch-all handler running the script `h.sh` with `body` (see
    /// [`Scene::script`]).
    pub fn script(self, body: &str) -> Self {
        let script = self.scene.script("h.sh", body);
        self.command(&script)
    }

    /// Adds a catch-all handler running the script `h.sh` that records each
    /// call in the job log, then runs `then` (see
    /// [`Scene::recording_script`]).
    pub fn recording(self, then: &str) -> Self {
        let script = self.scene.recording_script("h.sh", then);
        self.command(&script)
    }

    /// Changes the handler added last with `change` (e.g.
    /// `Handler::persistent`).
    pub fn tune(mut self, change: impl FnOnce(Handler) -> Handler) -> Self {
        let Some(Value::Table(last)) = self.handlers.pop() else {
            panic!("Config::tune: no handler added yet");
        };
        self.handlers.push(change(Handler(last)).0.into());
        self
    }

    /// `[queue] retry_after` in seconds.
    pub fn retry_after(self, seconds: i64) -> Self {
        self.set("queue", "retry_after", seconds)
    }

    /// `[queue] retry_after = "null"`: reservations never expire.
    pub fn retry_after_null(self) -> Self {
        self.set("queue", "retry_after", "null")
    }

    /// `[queue] block_for` in seconds.
    pub fn block_for(self, seconds: i64) -> Self {
        self.set("queue", "block_for", seconds)
    }

    /// `[queue] migration_batch_size`.
    pub fn migration_batch_size(self, n: i64) -> Self {
        self.set("queue", "migration_batch_size", n)
    }

    /// `[queue] connection`: the connection name handlers and rows see.
    pub fn connection(self, name: &str) -> Self {
        self.set("queue", "connection", name)
    }

    /// `[queue] unmatched = "release"` with `unmatched_release_delay` in
    /// seconds.
    pub fn unmatched_release(self, delay: i64) -> Self {
        self.set("queue", "unmatched", "release")
            .set("queue", "unmatched_release_delay", delay)
    }

    /// `[worker] kill_grace` in seconds.
    pub fn kill_grace(self, seconds: i64) -> Self {
        self.set("worker", "kill_grace", seconds)
    }

    /// `[worker] drain_timeout` in seconds.
    pub fn drain_timeout(self, seconds: i64) -> Self {
        self.set("worker", "drain_timeout", seconds)
    }

    /// `[worker] heartbeat_file`.
    pub fn heartbeat_file(self, path: &Path) -> Self {
        self.set("worker", "heartbeat_file", path.to_str().unwrap())
    }

    /// `[worker] error_summary_interval` in seconds.
    pub fn error_summary_interval(self, seconds: i64) -> Self {
        self.set("worker", "error_summary_interval", seconds)
    }

    /// `[failed] driver` (`redis`, `null`).
    pub fn failed_driver(self, driver: &str) -> Self {
        self.set("failed", "driver", driver)
    }

    /// `[failed] url`: a failed_jobs table elsewhere.
    pub fn failed_url(self, url: &str) -> Self {
        self.set("failed", "url", url)
    }

    /// `[app] path`.
    pub fn app_path(self, path: &Path) -> Self {
        self.set("app", "path", path.to_str().unwrap())
    }

    /// `[app] laravel`: the app's framework version.
    pub fn laravel(self, version: &str) -> Self {
        self.set("app", "laravel", version)
    }

    /// `[metrics] listen`.
    pub fn metrics_listen(self, address: &str) -> Self {
        self.set("metrics", "listen", address)
    }

    /// `[redis] url` and `[cache] url` on another server.
    pub fn redis_socket(self, socket: &Path) -> Self {
        let url = |db: i64| format!("unix://{}?db={db}", socket.display());
        self.set("redis", "url", url(0)).set("cache", "url", url(1))
    }

    /// No `prefix` in `[redis]` nor `[cache]`, no `colon`: the daemon's own
    /// defaults (Laravel 11+'s).
    pub fn default_prefixes(mut self) -> Self {
        for (section, keys) in [("redis", &["prefix"][..]), ("cache", &["prefix", "colon"])] {
            if let Some(t) = self.root.get_mut(section).and_then(Value::as_table_mut) {
                for key in keys {
                    t.remove(*key);
                }
            }
        }
        self
    }

    /// `[cache] store = "file"` at `path`, instead of Redis.
    pub fn file_cache(self, path: &Path) -> Self {
        self.without("cache").set("cache", "store", "file").set(
            "cache",
            "path",
            path.to_str().unwrap(),
        )
    }

    /// `[cache] store = "database"` on the database at `url` (the `cache`
    /// table), cache prefix `prefix`, instead of Redis.
    pub fn database_cache(self, url: &str, prefix: &str) -> Self {
        self.without("cache")
            .set("cache", "store", "database")
            .set("cache", "url", url)
            .set("cache", "prefix", prefix)
    }

    /// No `[failed]`: the failed store comes from the app (`--env-file`).
    pub fn failed_from_app(mut self) -> Self {
        self.failed_set = true;
        self
    }

    /// No `[redis]` nor `[cache]`: everything from the app (`--env-file`).
    pub fn settings_from_app(mut self) -> Self {
        self.root.remove("redis");
        self.root.remove("cache");
        self.failed_set = true;
        self
    }

    /// The TOML text.
    pub fn text(mut self) -> String {
        if !self.failed_set {
            let db = self.scene.failed_db();
            self = self.failed_url(&db);
        }
        if !self.handlers.is_empty() {
            let handlers = std::mem::take(&mut self.handlers);
            self.root.insert("handlers".into(), handlers.into());
        }
        toml::to_string(&self.root).unwrap()
    }

    /// Writes `config.toml` in the scene directory and returns its path.
    pub fn write(self) -> PathBuf {
        self.write_as("config.toml")
    }

    /// Writes the file `name` in the scene directory and returns its path.
    pub fn write_as(self, name: &str) -> PathBuf {
        let path = self.scene.path(name);
        std::fs::write(&path, self.text()).unwrap();
        path
    }
}
