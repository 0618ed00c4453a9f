//! The worker beside a real Laravel 12.67 app (`tests/laravel12/`, the 12.x
//! skeleton's defaults: `-database-` / `-cache-` prefixes, no colon), and
//! `--app` on both test apps: the worker reads the app's own resolved
//! configuration through PHP and needs no other setting.
//!
//! Skips, with a note, where PHP, Debian's Laravel or `../shared/laravel12`
//! is missing.

mod common;

use std::collections::HashMap;

use common::laravel::{self, App, Transport, Version};
use common::{Daemon, Scene};
use serde_json::{Value, json};

const PER_JOB: Transport = Transport::PerJob;
const PERSISTENT: Transport = Transport::Persistent(2);

/// The scene and app of `version`, with the daemon config from the app.
fn app_scene(version: Version, transport: Transport) -> Option<(Scene, App, std::path::PathBuf)> {
    let s = Scene::new();
    let app = App::on(&s, version)?;
    let config = app.config_from_app(&s, transport);
    Some((s, app, config))
}

/// Runs `work --app=… ARGS` to its end (exit 0).
fn run(s: &Scene, app: &App, config: &std::path::Path, args: &[&str]) -> Daemon {
    let flag = app.app_flag();
    let mut all = vec![flag.as_str(), "--stop-when-empty", "--sleep=0", "--json"];
    all.extend_from_slice(args);
    s.run(config, &all)
}

/// Runs the daemon until the default queue has nothing ready or delayed,
/// making delayed jobs due between runs.
fn drain(s: &Scene, app: &App, config: &std::path::Path, args: &[&str]) {
    let q = app.version.q("default");
    let delayed = format!("{q}:delayed");
    for _ in 0..20 {
        run(s, app, config, args);
        if s.redis.zcard(&delayed) == 0 && s.redis.llen(&q) == 0 {
            return;
        }
        s.redis.make_due(&delayed);
    }
    panic!("the queue never drained");
}

/// Every queue key of the app's prefix on DB 0 (none should be left).
fn queue_keys(s: &Scene, version: Version) -> Vec<String> {
    s.redis
        .cmd(&["KEYS", &format!("{}queues:*", version.redis_prefix())])
}

/// `--app` alone: the start-up log names the app as the source of the
/// prefix, retry_after, cache store and failed table, with the values the
/// app computes; a job the app dispatches runs, one that fails lands in
/// the app's failed_jobs, and `php artisan queue:restart` (the app's cache
/// store and prefix) stops the worker.
fn app_config_alone(version: Version) {
    let Some((s, app, config)) = app_scene(version, PER_JOB) else {
        return;
    };
    app.set_env("REDIS_QUEUE_RETRY_AFTER", "77");
    app.dispatch(json!([
        {"kind": "plain", "tag": "ok"},
        {"kind": "self-failing", "tag": "self"},
    ]));
    assert_eq!(s.redis.llen(&version.q("default")), 2, "dispatched");

    let d = run(&s, &app, &config, &["--tries=1"]);
    let log = d.stderr_text();
    let prefix = version.redis_prefix();
    let cache_prefix = match version {
        Version::L8 => "laravel_cache",
        Version::L12 => "laravel-cache-",
    };
    for line in [
        format!("setting redis prefix = \"{prefix}\" (app config)"),
        "setting retry_after = 77 (app config)".to_string(),
        "setting cache store = redis (app config)".to_string(),
        format!("setting cache prefix = \"{cache_prefix}\" (app config)"),
        format!(
            "setting cache colon = {} (app config)",
            version == Version::L8
        ),
        "setting failed table = failed_jobs (app config)".to_string(),
        format!("setting laravel = {} (app config)", version.laravel()),
    ] {
        assert!(log.contains(&line), "no {line:?} in:\n{log}");
    }
    assert!(
        log.contains(&format!("first_key={prefix}queues:default")),
        "{log}"
    );
    assert_eq!(app.attempts("ok"), vec![1]);
    assert_eq!(app.attempts("self"), vec![1]);
    let rows = s.failed_rows();
    assert_eq!(
        rows.len(),
        1,
        "the failed job's row in the app's failed_jobs"
    );
    assert_eq!(rows[0].connection, "redis");
    assert!(
        queue_keys(&s, version).is_empty(),
        "{:?}",
        queue_keys(&s, version)
    );

    // queue:restart, written by the app into its cache, stops the worker.
    let flag = app.app_flag();
    let mut d = s.work(&config, &[flag.as_str(), "--sleep=0.05"]);
    d.wait_log(&["worker started"]);
    app.artisan_ok(&["queue:restart"]);
    d.expect_stop(0, "restart_signal");
}

