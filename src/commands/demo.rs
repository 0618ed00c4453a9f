//! `demo`: the whole story on a private Redis, or a private SQLite file,
//! touching nothing else.
//!
//! With `--driver redis` (the default) it starts its own `redis-server` on
//! a unix socket in a temporary directory (no TCP port) and writes a
//! config with a demo-only key prefix ([`PREFIX`]); with `--driver
//! database` it creates a SQLite file there ([`SQLITE_FILE`]) with the
//! `jobs`, `failed_jobs` and `cache` tables of Laravel 11's migrations and
//! writes a config that keeps the queue, the failed jobs and the cache in
//! it, as Laravel 11's skeleton does (no Redis needed). Either way the
//! config has three example handlers; the demo pushes three jobs onto two
//! queues, runs `work --stop-when-empty` so their job lines print, then
//! `failed` and `monitor`, and finally stops the server (if any) and
//! removes the directory. Each step runs this same binary as a child with
//! a cleared environment (only `PATH` kept), so no `REDIS_*`, `DB_*`,
//! `LARAVEL_WORKER_*` or other variable can point it at a real Redis or
//! database.
//!
//! The jobs:
//! - `App\Jobs\SendWelcomeEmail` on `emails`: its handler exits 0 (DONE);
//! - `App\Jobs\SyncInventory` on `default`: its handler exits 1, an
//!   exception; with `--tries=3 --backoff=30` it is released for a retry
//!   in 30 seconds (FAIL line, still counted by `monitor`);
//! - `App\Jobs\ChargeCard` on `default`: its handler asks to fail
//!   (`{"action":"fail"}`), so it goes to the failed store (FAIL line,
//!   listed by `failed`).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The key prefix of every key the demo writes.
pub const PREFIX: &str = "laravel_worker_demo_";

/// The SQLite file of `demo --driver database`, in the demo's directory.
pub const SQLITE_FILE: &str = "database.sqlite";

/// The tables of `demo --driver database`, as Laravel 11's migrations make
/// them on SQLite (`0001_01_01_000002_create_jobs_table` and the cache's).
const SQLITE_TABLES: &str = "\
create table \"jobs\" (\"id\" integer primary key autoincrement not null, \
  \"queue\" varchar not null, \"payload\" text not null, \"attempts\" integer not null, \
  \"reserved_at\" integer, \"available_at\" integer not null, \"created_at\" integer not null);
create index \"jobs_queue_index\" on \"jobs\" (\"queue\");
create table \"failed_jobs\" (\"id\" integer primary key autoincrement not null, \
  \"uuid\" varchar not null, \"connection\" text not null, \"queue\" text not null, \
  \"payload\" text not null, \"exception\" text not null, \
  \"failed_at\" datetime not null default CURRENT_TIMESTAMP);
create unique index \"failed_jobs_uuid_unique\" on \"failed_jobs\" (\"uuid\");
create table \"cache\" (\"key\" varchar not null, \"value\" text not null, \
  \"expiration\" integer not null, primary key (\"key\"));
";

/// How long the private `redis-server` may take to answer.
const REDIS_START: Duration = Duration::from_secs(10);

/// What to do when `redis-server` is not installed.
pub const INSTALL_HINT: &str = "the demo needs redis-server on the PATH: install it with \
     `apt-get install redis-server` (Debian, Ubuntu), `dnf install redis` (Fedora), \
     `apk add redis` (Alpine) or `brew install redis` (macOS); it is started privately \
     on a unix socket and stopped at the end";

/// A `redis-server` child, killed and reaped when dropped.
struct PrivateRedis {
    child: Child,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the demo on `driver` (`redis` or `database`); returns 0 when
/// every step did what it should. Stopped by SIGINT or SIGTERM it stops
/// the running step and `redis-server`, removes its directory, and
/// returns 130 or 143 (as a shell reports a program those signals ended).
///
/// # Errors
/// `redis-server` missing or not answering (Redis), a SQLite file that
/// cannot be made (database), a temporary directory that cannot be made,
/// or this binary that cannot be run again.
pub async fn run(driver: &str) -> anyhow::Result<u8> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot catch SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot catch SIGTERM")?;
    let database = driver == "database";
    // Dropping the story (its step, its redis-server and its directory)
    // cleans up behind it.
    let code = tokio::select! {
        done = story(database) => return done,
        _ = interrupt.recv() => 130,
        _ = terminate.recv() => 143,
    };
    say(if database {
        "stopped: the SQLite file and its directory are removed"
    } else {
        "stopped: the private redis-server is stopped and its directory removed"
    });
    Ok(code)
}

