//! Whole jobs, part 1 (issue 45): the unique lock and the batch counters
//! of a job run by a handler that is not the PHP bridge, written by the
//! worker before the job leaves the queue, on a real redis-server and a
//! real SQLite file; the PHP bridge's jobs never booked twice.

use crate::common;

use common::recordings;
use common::sqlite;
use common::{Job, Scene};
use serde_json::json;

/// The lock key of the 12.67 recording's `UniqueJob`.
const KEY: &str = "laravel_unique_job:App\\Jobs\\UniqueJob:k";
/// The Scene's cache prefix on Redis (`laravel_database_` +
/// `laravel_cache` + `:`).
const REDIS_PREFIX: &str = "laravel_database_laravel_cache:";

/// The recorded 12.67 `UniqueJob` payload, its lock in `store`.
fn unique_payload(store: &str) -> String {
    let raw = recordings::read("laravel12/payloads/unique.json");
    raw.replace(
        "s:8:\\\"database\\\";",
        &format!("s:{}:\\\"{store}\\\";", store.len()),
    )
}

/// A 13.24-style payload: the context's hidden part with the lock's
/// store, key and owner, each PHP-serialized (the documented shape).
fn owned_payload(owner: &str) -> String {
    let ser = |s: &str| format!("s:{}:\"{s}\";", s.len());
    Job::laravel13("App\\Jobs\\UniqueJob")
        .set(
            "illuminate:log:context",
            json!({"data": [], "hidden": {
                "laravel_unique_job_cache_store": ser("redis"),
                "laravel_unique_job_key": ser(KEY),
                "laravel_unique_job_lock_owner": ser(owner),
            }}),
        )
        .build()
}

