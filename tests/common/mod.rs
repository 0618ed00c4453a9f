//! Test harness: real redis-server, real daemon binary, real handler
//! processes. Nothing is mocked.
#![allow(dead_code)]

pub mod daemon;
pub mod databases;
pub mod laravel;
pub mod payloads;
pub mod redis_server;
pub mod redis_topologies;
pub mod sqlite;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use daemon::Daemon;
pub use redis_server::RedisServer;

/// UNIX seconds now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The longest any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// A scratch directory with a config file, handler scripts and a job log.
pub struct Scene {
    pub dir: tempfile::TempDir,
    pub redis: RedisServer,
}

impl Scene {
    /// Starts a private Redis.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lw-test-")
            .tempdir()
            .unwrap();
        let redis = RedisServer::start(dir.path());
        Scene { dir, redis }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes an executable shell script `name` with `body` and returns its path.
    /// The script sees `$DIR` (the scene directory) and `$LOG` (the job log).
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        let text = format!(
            "#!/bin/sh\nDIR='{dir}'\nLOG='{dir}/jobs.log'\n{body}\n",
            dir = self.dir.path().display()
        );
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A handler script that records the call in the job log, then runs `then`.
    /// Log line: `MODE NAME ID ATTEMPT QUEUE`.
    pub fn recording_script(&self, name: &str, then: &str) -> PathBuf {
        self.script(
            name,
            &format!(
                "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_ATTEMPT $LARAVEL_WORKER_QUEUE\" >> \"$LOG\"\n{then}"
            ),
        )
    }

    /// The job log, one entry per handler call.
    pub fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("jobs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Writes the config file: `extra` is appended (handlers, failed store...).
    /// Defaults: prefix `laravel_database_`, Laravel 8 cache prefix rule,
    /// retry_after 90, failed jobs in SQLite at `failed.sqlite`.
    pub fn config(&self, extra: &str) -> PathBuf {
        let path = self.path("config.toml");
        let text = format!(
            r#"[redis]
url = "{url}"
prefix = "laravel_database_"

[cache]
url = "{cache_url}"
prefix = "laravel_cache"
colon = true

{extra}
"#,
            url = self.redis.url(0),
            cache_url = self.redis.url(1),
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// SQLite URL of the scene's failed_jobs database (created with
    /// Laravel's schema).
    pub fn failed_db(&self) -> String {
        let path = self.path("failed.sqlite");
        sqlite::create_failed_jobs(&path);
        format!("sqlite://{}", path.display())
    }

    /// A config with one handler matching everything and a SQLite failed store.
    pub fn config_with_handler(&self, handler: &Path, queue_extra: &str) -> PathBuf {
        let db = self.failed_db();
        self.config(&format!(
            "[queue]\n{queue_extra}\n\n[failed]\nurl = \"{db}\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            handler.display()
        ))
    }

    /// Rows of failed_jobs: (uuid, connection, queue, payload, exception).
    pub fn failed_rows(&self) -> Vec<sqlite::FailedRow> {
        sqlite::rows(&self.path("failed.sqlite"))
    }

    /// A daemon started with `args` after `work`.
    pub fn work(&self, config: &Path, args: &[&str]) -> Daemon {
        let mut all = vec!["--config", config.to_str().unwrap(), "work"];
        all.extend_from_slice(args);
        Daemon::start(&all, &[])
    }

    /// Runs `work` to its end and returns the daemon (exited).
    pub fn work_until_exit(&self, config: &Path, args: &[&str]) -> Daemon {
        let mut d = self.work(config, args);
        d.wait_exit();
        d
    }

    /// Waits until file `name` exists in the scene directory.
    pub fn wait_for_file(&self, name: &str) {
        let path = self.path(name);
        let deadline = std::time::Instant::now() + WAIT;
        while !path.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} never appeared"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Creates file `name` (a gate for handler scripts).
    pub fn touch(&self, name: &str) {
        std::fs::write(self.path(name), "").unwrap();
    }
}

/// The queue keys of `name` under the test prefix.
pub fn q(name: &str) -> String {
    format!("laravel_database_queues:{name}")
}

/// Whether process `pid` still exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses.
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .chars()
        .next();
    !matches!(state, Some('Z') | Some('X') | None)
}

/// Waits until process `pid` is gone; fails the test after [`WAIT`].
pub fn wait_dead(pid: i32) {
    let deadline = std::time::Instant::now() + WAIT;
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} survived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
