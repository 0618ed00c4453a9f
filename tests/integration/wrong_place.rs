//! The worker says when it is probably looking in the wrong place: its
//! queue keys are empty while the same queue holds jobs under another
//! Redis prefix, or the restart key it watches is absent while
//! `queue:restart` wrote one under another cache prefix or colon rule.
//! `work` logs a warning at start naming both keys and the setting to
//! change; `monitor` prints the same hint under its table.

use crate::common;

use common::{Daemon, Job, Scene};

/// The one hint `d` logged, asserted to contain every one of `parts`.
#[track_caller]
fn one_hint_saying(d: &Daemon, parts: &[&str]) -> String {
    let hints = hints(d);
    assert_eq!(hints.len(), 1, "one hint: {hints:?}\n{}", d.stderr_text());
    for part in parts {
        assert!(
            hints[0].contains(part),
            "{part:?} missing from {:?}",
            hints[0]
        );
    }
    hints[0].clone()
}

/// The app's own prefix in these tests (an app named "Shop", Laravel 8).
const APP_PREFIX: &str = "shop_database_";

/// Pushes `job` on queue `queue` under `prefix`, as the app would.
fn push_under(s: &Scene, prefix: &str, queue: &str, job: &Job) {
    let _: i64 = s
        .redis
        .cmd(&["RPUSH", &format!("{prefix}queues:{queue}"), &job.build()]);
}

/// The worker's log lines that carry a wrong-place hint.
fn hints(d: &Daemon) -> Vec<String> {
    d.stderr_text()
        .lines()
        .filter(|l| l.contains("look empty at") || l.contains("restart signal is watched"))
        .map(str::to_string)
        .collect()
}

#[test]
fn jobs_under_another_prefix_are_named_at_start() {
    let (s, config) = Scene::recording("exit 0");
    for _ in 0..3 {
        push_under(&s, APP_PREFIX, "default", &Job::laravel8("App\\Jobs\\Mail"));
    }

    let d = s.run(&config, &["--once", "--sleep=0"]);
    let hint = one_hint_saying(
        &d,
        &[
            "laravel_database_queues:default",
            "shop_database_queues:default",
            "holds 3 job(s)",
            "REDIS_PREFIX",
        ],
    );
    assert!(hint.contains("WARN"), "a warning: {hint:?}");
    assert_eq!(s.log(), Vec::<String>::new(), "nothing ran");
    assert_eq!(
        s.redis.llen("shop_database_queues:default"),
        3,
        "nothing taken"
    );
}

