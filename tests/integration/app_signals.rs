//! Artisan's control signals and the app's own settings: pause keys
//! (`queue:pause`), the file cache store, maintenance mode, `--env-file`.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Daemon, Job, QueueState, Scene, now};
use serde_json::json;

/// GET `key` from the cache (DB 1).
fn cache_get(s: &Scene, key: &str) -> Option<String> {
    s.redis.cache(&["GET", key])
}

const PAUSED_DEFAULT: &str = "laravel_database_laravel_cache:illuminate:queue:paused:redis:default";

/// `pause redis:default` writes Laravel's pause key; a worker then skips
/// `default` although it comes first in `--queue`, serves `other`, and takes
/// `default` again after `resume`.
#[test]
fn pause_skips_a_queue_until_resume() {
    let (s, config) = Scene::recording("exit 0");
    Daemon::cli(&config, &["pause", "redis:default"]).expect_exit(0);
    assert_eq!(
        cache_get(&s, PAUSED_DEFAULT).as_deref(),
        Some("b:1;"),
        "the pause key"
    );
    let ttl: i64 = s.redis.cache(&["TTL", PAUSED_DEFAULT]);
    assert_eq!(ttl, -1, "paused for ever");

    let first = Job::laravel13("App\\Jobs\\Default");
    s.push(&first);
    s.push_on("other", [&Job::laravel13("App\\Jobs\\Other")]);
    let mut d = s.work(
        &config,
        &[
            "--queue=default,other",
            "--max-jobs=2",
            "--sleep=0.05",
            "--json",
        ],
    );
    let started = d.wait_event("starting");
    assert_eq!(started["queue"], "other", "the paused queue is skipped");
    assert_eq!(
        s.redis.lrange("laravel_database_queues:default"),
        vec![first.build()],
        "untouched while paused"
    );

    Daemon::cli(&config, &["resume", "redis:default"]).expect_exit(0);
    assert_eq!(cache_get(&s, PAUSED_DEFAULT), None, "the pause key is gone");
    d.expect_exit(0);
    let order = d.event_fields("starting", "queue");
    assert_eq!(order, ["other", "default"], "queues in the order reserved");
    s.assert_state(QueueState::empty());
}

/// `illuminate:queues:paused` (`queue:pause --all`, 13.25+) pauses every
/// queue: the worker finds nothing, and `--stop-when-empty` ends it.
#[test]
fn global_pause_key_pauses_every_queue() {
    let (s, config) = Scene::recording("exit 0");
    let global = "laravel_database_laravel_cache:illuminate:queues:paused";
    let _: () = s.redis.cache(&["SET", global, "b:1;"]);
    let job = Job::laravel8("App\\Jobs\\Held");
    s.push(&job);
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
    s.assert_state(QueueState::empty().ready([&job]).notify(1));
}

/// The file cache store: `restart` writes `9999999999i:<time>;` at
/// Laravel's path, a worker reading the same directory stops, and
/// maxExceptions counts in a file with a one-day expiry.
#[test]
fn file_cache_store_restart_and_max_exceptions() {
    let s = Scene::new();
    let data = s.path("cache-data");
    let config = s.config().file_cache(&data).recording("exit 1").write();
    let job = Job::laravel8("App\\Jobs\\Flaky")
        .set("maxExceptions", json!(2))
        .set("maxTries", json!(10));
    s.push(&job);
    s.run(&config, &["--once", "--sleep=0"]);
    let counter = laravel_file_path(&data, &format!("job-exceptions:{}", job.uuid()));
    let text = std::fs::read_to_string(&counter)
        .unwrap_or_else(|e| panic!("no counter file {}: {e}", counter.display()));
    let (expiry, value) = text.split_at(10);
    assert_eq!(value, "i:1;", "one exception counted: {text}");
    let expiry: i64 = expiry.parse().unwrap();
    assert!(
        (expiry - (now() + 86_400)).abs() <= 5,
        "expires in a day: {expiry}"
    );

    let mut w = s.work(&config, &["--sleep=0.05"]);
    w.wait_log(&["worker started"]);
    Daemon::cli(&config, &["restart"]).expect_exit(0);
    let restart =
        std::fs::read_to_string(laravel_file_path(&data, "illuminate:queue:restart")).unwrap();
    assert!(
        restart.starts_with("9999999999i:") && restart.ends_with(';'),
        "{restart}"
    );
    w.expect_stop(0, "restart_signal");
}

/// `{dir}/aa/bb/{sha1}` as Laravel's FileStore lays keys out.
fn laravel_file_path(dir: &Path, key: &str) -> PathBuf {
    use sha1::{Digest, Sha1};
    let hash: String = Sha1::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(&hash[0..2]).join(&hash[2..4]).join(&hash)
}

/// Maintenance mode: with the app's `storage/framework/down` present the
/// worker takes nothing (`--once` waits `--sleep` and exits 0); `--force`
/// runs jobs anyway.
#[test]
fn maintenance_mode_and_force() {
    let s = Scene::new();
    let app = s.path("app");
    std::fs::create_dir_all(app.join("storage/framework")).unwrap();
    std::fs::write(app.join("storage/framework/down"), "{}").unwrap();
    let config = s.config().app_path(&app).recording("exit 0").write();
    let job = Job::laravel8("App\\Jobs\\Down");
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran while down");
    s.assert_state(QueueState::empty().ready([&job]).notify(1));

    s.run(&config, &["--once", "--force"]);
    assert_eq!(s.log(), vec![job.run_line(1)], "--force runs it");
    s.assert_state(QueueState::empty());
}

