//! `--app` on the Laravel 8.83 test app: the worker reads the app's own
//! resolved configuration through PHP and needs no other setting. (The
//! `.env` rules without PHP, for Laravel 11–12 apps, are checked against
//! recordings in `tests/integration/recordings.rs`.)
//!
//! Skips, with a note, where PHP or Debian's Laravel is missing.

use crate::common;

use common::laravel::{App, LARAVEL, Transport};
use common::{Daemon, Scene, q};
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

/// `work --app=… --stop-when-empty` on the Laravel 8 app, its config
/// first edited by `edit`; the daemon, exited.
fn work_on_edited_app(edit: impl FnOnce(&App)) -> Option<(Scene, Daemon)> {
    let (s, app, config) = common::laravel::scene(Transport::PerJob)?;
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

/// An app that prints on stdout and exits while it boots fails with what
/// it printed, not an empty message.
#[test]
fn an_app_that_exits_while_booting_says_what_it_printed() {
    if std::process::Command::new("php")
        .arg("-v")
        .output()
        .is_err()
    {
        common::skip::note("php", "not on the PATH");
        return;
    }
    let s = Scene::new();
    let app = s.path("app");
    std::fs::create_dir_all(app.join("bootstrap")).unwrap();
    std::fs::write(
        app.join("bootstrap/app.php"),
        "<?php\nfile_put_contents('php://stdout', \"Booting the shop\\n\"); exit(1);\n",
    )
    .unwrap();
    let config = s.config().settings_from_app().write();
    let flag = format!("--app={}", app.display());
    let mut d = s.work(&config, &[flag.as_str(), "--once"]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("the last line printed on stdout: Booting the shop"),
        "{log}"
    );
}

/// `--app` on a database queue connection, through the real PHP and
/// Laravel 8.83: a connection of any name whose driver is `database`
/// (here `jobs-db`, with the app's table, queue and `retry_after =>
/// null`) is the database queue on the app's default database
/// connection (`connection` unset), whether `work jobs-db` names it or
/// `QUEUE_CONNECTION` makes it the default; `work redis` stays on Redis,
/// and a connection of another driver (`sync`) is refused, naming it.
#[test]
fn app_config_resolves_a_database_connection_on_laravel_8() {
    use laravel_worker::config::{QueueDriverSettings, Settings};

    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    app.edit_config(
        "queue.php",
        "        'sync' => [",
        "        'jobs-db' => [\n            'driver' => 'database',\n            \
         'table' => 'queue_jobs',\n            'queue' => 'mail',\n            \
         'retry_after' => null,\n        ],\n        'sync' => [",
    );
    let database = format!("sqlite://{}", app.scene().join("failed.sqlite").display());
    let check = |settings: &Settings| {
        let QueueDriverSettings::Database(spec) = &settings.driver else {
            panic!("not the database driver: {:?}", settings.driver);
        };
        assert_eq!(spec.url, database, "the app's default database connection");
        assert_eq!(spec.table, "queue_jobs");
        assert_eq!(spec.retry_after, 60, "retry_after => null is 60 s here");
        assert_eq!(settings.default_queue, "mail");
        assert_eq!(settings.connection, "jobs-db");
        assert_eq!(settings.block_for, None);
    };
    let load = |connection: Option<&str>| {
        Settings::load_connection(None, None, Some(app.dir.as_path()), connection)
    };
    check(&load(Some("jobs-db")).unwrap());
    app.set_env("QUEUE_CONNECTION", "jobs-db");
    check(&load(None).unwrap());
    let redis = load(Some("redis")).unwrap();
    assert_eq!(redis.driver, QueueDriverSettings::Redis);
    assert_eq!(redis.connection, "redis");
    let e = format!("{:#}", load(Some("sync")).unwrap_err());
    assert!(e.contains("\"sync\" has driver \"sync\""), "{e}");
}

/// Laravel 12.34+'s `failover` connection, written into the 8.83 app's
/// `config/queue.php` as the skeleton has it (`[database, deferred]`) and
/// made the default: `work` refuses it at start (exit 1, no worker started)
/// naming the app's actual members, the `work database` command, and
/// `deferred` as no queue; `work failover` says the same. The command it
/// names then runs the job the app dispatched to its `database` member.
#[test]
fn a_failover_connection_is_refused_naming_its_members_and_their_commands() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    app.edit_config(
        "queue.php",
        "        'sync' => [",
        "        'failover' => [\n            'driver' => 'failover',\n            \
         'connections' => ['database', 'deferred'],\n        ],\n        \
         'deferred' => [\n            'driver' => 'deferred',\n        ],\n        'sync' => [",
    );
    let jobs = common::jobs_table::JobsTable::sqlite(&app.scene().join("failed.sqlite"));
    // Laravel 8.83 has no FailoverQueue: the job goes to the member itself.
    app.set_env("QUEUE_CONNECTION", "database");
    app.dispatch(json!([{"kind": "plain", "tag": "member"}]));
    assert_eq!(jobs.rows().len(), 1, "dispatched to the database member");
    app.set_env("QUEUE_CONNECTION", "failover");
    let config = app.config_from_app(&s, Transport::PerJob);
    let flag = app.app_flag();
    for named in [None, Some("failover")] {
        let mut args = vec![flag.as_str()];
        args.extend(named);
        args.extend(["--stop-when-empty", "--sleep=0"]);
        let mut d = s.work(&config, &args);
        d.expect_exit(1);
        let log = d.stderr_text();
        for says in [
            "\"failover\" has driver \"failover\"",
            "(queue.connections.failover.connections) are [database, deferred]",
            "with this command's other options: laravel-worker work database;",
            "deferred (driver \"deferred\") is not a queue",
        ] {
            assert!(log.contains(says), "{named:?}: no {says:?} in:\n{log}");
        }
        assert!(!log.contains("worker started"), "{log}");
    }
    assert_eq!(jobs.rows().len(), 1, "nothing was touched");
    let args = [flag.as_str(), "database", "--stop-when-empty", "--sleep=0"];
    s.work(&config, &args).expect_stop(0, "empty");
    assert_eq!(app.attempts("member"), vec![1], "the named command ran it");
    assert_eq!(jobs.rows(), vec![]);
}