#[test]
fn a_watched_queue_with_jobs_or_nothing_anywhere_gives_no_hint() {
    let (s, config) = Scene::recording("exit 0");
    let d = s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(hints(&d), Vec::<String>::new(), "empty Redis");

    // Jobs under both prefixes: the worker's own queue is not empty.
    s.push(&Job::laravel8("App\\Jobs\\Ours"));
    push_under(
        &s,
        APP_PREFIX,
        "default",
        &Job::laravel8("App\\Jobs\\Theirs"),
    );
    let d = s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(hints(&d), Vec::<String>::new(), "our queue had a job");
    assert_eq!(s.log().len(), 1, "ours ran: {:?}", s.log());

    // Only notify tokens elsewhere: no jobs there, no hint.
    let _: i64 = s.redis.cmd(&["RPUSH", "other_queues:default:notify", "1"]);
    let d = s.run(&config, &["--once", "--sleep=0"]);
    let left: Vec<String> = hints(&d)
        .into_iter()
        .filter(|h| h.contains("other_"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "notify tokens are not jobs");
}

#[test]
fn delayed_and_tagged_queues_elsewhere_are_found_too() {
    let (s, config) = Scene::recording("exit 0");
    let job = Job::laravel8("App\\Jobs\\Later").build();
    let _: i64 = s.redis.cmd(&[
        "ZADD",
        "app-database-queues:emails:delayed",
        "9999999999",
        &job,
    ]);
    let _: i64 = s
        .redis
        .cmd(&["RPUSH", "app-database-queues:{emails}", &job]);

    let d = s.run(&config, &["--once", "--sleep=0", "--queue=emails"]);
    let hints = hints(&d);
    assert_eq!(hints.len(), 2, "{hints:?}");
    assert!(
        hints
            .iter()
            .any(|h| h.contains("\"app-database-queues:emails\"")),
        "{hints:?}"
    );
    assert!(
        hints
            .iter()
            .any(|h| h.contains("\"app-database-queues:{emails}\"")),
        "{hints:?}"
    );
}

#[test]
fn a_restart_key_under_another_cache_prefix_is_named_at_start() {
    let (s, config) = Scene::recording("exit 0");
    // Laravel 11+ drops the ':' after the cache prefix; the worker (with
    // `colon = true`) watches `laravel_cache:illuminate:queue:restart`
    // behind the Redis prefix.
    let _: () = s.redis.cache(&[
        "SET",
        "laravel_database_laravel_cacheilluminate:queue:restart",
        "1700000000",
    ]);

    let d = s.run(&config, &["--once", "--sleep=0"]);
    one_hint_saying(
        &d,
        &[
            "\"laravel_database_laravel_cache:illuminate:queue:restart\"",
            "laravel_database_laravel_cacheilluminate:queue:restart",
            "CACHE_PREFIX",
        ],
    );

    // Once the watched key exists, no hint.
    let _: () = s.redis.cache(&[
        "SET",
        "laravel_database_laravel_cache:illuminate:queue:restart",
        "1700000001",
    ]);
    let d = s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(self::hints(&d), Vec::<String>::new());
}

#[test]
fn monitor_shows_the_same_hint() {
    let (s, config) = Scene::recording("exit 0");
    push_under(&s, APP_PREFIX, "default", &Job::laravel8("App\\Jobs\\Mail"));
    let _: () = s.redis.cache(&[
        "SET",
        "laravel_database_laravel_cacheilluminate:queue:restart",
        "1700000000",
    ]);

    let mut d = Daemon::cli(&config, &["monitor", "redis:default"]);
    d.expect_exit(0);
    let out = d.stdout.join("\n");
    assert!(
        out.contains("Hint: queue keys look empty at \"laravel_database_queues:default\"")
            && out.contains("\"shop_database_queues:default\" holds 1 job(s)"),
        "{out}"
    );
    assert!(
        out.contains("\"laravel_database_laravel_cacheilluminate:queue:restart\""),
        "the restart hint too: {out}"
    );

    let mut d = Daemon::cli(&config, &["monitor", "redis:default", "--json"]);
    d.expect_exit(0);
    let rows: serde_json::Value = serde_json::from_str(&d.stdout.join("\n")).unwrap();
    let hint = rows[0]["hints"][0].as_str().unwrap_or_default();
    assert!(hint.contains("shop_database_queues:default"), "{rows}");
}

#[test]
fn a_restart_key_under_another_prefix_in_the_cache_table_is_named() {
    use sqlx::Connection;
    let s = Scene::new();
    let db = s.path("cache.sqlite");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    common::sqlite::block_on(async {
        let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(
            "create table \"cache\" (\"key\" varchar not null primary key, \
             \"value\" text not null, \"expiration\" integer not null); \
             insert into \"cache\" values \
             ('laravel-cache-illuminate:queue:restart', 'i:1700000000;', 9999999999)",
        )
        .execute(&mut c)
        .await
        .unwrap();
    });
    let config = s
        .config()
        .recording("exit 0")
        .database_cache(&url, "shop-cache-")
        .write();

    let d = s.run(&config, &["--once", "--sleep=0"]);
    one_hint_saying(
        &d,
        &[
            "\"shop-cache-illuminate:queue:restart\"",
            "\"laravel-cache-illuminate:queue:restart\"",
        ],
    );
}

/// An app whose queue connection (`QUEUE_CONNECTION` in its `.env`) has a
/// driver the worker does not run is refused by `work`, exit 1, naming the
/// connection, its driver, the drivers the worker runs and what to do
/// (for `failover`: its member connections); before, the worker served
/// the Redis queue `default` and exited 0 with `--stop-when-empty`, never
/// touching the app's queue. A connection named on the command line is
/// served as before, and `failed` (which opens no queue) still works.
#[test]
fn an_app_connection_of_a_driver_not_run_is_refused_not_served_as_redis() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").write();
    let env = s.path(".env");
    let run = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), "--env-file"];
        all.push(env.to_str().unwrap());
        all.extend_from_slice(args);
        Daemon::run(&all, &[])
    };
    for (connection, says) in [
        ("deferred", "\"deferred\" has driver \"deferred\""),
        ("failover", "laravel-worker work database"),
        ("sync", "never reach a queue"),
    ] {
        std::fs::write(
            &env,
            format!("APP_NAME=shop\nQUEUE_CONNECTION={connection}\n"),
        )
        .unwrap();
        s.push(&Job::laravel8("App\\Jobs\\Waiting"));
        let mut d = run(&["work", "--stop-when-empty", "--sleep=0"]);
        d.expect_exit(1);
        let log = d.stderr_text();
        assert!(log.contains(says), "{connection}: {log}");
        assert!(
            log.contains("\"redis\", \"database\", \"sqs\" and \"beanstalkd\""),
            "{connection}: {log}"
        );
        assert!(!log.contains("worker started"), "{connection}: {log}");
        run(&["failed"]).expect_exit(0);
        // Named on the command line, the Redis connection is served.
        run(&["work", "redis", "--stop-when-empty", "--sleep=0"]).expect_exit(0);
    }
}