/// The demo's steps, in order (see the module docs), on a SQLite file
/// when `database`, else on a private Redis.
async fn story(database: bool) -> anyhow::Result<u8> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let dir = tempfile::Builder::new()
        .prefix("laravel-worker-demo-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    write_handlers(dir.path())?;
    // `_redis` lives to the end: dropping it stops the server.
    let (config, connection, _redis) = if database {
        let file = dir.path().join(SQLITE_FILE);
        create_tables(&file).await?;
        let config = write_config(dir.path(), &database_config(&file))?;
        say(&format!(
            "laravel-worker demo: a SQLite file at {} (tables jobs, failed_jobs and cache, \
             as Laravel 11's migrations make them; nothing else is touched)",
            file.display()
        ));
        (config, "database", None)
    } else {
        let socket = dir.path().join("redis.sock");
        let redis = start_redis(dir.path(), &socket)?;
        let config = write_config(dir.path(), &config(&socket))?;
        say(&format!(
            "laravel-worker demo: a private redis-server on {} (key prefix {PREFIX}; \
             nothing else is touched)",
            socket.display()
        ));
        (config, "redis", Some(redis))
    };
    jobs_story(&exe, &config, connection).await?;
    say(if database {
        "done: the SQLite file and its directory are removed"
    } else {
        "done: the private redis-server is stopped and its directory removed"
    });
    Ok(0)
}

/// The jobs' part of the story, the same on each driver: push, work,
/// `failed`, `monitor CONNECTION:default,emails`.
async fn jobs_story(exe: &Path, config: &Path, connection: &str) -> anyhow::Result<()> {
    say(
        "pushing App\\Jobs\\SendWelcomeEmail onto `emails`, App\\Jobs\\SyncInventory and App\\Jobs\\ChargeCard onto `default`",
    );
    for (queue, job) in [
        ("emails", "App\\Jobs\\SendWelcomeEmail"),
        ("default", "App\\Jobs\\SyncInventory"),
        ("default", "App\\Jobs\\ChargeCard"),
    ] {
        step(exe, config, &["push", queue, "--job", job], &[0]).await?;
    }

    say("$ laravel-worker work --queue=emails,default --tries=3 --backoff=30 --stop-when-empty");
    step(
        exe,
        config,
        &[
            "work",
            "--queue=emails,default",
            "--tries=3",
            "--backoff=30",
            "--stop-when-empty",
            "--sleep=0",
        ],
        &[0],
    )
    .await?;
    say(
        "SendWelcomeEmail succeeded (DONE); SyncInventory threw and was released for a retry in 30 s; ChargeCard failed for good (FAIL)",
    );

    say("$ laravel-worker failed");
    step(exe, config, &["failed"], &[0]).await?;

    let queues = format!("{connection}:default,emails");
    say(&format!("$ laravel-worker monitor {queues} --max=1"));
    // Exit 3 (a queue at or over --max) is what the demo expects here.
    step(exe, config, &["monitor", &queues, "--max=1"], &[0, 3]).await?;
    Ok(())
}

/// Creates the SQLite file `file` with [`SQLITE_TABLES`].
///
/// # Errors
/// The file cannot be created or written.
async fn create_tables(file: &Path) -> anyhow::Result<()> {
    use sqlx::{ConnectOptions, Connection};
    let mut c = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(file)
        .create_if_missing(true)
        .connect()
        .await
        .with_context(|| format!("cannot create the SQLite file {}", file.display()))?;
    sqlx::raw_sql(SQLITE_TABLES)
        .execute(&mut c)
        .await
        .with_context(|| format!("cannot create the demo's tables in {}", file.display()))?;
    c.close().await.context("cannot close the SQLite file")?;
    Ok(())
}

/// Prints one narration line on stdout.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n== {line}");
    let _ = out.flush();
}