#[test]
fn a_process_handler_s_unique_job_has_its_redis_lock_released() {
    let (s, config) = Scene::configured(|c| c.script("exit 0"));
    let lock = format!("{REDIS_PREFIX}{KEY}");
    let _: () = s
        .redis
        .cmd(&["SET", &lock, "oxo2vtxMweerU2DO", "EX", "3600"]);
    s.redis.push("default", &unique_payload("redis"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let left: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(left, 0, "the lock is released (DEL on the lock connection)");
}

#[test]
fn an_owner_is_compared_before_the_delete() {
    let (s, config) = Scene::configured(|c| c.script("exit 0"));
    let lock = format!("{REDIS_PREFIX}{KEY}");
    // A new dispatch took the lock since: another owner's lock stays.
    let _: () = s.redis.cmd(&["SET", &lock, "someone-else"]);
    s.redis.push("default", &owned_payload("mine"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let value: Option<String> = s.redis.cmd(&["GET", &lock]);
    assert_eq!(value.as_deref(), Some("someone-else"));
    // The job's own lock goes.
    let _: () = s.redis.cmd(&["SET", &lock, "mine"]);
    s.redis.push("default", &owned_payload("mine"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let left: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(left, 0);
}

#[test]
fn a_released_job_keeps_its_lock_and_until_processing_is_released_before_the_run() {
    let (s, config) = Scene::configured(|c| {
        c.script("echo '{\"action\":\"release\",\"delay\":60}' > \"$LARAVEL_WORKER_RESULT\"")
    });
    let lock = format!("{REDIS_PREFIX}{KEY}");
    let _: () = s.redis.cmd(&["SET", &lock, "o"]);
    s.redis.push("default", &unique_payload("redis"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let left: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(left, 1, "a job released back keeps its lock");

    // UntilProcessing: the handler runs after the lock is gone, and a lock
    // taken again meanwhile (by a new dispatch) is not deleted after.
    let config = s
        .config()
        .set(
            "bookkeeping",
            "until_processing",
            vec!["App\\Jobs\\UniqueJob".to_string()],
        )
        .script(&format!(
            "redis-cli -s '{}' EXISTS '{lock}' > \"$DIR/seen\"; redis-cli -s '{}' SET '{lock}' new > /dev/null",
            s.path("redis.sock").display(),
            s.path("redis.sock").display()
        ))
        .write();
    let _: () = s
        .redis
        .cmd(&["DEL", "laravel_database_queues:default:delayed"]);
    s.redis.push("default", &unique_payload("redis"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.read("seen"), "0", "released before the handler ran");
    let value: Option<String> = s.redis.cmd(&["GET", &lock]);
    assert_eq!(value.as_deref(), Some("new"), "not deleted after the run");
}

#[test]
fn a_database_store_lock_is_released_from_cache_locks() {
    let s = Scene::new();
    let db = s.path("app.sqlite");
    sqlite::execute(
        &db,
        "create table cache_locks (\"key\" varchar not null primary key, owner varchar not null, expiration integer not null)",
        &[],
    );
    sqlite::execute(
        &db,
        "insert into cache_locks values (?, 'zIXCBQS2gXXXFX0k', 9999999999)",
        &[&format!("laravel-cache-{KEY}")],
    );
    let url = format!("sqlite://{}", db.display());
    let config = s
        .config()
        .set("cache", "store", "database")
        .set("cache", "url", url.as_str())
        .set("cache", "prefix", "laravel-cache-")
        .set("cache", "colon", false)
        .set("bookkeeping", "batches_url", url.as_str())
        .script("exit 0")
        .write();
    s.redis.push("default", &unique_payload("database"));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let left = sqlite::strings(&db, "SELECT \"key\" FROM cache_locks");
    assert!(left.is_empty(), "{left:?}");
}

/// A `job_batches` table (Laravel's migration) with one batch `name` of
/// `total` jobs, its options allowing failures or not; returns its id.
fn batch(db: &std::path::Path, name: &str, total: i64, allow_failures: bool) -> String {
    let id = format!("9f{name}-0000-4000-8000-000000000000");
    batches_table(db);
    let options = if allow_failures {
        "a:1:{s:13:\"allowFailures\";b:1;}"
    } else {
        "a:0:{}"
    };
    sqlite::execute(
        db,
        "insert into job_batches values (?, ?, ?, ?, 0, '[]', ?, null, 1, null)",
        &[&id, name, &total.to_string(), &total.to_string(), options],
    );
    id
}

/// Laravel's `job_batches` table in the SQLite file `db`.
fn batches_table(db: &std::path::Path) {
    sqlite::execute(
        db,
        "create table if not exists job_batches (id varchar not null primary key, name varchar not null, \
         total_jobs integer not null, pending_jobs integer not null, failed_jobs integer not null, \
         failed_job_ids text not null, options text, cancelled_at integer, created_at integer not null, \
         finished_at integer)",
        &[],
    );
}

/// A job of batch `id`, its batch id in `data.batchId` (12.51+) or, with
/// `in_command`, only in the serialized command (8.x).
fn batched(class: &str, id: &str, in_command: bool) -> Job {
    let command = format!(
        "O:{}:\"{class}\":2:{{s:7:\"batchId\";s:{}:\"{id}\";s:5:\"queue\";N;}}",
        class.len(),
        id.len()
    );
    let batch_id = if in_command { json!(null) } else { json!(id) };
    Job::laravel8(class).set(
        "data",
        json!({"commandName": class, "command": command, "batchId": batch_id}),
    )
}

#[test]
fn a_batch_run_by_a_process_handler_finishes_and_counts_failures() {
    let s = Scene::new();
    let db = s.path("app.sqlite");
    let ok = batch(&db, "ok", 3, false);
    let lenient = batch(&db, "lenient", 2, true);
    let strict = batch(&db, "strict", 2, false);
    let url = format!("sqlite://{}", db.display());
    let config = s
        .config()
        .set("bookkeeping", "batches_url", url.as_str())
        .script(
            "echo \"$LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_BATCH_CANCELLED\" >> \"$LOG\"\n\
             case \"$LARAVEL_WORKER_JOB_NAME\" in *Fails) exit 1;; esac",
        )
        .write();
    for (i, in_command) in [false, true, false].into_iter().enumerate() {
        s.push(&batched(&format!("App\\Jobs\\Ok{i}"), &ok, in_command));
    }
    s.push(&batched("App\\Jobs\\Fine", &lenient, false));
    s.push(&batched("App\\Jobs\\Fails", &lenient, false));
    s.push(&batched("App\\Jobs\\Fails", &strict, true));
    s.push(&batched("App\\Jobs\\After", &strict, false));
    s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    let rows = sqlite::batches(&db);
    let by = |name: &str| rows.iter().find(|r| r.name == name).unwrap().clone();
    let ok = by("ok");
    assert_eq!((ok.pending_jobs, ok.failed_jobs), (0, 0));
    assert!(ok.finished && !ok.cancelled, "{ok:?}");
    let lenient = by("lenient");
    assert_eq!(
        (
            lenient.pending_jobs,
            lenient.failed_jobs,
            lenient.failed_job_ids
        ),
        (1, 1, 1)
    );
    assert!(!lenient.cancelled && !lenient.finished, "{lenient:?}");
    let strict = by("strict");
    assert_eq!((strict.pending_jobs, strict.failed_jobs), (1, 1));
    assert!(strict.cancelled && strict.finished, "{strict:?}");
    let log = s.log();
    assert!(log.contains(&"App\\Jobs\\Ok0 0".to_string()), "{log:?}");
    assert!(
        log.contains(&"App\\Jobs\\After 1".to_string()),
        "a cancelled batch's job is told so: {log:?}"
    );
}

#[test]
fn the_php_bridge_s_jobs_are_never_booked_twice() {
    let s = Scene::new();
    let db = s.path("app.sqlite");
    let id = batch(&db, "bridged", 2, false);
    let url = format!("sqlite://{}", db.display());
    // A handler whose program is the bridge (by its file name): Laravel's
    // own code books its jobs.
    let bridge = s.script("laravel-worker-bridge.php", "exit 0");
    let config = s
        .config()
        .set("bookkeeping", "batches_url", url.as_str())
        .command(&bridge)
        .write();
    let lock = format!("{REDIS_PREFIX}{KEY}");
    let _: () = s.redis.cmd(&["SET", &lock, "o"]);
    s.redis.push("default", &unique_payload("redis"));
    s.push(&batched("App\\Jobs\\Ok", &id, false));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let rows = sqlite::batches(&db);
    assert_eq!(rows[0].pending_jobs, 2, "not decremented by the worker");
    let left: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(left, 1, "the bridge releases its own locks");
}

/// A batches database on a server, by URL.
enum ServerDb {
    Postgres(String),
    MySql(String),
}

impl ServerDb {
    fn url(&self) -> &str {
        match self {
            ServerDb::Postgres(u) | ServerDb::MySql(u) => u,
        }
    }

    /// Runs `sql` (one statement).
    fn run(&self, sql: &str) {
        use sqlx::Connection;
        sqlite::block_on(async {
            match self {
                ServerDb::Postgres(url) => {
                    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                        .execute(&mut c)
                        .await
                        .unwrap();
                }
                ServerDb::MySql(url) => {
                    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
                    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                        .execute(&mut c)
                        .await
                        .unwrap();
                }
            }
        });
    }

    /// `(name, pending, failed, failed_job_ids, cancelled, finished)` of
    /// each batch, by name.
    fn rows(&self) -> Vec<(String, i64, i64, String, bool, bool)> {
        use sqlx::{Connection, Row};
        let sql = "SELECT name, CAST(pending_jobs AS {int}) AS p, CAST(failed_jobs AS {int}) AS f, \
                   failed_job_ids, cancelled_at IS NOT NULL AS c, finished_at IS NOT NULL AS d \
                   FROM job_batches ORDER BY name";
        sqlite::block_on(async {
            match self {
                ServerDb::Postgres(url) => {
                    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                    let sql = sql.replace("{int}", "BIGINT");
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .fetch_all(&mut c)
                        .await
                        .unwrap()
                        .iter()
                        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                        .collect()
                }
                ServerDb::MySql(url) => {
                    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
                    let sql = sql.replace("{int}", "SIGNED");
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .fetch_all(&mut c)
                        .await
                        .unwrap()
                        .iter()
                        .map(|r| {
                            let c: i64 = r.get(4);
                            let d: i64 = r.get(5);
                            (r.get(0), r.get(1), r.get(2), r.get(3), c != 0, d != 0)
                        })
                        .collect()
                }
            }
        })
    }
}

/// Three batches on `db` (Laravel's `job_batches` migration, options
/// base64-encoded on PostgreSQL as Laravel writes them there), run by a
/// process handler: success, failure with and without `allowFailures`.
fn batches_on_a_server(db: &ServerDb) {
    let (texts, lenient_options) = match db {
        ServerDb::Postgres(_) => (
            "failed_job_ids text not null, options text null",
            // base64 of a:1:{s:13:"allowFailures";b:1;}
            "YToxOntzOjEzOiJhbGxvd0ZhaWx1cmVzIjtiOjE7fQ==",
        ),
        ServerDb::MySql(_) => (
            "failed_job_ids longtext not null, options mediumtext null",
            "a:1:{s:13:\"allowFailures\";b:1;}",
        ),
    };
    db.run(&format!(
        "create table job_batches (id varchar(255) not null primary key, name varchar(255) not null, \
         total_jobs integer not null, pending_jobs integer not null, failed_jobs integer not null, \
         {texts}, cancelled_at integer null, created_at integer not null, finished_at integer null)"
    ));
    for (id, name, options) in [
        ("b-ok", "ok", "a:0:{}"),
        ("b-lenient", "lenient", lenient_options),
        ("b-strict", "strict", "a:0:{}"),
    ] {
        db.run(&format!(
            "insert into job_batches values ('{id}', '{name}', 2, 2, 0, '[]', '{options}', null, 1, null)"
        ));
    }
    let s = Scene::new();
    let config = s
        .config()
        .set("bookkeeping", "batches_url", db.url())
        .script("case \"$LARAVEL_WORKER_JOB_NAME\" in *Fails) exit 1;; esac")
        .write();
    for (class, id) in [
        ("App\\Jobs\\Ok", "b-ok"),
        ("App\\Jobs\\Ok", "b-ok"),
        ("App\\Jobs\\Fine", "b-lenient"),
        ("App\\Jobs\\Fails", "b-lenient"),
        ("App\\Jobs\\Fails", "b-strict"),
    ] {
        s.push(&batched(class, id, false));
    }
    s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    let rows = db.rows();
    let failed_ids = |ids: &str| serde_json::from_str::<Vec<String>>(ids).unwrap().len();
    let [lenient, ok, strict] = &rows[..] else {
        panic!("{rows:?}")
    };
    assert_eq!((ok.1, ok.2, ok.4, ok.5), (0, 0, false, true), "{ok:?}");
    assert_eq!(
        (
            lenient.1,
            lenient.2,
            failed_ids(&lenient.3),
            lenient.4,
            lenient.5
        ),
        (1, 1, 1, false, false),
        "{lenient:?}"
    );
    assert_eq!(
        (strict.1, strict.2, strict.4, strict.5),
        (2, 1, true, true),
        "{strict:?}"
    );
}

#[test]
fn batches_on_postgres_move_as_laravel_moves_them() {
    let Some(pg) = common::databases::Postgres::start() else {
        return;
    };
    let db = pg.database("app");
    batches_on_a_server(&ServerDb::Postgres(db.url().to_string()));
}

#[test]
fn batches_on_mariadb_move_as_laravel_moves_them() {
    let Some(maria) = common::databases::MariaDb::start() else {
        return;
    };
    let db = maria.database("app");
    batches_on_a_server(&ServerDb::MySql(db.url().to_string()));
}

/// Batches the Laravel 8.83 test app dispatched with `Bus::batch`, run by
/// a process handler (a shell script, not PHP): the app itself then reads
/// them back (`Bus::findBatch`) finished, with their failures counted
/// (`allowFailures`), or cancelled, whose later job was told so.
#[test]
fn batches_the_app_dispatched_are_finished_for_the_app_when_a_process_handler_runs_them() {
    let s = Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    let db = s.path("failed.sqlite");
    batches_table(&db);
    app.dispatch(json!([
        {"kind": "batch", "tag": "ok", "steps": ["a", "b", "c"]},
        {"kind": "batch", "tag": "lenient", "steps": ["a", "b:fail"], "allow_failures": true},
        {"kind": "batch", "tag": "strict", "steps": ["x:fail", "y"]},
    ]));
    let config = s
        .config()
        .laravel(common::laravel::LARAVEL)
        .script(
            "echo \"$LARAVEL_WORKER_BATCH_CANCELLED\" >> \"$LOG\"\n\
             grep -Eq '\"fail\": ?true' \"$LARAVEL_WORKER_COMMAND_FILE\" && exit 1\nexit 0",
        )
        .write();
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let reader = s.path("read-batches.php");
    std::fs::write(
        &reader,
        format!(
            "<?php\n$app = require '{}/bootstrap/app.php';\n\
             $app->make(Illuminate\\Contracts\\Console\\Kernel::class)->bootstrap();\n\
             $out = [];\n\
             foreach (Illuminate\\Support\\Facades\\DB::table('job_batches')->pluck('id') as $id) {{\n\
                 $b = Illuminate\\Support\\Facades\\Bus::findBatch($id);\n\
                 $out[$b->name] = [$b->pendingJobs, $b->failedJobs, $b->finished(), $b->cancelled()];\n\
             }}\n\
             ksort($out);\necho json_encode($out);\n",
            app.dir.display()
        ),
    )
    .unwrap();
    let out = common::succeeds(
        std::process::Command::new("php")
            .arg(&reader)
            .current_dir(&app.dir),
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        read,
        json!({
            "lenient": [1, 1, false, false],
            "ok": [0, 0, true, false],
            "strict": [1, 1, true, true],
        }),
        "as the app reads its batches"
    );
    let told = s.log();
    assert_eq!(
        told.iter().filter(|l| *l == "1").count(),
        1,
        "the strict batch's second job is told its batch was cancelled: {told:?}"
    );
}

/// A batch's jobs run by a process handler, with the PHP bridge configured
/// beside it: the bridge's finish mode records each job in the batch, so
/// the batch's `then`, `catch` and `finally` callbacks (closures the app
/// registered) run as under `queue:work`, each once, and the worker moves
/// no counter itself (none counted twice).
#[test]
fn a_batch_s_callbacks_run_when_a_bridge_finishes_its_jobs() {
    let s = Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    batches_table(&s.path("failed.sqlite"));
    app.dispatch(json!([
        {"kind": "batch", "tag": "ok", "steps": ["a", "b", "c"]},
        {"kind": "batch", "tag": "strict", "steps": ["x:fail", "y"]},
    ]));
    let step = common::config::Handler::command(&s.script(
        "step.sh",
        "[ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
         grep -Eq '\"fail\": ?true' \"$LARAVEL_WORKER_COMMAND_FILE\" && exit 1\nexit 0",
    ))
    .matching("App\\Jobs\\BatchStep");
    let bridge = app.handler(common::laravel::Transport::PerJob);
    let config = s
        .config()
        .laravel(common::laravel::LARAVEL)
        .handler(step)
        .handler(bridge)
        .write();
    s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    let once = |event: &str, tag: &str| app.events(event, tag).len();
    assert_eq!(
        (once("batch-then", "ok"), once("batch-finally", "ok")),
        (1, 1),
        "the ok batch's then and finally"
    );
    assert_eq!(once("batch-catch", "ok"), 0);
    assert_eq!(
        (
            once("batch-catch", "strict"),
            once("batch-finally", "strict")
        ),
        (1, 1),
        "the strict batch's catch and finally"
    );
    let finished = app.events("batch-finally", "ok");
    assert_eq!(finished[0]["pending"], 0, "{finished:?}");
    assert_eq!(finished[0]["failed"], 0, "{finished:?}");
}

/// The bookkeeping comes before the queue write (Laravel's order): in the
/// Redis commands the worker sends, the unique lock's `DEL` precedes the
/// `ZREM` of the reservation.
#[test]
fn the_lock_is_released_before_the_job_leaves_the_queue() {
    let (s, config) = Scene::configured(|c| c.script("exit 0"));
    let lock = format!("{REDIS_PREFIX}{KEY}");
    let _: () = s.redis.cmd(&["SET", &lock, "o"]);
    s.redis.push("default", &owned_payload("o"));
    let Some(monitor) = recordings::Monitor::start(&s, "order") else {
        return;
    };
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let trace = monitor.stop(&s);
    let released = trace.find("\"del\"").or_else(|| trace.find("\"DEL\""));
    let deleted = trace.find("\"ZREM\"").or_else(|| trace.find("\"zrem\""));
    assert!(
        matches!((released, deleted), (Some(r), Some(d)) if r < d),
        "the lock's delete comes first:\n{trace}"
    );
}

/// On the database queue (SQLite `jobs`), the same bookkeeping: the batch
/// is recorded before the row is deleted, whatever the driver.
#[test]
fn a_batch_on_the_database_queue_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.sqlite");
    let jobs = common::jobs_table::JobsTable::sqlite(&db);
    let failed = common::databases::FailedDb::sqlite(&db);
    failed.create_table();
    let id = batch(&db, "db", 2, false);
    let config = crate::database_worker::config(dir.path(), &jobs, failed.url(), 90, "exit 0");
    for (n, uuid) in ["u-1", "u-2"].iter().enumerate() {
        let class = format!("App\\Jobs\\Step{n}");
        let command = format!(
            "O:{}:\"{class}\":1:{{s:7:\"batchId\";s:{}:\"{id}\";}}",
            class.len(),
            id.len()
        );
        let payload = json!({"uuid": uuid, "displayName": class, "job": "Illuminate\\Queue\\CallQueuedHandler@call",
            "maxTries": null, "data": {"commandName": class, "command": command}});
        jobs.insert("default", &payload.to_string(), 0, None, common::now());
    }
    let args = ["--config", config.to_str().unwrap(), "work"];
    let mut d = common::Daemon::start(
        &[&args[..], &["--stop-when-empty", "--sleep=0"]].concat(),
        &[],
    );
    d.expect_stop(0, "empty");
    assert_eq!(jobs.rows(), vec![], "every row settled");
    let rows = sqlite::batches(&db);
    assert_eq!(
        (rows[0].pending_jobs, rows[0].finished),
        (0, true),
        "{rows:?}"
    );
}

/// A lock store and a batches table the worker cannot use are named at
/// start, and the jobs are settled all the same.
#[test]
fn stores_that_cannot_be_used_are_named_at_start_and_jobs_still_settle() {
    let s = Scene::new();
    let db = s.path("empty.sqlite");
    sqlite::execute(&db, "create table other (x integer)", &[]);
    let nowhere = format!("unix://{}/nobody.sock", s.dir.path().display());
    let config = s
        .config()
        .set("bookkeeping", "lock_url", nowhere.as_str())
        .set(
            "bookkeeping",
            "batches_url",
            format!("sqlite://{}", db.display()).as_str(),
        )
        .script("exit 0")
        .write();
    s.redis.push("default", &owned_payload("o"));
    s.push(&batched("App\\Jobs\\Ok", "9f-none", false));
    let d = s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let err = d.stderr_text();
    assert!(err.contains("unique locks' Redis"), "{err}");
    assert!(err.contains("no batches table"), "{err}");
    let left: i64 = s.redis.cmd(&["LLEN", "laravel_database_queues:default"]);
    let reserved: i64 = s
        .redis
        .cmd(&["ZCARD", "laravel_database_queues:default:reserved"]);
    assert_eq!((left, reserved), (0, 0), "both jobs settled");
}

/// Laravel 8.83, whose payloads do not carry the lock: a `ShouldBeUnique`
/// class with a `uniqueId` property, named in `[bookkeeping] unique`, run
/// by a process handler, can be dispatched again right after it ran (the
/// app refused the second dispatch while it was queued).
#[test]
fn an_8_x_unique_job_with_a_property_id_can_be_dispatched_again_after_it_ran() {
    let s = Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    let spec = json!([{"kind": "property-unique", "tag": "u", "key": "p1"}]);
    app.dispatch(spec.clone());
    app.dispatch(spec.clone());
    let queued = || -> i64 { s.redis.cmd(&["LLEN", "laravel_database_queues:default"]) };
    assert_eq!(
        queued(),
        1,
        "the app refuses a second dispatch while the lock is held"
    );
    let lock = format!("{REDIS_PREFIX}laravel_unique_job:App\\Jobs\\PropertyUniqueJobp1");
    let held: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(held, 1, "the 8.x key: class and id with no separator");
    let config = s
        .config()
        .laravel(common::laravel::LARAVEL)
        .set(
            "bookkeeping",
            "unique",
            vec!["App\\Jobs\\PropertyUniqueJob".to_string()],
        )
        .script("exit 0")
        .write();
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let held: i64 = s.redis.cmd(&["EXISTS", &lock]);
    assert_eq!(held, 0, "released after the run");
    app.dispatch(spec);
    assert_eq!(queued(), 1, "dispatched again at once");
}
