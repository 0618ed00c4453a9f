//! Artisan's control signals and the app's own settings: pause keys
//! (`queue:pause`), the file cache store, maintenance mode, `--env-file`.

mod common;

use std::path::{Path, PathBuf};

use common::payloads::Job;
use common::{Daemon, Scene, now, q};
use serde_json::json;

fn write_config(s: &Scene, body: &str) -> PathBuf {
    let path = s.path("custom.toml");
    std::fs::write(&path, body).unwrap();
    path
}

fn cli(config: &Path, args: &[&str]) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut d = Daemon::start(&all, &[]);
    d.wait_exit();
    d
}

fn cache_get(s: &Scene, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut s.redis.conn(1))
        .unwrap()
}

const PAUSED_DEFAULT: &str = "laravel_database_laravel_cache:illuminate:queue:paused:redis:default";

/// `pause redis:default` writes Laravel's pause key; a worker then skips
/// `default` although it comes first in `--queue`, serves `other`, and takes
/// `default` again after `resume`.
#[test]
fn pause_skips_a_queue_until_resume() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let mut p = cli(&config, &["pause", "redis:default"]);
    assert_eq!(p.code(), Some(0));
    assert_eq!(cache_get(&s, PAUSED_DEFAULT).as_deref(), Some("b:1;"));
    let ttl: i64 = redis::cmd("TTL")
        .arg(PAUSED_DEFAULT)
        .query(&mut s.redis.conn(1))
        .unwrap();
    assert_eq!(ttl, -1, "paused for ever");

    let first = Job::laravel13("App\\Jobs\\Default");
    let second = Job::laravel13("App\\Jobs\\Other");
    s.redis.push("default", &first.build());
    s.redis.push("other", &second.build());
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
        s.redis.lrange(&q("default")),
        vec![first.build()],
        "untouched while paused"
    );

    let mut r = cli(&config, &["resume", "redis:default"]);
    assert_eq!(r.code(), Some(0));
    assert_eq!(cache_get(&s, PAUSED_DEFAULT), None);
    assert_eq!(d.code(), Some(0));
    let order: Vec<String> = d
        .events()
        .iter()
        .filter(|e| e["status"] == "starting")
        .map(|e| e["queue"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, ["other", "default"]);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// `illuminate:queues:paused` (`queue:pause --all`, 13.25+) pauses every
/// queue: the worker finds nothing, and `--stop-when-empty` ends it.
#[test]
fn global_pause_key_pauses_every_queue() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let _: () = redis::cmd("SET")
        .arg("laravel_database_laravel_cache:illuminate:queues:paused")
        .arg("b:1;")
        .query(&mut s.redis.conn(1))
        .unwrap();
    let job = Job::laravel8("App\\Jobs\\Held");
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert!(s.log().is_empty());
    assert_eq!(s.redis.lrange(&q("default")), vec![job.build()]);
}

/// The file cache store: `restart` writes `9999999999i:<time>;` at
/// Laravel's path, a worker reading the same directory stops, and
/// maxExceptions counts in a file with a one-day expiry.
#[test]
fn file_cache_store_restart_and_max_exceptions() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 1");
    let data = s.path("cache-data");
    let db = s.failed_db();
    let config = write_config(
        &s,
        &format!(
            "[redis]\nurl = \"{}\"\nprefix = \"laravel_database_\"\n[cache]\nstore = \"file\"\npath = \"{}\"\n[failed]\nurl = \"{db}\"\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            s.redis.url(0),
            data.display(),
            handler.display()
        ),
    );
    let job = Job::laravel8("App\\Jobs\\Flaky")
        .set("maxExceptions", json!(2))
        .set("maxTries", json!(10));
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    let counter = laravel_file_path(&data, &format!("job-exceptions:{}", job.uuid()));
    let text = std::fs::read_to_string(&counter).unwrap();
    let (expiry, value) = text.split_at(10);
    assert_eq!(value, "i:1;");
    let expiry: i64 = expiry.parse().unwrap();
    assert!(
        (expiry - (now() + 86_400)).abs() <= 5,
        "expires in a day: {expiry}"
    );

    let mut w = s.work(&config, &["--sleep=0.05"]);
    w.wait_stderr(|l| l.contains("worker started"));
    let mut r = cli(&config, &["restart"]);
    assert_eq!(r.code(), Some(0));
    let restart =
        std::fs::read_to_string(laravel_file_path(&data, "illuminate:queue:restart")).unwrap();
    assert!(
        restart.starts_with("9999999999i:") && restart.ends_with(';'),
        "{restart}"
    );
    assert_eq!(w.code(), Some(0));
    assert!(w.stderr.iter().any(|l| l.contains("restart_signal")));
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
    let handler = s.recording_script("h.sh", "exit 0");
    let app = s.path("app");
    std::fs::create_dir_all(app.join("storage/framework")).unwrap();
    std::fs::write(app.join("storage/framework/down"), "{}").unwrap();
    let db = s.failed_db();
    let config = s.config_toml(&format!(
        "[app]\npath = \"{}\"\n[failed]\nurl = \"{db}\"\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        app.display(),
        handler.display()
    ));
    let job = Job::laravel8("App\\Jobs\\Down");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert!(s.log().is_empty());
    assert_eq!(s.redis.lrange(&q("default")), vec![job.build()]);

    let mut d = s.work_until_exit(&config, &["--once", "--force"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(s.log().len(), 1);
    assert!(s.redis.keys(0).is_empty());
}

/// `--env-file`: Redis, prefixes (the app's `_database_`/`_cache`
/// conventions, the ≤10 colon from its framework version), the cache store
/// and the SQLite failed_jobs database all come from the app.
#[test]
fn env_file_configures_everything_from_the_app() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 1");
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
    common::sqlite::create_failed_jobs(&app.join("database/failed.sqlite"));
    let config = write_config(
        &s,
        &format!(
            "[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            handler.display()
        ),
    );
    let job = Job::laravel8("App\\Jobs\\FromEnv");
    let key = "test_app_database_queues:default";
    let _: () = redis::pipe()
        .rpush(key, job.build())
        .rpush(format!("{key}:notify"), 1)
        .query(&mut s.redis.conn(0))
        .unwrap();

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
    d.wait_stderr(|l| {
        l.contains("worker started") && l.contains("test_app_database_queues:default")
    });
    let rows_path = app.join("database/failed.sqlite");
    let deadline = std::time::Instant::now() + common::WAIT;
    while common::sqlite::rows(&rows_path).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no failed row");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rows = common::sqlite::rows(&rows_path);
    assert_eq!(rows[0].uuid, job.uuid());
    assert_eq!(rows[0].connection, "redis");

    let restart = "test_app_database_test_app_cache:illuminate:queue:restart";
    let _: () = redis::cmd("SET")
        .arg(restart)
        .arg(now())
        .query(&mut s.redis.conn(1))
        .unwrap();
    assert_eq!(d.code(), Some(0));
    assert!(d.stderr.iter().any(|l| l.contains("restart_signal")));
    assert!(!s.redis.exists(key));
}