/// Starts `redis-server` with its socket at `socket` and no TCP port, and
/// waits (at most [`REDIS_START`]) until it answers.
fn start_redis(dir: &Path, socket: &Path) -> anyhow::Result<PrivateRedis> {
    let child = match Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .args(["--unixsocketperm", "700"])
        .arg("--unixsocket")
        .arg(socket)
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("{INSTALL_HINT}"),
        Err(e) => return Err(e).context("cannot start redis-server"),
    };
    let mut redis = PrivateRedis { child };
    let deadline = Instant::now() + REDIS_START;
    loop {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(redis);
        }
        if let Ok(Some(status)) = redis.child.try_wait() {
            bail!("redis-server exited at start ({status})");
        }
        if Instant::now() > deadline {
            bail!(
                "redis-server did not answer on {} within {} s",
                socket.display(),
                REDIS_START.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The demo's handlers: file name and shell script body.
const HANDLERS: [(&str, &str); 3] = [
    (
        "welcome.sh",
        "cat > /dev/null\necho \"sent the welcome email (attempt $LARAVEL_WORKER_ATTEMPT)\" >&2",
    ),
    (
        "inventory.sh",
        "cat > /dev/null\necho 'the stock service timed out' >&2\nexit 1",
    ),
    (
        "charge.sh",
        "cat > /dev/null\n\
             echo '{\"action\":\"fail\",\"reason\":\"card declined\"}' > \"$LARAVEL_WORKER_RESULT\"",
    ),
];

/// Writes the handlers into `dir`.
fn write_handlers(dir: &Path) -> anyhow::Result<()> {
    for (name, body) in HANDLERS {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes the config `text` into `dir`; returns its path.
fn write_config(dir: &Path, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("demo.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The handlers of the demo's config files, one per job.
const HANDLERS_CONFIG: &str = r#"
[[handlers]]
match = "App\\Jobs\\SendWelcomeEmail"
command = ["./welcome.sh"]

[[handlers]]
match = "App\\Jobs\\SyncInventory"
command = ["./inventory.sh"]

[[handlers]]
match = "App\\Jobs\\ChargeCard"
command = ["./charge.sh"]
"#;

/// The config file of `demo --driver database`: the queue, the failed
/// jobs and the cache in the SQLite file `file`, as Laravel 11's skeleton
/// keeps them (`QUEUE_CONNECTION`, `CACHE_STORE` and the failed store all
/// `database`).
fn database_config(file: &Path) -> String {
    // A TOML string, quoted and escaped whatever the temporary path holds.
    let url = toml::Value::String(format!("sqlite://{}", file.display()));
    format!(
        "# Written by `laravel-worker demo --driver database`; removed when it ends.\n\
         [queue]\nconnection = \"database\"\nqueue = \"default\"\nretry_after = 90\n\n\
         [database]\nurl = {url}\ntable = \"jobs\"\n\n\
         [cache]\nstore = \"database\"\nurl = {url}\n\n\
         [failed]\ndriver = \"database-uuids\"\nurl = {url}\n{HANDLERS_CONFIG}"
    )
}

/// The demo's config file, its Redis at `socket`.
fn config(socket: &Path) -> String {
    format!(
        r#"# Written by `laravel-worker demo`; removed when it ends.
[redis]
url = "unix://{socket}?db=0"
prefix = "{PREFIX}"

[queue]
connection = "redis"
queue = "default"
retry_after = 90

[cache]
store = "redis"
database = 1
prefix = "demo_cache"

[failed]
driver = "redis"
{HANDLERS_CONFIG}"#,
        socket = socket.display()
    )
}

/// Runs `exe --config CONFIG ARGS` with only `PATH` in its environment and
/// warnings-only logs; its output goes to ours.
///
/// The child is killed if the step is dropped (the demo is stopped).
///
/// # Errors
/// The child cannot start, or exits with a status not in `ok`.
async fn step(exe: &Path, config: &Path, args: &[&str], ok: &[i32]) -> anyhow::Result<()> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.kill_on_drop(true);
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("RUST_LOG", "warn")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null());
    let _ = std::io::stdout().flush();
    let status = cmd
        .status()
        .await
        .with_context(|| format!("cannot run {}", exe.display()))?;
    match status.code() {
        Some(code) if ok.contains(&code) => Ok(()),
        _ => bail!("`laravel-worker {}` ended with {status}", args.join(" ")),
    }
}
