//! Test harness: real redis-server, real daemon binary, real handler
//! processes. Nothing is mocked.
//!
//! - [`Scene`]: a scratch directory with a private Redis, handler scripts
//!   and a job log; [`Scene::config`] builds its config file
//!   ([`config::Config`], a setter per key).
//! - [`QueueState`]: what the queue keys and the failed store hold, compared
//!   with one `assert_eq!` ([`Scene::assert_state`]) that lists each
//!   difference.
//! - [`Daemon`]: the binary as a subprocess; `expect_exit`/`expect_stop`
//!   print its output when the status differs.
//! - [`payloads::Job`]: payloads as Laravel writes them;
//!   [`http_server::Server`]: an HTTP endpoint for HTTP handlers;
//!   [`laravel`]: a real Laravel app beside the daemon; [`databases`]:
//!   private PostgreSQL and MariaDB servers.

pub mod beanstalkd;
pub mod composer;
pub mod config;
pub mod daemon;
pub mod databases;
pub mod http_server;
pub mod jobs_table;
pub mod laravel;
pub mod parity;
pub mod payloads;
pub mod queue_scenes;
pub mod recordings;
pub mod redis_server;
pub mod redis_topologies;
pub mod sandbox;
pub mod skip;
pub mod sqlite;
pub mod sqs;
pub mod state;
pub mod tcp_gate;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use config::{Config, Handler};
pub use daemon::Daemon;
pub use payloads::Job;
pub use redis_server::RedisServer;
pub use state::{Failed, Payload, QueueState, Score};

/// UNIX seconds now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Handler body: mark the job as started (file `started`), then wait for
/// the test to create the `go` gate.
pub const GATED: &str = "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done";

/// `work` arguments that drain `high`, then `default`, eight jobs at a
/// time, with `--json` lines, and stop once both are empty.
pub const DRAIN_HIGH_THEN_DEFAULT: [&str; 5] = [
    "--queue=high,default",
    "--concurrency=8",
    "--json",
    "--stop-when-empty",
    "--sleep=0",
];

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

    /// A scene whose default config (returned beside it) runs
    /// `recording_script("h.sh", then)` for every job.
    pub fn recording(then: &str) -> (Self, PathBuf) {
        let s = Scene::new();
        let config = s.config().recording(then).write();
        (s, config)
    }

    /// A scene and its config file: the default config as `change` makes
    /// it.
    pub fn configured(change: impl FnOnce(Config<'_>) -> Config<'_>) -> (Self, PathBuf) {
        let s = Scene::new();
        let config = change(s.config()).write();
        (s, config)
    }

    /// A scene with `job` pushed onto `default`, and its config: the
    /// default one as `config` changes it.
    pub fn with_job(job: &Job, config: impl FnOnce(Config<'_>) -> Config<'_>) -> (Self, PathBuf) {
        let s = Scene::new();
        let path = config(s.config()).write();
        s.push(job);
        (s, path)
    }

    /// The path of `name` in the scene directory.
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

    /// The config builder, with the scene's defaults (see [`Config`]).
    pub fn config(&self) -> Config<'_> {
        Config::new(self)
    }

    /// The default config with one handler, running `handler`, for every
    /// job.
    pub fn config_for(&self, handler: &Path) -> PathBuf {
        self.config().command(handler).write()
    }

    /// SQLite URL of the scene's failed_jobs database (created with
    /// Laravel's schema).
    pub fn failed_db(&self) -> String {
        let path = self.path("failed.sqlite");
        sqlite::create_failed_jobs(&path);
        format!("sqlite://{}", path.display())
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

    /// Runs `work` (no flags) to its end, asserts it exited with `code`,
    /// and returns its log (stderr).
    #[track_caller]
    pub fn work_exits(&self, config: &Path, code: i32) -> String {
        let mut d = self.work_until_exit(config, &[]);
        d.expect_exit(code);
        d.stderr_text()
    }

    /// Runs `work` to its end, asserts it exited 0, and returns it.
    #[track_caller]
    pub fn run(&self, config: &Path, args: &[&str]) -> Daemon {
        let mut d = self.work_until_exit(config, args);
        d.expect_exit(0);
        d
    }

    /// Pushes `job` onto `default` as Laravel does.
    pub fn push(&self, job: &Job) {
        self.redis.push("default", &job.build());
    }

    /// Pushes each of `jobs` onto `queue`, in order.
    pub fn push_on<'j>(&self, queue: &str, jobs: impl IntoIterator<Item = &'j Job>) {
        for job in jobs {
            self.redis.push(queue, &job.build());
        }
    }

    /// The text of file `name` in the scene directory, without its
    /// trailing white space.
    #[track_caller]
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
            .trim_end()
            .to_string()
    }

    /// The process id written to file `name`.
    #[track_caller]
    pub fn read_pid(&self, name: &str) -> i32 {
        let text = self.read(name);
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name} holds {text:?}, not a pid: {e}"))
    }

    /// Waits until file `name` exists in the scene directory.
    pub fn wait_for_file(&self, name: &str) {
        let path = self.path(name);
        wait_until(&format!("{name} to appear"), || path.exists());
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

/// Runs `command` to its end and asserts that it succeeded, showing its
/// stdout and stderr when it did not; returns its output.
#[track_caller]
pub fn succeeds(command: &mut std::process::Command) -> std::process::Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Asserts that one of `lines` (a command's output) contains `part`.
#[track_caller]
pub fn assert_said(lines: &[String], part: &str) {
    assert!(
        lines.iter().any(|l| l.contains(part)),
        "no line says {part:?}: {lines:?}"
    );
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
    wait_until(&format!("process {pid} to end"), || !alive(pid));
}

/// Polls `done` every 10 ms until it holds; fails the test, saying it
/// waited for `what`, after [`WAIT`].
#[track_caller]
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {WAIT:?} for {what} in vain"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