/// `clear` empties a queue's four keys and reports how many jobs they
/// held; `monitor` reports each queue's size and parts.
#[test]
fn clear_and_monitor() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let newest = Job::laravel13("App\\Jobs\\A");
    s.redis.push("default", &newest.build());
    s.redis
        .push("default", &Job::laravel13("App\\Jobs\\B").build());
    s.redis.later(
        "default",
        now() + 60,
        &Job::laravel13("App\\Jobs\\C").build(),
    );
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}:reserved", q("default")))
        .arg(now() + 90)
        .arg(
            Job::laravel13("App\\Jobs\\D")
                .set("attempts", json!(1))
                .build(),
        )
        .query(&mut s.redis.conn(0))
        .unwrap();
    s.redis
        .push("other", &Job::laravel8("App\\Jobs\\E").build());

    let mut m = cli(
        &config,
        &["monitor", "redis:default,other", "--max=3", "--json"],
    );
    assert_eq!(m.code(), Some(0));
    let report: serde_json::Value = serde_json::from_str(&m.stdout[0]).unwrap();
    assert_eq!(report[0]["queue"], "default");
    assert_eq!(report[0]["size"], 4);
    assert_eq!(
        (
            report[0]["pending"].clone(),
            report[0]["delayed"].clone(),
            report[0]["reserved"].clone()
        ),
        (json!(2), json!(1), json!(1))
    );
    assert_eq!(report[0]["oldest_pending"], newest.get("createdAt"));
    assert_eq!(report[0]["status"], "ALERT");
    assert_eq!(report[1]["queue"], "other");
    assert_eq!(report[1]["size"], 1);
    assert_eq!(report[1]["status"], "OK");

    let mut c = cli(&config, &["clear", "redis", "--queue=default"]);
    assert_eq!(c.code(), Some(0));
    assert!(
        c.stdout
            .iter()
            .any(|l| l.contains("Cleared 4 jobs from the [default] queue.")),
        "{:?}",
        c.stdout
    );
    for suffix in ["", ":delayed", ":reserved", ":notify"] {
        assert!(
            !s.redis.exists(&format!("{}{suffix}", q("default"))),
            "{suffix} left"
        );
    }
    assert_eq!(s.redis.llen(&q("other")), 1, "other queues untouched");
}

/// Laravel 11+ joins the cache prefix without a colon: with `colon = false`
/// the restart key is `laravel-database-laravel-cache-illuminate:queue:restart`
/// (the 12.x/13.x skeleton's defaults), and the worker watches that key.
#[test]
fn restart_key_with_the_11_plus_prefix_rule() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = write_config(
        &s,
        &format!(
            "[redis]\nurl = \"{}\"\n[cache]\nurl = \"{}\"\n[failed]\ndriver = \"null\"\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            s.redis.url(0),
            s.redis.url(1),
            handler.display()
        ),
    );
    let mut w = s.work(&config, &["--sleep=0.05"]);
    w.wait_stderr(|l| {
        l.contains("worker started") && l.contains("laravel-database-queues:default")
    });
    let mut r = cli(&config, &["restart"]);
    assert_eq!(r.code(), Some(0));
    assert!(
        cache_get(
            &s,
            "laravel-database-laravel-cache-illuminate:queue:restart"
        )
        .is_some()
    );
    assert_eq!(w.code(), Some(0));
    assert!(w.stderr.iter().any(|l| l.contains("restart_signal")));
}
