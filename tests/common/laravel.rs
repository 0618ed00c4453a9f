//! A real Laravel app beside the daemon: `tests/laravel/` (Laravel 8.83, on
//! Debian's packaged framework) or `tests/laravel12/` (Laravel 12.67, from
//! `../shared/laravel12`, see [`Version`]) copied into the scene directory, with a `.env` pointing it at the scene's redis-server
//! socket, its SQLite `failed_jobs` file and a job log. Jobs are dispatched
//! through the app's real bus; `php artisan queue:*` commands run for real;
//! the daemon runs jobs through `php/laravel-worker-bridge.php`.
//!
//! Tests skip (with a note on stderr) when `php`, its redis or pdo_sqlite
//! extension, or Debian's Laravel (`/usr/share/php/Illuminate`) is missing,
//! and the Laravel 12 ones when `../shared/laravel12` is absent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::Value;

use super::{Handler, Scene, WAIT};

/// The bridge users copy into their app.
pub fn bridge() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("php/laravel-worker-bridge.php")
}

/// The framework a test app runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Debian's packaged Laravel 8.83: `tests/laravel/`, with the 8.x
    /// skeleton's `_database_` / `_cache` (+ `:`) prefixes.
    L8,
    /// Laravel 12.67 from `../shared/laravel12`: `tests/laravel12/`, with
    /// the 12.x skeleton's `-database-` / `-cache-` prefixes, no colon.
    L12,
}

impl Version {
    /// The app's sources in the repository.
    fn source(self) -> PathBuf {
        let dir = match self {
            Version::L8 => "tests/laravel",
            Version::L12 => "tests/laravel12",
        };
        Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
    }

    /// `[app] laravel` for this app.
    pub fn laravel(self) -> &'static str {
        match self {
            Version::L8 => "8.83",
            Version::L12 => "12.67",
        }
    }

    /// The queue connection's Redis prefix (APP_NAME=Laravel).
    pub fn redis_prefix(self) -> &'static str {
        match self {
            Version::L8 => "laravel_database_",
            Version::L12 => "laravel-database-",
        }
    }

    /// The cache prefix (`cache.prefix`, APP_NAME=Laravel), without the
    /// 8.x colon.
    pub fn cache_prefix(self) -> &'static str {
        match self {
            Version::L8 => "laravel_cache",
            Version::L12 => "laravel-cache-",
        }
    }

    /// Everything before a cache key in the cache Redis (DB 1), when the
    /// app's cache store is `redis` (the 8.83 app's; the 12.67 app's only
    /// with `CACHE_STORE=redis`).
    pub fn cache_key_prefix(self) -> &'static str {
        match self {
            Version::L8 => "laravel_database_laravel_cache:",
            Version::L12 => "laravel-database-laravel-cache-",
        }
    }

    /// The ready list of queue `name`.
    pub fn q(self, name: &str) -> String {
        format!("{}queues:{name}", self.redis_prefix())
    }
}

/// `../shared/laravel12/autoload.php` beside the repository, when present.
pub fn laravel12_autoload() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/laravel12/autoload.php");
    path.is_file()
        .then(|| std::fs::canonicalize(&path).unwrap_or(path))
}

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

/// A scene with the test app and a daemon config that runs every job
/// through the bridge with `transport`; `None` (after a note) when PHP or
/// Laravel is missing: the test should return.
pub fn scene(transport: Transport) -> Option<(Scene, App, PathBuf)> {
    scene_on(Version::L8, transport)
}

/// As [`scene`], with the app of `version`.
pub fn scene_on(version: Version, transport: Transport) -> Option<(Scene, App, PathBuf)> {
    let s = Scene::new();
    let app = App::on(&s, version)?;
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
    /// The framework it runs on.
    pub version: Version,
}

impl App {
    /// Copies the app into the scene and configures it for the scene's
    /// Redis and failed_jobs database (created here). `None`, with a note,
    /// when PHP or Laravel is missing: the test should return.
    pub fn new(s: &Scene) -> Option<App> {
        App::on(s, Version::L8)
    }

