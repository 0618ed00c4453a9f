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
    // The skeletons' cache stores: redis on the 8.83 app (8.x's colon after
    // the prefix), database on the 12.67 app (the `cache` table of the
    // app's SQLite; no colon there in any version).
    let (store, colon, restart_key) = match version {
        Version::L8 => (
            "redis",
            "setting cache colon = true (app config)",
            "laravel_database_laravel_cache:illuminate:queue:restart",
        ),
        Version::L12 => (
            "database",
            "setting cache colon: built-in default",
            "laravel-cache-illuminate:queue:restart (table cache)",
        ),
    };
    for line in [
        format!("setting redis prefix = \"{prefix}\" (app config)"),
        "setting retry_after = 77 (app config)".to_string(),
        format!("setting cache store = {store} (app config)"),
        format!("setting cache prefix = \"{cache_prefix}\" (app config)"),
        colon.to_string(),
        format!("\"restart_key\":\"{restart_key}"),
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

/// `work --app=… --stop-when-empty` on the Laravel 8 app, its config
/// first edited by `edit`; the daemon, exited.
fn work_on_edited_app(edit: impl FnOnce(&App)) -> Option<(Scene, Daemon)> {
    let (s, app, config) = app_scene(Version::L8, PER_JOB)?;
    edit(&app);
    let flag = app.app_flag();
    let mut d = s.work(&config, &[flag.as_str(), "--stop-when-empty", "--sleep=0"]);
    d.wait_exit();
    Some((s, d))
}

/// An `--app` that cannot be asked is fatal, with the real reason: a
/// directory that does not exist (not "php is not on the PATH", and no
/// Redis asked), and an app whose configuration throws (PHP's message, not
/// "Undefined constant STDERR" from the reader fed on standard input).
#[test]
fn an_app_that_cannot_be_asked_is_fatal_with_its_reason() {
    let s = Scene::new();
    let config = s.config().settings_from_app().write();
    let mut d = s.work(&config, &["--app=/nonexistent/app", "--stop-when-empty"]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(log.contains("/nonexistent/app"), "{log}");
    assert!(log.contains("No such file or directory"), "{log}");
    assert!(!log.contains("php is not on the PATH"), "{log}");
    assert!(
        !log.contains("worker stopped"),
        "it ran on defaults:\n{log}"
    );

    let Some((_s, mut d)) = work_on_edited_app(|app| {
        app.edit_config(
            "queue.php",
            "<?php",
            "<?php throw new RuntimeException('the queue config is broken');",
        );
    }) else {
        return;
    };
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("the app did not boot: RuntimeException: the queue config is broken"),
        "{log}"
    );
    assert!(!log.contains("STDERR"), "{log}");
}

/// A reader that writes 1 MiB of warnings on stderr while it boots does not
/// stall the start (both streams are read at once); an answer over 4 MiB
/// is refused with a clear error.
#[test]
fn a_noisy_or_huge_app_answer_does_not_stall_the_start() {
    let noise =
        "<?php file_put_contents('php://stderr', str_repeat(\"Warning: noise\\n\", 70000));";
    let Some((_s, mut d)) = work_on_edited_app(|app| app.edit_config("queue.php", "<?php", noise))
    else {
        return;
    };
    d.expect_exit(0);
    assert!(
        d.stderr_text()
            .contains("settings read from the app's own configuration"),
        "{}",
        d.stderr_text()
    );

    let Some((_s, mut d)) = work_on_edited_app(|app| {
        app.edit_config(
            "queue.php",
            "env('REDIS_QUEUE', 'default')",
            "str_repeat('q', 5 << 20)",
        );
    }) else {
        return;
    };
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(log.contains("printed more than 4 MiB"), "{log}");
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
    // ShouldBeUnique: dispatch took the lock, in the database store's
    // cache_locks table.
    let lock = "laravel-cache-laravel_unique_job:App\\Jobs\\UniqueJob:k";
    assert_eq!(app.cache_lock_keys(), [lock]);
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

    // The unique lock is released.
    assert!(
        app.cache_lock_keys().is_empty(),
        "{:?}",
        app.cache_lock_keys()
    );
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

/// The cache stores a Laravel 12 app keeps queue:restart and queue:pause in.
#[derive(Clone, Copy, PartialEq)]
enum Store {
    /// The 12.x skeleton's default: the `cache` table of the app's SQLite.
    Database,
    /// `CACHE_STORE=redis`: keys `laravel-database-laravel-cache-…` (no
    /// colon, unlike 8.x) on the cache connection (DB 1).
    Redis,
}

/// Where the app's cache store holds `key` (the cache prefix added), if
/// it holds it.
fn cache_has(s: &Scene, app: &App, store: Store, key: &str) -> bool {
    let full = format!("{}{key}", Version::L12.cache_prefix());
    match store {
        Store::Database => app.cache_keys().contains(&full),
        Store::Redis => {
            let redis_key = format!("{}{key}", Version::L12.cache_key_prefix());
            s.redis.keys(1).contains(&redis_key)
        }
    }
}

/// restart, pause and resume in both directions with Laravel 12's own
/// worker: artisan's signals reach the daemon, the daemon's reach
/// `php artisan queue:work`, through the app's cache store.
fn restart_pause_and_resume_both_ways(store: Store) {
    let Some((s, app, config)) = app_scene(Version::L12, PER_JOB) else {
        return;
    };
    if store == Store::Redis {
        app.set_env("CACHE_STORE", "redis");
    }
    let flag = app.app_flag();
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), flag.as_str()];
        all.extend_from_slice(args);
        let mut d = Daemon::run(&all, &[]);
        d.expect_exit(0);
    };
    let paused = "illuminate:queue:paused:redis:default";

    // artisan queue:pause: the daemon leaves the queue alone.
    app.artisan_ok(&["queue:pause", "redis:default"]);
    assert!(cache_has(&s, &app, store, paused), "paused in the store");
    app.dispatch(json!([{"kind": "plain", "tag": "paused"}]));
    let mut d = s.work(&config, &[flag.as_str(), "--sleep=0.05"]);
    d.wait_log(&["worker started"]);
    // Our own resume lifts it; the job then runs.
    cli(&["resume", "redis:default"]);
    assert!(!cache_has(&s, &app, store, paused), "resumed in the store");
    app.wait_for_events("handle", 1);
    assert_eq!(app.attempts("paused"), vec![1]);
    // artisan queue:restart stops the daemon.
    app.artisan_ok(&["queue:restart"]);
    assert!(cache_has(&s, &app, store, "illuminate:queue:restart"));
    d.expect_stop(0, "restart_signal");

    // Our pause: Laravel 12's queue:work leaves the queue alone.
    cli(&["pause", "redis:default"]);
    assert!(cache_has(&s, &app, store, paused), "paused in the store");
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

