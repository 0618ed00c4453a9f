//! Laravel Pulse's entries for jobs a non-PHP handler runs (`[pulse]`):
//! the Redis ingest stream read back and unserialized by real PHP into an
//! `Entry` of Pulse's shape, and Pulse's tables on SQLite and PostgreSQL
//! (made by the test from the columns of Pulse's migration) holding the
//! counts after the jobs ran.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Config, Job, Scene};
use serde_json::Value;
use sqlx::Connection;

/// `Bad` jobs fail (exit 1), the others succeed.
const OUTCOMES: &str = r#"case "$LARAVEL_WORKER_JOB_NAME" in *Bad) echo boom >&2; exit 1;; esac"#;

/// The stream under the scene's Redis prefix.
const STREAM: &str = "laravel_database_laravel:pulse:ingest";

/// Pulse on, every job slow (threshold 0), with `more` settings.
fn pulse<'s>(config: Config<'s>, more: &[(&str, Value)]) -> Config<'s> {
    let mut config = config
        .set("pulse", "enabled", true)
        .set("pulse", "slow_jobs_threshold", 0);
    for (key, value) in more {
        let value: toml::Value = match value {
            Value::String(s) => s.clone().into(),
            Value::Number(n) if n.is_f64() => n.as_f64().unwrap_or(0.0).into(),
            Value::Number(n) => n.as_i64().unwrap_or(0).into(),
            Value::Bool(b) => (*b).into(),
            other => panic!("unsupported {other}"),
        };
        config = config.set("pulse", key, value);
    }
    config
}

/// Good, then Bad twice (released after its exception, then failed):
/// three runs under `--tries=2`.
fn run_three(s: &Scene, config: &Path) {
    let [good, bad] = Job::named(["Good", "Bad"]);
    s.push_on("default", [&good, &bad]);
    s.run(config, &["--max-jobs=3", "--tries=2", "--sleep=0.05"]);
}

/// The stream's `data` fields, in order.
fn stream(s: &Scene) -> Vec<Vec<u8>> {
    let entries: Vec<(String, Vec<Vec<u8>>)> = s.redis.cmd(&["XRANGE", STREAM, "-", "+"]);
    entries
        .into_iter()
        .map(|(_, fields)| {
            assert_eq!(fields.len(), 2, "one field");
            assert_eq!(fields[0], b"data");
            fields[1].clone()
        })
        .collect()
}

/// A class of Pulse's `Entry` shape (laravel/pulse 1.x `src/Entry.php`:
/// protected `aggregations` and `onlyBuckets`, public promoted
/// `timestamp`, `type`, `key`, `value`), which unserializes each hex line
/// of the file it is given, allowing that class only, and prints them.
const PHP_ENTRY: &str = r#"<?php
namespace Laravel\Pulse;
class Entry {
    protected array $aggregations = [];
    protected bool $onlyBuckets = false;
    public function __construct(public int $timestamp, public string $type, public string $key, public ?int $value = null) {}
    public function fields(): array {
        return ['timestamp' => $this->timestamp, 'type' => $this->type, 'key' => $this->key,
            'value' => $this->value, 'aggregations' => $this->aggregations, 'onlyBuckets' => $this->onlyBuckets];
    }
}
$out = [];
foreach (file($argv[1], FILE_IGNORE_NEW_LINES) as $line) {
    $entry = unserialize(hex2bin($line), ['allowed_classes' => [Entry::class]]);
    if (! $entry instanceof Entry) { fwrite(STDERR, "not an Entry: $line\n"); exit(1); }
    $out[] = $entry->fields();
}
echo json_encode($out);
"#;

