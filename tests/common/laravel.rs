//! A real Laravel app beside the daemon: `tests/laravel/` (Laravel 8.83, on
//! Debian's packaged framework) copied into the scene directory, with a
//! `.env` pointing it at the scene's redis-server
//! socket, its SQLite `failed_jobs` file and a job log. Jobs are dispatched
//! through the app's real bus; `php artisan queue:*` commands run for real;
//! the daemon runs jobs through `php/laravel-worker-bridge.php`.
//!
//! Tests skip (with a note on stderr) when `php`, its redis or pdo_sqlite
//! extension, or Debian's Laravel (`/usr/share/php/Illuminate`) is missing.
//! Laravel 11–12 behaviour is checked from recordings instead (see
//! `tests/integration/recordings.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::Value;

use super::{Handler, Scene, WAIT};

/// The bridge users copy into their app.
pub fn bridge() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("php/laravel-worker-bridge.php")
}

/// `[app] laravel` for the test app (Debian's packaged framework).
pub const LARAVEL: &str = "8.83";

/// Why PHP tests cannot run here, if they cannot.
fn missing() -> Option<&'static str> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    MISSING
        .get_or_init(|| {
            let probe = Command::new("php")
                .args([
                    "-r",
                    "exit(extension_loaded('redis') && extension_loaded('pdo_sqlite') \
                     && stream_resolve_include_path('Illuminate/autoload.php') ? 0 : 3);",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            match probe {
                Err(_) => Some("php is not installed".to_string()),
                Ok(s) if s.success() => None,
                Ok(_) => Some(
                    "php lacks the redis or pdo_sqlite extension or Debian's Laravel \
                     (php-redis, php-sqlite3, php-laravel-framework)"
                        .to_string(),
                ),
            }
        })
        .as_deref()
}

/// True when PHP, its redis and pdo_sqlite extensions and Debian's
/// Laravel are there; else records the skip (as [`App::new`] does) and
/// returns false: the test should return.
pub fn available() -> bool {
    match missing() {
        None => true,
        Some(why) => {
            super::skip::note("php/laravel", &format!("a Laravel interop test: {why}"));
            false
        }
    }
}

/// True when PHP has the extension `name` (e.g. `pdo_pgsql`, from Debian's
/// `php-pgsql`); else records the skip (see [`super::skip::note`]), saying
/// `why` it is needed, and returns false.
pub fn have_extension(name: &str, package: &str, why: &str) -> bool {
    let loaded = Command::new("php")
        .args(["-r", &format!("exit(extension_loaded('{name}') ? 0 : 3);")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !loaded {
        super::skip::note(&format!("php {name} ({package})"), why);
    }
    loaded
}

/// A scene with the test app and a daemon config that runs every job
/// through the bridge with `transport`; `None` (after a note) when PHP or
/// Laravel is missing: the test should return.
pub fn scene(transport: Transport) -> Option<(Scene, App, PathBuf)> {
    let s = Scene::new();
    let app = App::new(&s)?;
    let config = app.config(&s, transport);
    Some((s, app, config))
}

/// How the daemon runs the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A PHP process per job.
    PerJob,
    /// Warm PHP processes (`mode = "persistent"`), this many.
    Persistent(usize),
}

/// The test app, copied into a scene.
pub struct App {
    /// The app's root (the copy).
    pub dir: PathBuf,
    /// The job log the app's jobs append to.
    pub log: PathBuf,
    /// The scene directory.
    scene: PathBuf,
}

impl App {
    /// Copies the app into the scene and configures it for the scene's
    /// Redis and failed_jobs database (created here). `None`, with a note,
    /// when PHP or Laravel is missing: the test should return.
    pub fn new(s: &Scene) -> Option<App> {
        if let Some(why) = missing() {
            super::skip::note("php/laravel", &format!("a Laravel interop test: {why}"));
            return None;
        }
        let scene = s.dir.path().to_path_buf();
        let dir = scene.join("app");
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/laravel"),
            &dir,
        );
        for sub in [
            "storage/logs",
            "storage/framework/cache/data",
            "bootstrap/cache",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let log = scene.join("laravel-jobs.log");
        use rand::distr::{Alphanumeric, SampleString};
        let key = Alphanumeric.sample_string(&mut rand::rng(), 32);
        let env = format!(
            "APP_NAME=Laravel\nAPP_ENV=testing\nAPP_KEY={key}\n\
             REDIS_HOST={socket}\nREDIS_PORT=0\n\
             DB_CONNECTION=sqlite\nDB_DATABASE={db}\n\
             JOB_LOG={log}\nLOG_CHANNEL=single\n",
            socket = s.redis.socket.display(),
            db = scene.join("failed.sqlite").display(),
            log = log.display(),
        );
        std::fs::write(dir.join(".env"), env).unwrap();
        // The 8.x skeleton's failed_jobs table, made here.
        let _ = s.failed_db();
        Some(App { dir, log, scene })
    }

    /// Sets `name=value` in the app's .env (replacing any earlier value).
    pub fn set_env(&self, name: &str, value: &str) {
        let path = self.dir.join(".env");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with(&format!("{name}=")))
            .map(str::to_string)
            .collect();
        lines.push(format!("{name}={value}"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }

    /// Replaces `from` with `to` in the app's `config/NAME` (once; `from`
    /// must be there).
    pub fn edit_config(&self, name: &str, from: &str, to: &str) {
        let path = self.dir.join("config").join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "no {from:?} in config/{name}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }

    /// The scene directory the app lives in.
    pub fn scene(&self) -> &Path {
        &self.scene
    }

    fn php(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("php");
        cmd.args(args).current_dir(&self.dir);
        // The app reads its settings from .env; nothing may leak in.
        for var in [
            "REDIS_URL",
            "REDIS_HOST",
            "REDIS_PORT",
            "REDIS_PREFIX",
            "REDIS_DB",
            "REDIS_CACHE_DB",
            "CACHE_PREFIX",
            "APP_NAME",
            "QUEUE_CONNECTION",
            "REDIS_QUEUE",
            "DB_CONNECTION",
            "DB_DATABASE",
            "LARAVEL_WORKER_PROTOCOL",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Runs `php artisan ARGS`, asserts it succeeded, returns its stdout.
    pub fn artisan_ok(&self, args: &[&str]) -> String {
        let mut all = vec!["artisan"];
        all.extend_from_slice(args);
        let out = super::succeeds(&mut self.php(&all));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Dispatches jobs through the app's real bus, in one PHP process (see
    /// `tests/laravel/app/Console/Commands/DispatchJobs.php` for the specs).
    pub fn dispatch(&self, specs: Value) {
        self.artisan_ok(&["test:dispatch", &specs.to_string()]);
    }

    /// Starts `php artisan queue:work redis ARGS`; its output goes to a file.
    pub fn queue_work(&self, args: &[&str]) -> PhpWorker {
        self.queue_work_on("redis", args)
    }

    /// Starts `php artisan queue:work CONNECTION ARGS`; its output goes to
    /// a file.
    pub fn queue_work_on(&self, connection: &str, args: &[&str]) -> PhpWorker {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let out = self.scene.join(format!("queue-work-{n}.out"));
        let file = std::fs::File::create(&out).unwrap();
        let mut all = vec!["artisan", "queue:work", connection];
        all.extend_from_slice(args);
        let child = self
            .php(&all)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start php artisan queue:work");
        PhpWorker {
            child,
            out,
            status: None,
        }
    }

    /// Every line the app's jobs recorded, in order.
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Recorded lines of `event` (handle, failed, ...) for `tag`.
    pub fn events(&self, event: &str, tag: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["event"] == event && r["tag"] == tag)
            .collect()
    }

    /// The attempt numbers of `tag`'s runs, in order.
    pub fn attempts(&self, tag: &str) -> Vec<i64> {
        self.events("handle", tag)
            .iter()
            .map(|r| r["attempt"].as_i64().unwrap())
            .collect()
    }

    /// The `[[handlers]]` entry that runs every job through the bridge.
    pub fn handler(&self, transport: Transport) -> Handler {
        let app = format!("--app={}", self.dir.display());
        let handler = Handler::argv(&["php", bridge().to_str().unwrap(), &app]);
        match transport {
            Transport::PerJob => handler,
            Transport::Persistent(n) => handler.persistent().processes(n as i64),
        }
    }

    /// The scene's daemon config with the bridge handler and the app's
    /// failed_jobs database.
    pub fn config(&self, s: &Scene, transport: Transport) -> PathBuf {
        // Exceptions are worded as the app's version words them.
        let config = s.config().laravel(LARAVEL);
        config.handler(self.handler(transport)).write()
    }

    /// A daemon config holding only the bridge handler: Redis, prefixes,
    /// queue, retry_after, cache store and failed store all come from the
    /// app itself (`--app`, see [`App::app_flag`]).
    pub fn config_from_app(&self, s: &Scene, transport: Transport) -> PathBuf {
        s.config()
            .settings_from_app()
            .without("app")
            .handler(self.handler(transport))
            .write_as("config-from-app.toml")
    }

    /// `--app=DIR` for the daemon.
    pub fn app_flag(&self) -> String {
        format!("--app={}", self.dir.display())
    }

    /// Waits until the job log has `n` lines of `event`.
    pub fn wait_for_events(&self, event: &str, n: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = self
                .records()
                .iter()
                .filter(|r| r["event"] == event)
                .count();
            if seen >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {seen} of {n} {event} records; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A running `php artisan queue:work`.
pub struct PhpWorker {
    child: Child,
    out: PathBuf,
    status: Option<ExitStatus>,
}

impl PhpWorker {
    /// Waits for it to exit (within [`WAIT`]).
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                self.status = Some(s);
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "queue:work did not exit in time; output:\n{}",
                    self.output()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// What it printed (stdout and stderr).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// The process id (of `php` itself: queue:work runs its jobs in it).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        // It may have exited on its own: nothing to signal then.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }
}

impl Drop for PhpWorker {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Copies the directory `from` to `to`, recursively (files and folders only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