#[test]
fn app_config_alone_on_laravel_8() {
    app_config_alone(Version::L8);
}

#[test]
fn app_config_alone_on_laravel_12() {
    app_config_alone(Version::L12);
}

/// Without PHP on the PATH the worker says so and follows the `.env`
/// rules: on the Laravel 12 app they give the same prefix.
#[test]
fn without_php_the_env_rules_apply_and_the_log_says_so() {
    let s = Scene::new();
    let Some(app) = App::on(&s, Version::L12) else {
        return;
    };
    let config = app.config_from_app(&s, PER_JOB);
    let env_file = app.dir.join(".env");
    let mut d = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--env-file",
            env_file.to_str().unwrap(),
            "work",
            "--stop-when-empty",
            "--sleep=0",
        ],
        &[("PATH", "/nonexistent")],
    );
    d.expect_exit(0);
    let log = d.stderr_text();
    assert!(log.contains("php is not on the PATH"), "{log}");
    assert!(
        log.contains("setting redis prefix = \"laravel-database-\" (.env)"),
        "{log}"
    );
}

/// Every kind of job the Laravel 12 app dispatches, run through the bridge.
fn every_kind_on_laravel_12(transport: Transport) {
    let Some((s, app, config)) = app_scene(Version::L12, transport) else {
        return;
    };
    app.dispatch(json!([
        {"kind": "noop"},
        {"kind": "plain", "tag": "plain", "data": {"city": "Zürich"}},
        {"kind": "string", "tag": "str", "data": {"x": "y"}},
        {"kind": "flaky", "tag": "ok", "failures": 1},
        {"kind": "flaky", "tag": "doomed", "failures": 9},
        {"kind": "chain", "tag": "chain", "steps": ["a", "b"]},
        {"kind": "chain", "tag": "chain-fail", "steps": ["a", "b"], "fail": "a"},
        {"kind": "event", "tag": "order"},
        {"kind": "notification", "tag": "invoice"},
        {"kind": "encrypted", "tag": "enc", "secret": "s"},
        {"kind": "unique", "tag": "uniq", "key": "k"},
        {"kind": "self-failing", "tag": "self"},
        {"kind": "releasing", "tag": "rel", "release": 5},
    ]));
    drain(&s, &app, &config, &["--tries=2"]);

    for tag in ["plain", "str", "order", "enc", "uniq", "chain.a", "chain.b"] {
        assert_eq!(app.attempts(tag), vec![1], "{tag}");
    }
    assert_eq!(app.attempts("ok"), vec![1, 2]);
    assert_eq!(
        app.attempts("doomed"),
        vec![1, 2, 3],
        "FlakyJob's own $tries"
    );
    assert_eq!(app.events("failed", "doomed").len(), 1);
    assert_eq!(app.attempts("chain-fail.a"), vec![1, 2]);
    assert!(app.attempts("chain-fail.b").is_empty());
    let catches: Vec<Value> = app
        .records()
        .into_iter()
        .filter(|r| r["event"] == "chain-catch")
        .collect();
    assert_eq!(catches.len(), 1, "{catches:?}");
    assert_eq!(catches[0]["tag"], "chain-fail");
    assert_eq!(app.events("failed", "self").len(), 1);
    assert!(!app.attempts("rel").is_empty());
    let secret = app.events("handle", "enc");
    assert_eq!(secret[0]["secret"], "s", "{secret:?}");

    // The unique lock is gone (12.x prefixes on the lock connection, DB 0).
    let locks: Vec<String> = s.redis.cmd(&["KEYS", "*unique*"]);
    assert!(locks.is_empty(), "{locks:?}");
    let mut failed: Vec<String> = s
        .failed_rows()
        .iter()
        .map(|row| {
            let payload: Value = serde_json::from_str(&row.payload).unwrap();
            payload["displayName"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            "App\\Jobs\\ChainStep",
            "App\\Jobs\\FlakyJob",
            "App\\Jobs\\SelfFailingJob"
        ],
        "doomed, chain-fail.a and self failed (rel: {:?})",
        app.attempts("rel")
    );
    assert!(queue_keys(&s, Version::L12).is_empty());
}

#[test]
fn every_kind_on_laravel_12_per_job() {
    every_kind_on_laravel_12(PER_JOB);
}

#[test]
fn every_kind_on_laravel_12_persistent() {
    every_kind_on_laravel_12(PERSISTENT);
}

/// restart, pause and resume in both directions with Laravel 12's own
/// worker: artisan's signals reach the daemon, the daemon's reach
/// `php artisan queue:work`.
#[test]
fn restart_pause_and_resume_both_ways_on_laravel_12() {
    let Some((s, app, config)) = app_scene(Version::L12, PER_JOB) else {
        return;
    };
    let flag = app.app_flag();
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), flag.as_str()];
        all.extend_from_slice(args);
        let mut d = Daemon::run(&all, &[]);
        d.expect_exit(0);
    };

    // artisan queue:pause: the daemon leaves the queue alone.
    app.artisan_ok(&["queue:pause", "redis:default"]);
    app.dispatch(json!([{"kind": "plain", "tag": "paused"}]));
    let mut d = s.work(&config, &[flag.as_str(), "--sleep=0.05"]);
    d.wait_log(&["worker started"]);
    // Our own resume lifts it; the job then runs.
    cli(&["resume", "redis:default"]);
    app.wait_for_events("handle", 1);
    assert_eq!(app.attempts("paused"), vec![1]);
    // artisan queue:restart stops the daemon.
    app.artisan_ok(&["queue:restart"]);
    d.expect_stop(0, "restart_signal");

    // Our pause: Laravel 12's queue:work leaves the queue alone.
    cli(&["pause", "redis:default"]);
    app.dispatch(json!([{"kind": "plain", "tag": "later"}]));
    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    assert!(php.wait().success(), "{}", php.output());
    assert!(app.attempts("later").is_empty(), "{}", php.output());
    assert_eq!(s.redis.llen(&Version::L12.q("default")), 1);
    // artisan queue:resume, then our restart stops a running queue:work.
    app.artisan_ok(&["queue:resume", "redis:default"]);
    let mut php = app.queue_work(&["--sleep=0"]);
    app.wait_for_events("handle", 2);
    cli(&["restart"]);
    assert!(php.wait().success(), "{}", php.output());
    assert_eq!(app.attempts("later"), vec![1]);
}