/// The entries as PHP unserializes them.
fn unserialized(s: &Scene, data: &[Vec<u8>]) -> Vec<Value> {
    let lines: Vec<String> = data.iter().map(hex::encode).collect();
    std::fs::write(s.path("entries.hex"), lines.join("\n")).unwrap();
    std::fs::write(s.path("entry.php"), PHP_ENTRY).unwrap();
    let out = common::succeeds(
        std::process::Command::new("php")
            .arg(s.path("entry.php"))
            .arg(s.path("entries.hex")),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_stream_holds_entries_php_unserializes_as_pulses() {
    if !common::skip::have("php", "unserializes the entries") {
        return;
    }
    let s = Scene::new();
    let config = pulse(
        s.config().recording(OUTCOMES),
        &[("ingest", "redis".into())],
    )
    .write();
    let started = common::now();
    run_three(&s, &config);
    let entries = unserialized(&s, &stream(&s));
    let counts: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["type"] != "slow_job")
        .map(|e| (e["type"].as_str().unwrap(), e["key"].as_str().unwrap()))
        .collect();
    let key = "redis:default";
    assert_eq!(
        counts,
        [
            ("processing", key),
            ("processed", key),
            ("processing", key),
            ("released", key),
            ("processing", key),
            ("failed", key),
        ],
        "{entries:?}"
    );
    for e in entries.iter().filter(|e| e["type"] != "slow_job") {
        assert_eq!(e["aggregations"], serde_json::json!(["count"]));
        assert_eq!(e["onlyBuckets"], true);
        assert_eq!(e["value"], Value::Null);
        let at = e["timestamp"].as_i64().unwrap();
        assert!(at >= started - 1 && at <= common::now(), "{e}");
    }
    let slow: Vec<&Value> = entries.iter().filter(|e| e["type"] == "slow_job").collect();
    assert_eq!(slow.len(), 3, "{entries:?}");
    assert_eq!(slow[0]["key"], "App\\Jobs\\Good");
    assert_eq!(slow[0]["aggregations"], serde_json::json!(["max", "count"]));
    assert_eq!(slow[0]["onlyBuckets"], false);
    assert!(slow[0]["value"].as_i64().is_some_and(|ms| ms >= 0));
}

/// At sample rate 0 nothing is recorded; at 1 (the default, the test
/// above) every job is.
#[test]
fn sampling_at_zero_records_nothing() {
    let s = Scene::new();
    let rates = [
        ("ingest", Value::from("redis")),
        ("queues_sample_rate", Value::from(0.0)),
        ("slow_jobs_sample_rate", Value::from(0.0)),
    ];
    let config = pulse(s.config().recording(OUTCOMES), &rates).write();
    run_three(&s, &config);
    let runs = s.log().iter().filter(|l| !l.starts_with("failed")).count();
    assert_eq!(runs, 3, "the jobs ran: {:?}", s.log());
    assert!(stream(&s).is_empty());
}

/// A handler that runs `laravel-worker-bridge.php` is the bridge: its
/// jobs fired Laravel's events in PHP, where the app's Pulse recorded
/// them, so the daemon records nothing for them. (A shell script under
/// that name stands in for the bridge: the feed decides from the route.)
#[test]
fn jobs_the_bridge_runs_are_not_recorded_twice() {
    let s = Scene::new();
    let bridge = s.recording_script("laravel-worker-bridge.php", "");
    let other = s.recording_script("other.sh", "");
    let config = pulse(s.config(), &[("ingest", "redis".into())])
        .handler(common::Handler::command(&bridge).matching("App\\Jobs\\Php*"))
        .handler(common::Handler::command(&other))
        .write();
    let [php, python] = Job::named(["PhpJob", "PythonJob"]);
    s.push_on("default", [&php, &python]);
    s.run(&config, &["--max-jobs=2", "--sleep=0.05"]);
    assert_eq!(s.log().len(), 2, "both ran");
    let entries = unserialized_or_raw(&s);
    assert!(entries.iter().all(|e| !e.contains("PhpJob")), "{entries:?}");
    assert!(
        entries.iter().any(|e| e.contains("PythonJob")),
        "{entries:?}"
    );
    assert_eq!(
        entries.len(),
        3,
        "processing, processed, slow_job: {entries:?}"
    );
}

/// The stream's entries as text (no PHP needed).
fn unserialized_or_raw(s: &Scene) -> Vec<String> {
    stream(s)
        .iter()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .collect()
}

/// Pulse's tables on SQLite, as the migration makes them there
/// (`key_hash` a plain string column).
const SQLITE_TABLES: &str = r#"
create table pulse_entries (id integer primary key autoincrement not null, "timestamp" integer not null,
  "type" varchar not null, "key" text not null, key_hash varchar not null, "value" integer);
create table pulse_aggregates (id integer primary key autoincrement not null, bucket integer not null,
  period integer not null, "type" varchar not null, "key" text not null, key_hash varchar not null,
  aggregate varchar not null, "value" numeric not null, "count" integer,
  unique (bucket, period, "type", aggregate, key_hash));
"#;

/// Pulse's tables on PostgreSQL; `generated`: `key_hash` generated from
/// `key` as before the 2026-02-13 migration, else plain.
fn postgres_tables(generated: bool) -> String {
    let hash = if generated {
        r#"uuid generated always as (md5("key")::uuid) stored"#
    } else {
        "uuid not null"
    };
    format!(
        r#"create table pulse_entries (id bigserial primary key, "timestamp" integer not null,
  "type" varchar(255) not null, "key" text not null, key_hash {hash}, "value" bigint);
create table pulse_aggregates (id bigserial primary key, bucket integer not null,
  period integer not null, "type" varchar(255) not null, "key" text not null, key_hash {hash},
  aggregate varchar(255) not null, "value" decimal(20, 2) not null, "count" integer,
  unique (bucket, period, "type", aggregate, key_hash));"#
    )
}