/// `--env-file`: Redis, prefixes (the app's `_database_`/`_cache`
/// conventions, the ≤10 colon from its framework version), the cache store
/// and the SQLite failed_jobs database all come from the app.
#[test]
fn env_file_configures_everything_from_the_app() {
    let s = Scene::new();
    let app = s.path("app");
    let files = [
        (
            ".env",
            format!(
                "APP_NAME=\"Test App\"\nREDIS_HOST={}\nREDIS_PORT=0\nCACHE_DRIVER=redis\nQUEUE_CONNECTION=redis\nDB_CONNECTION=sqlite\nDB_DATABASE=database/failed.sqlite\n",
                s.redis.socket.display()
            ),
        ),
        (
            "config/database.php",
            "'prefix' => env('REDIS_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_database_'),".into(),
        ),
        (
            "config/cache.php",
            "'prefix' => env('CACHE_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_cache'),".into(),
        ),
        (
            "vendor/laravel/framework/src/Illuminate/Foundation/Application.php",
            "const VERSION = '8.83.27';".into(),
        ),
    ];
    for (name, text) in &files {
        let path = app.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::fs::create_dir_all(app.join("database")).unwrap();
    let rows_path = app.join("database/failed.sqlite");
    common::sqlite::create_failed_jobs(&rows_path);
    let config = s.config().settings_from_app().recording("exit 1").write();
    let job = Job::laravel8("App\\Jobs\\FromEnv");
    let key = "test_app_database_queues:default";
    s.redis.push_to(key, &job.build());

    let env_file = app.join(".env");
    let mut d = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--env-file",
            env_file.to_str().unwrap(),
            "work",
            "--sleep=0.05",
        ],
        &[],
    );
    d.wait_log(&["worker started", "test_app_database_queues:default"]);
    common::wait_until("a failed row in the app's database", || {
        !common::sqlite::rows(&rows_path).is_empty()
    });
    let rows = common::sqlite::rows(&rows_path);
    assert_eq!(rows[0].uuid, job.uuid(), "the failed row: {rows:?}");
    assert_eq!(rows[0].connection, "redis", "the failed row: {rows:?}");

    let restart = "test_app_database_test_app_cache:illuminate:queue:restart";
    let _: () = s.redis.cache(&["SET", restart, &now().to_string()]);
    d.expect_stop(0, "restart_signal");
    assert!(
        !s.redis.exists(key),
        "{key} left: {:?}",
        s.redis.lrange(key)
    );
}

/// `clear` empties a queue's four keys and reports how many jobs they
/// held; `monitor` reports each queue's size and parts, and exits 3 when one
/// is at or over `--max`.
#[test]
fn clear_and_monitor() {
    let (s, config) = Scene::recording("exit 0");
    let newest = Job::laravel13("App\\Jobs\\A");
    s.push_on("default", [&newest, &Job::laravel13("App\\Jobs\\B")]);
    let later = Job::laravel13("App\\Jobs\\C");
    s.redis.later("default", now() + 60, &later.build());
    let running = Job::laravel13("App\\Jobs\\D").set("attempts", json!(1));
    let reserved = "laravel_database_queues:default:reserved";
    let _: () = s.redis.cmd(&[
        "ZADD",
        reserved,
        &(now() + 90).to_string(),
        &running.build(),
    ]);
    let other = Job::laravel8("App\\Jobs\\E");
    s.push_on("other", [&other]);

    let monitor = ["monitor", "redis:default,other", "--max=3", "--json"];
    // A queue at or over --max: exit 3 (for cron and health checks); all
    // below it: exit 0.
    let mut m = Daemon::cli(&config, &monitor);
    m.expect_exit(3);
    Daemon::cli(&config, &["monitor", "redis:default,other", "--max=5"]).expect_exit(0);
    let report: serde_json::Value = serde_json::from_str(&m.stdout[0]).unwrap();
    let expected = json!([
        {"queue": "default", "size": 4, "pending": 2, "delayed": 1, "reserved": 1,
         "oldest_pending": newest.get("createdAt"), "status": "ALERT"},
        {"queue": "other", "size": 1, "status": "OK"},
    ]);
    for (i, queue) in expected.as_array().unwrap().iter().enumerate() {
        for (field, value) in queue.as_object().unwrap() {
            assert_eq!(&report[i][field], value, "{field} of queue {i}: {report}");
        }
    }

    let mut c = Daemon::cli(&config, &["clear", "redis", "--queue=default"]);
    c.expect_exit(0);
    common::assert_said(&c.stdout, "Cleared 4 jobs from the [default] queue.");
    // Other queues untouched.
    s.assert_state(
        QueueState::empty()
            .ready_on("other", [&other])
            .notify_on("other", 1),
    );
}

/// Laravel 11+ joins the cache prefix without a colon: with `colon = false`
/// the restart key is `laravel-database-laravel-cache-illuminate:queue:restart`
/// (the 12.x/13.x skeleton's defaults), and the worker watches that key.
#[test]
fn restart_key_with_the_11_plus_prefix_rule() {
    let s = Scene::new();
    let config = s
        .config()
        .default_prefixes()
        .failed_driver("null")
        .recording("exit 0")
        .write();
    let mut w = s.work(&config, &["--sleep=0.05"]);
    w.wait_log(&["worker started", "laravel-database-queues:default"]);
    Daemon::cli(&config, &["restart"]).expect_exit(0);
    let key = "laravel-database-laravel-cache-illuminate:queue:restart";
    assert!(cache_get(&s, key).is_some(), "{key} written");
    w.expect_stop(0, "restart_signal");
}