/// `work redis` (as every command of the book said before) on an app whose
/// queue connection is `database`, with no Redis to reach: the error says
/// which connection the app uses and what to run (before: "the queue Redis
/// is unreachable" and nothing about the app's queue).
#[test]
fn an_unreachable_redis_on_a_database_app_names_the_apps_connection() {
    let dir = tempfile::Builder::new()
        .prefix("lw-first-")
        .tempdir()
        .unwrap();
    let d = dir.path();
    let config = d.join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"unix://{}/no-redis.sock\"\n\n[failed]\ndriver = \"null\"\n\n\
             [cache]\nstore = \"none\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"true\"]\n",
            d.display()
        ),
    )
    .unwrap();
    let env = d.join(".env");
    std::fs::write(
        &env,
        format!(
            "APP_NAME=shop\nQUEUE_CONNECTION=database\nDB_CONNECTION=sqlite\n\
             DB_DATABASE={}/database.sqlite\n",
            d.display()
        ),
    )
    .unwrap();
    let mut w = Daemon::run(
        &[
            "--config",
            config.to_str().unwrap(),
            "--env-file",
            env.to_str().unwrap(),
            "work",
            "redis",
            "--stop-when-empty",
        ],
        &[],
    );
    w.expect_exit(1);
    let log = w.stderr_text();
    assert!(
        log.contains("the app's own queue connection is \"database\"")
            && log.contains("laravel-worker work without a connection"),
        "{log}"
    );
}

/// `work redis` on an app whose queue connection is `database`, with a
/// Redis reachable (common on Laravel servers): the worker starts on the
/// empty Redis queue and warns that the app's `jobs` table holds jobs it
/// does not serve, with both counts and what to run (before: no word, the
/// jobs waited for ever). Without `redis`, `work` serves the table.
#[test]
fn work_redis_on_a_database_app_with_jobs_waiting_warns_with_both_counts() {
    let s = Scene::new();
    let d = s.dir.path();
    let jobs = common::jobs_table::JobsTable::sqlite(&d.join("database.sqlite"));
    let payload = crate::database_worker::payload("Waiting", "u-waiting");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    jobs.insert("default", &payload, 0, None, now);
    jobs.insert(
        "default",
        &payload.replace("u-waiting", "u-second"),
        0,
        None,
        now,
    );
    let config = d.join("first.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"{}\"\n\n[failed]\ndriver = \"null\"\n\n[cache]\nstore = \"none\"\n\n\
             [[handlers]]\nmatch = \"*\"\ncommand = [\"true\"]\n",
            s.redis.url(0)
        ),
    )
    .unwrap();
    let env = d.join(".env");
    std::fs::write(
        &env,
        format!(
            "APP_NAME=shop\nQUEUE_CONNECTION=database\nDB_CONNECTION=sqlite\nDB_DATABASE={}\n",
            d.join("database.sqlite").display()
        ),
    )
    .unwrap();
    let args = |connection: &[&'static str]| -> Vec<String> {
        let mut all = vec![
            "--config".to_string(),
            config.display().to_string(),
            "--env-file".to_string(),
            env.display().to_string(),
            "work".to_string(),
        ];
        all.extend(connection.iter().map(|c| c.to_string()));
        all.push("--stop-when-empty".to_string());
        all
    };
    let on_redis = args(&["redis"]);
    let mut w = Daemon::run(
        &on_redis.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    w.expect_stop(0, "empty");
    let log = w.stderr_text();
    let said = log
        .lines()
        .find(|l| l.contains("holds 2 jobs on default"))
        .unwrap_or_else(|| panic!("no warning in:\n{log}"));
    assert!(
        said.contains("\"database\"")
            && said.contains("serves \"redis\" (0 jobs there)")
            && said.contains("work without a connection"),
        "{said}"
    );
    assert_eq!(jobs.count(), 2, "the table's jobs are left alone");
    let on_app = args(&[]);
    let mut w = Daemon::run(&on_app.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    w.expect_stop(0, "empty");
    assert_eq!(
        jobs.count(),
        0,
        "work without a connection serves the app's table"
    );
    assert!(
        !w.stderr_text().contains("does not serve"),
        "{}",
        w.stderr_text()
    );
}