/// What the tables hold: per (type, aggregate) the one-hour period's
/// summed value, and the `pulse_entries` rows as (type, key, key_hash
/// without dashes).
type Tables = (
    BTreeMap<(String, String), i64>,
    Vec<(String, String, String)>,
);

const AGGREGATES: &str = r#"select "type", aggregate, cast(sum("value") as bigint) from pulse_aggregates
  where period = 60 and aggregate = 'count' group by "type", aggregate
  union all select "type", aggregate, cast(max("value") as bigint) from pulse_aggregates
  where period = 60 and aggregate = 'max' group by "type", aggregate"#;
const ENTRIES: &str =
    r#"select "type", "key", cast(key_hash as text) from pulse_entries order by id"#;

/// Reads [`Tables`] with a connection of either engine.
macro_rules! read_tables {
    ($conn:expr) => {{
        let sums: Vec<(String, String, i64)> = sqlx::query_as(AGGREGATES)
            .fetch_all(&mut $conn)
            .await
            .unwrap();
        let rows: Vec<(String, String, String)> =
            sqlx::query_as(ENTRIES).fetch_all(&mut $conn).await.unwrap();
        let sums = sums.into_iter().map(|(t, a, v)| ((t, a), v)).collect();
        (sums, rows)
    }};
}

/// The buckets and rows after the three runs, whatever the engine.
fn assert_tables(tables: &Tables) {
    let (sums, rows) = tables;
    let sum = |t: &str, a: &str| sums.get(&(t.to_string(), a.to_string())).copied();
    assert_eq!(sum("processing", "count"), Some(3), "{sums:?}");
    assert_eq!(sum("processed", "count"), Some(1), "{sums:?}");
    assert_eq!(sum("released", "count"), Some(1), "{sums:?}");
    assert_eq!(sum("failed", "count"), Some(1), "{sums:?}");
    assert_eq!(sum("slow_job", "count"), Some(3), "{sums:?}");
    assert!(sum("slow_job", "max").is_some(), "{sums:?}");
    assert_eq!(rows.len(), 3, "only the slow jobs keep a row: {rows:?}");
    for (kind, key, hash) in rows {
        assert_eq!(kind, "slow_job");
        let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(key.as_bytes()));
        assert_eq!(hash.replace('-', ""), md5, "{key}");
    }
}