#[test]
fn restart_pause_and_resume_both_ways_on_laravel_12() {
    restart_pause_and_resume_both_ways(Store::Database);
}

/// The same with `CACHE_STORE=redis`, which many apps with Redis queues
/// choose: the only test of the 12.x Redis cache key layout (no colon
/// after the cache prefix) against artisan's own writes.
#[test]
fn restart_pause_and_resume_both_ways_on_laravel_12_with_the_redis_cache() {
    restart_pause_and_resume_both_ways(Store::Redis);
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

/// The batches of the batch test (see `BatchStep` and the `batch` kind of
/// the app's `test:dispatch`): each step is `name[:action]`.
fn batch_specs() -> Value {
    json!([
        // A failure cancels the batch: catch and finally run, then does not;
        // the step after it skips its work ($this->batch()->cancelled()).
        {"kind": "batch", "tag": "fails", "steps": ["a", "b:fail", "c"]},
        // A job cancels its batch; the next is skipped by Laravel's
        // SkipIfBatchCancelled middleware (it never reaches handle()).
        {"kind": "batch", "tag": "cancels", "steps": ["a", "b:cancel", "c"], "middleware": true},
        // The same, skipped by handle() asking the batch.
        {"kind": "batch", "tag": "cancels-h", "steps": ["a", "b:cancel", "c"]},
        // allowFailures(): not cancelled; the step after the failure runs.
        {"kind": "batch", "tag": "allows", "steps": ["a", "b:fail", "c"], "allow_failures": true},
        // Everything succeeds: then and finally.
        {"kind": "batch", "tag": "ok", "steps": ["a", "b"]},
        // A chain in a batch: its next job is dispatched into the batch by
        // the job before it; a failure in the chain ends the chain.
        {"kind": "batch", "tag": "chained", "steps": [["a", "b"], "c"]},
        {"kind": "batch", "tag": "chain-fails", "steps": [["a:fail", "b"], "c"], "allow_failures": true},
    ])
}

/// What a run of the batches left: the job log (times, pids, runners and
/// batch ids dropped, sorted), the job_batches rows, the failed jobs'
/// displayNames and the cache locks and queue keys left.
#[derive(Debug, PartialEq)]
struct BatchRun {
    records: Vec<String>,
    batches: Vec<common::sqlite::BatchRow>,
    failed: Vec<String>,
    left: Vec<String>,
}

fn batch_run(s: &Scene, app: &App) -> BatchRun {
    let mut records: Vec<String> = app
        .records()
        .into_iter()
        .map(|mut r| {
            for volatile in ["time", "pid", "runner", "batch"] {
                r.as_object_mut().unwrap().remove(volatile);
            }
            r.to_string()
        })
        .collect();
    records.sort();
    let mut failed: Vec<String> = s
        .failed_rows()
        .iter()
        .map(|row| {
            let first = row.exception.lines().next().unwrap_or_default();
            first.split(" in /").next().unwrap_or_default().to_string()
        })
        .collect();
    failed.sort();
    let mut left = app.cache_lock_keys();
    left.extend(queue_keys(s, Version::L12));
    BatchRun {
        records,
        batches: app.batches(),
        failed,
        left,
    }
}

/// `Bus::batch()` with the database batch repository (`job_batches` on
/// the app's SQLite), through the bridge per job and persistent: the same
/// job runs, skips, callbacks and batch rows (pending and failed counts,
/// failed job ids, cancelled_at, finished_at) as Laravel 12's own
/// `queue:work` leaves for the same batches.
#[test]
fn batches_on_laravel_12_as_queue_work_runs_them() {
    let s = Scene::new();
    let Some(app) = App::on(&s, Version::L12) else {
        return;
    };
    app.dispatch(batch_specs());
    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    assert!(php.wait().success(), "{}", php.output());
    let expected = batch_run(&s, &app);

    // The scenario does what it is meant to (not just the same twice).
    let row = |name: &str| {
        expected
            .batches
            .iter()
            .find(|b| b.name == name)
            .unwrap()
            .clone()
    };
    let (fails, cancels, allows, ok) = (row("fails"), row("cancels"), row("allows"), row("ok"));
    assert_eq!(
        (fails.pending_jobs, fails.failed_jobs, fails.failed_job_ids),
        (1, 1, 1)
    );
    assert!(fails.cancelled && fails.finished, "{fails:?}");
    assert_eq!((cancels.pending_jobs, cancels.failed_jobs), (0, 0));
    assert!(cancels.cancelled && cancels.finished, "{cancels:?}");
    assert_eq!((allows.pending_jobs, allows.failed_jobs), (1, 1));
    assert!(!allows.cancelled && !allows.finished, "{allows:?}");
    assert_eq!((ok.pending_jobs, ok.failed_jobs), (0, 0));
    assert!(!ok.cancelled && ok.finished, "{ok:?}");
    let has = |needle: &str| expected.records.iter().any(|r| r.contains(needle));
    assert!(has(r#""event":"batch-catch""#) && has(r#""tag":"fails.c""#));
    assert!(has(r#""skipped":true"#), "{:#?}", expected.records);
    assert!(!has(r#""tag":"cancels.c""#), "skipped by the middleware");
    let chained = row("chained");
    assert_eq!((chained.total_jobs, chained.pending_jobs), (3, 0));
    assert!(chained.finished, "{chained:?}");
    assert!(has(r#""tag":"chained.b""#) && !has(r#""tag":"chain-fails.b""#));
    assert_eq!(expected.failed.len(), 3, "{:?}", expected.failed);
    assert!(expected.left.is_empty(), "{:?}", expected.left);

    for transport in [PER_JOB, PERSISTENT] {
        let s = Scene::new();
        let app = App::on(&s, Version::L12).unwrap();
        let config = app.config(&s, transport);
        app.dispatch(batch_specs());
        s.run(&config, &["--stop-when-empty", "--sleep=0"]);
        assert_eq!(batch_run(&s, &app), expected, "{transport:?}");
    }
}

/// `$maxExceptions` counted across the two workers in the 12.x skeleton's
/// database cache store (`job-exceptions:{uuid}` in the `cache` table):
/// one worker counts the first exception, the other reads that count,
/// counts the second and fails the job, in both directions.
/// `MaxExceptionsJob`: attempt 1 releases itself, then every attempt
/// throws; two exceptions fail it.
#[test]
fn max_exceptions_counted_across_queue_work_and_the_daemon_on_laravel_12() {
    for php_first in [true, false] {
        let s = Scene::new();
        let Some(app) = App::on(&s, Version::L12) else {
            return;
        };
        let config = app.config(&s, PER_JOB);
        app.dispatch(json!([{"kind": "max-exceptions", "tag": "max-ex"}]));
        let counter = || -> Vec<String> {
            app.cache_keys()
                .into_iter()
                .filter(|k| k.starts_with("laravel-cache-job-exceptions:"))
                .collect()
        };
        // Attempts 1 (released) and 2 (the first exception, counted).
        let args = ["--once", "--sleep=0"];
        for _ in 0..2 {
            if php_first {
                let mut php = app.queue_work(&args);
                assert!(php.wait().success(), "{}", php.output());
            } else {
                s.run(&config, &args);
            }
        }
        assert_eq!(app.attempts("max-ex"), [1, 2]);
        assert_eq!(counter().len(), 1, "counted once: {:?}", app.cache_keys());
        assert!(s.failed_rows().is_empty());

        // Attempt 3 by the other worker: the second exception fails it.
        if php_first {
            s.run(&config, &["--stop-when-empty", "--sleep=0"]);
        } else {
            let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
            assert!(php.wait().success(), "{}", php.output());
        }
        assert_eq!(app.attempts("max-ex"), [1, 2, 3], "php first: {php_first}");
        assert_eq!(app.events("failed", "max-ex").len(), 1);
        let rows = s.failed_rows();
        assert_eq!(rows.len(), 1, "php first: {php_first}");
        assert!(
            rows[0]
                .exception
                .starts_with("RuntimeException: max exceptions max-ex attempt 3 in "),
            "{}",
            rows[0].exception
        );
        assert!(counter().is_empty(), "forgotten: {:?}", counter());
        assert!(queue_keys(&s, Version::L12).is_empty());
    }
}