/// One `php artisan queue:work` (Laravel 12) and two daemons consume one
/// queue: every job runs exactly once.
#[test]
fn laravel_12_mixed_fleet_runs_every_job_once() {
    const JOBS: usize = 600;
    let Some((s, app, config)) = app_scene(Version::L12, PERSISTENT) else {
        return;
    };
    app.dispatch(json!([{"kind": "plain", "tag": "job", "count": JOBS}]));
    let flag = app.app_flag();
    let args = [
        flag.as_str(),
        "--stop-when-empty",
        "--sleep=0",
        "--json",
        "--concurrency=2",
    ];
    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    let mut daemons = [s.work(&config, &args), s.work(&config, &args)];
    assert!(php.wait().success(), "{}", php.output());
    for d in &mut daemons {
        d.expect_exit(0);
    }
    let mut runs: HashMap<String, usize> = HashMap::new();
    let mut php_jobs = 0;
    for r in app.records() {
        assert_eq!(r["attempt"], 1, "{r}");
        *runs
            .entry(r["tag"].as_str().unwrap().to_string())
            .or_default() += 1;
        if r["runner"] == "Illuminate\\Queue\\Jobs\\RedisJob" {
            php_jobs += 1;
        }
    }
    assert_eq!(runs.len(), JOBS);
    assert!(runs.values().all(|n| *n == 1), "a job ran twice");
    assert!(php_jobs > 0, "queue:work ran none");
    let daemon_jobs: usize = daemons.iter().map(|d| d.events_with("success").len()).sum();
    assert_eq!(php_jobs + daemon_jobs, JOBS);
    assert!(queue_keys(&s, Version::L12).is_empty());
    let _ = laravel::bridge();
}

/// A `config:cache`d Laravel 12 app: the worker reads the cached
/// configuration, as Laravel does, not the `.env` changed since.
#[test]
fn a_config_cached_app_is_read_as_cached() {
    let Some((s, app, config)) = app_scene(Version::L12, PER_JOB) else {
        return;
    };
    app.artisan_ok(&["config:cache"]);
    app.set_env("APP_NAME", "\"Changed Since\"");
    let d = run(&s, &app, &config, &[]);
    let log = d.stderr_text();
    assert!(
        log.contains("setting redis prefix = \"laravel-database-\" (app config)"),
        "{log}"
    );
    assert!(
        log.contains("first_key=laravel-database-queues:default"),
        "{log}"
    );
}