#[test]
fn sqlite_tables_hold_the_counts_and_the_slow_jobs() {
    let s = Scene::new();
    let url = format!("sqlite://{}", s.path("pulse.sqlite").display());
    common::sqlite::block_on(async {
        let mut c = sqlx::SqliteConnection::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::raw_sql(SQLITE_TABLES).execute(&mut c).await.unwrap();
    });
    let config = pulse(
        s.config().recording(OUTCOMES),
        &[("url", url.clone().into())],
    )
    .write();
    run_three(&s, &config);
    let tables = common::sqlite::block_on(async {
        let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
        read_tables!(c)
    });
    assert_tables(&tables);
}

/// PostgreSQL, with `key_hash` generated (Pulse before 2026-02-13: not
/// written) and plain (after: written as `md5(key)::uuid`).
#[test]
fn postgres_tables_hold_the_counts_whether_key_hash_is_generated_or_not() {
    let Some(pg) = common::databases::Postgres::start() else {
        return;
    };
    for generated in [true, false] {
        let s = Scene::new();
        let url = pg.create_database(if generated {
            "pulse_generated"
        } else {
            "pulse_plain"
        });
        common::sqlite::block_on(async {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(postgres_tables(generated)))
                .execute(&mut c)
                .await
                .unwrap();
        });
        let config = pulse(
            s.config().recording(OUTCOMES),
            &[("url", url.clone().into())],
        )
        .write();
        run_three(&s, &config);
        let tables = common::sqlite::block_on(async {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            read_tables!(c)
        });
        assert_tables(&tables);
    }
}

/// `[pulse] enabled = true` with no Pulse tables where it should write:
/// the start is refused, naming the table.
#[test]
fn required_pulse_without_its_tables_refuses_to_start() {
    let s = Scene::new();
    let url = format!("sqlite://{}?mode=rwc", s.path("empty.sqlite").display());
    let config = pulse(s.config().recording(""), &[("url", url.into())]).write();
    let stderr = s.work_exits(&config, 1);
    assert!(stderr.contains("pulse_entries"), "{stderr}");
}

/// Runs `work` on `config` with `env` until two jobs are done.
fn run_two_with_env(s: &Scene, config: &Path, env: &[(&str, &str)]) -> common::Daemon {
    let [a, b] = Job::named(["First", "Second"]);
    s.push_on("default", [&a, &b]);
    let args = [
        "--config",
        config.to_str().unwrap(),
        "work",
        "--max-jobs=2",
        "--sleep=0.05",
    ];
    let mut d = common::Daemon::start(&args, env);
    d.expect_exit(0);
    d
}

/// No `[pulse]`: the app's `PULSE_INGEST_DRIVER=redis` says where its Pulse
/// ingests, and the feed writes there.
#[test]
fn the_apps_pulse_settings_turn_it_on_without_a_pulse_section() {
    let s = Scene::new();
    let config = s.config().recording("").write();
    let env = [
        ("PULSE_INGEST_DRIVER", "redis"),
        ("PULSE_SLOW_JOBS_THRESHOLD", "0"),
    ];
    run_two_with_env(&s, &config, &env);
    let entries = unserialized_or_raw(&s);
    assert_eq!(
        entries.len(),
        6,
        "2 x processing, processed, slow_job: {entries:?}"
    );
}

/// Nothing says the app has Pulse (no `[pulse]`, no `PULSE_*`, no
/// database): no listener, nothing written.
#[test]
fn without_pulse_nothing_is_written() {
    let s = Scene::new();
    let config = s.config().recording("").write();
    let d = run_two_with_env(&s, &config, &[]);
    assert!(stream(&s).is_empty());
    let stderr = d.stderr_text();
    assert!(!stderr.contains("Laravel Pulse"), "{stderr}");
}

/// `PULSE_ENABLED=false` turns it off whatever else says Pulse is there.
#[test]
fn pulse_enabled_false_turns_it_off() {
    let s = Scene::new();
    let config = s.config().recording("").write();
    let env = [("PULSE_ENABLED", "false"), ("PULSE_INGEST_DRIVER", "redis")];
    run_two_with_env(&s, &config, &env);
    assert!(stream(&s).is_empty());
}

