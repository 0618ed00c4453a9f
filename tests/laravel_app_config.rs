//! `--app` on the Laravel 8.83 test app: the worker reads the app's own
//! resolved configuration through PHP and needs no other setting. (The
//! `.env` rules without PHP, for Laravel 11–12 apps, are checked against
//! recordings in `tests/recordings.rs`.)
//!
//! Skips, with a note, where PHP or Debian's Laravel is missing.

mod common;

use common::laravel::{App, LARAVEL, Transport};
use common::{Scene, q};
use serde_json::json;

/// `--app` alone: the start-up log names the app as the source of the
/// prefix, retry_after, cache store and failed table, with the values the
/// app computes; a job the app dispatches runs, one that fails lands in
/// the app's failed_jobs, and `php artisan queue:restart` (the app's cache
/// store and prefix) stops the worker.
#[test]
fn app_config_alone_on_laravel_8() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    let config = app.config_from_app(&s, Transport::PerJob);
    app.set_env("REDIS_QUEUE_RETRY_AFTER", "77");
    app.dispatch(json!([
        {"kind": "plain", "tag": "ok"},
        {"kind": "self-failing", "tag": "self"},
    ]));
    assert_eq!(s.redis.llen(&q("default")), 2, "dispatched");

    let flag = app.app_flag();
    let args = [
        flag.as_str(),
        "--stop-when-empty",
        "--sleep=0",
        "--json",
        "--tries=1",
    ];
    let log = s.run(&config, &args).stderr_text();
    // The 8.x skeleton's Redis cache store, with 8.x's colon after the
    // cache prefix.
    for line in [
        "setting redis prefix = \"laravel_database_\" (app config)".to_string(),
        "setting retry_after = 77 (app config)".to_string(),
        "setting cache store = redis (app config)".to_string(),
        "setting cache prefix = \"laravel_cache\" (app config)".to_string(),
        "setting cache colon = true (app config)".to_string(),
        "\"restart_key\":\"laravel_database_laravel_cache:illuminate:queue:restart".to_string(),
        "setting failed table = failed_jobs (app config)".to_string(),
        format!("setting laravel = {LARAVEL} (app config)"),
        "first_key=laravel_database_queues:default".to_string(),
    ] {
        assert!(log.contains(&line), "no {line:?} in:\n{log}");
    }
    assert_eq!(app.attempts("ok"), vec![1]);
    assert_eq!(app.attempts("self"), vec![1]);
    let rows = s.failed_rows();
    assert_eq!(
        rows.len(),
        1,
        "the failed job's row in the app's failed_jobs"
    );
    assert_eq!(rows[0].connection, "redis");
    let left: Vec<String> = s.redis.cmd(&["KEYS", "laravel_database_queues:*"]);
    assert!(left.is_empty(), "{left:?}");

    // queue:restart, written by the app into its cache, stops the worker.
    let mut d = s.work(&config, &[flag.as_str(), "--sleep=0.05"]);
    d.wait_log(&["worker started"]);
    app.artisan_ok(&["queue:restart"]);
    d.expect_stop(0, "restart_signal");
}