    /// As [`App::new`], with the app of `version`. The Laravel 12 app gets
    /// a `vendor/autoload.php` that loads `../shared/laravel12` (as a
    /// Composer app loads its vendor/) and maps `App\` to `app/`.
    pub fn on(s: &Scene, version: Version) -> Option<App> {
        if let Some(why) = missing() {
            super::skip::note("php/laravel", &format!("a Laravel interop test: {why}"));
            return None;
        }
        let autoload = match version {
            Version::L8 => None,
            Version::L12 => match laravel12_autoload() {
                Some(path) => Some(path),
                None => {
                    eprintln!(
                        "note: skipping a Laravel 12 test: ../shared/laravel12 (Laravel 12.67 \
                         for PHP 8.2) is not beside the repository"
                    );
                    return None;
                }
            },
        };
        let scene = s.dir.path().to_path_buf();
        let dir = scene.join("app");
        copy_dir(&version.source(), &dir);
        if let Some(autoload) = autoload {
            std::fs::create_dir_all(dir.join("vendor")).unwrap();
            // vendor/autoload.php (checked in) requires what this returns.
            let php = format!("<?php\n\nreturn {:?};\n", autoload.display().to_string());
            std::fs::write(dir.join("vendor/framework.php"), php).unwrap();
        }
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
             JOB_LOG={log}\nLOG_CHANNEL=single\n{more}",
            socket = s.redis.socket.display(),
            db = scene.join("failed.sqlite").display(),
            log = log.display(),
            // The 12.x skeleton's .env (CACHE_STORE=database: the `cache`
            // table on the app's SQLite database), but queues on Redis.
            more = match version {
                Version::L8 => "",
                Version::L12 =>
                    "QUEUE_CONNECTION=redis\nCACHE_STORE=database\nREDIS_CLIENT=phpredis\n",
            },
        );
        std::fs::write(dir.join(".env"), env).unwrap();
        let app = App {
            dir,
            log,
            scene,
            version,
        };
        match version {
            // The 8.x skeleton's failed_jobs table, made here.
            Version::L8 => {
                let _ = s.failed_db();
            }
            // The 12.x skeleton's migrations, run by the app: users, cache
            // and cache_locks, jobs, job_batches and failed_jobs.
            Version::L12 => {
                std::fs::File::create(app.database()).unwrap();
                app.artisan_ok(&["migrate", "--force"]);
            }
        }
        Some(app)
    }

    /// The app's SQLite database (`DB_DATABASE`): failed_jobs, and for the
    /// 12.x app also the cache, cache_locks and job_batches tables.
    pub fn database(&self) -> PathBuf {
        self.scene.join("failed.sqlite")
    }

    /// The keys of the app's database cache store (the `cache` table),
    /// sorted; empty when there is no such table.
    pub fn cache_keys(&self) -> Vec<String> {
        super::sqlite::strings(&self.database(), "SELECT key FROM cache ORDER BY key")
    }

    /// The keys of the database store's locks (`cache_locks`), sorted.
    pub fn cache_lock_keys(&self) -> Vec<String> {
        super::sqlite::strings(&self.database(), "SELECT key FROM cache_locks ORDER BY key")
    }

    /// The rows of `job_batches` (database batch repository), by name.
    pub fn batches(&self) -> Vec<super::sqlite::BatchRow> {
        super::sqlite::batches(&self.database())
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

    /// Runs `php artisan ARGS` to its end.
    pub fn artisan(&self, args: &[&str]) -> Output {
        let mut all = vec!["artisan"];
        all.extend_from_slice(args);
        self.php(&all).output().expect("run php artisan")
    }

    /// Runs `php artisan ARGS`, asserts it succeeded, returns its stdout.
    pub fn artisan_ok(&self, args: &[&str]) -> String {
        let out = self.artisan(args);
        assert!(
            out.status.success(),
            "php artisan {args:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Dispatches jobs through the app's real bus, in one PHP process (see
    /// `tests/laravel/app/Console/Commands/DispatchJobs.php` for the specs).
    pub fn dispatch(&self, specs: Value) {
        self.artisan_ok(&["test:dispatch", &specs.to_string()]);
    }

    /// Starts `php artisan queue:work redis ARGS`; its output goes to a file.
    pub fn queue_work(&self, args: &[&str]) -> PhpWorker {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let out = self.scene.join(format!("queue-work-{n}.out"));
        let file = std::fs::File::create(&out).unwrap();
        let mut all = vec!["artisan", "queue:work", "redis"];
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
        let config = s.config().laravel(self.version.laravel());
        let config = match self.version {
            Version::L8 => config,
            // Prefixes and cache store as the 12.x skeleton makes them:
            // the database store on the app's database.
            Version::L12 => config
                .set("redis", "prefix", self.version.redis_prefix())
                .database_cache(
                    &format!("sqlite://{}", self.database().display()),
                    self.version.cache_prefix(),
                ),
        };
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
}

impl Drop for PhpWorker {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
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