/// The app's database has Pulse's tables (no `PULSE_*` variable): the
/// feed writes them; an app whose database has none gets no feed, and
/// starts all the same.
#[test]
fn pulses_tables_in_the_apps_database_turn_it_on() {
    let s = Scene::new();
    let config = s.config().recording("").write();
    let db = s.path("app.sqlite");
    let env = [
        ("DB_CONNECTION", "sqlite"),
        ("DB_DATABASE", db.to_str().unwrap()),
    ];
    // DB_CONNECTION is the failed store's too.
    common::sqlite::create_failed_jobs(&db);
    let d = run_two_with_env(&s, &config, &env);
    let stderr = d.stderr_text();
    assert!(stderr.contains("are not written"), "says why: {stderr}");

    common::sqlite::block_on(async {
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::raw_sql(SQLITE_TABLES).execute(&mut c).await.unwrap();
    });
    run_two_with_env(&s, &config, &env);
    let processed: i64 = common::sqlite::block_on(async {
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query_scalar(
            "select cast(sum(value) as integer) from pulse_aggregates \
             where period = 60 and type = 'processed'",
        )
        .fetch_one(&mut c)
        .await
        .unwrap()
    });
    assert_eq!(processed, 2);
}

/// Pulse's tables on MariaDB; `generated`: `key_hash` a virtual column of
/// `unhex(md5(key))` as before the 2026-02-13 migration, else plain
/// `binary(16)`.
fn mariadb_tables(generated: bool) -> String {
    let hash = if generated {
        "binary(16) as (unhex(md5(`key`))) virtual"
    } else {
        "binary(16) not null"
    };
    format!(
        "create table pulse_entries (id bigint unsigned auto_increment primary key,
  `timestamp` int unsigned not null, `type` varchar(255) not null, `key` mediumtext not null,
  key_hash {hash}, `value` bigint null);
create table pulse_aggregates (id bigint unsigned auto_increment primary key,
  bucket int unsigned not null, period mediumint unsigned not null, `type` varchar(255) not null,
  `key` mediumtext not null, key_hash {hash}, aggregate varchar(255) not null,
  `value` decimal(20, 2) not null, `count` int unsigned null,
  unique key pulse_aggregates_unique (bucket, period, `type`, aggregate, key_hash));"
    )
}

/// MariaDB, with `key_hash` generated (not written) and plain (written as
/// `unhex(md5(key))`); `key` is a reserved word there.
#[test]
fn mariadb_tables_hold_the_counts_whether_key_hash_is_generated_or_not() {
    let Some(db) = common::databases::MariaDb::start() else {
        return;
    };
    for generated in [true, false] {
        let s = Scene::new();
        let url = db.create_database(if generated {
            "pulse_generated"
        } else {
            "pulse_plain"
        });
        common::sqlite::block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(mariadb_tables(generated)))
                .execute(&mut c)
                .await
                .unwrap();
        });
        let config = pulse(
            s.config().recording(OUTCOMES),
            &[("url", url.clone().into())],
        )
        .write();
        run_three(&s, &config);
        let tables: Tables = common::sqlite::block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
            let sums: Vec<(String, String, i64)> = sqlx::query_as(
                "select `type`, aggregate, cast(sum(`value`) as signed) from pulse_aggregates
                 where period = 60 and aggregate = 'count' group by `type`, aggregate
                 union all select `type`, aggregate, cast(max(`value`) as signed)
                 from pulse_aggregates where period = 60 and aggregate = 'max'
                 group by `type`, aggregate",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            let rows: Vec<(String, String, String)> = sqlx::query_as(
                "select `type`, cast(`key` as char), lower(hex(key_hash)) from pulse_entries order by id",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            (
                sums.into_iter().map(|(t, a, v)| ((t, a), v)).collect(),
                rows,
            )
        });
        assert_tables(&tables);
    }
}

/// A `config/pulse.php` of Pulse's shape, written by the test (the 8.83
/// app has no Pulse): the Redis ingest on the default connection, both
/// recorders on, the slow-job threshold a per-job map whose `default` is 0.
const PULSE_PHP: &str = r#"<?php
return [
    'enabled' => true,
    'ingest' => ['driver' => 'redis', 'redis' => ['connection' => null]],
    'storage' => ['database' => ['connection' => null]],
    'recorders' => [
        'Laravel\Pulse\Recorders\Queues' => ['enabled' => true, 'sample_rate' => 1],
        'Laravel\Pulse\Recorders\SlowJobs' => ['enabled' => true, 'sample_rate' => 1,
            'threshold' => ['#^App\\\\Jobs\\\\Never$#' => 5000, 'default' => 0]],
    ],
];
"#;

/// With `--app`, the app's own `config/pulse.php` (as Laravel resolves
/// it) says where Pulse ingests: no `[pulse]`, no `PULSE_*` variable.
#[test]
fn the_apps_config_pulse_php_turns_it_on() {
    let s = Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    std::fs::write(app.dir.join("config/pulse.php"), PULSE_PHP).unwrap();
    let config = s.config().recording("").write();
    let [a, b] = Job::named(["First", "Second"]);
    s.push_on("default", [&a, &b]);
    let flag = app.app_flag();
    let log = s
        .run(&config, &[flag.as_str(), "--max-jobs=2", "--sleep=0.05"])
        .stderr_text();
    assert!(
        log.contains("setting pulse ingest = redis (app config)"),
        "{log}"
    );
    let entries = unserialized_or_raw(&s);
    assert_eq!(
        entries.len(),
        6,
        "2 x processing, processed, slow_job: {entries:?}"
    );
}

/// Per-job rules from the app's `config/pulse.php`: a threshold map (the
/// first matching pattern wins), the `Queues` and `SlowJobs` recorders'
/// `ignore` lists, matched against the job's name.
const PULSE_RULES_PHP: &str = r#"<?php
return [
    'enabled' => true,
    'ingest' => ['driver' => 'redis', 'redis' => ['connection' => null]],
    'storage' => ['database' => ['connection' => null]],
    'recorders' => [
        'Laravel\Pulse\Recorders\Queues' => ['enabled' => true, 'sample_rate' => 1,
            'ignore' => ['/^app\\\\jobs\\\\second$/i']],
        'Laravel\Pulse\Recorders\SlowJobs' => ['enabled' => true, 'sample_rate' => 1,
            'threshold' => ['#\\\\First$#' => 600000, '#\\\\F#' => 0, 'default' => 0],
            'ignore' => ['#Third#']],
    ],
];
"#;

#[test]
fn the_apps_per_job_thresholds_and_ignore_lists_apply() {
    let s = Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    std::fs::write(app.dir.join("config/pulse.php"), PULSE_RULES_PHP).unwrap();
    let config = s.config().recording("").write();
    let jobs = Job::named(["First", "Second", "Third"]);
    s.push_on("default", jobs.iter());
    let flag = app.app_flag();
    s.run(&config, &[flag.as_str(), "--max-jobs=3", "--sleep=0.05"]);
    let entries = unserialized_or_raw(&s);
    let of = |kind: &str| -> Vec<&String> {
        entries
            .iter()
            .filter(|e| e.contains(&format!("\"{kind}\"")))
            .collect()
    };
    // First: counted, under its own 10-minute threshold; Second: not
    // counted (Queues' ignore), slow (the default 0); Third: counted,
    // never slow (SlowJobs' ignore). Before: every job counted and slow.
    assert_eq!(of("processing").len(), 2, "{entries:?}");
    let slow = of("slow_job");
    assert_eq!(slow.len(), 1, "{entries:?}");
    assert!(slow[0].contains(r"App\Jobs\Second"), "{slow:?}");
}
