//! Rows of the `jobs` table that Laravel's migration would not write, read
//! as `queue:work database` reads them (issue 47): PDO hands every column
//! over as it is stored and PHP's `(int)` reads the count, so a job whose
//! row is odd still runs or fails, and never stops the rows behind it.
//! A table whose rows cannot be told apart (no primary key on `id`) is
//! refused at start instead of run in a loop.

use crate::common;

use common::Daemon;
use common::jobs_table::Kind;

use super::database_worker::{Databases, config, payload};

/// The shell line of a handler that notes each run as `NAME ATTEMPT`.
const NOTE_RUN: &str = "echo \"${LARAVEL_WORKER_JOB_NAME##*\\\\} $LARAVEL_WORKER_ATTEMPT\" \
                        >> \"$DIR/ran\"";

/// `text` as an SQL string literal of `kind`'s dialect (the payloads here
/// hold no quote; MySQL reads a backslash as an escape).
fn literal(kind: Kind, text: &str) -> String {
    assert!(!text.contains('\''));
    match kind {
        Kind::MariaDb => format!("'{}'", text.replace('\\', "\\\\")),
        Kind::Sqlite | Kind::Postgres => format!("'{text}'"),
    }
}

/// A worker on `config` run to its end with `--stop-when-empty
/// --sleep=0` and `extra` flags.
fn until_empty(config: &std::path::Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "work",
        "--stop-when-empty",
        "--sleep=0",
    ];
    args.extend_from_slice(extra);
    let mut d = Daemon::start(&args, &[]);
    d.wait_exit();
    d
}

/// The lines of the `ran` file of `dir`, sorted.
fn runs(dir: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("ran")).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// On SQLite, whose columns hold any type: a payload stored as a BLOB runs,
/// an `attempts` of `'abc'` counts as 0 and one of `1.5` as 1 (PHP's
/// `(int)`), and a payload of bytes that are not UTF-8, or one that names
/// no job, is failed with the reason. The odd row is fourth of seven at `--concurrency=4`, and every
/// good row behind it runs (before: every reserve failed on the row, and
/// none of the six ran).
#[test]
fn odd_sqlite_rows_run_or_fail_and_never_stop_the_queue() {
    let dbs = Databases::start();
    let (name, jobs, failed) = &dbs.each[0];
    assert_eq!(jobs.kind, Kind::Sqlite, "{name}");
    let dir = dbs.dir.path().join("sqlite-odd");
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(&dir, jobs, failed.url(), 90, NOTE_RUN);
    let now = common::now();
    let insert = |payload: &str, attempts: &str| {
        jobs.execute(&format!(
            "INSERT INTO jobs (queue, attempts, reserved_at, available_at, created_at, payload) \
             VALUES ('default', {attempts}, NULL, {now}, {now}, {payload})"
        ));
    };
    for n in 1..=3 {
        insert(
            &literal(jobs.kind, &payload(&format!("Good{n}"), &format!("u-{n}"))),
            "0",
        );
    }
    // `{"uuid":"u-x"` then a lone 0xff byte: no UTF-8, no JSON.
    insert("CAST(X'7B2275756964223A22752D78222CFF7D' AS TEXT)", "0");
    let blob = payload("Blob", "u-blob");
    insert(&format!("CAST({} AS BLOB)", literal(jobs.kind, &blob)), "0");
    insert(&literal(jobs.kind, &payload("Text", "u-text")), "'abc'");
    insert(&literal(jobs.kind, &payload("Real", "u-real")), "1.5");
    // JSON, but no job: neither `job` nor `displayName` (the worker's
    // catch-all handler ran it before).
    insert("'{\"uuid\":\"u-none\",\"data\":{}}'", "0");

    let mut d = until_empty(&config, &["--tries=3", "--concurrency=4"]);
    d.expect_stop(0, "empty");

    assert_eq!(jobs.count(), 0, "every row settled; {}", d.stderr_text());
    assert_eq!(
        runs(&dir),
        [
            "Blob 1", "Good1 1", "Good2 1", "Good3 1", "Real 2", "Text 1"
        ],
        "each readable job ran once, counted as PHP counts; {}",
        d.stderr_text()
    );
    let rows = failed.rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row.connection, "database");
        assert!(
            row.exception.contains("payload"),
            "the reason names the payload: {}",
            row.exception
        );
    }
    assert!(
        rows.iter()
            .any(|r| r.uuid == "u-none" && r.exception.contains("names no job")),
        "{rows:?}"
    );
}

/// On each database, a row whose `attempts` is NULL (a column made
/// nullable, a row written by hand) counts as 0, as Laravel's
/// `DatabaseJobRecord::increment` does: the job runs once, as attempt 1,
/// and its row is deleted (before: never counted nor deleted, run again
/// every `retry_after`). On MariaDB the payload column is a `LONGBLOB`,
/// whose bytes run as text does.
#[test]
fn a_null_attempts_counts_as_zero_and_a_blob_payload_runs_on_each_database() {
    let dbs = Databases::start();
    for (name, jobs, failed) in &dbs.each {
        let dir = dbs.dir.path().join(format!("{name}-null"));
        std::fs::create_dir_all(&dir).unwrap();
        let nullable = match jobs.kind {
            // SQLite cannot change a column: the table is made again,
            // as Laravel's migration makes it but for the NOT NULL.
            Kind::Sqlite => vec![
                "DROP TABLE jobs".to_string(),
                "CREATE TABLE jobs (id integer not null primary key autoincrement, \
                 queue varchar not null, payload text not null, attempts integer, \
                 reserved_at integer, available_at integer not null, \
                 created_at integer not null)"
                    .to_string(),
            ],
            Kind::Postgres => vec!["ALTER TABLE jobs ALTER COLUMN attempts DROP NOT NULL".into()],
            Kind::MariaDb => vec![
                "ALTER TABLE jobs MODIFY attempts tinyint unsigned NULL, \
                 MODIFY payload longblob NOT NULL"
                    .into(),
            ],
        };
        for sql in nullable {
            jobs.execute(&sql);
        }
        let config = config(&dir, jobs, failed.url(), 3, NOTE_RUN);
        let now = common::now();
        for (job, attempts) in [("Unset", "NULL"), ("Counted", "0")] {
            jobs.execute(&format!(
                "INSERT INTO jobs (queue, attempts, reserved_at, available_at, created_at, \
                 payload) VALUES ('default', {attempts}, NULL, {now}, {now}, {})",
                literal(jobs.kind, &payload(job, &format!("u-{job}")))
            ));
        }
        let mut d = until_empty(&config, &["--tries=3"]);
        d.expect_stop(0, "empty");
        assert_eq!(jobs.count(), 0, "{name}: both rows deleted");
        assert_eq!(
            runs(&dir),
            ["Counted 1", "Unset 1"],
            "{name}: each ran once, as attempt 1; {}",
            d.stderr_text()
        );
        assert!(failed.rows().is_empty(), "{name}");
    }
}

/// On each database, a `jobs` table whose `id` is not its primary key
/// (made by hand, or a key dropped) is refused at start, exit 1, with what
/// to do: its rows could have no `id` or share one, and such a row can be
/// neither reserved nor deleted alone (before: a NULL `id` ran in a tight
/// loop, thousands of runs in seconds, and starved the rest).
#[test]
fn a_jobs_table_without_a_primary_key_on_id_is_refused_at_start() {
    let dbs = Databases::start();
    for (name, jobs, failed) in &dbs.each {
        let dir = dbs.dir.path().join(format!("{name}-nokey"));
        std::fs::create_dir_all(&dir).unwrap();
        let unkeyed = match jobs.kind {
            Kind::Sqlite => vec![
                "DROP TABLE jobs".to_string(),
                "CREATE TABLE jobs (id integer, queue varchar not null, payload text, \
                 attempts integer not null, reserved_at integer, \
                 available_at integer not null, created_at integer not null)"
                    .to_string(),
            ],
            Kind::Postgres => vec![
                "ALTER TABLE jobs DROP CONSTRAINT jobs_pkey, ALTER COLUMN id DROP NOT NULL".into(),
            ],
            Kind::MariaDb => {
                vec!["ALTER TABLE jobs MODIFY id bigint unsigned NULL, DROP PRIMARY KEY".into()]
            }
        };
        for sql in unkeyed {
            jobs.execute(&sql);
        }
        let now = common::now();
        jobs.execute(&format!(
            "INSERT INTO jobs (id, queue, attempts, reserved_at, available_at, created_at, \
             payload) VALUES (NULL, 'default', 0, NULL, {now}, {now}, {})",
            literal(jobs.kind, &payload("Loose", "u-loose"))
        ));
        let config = config(&dir, jobs, failed.url(), 90, NOTE_RUN);
        let mut d = until_empty(&config, &[]);
        d.expect_exit(1);
        let log = d.stderr_text();
        assert!(
            log.contains("no primary key on its id column") && log.contains("queue:table"),
            "{name}: the refusal says what is wrong and what to do:\n{log}"
        );
        assert!(runs(&dir).is_empty(), "{name}: nothing ran");
        assert_eq!(jobs.count(), 1, "{name}: the row is left as it was");
    }
}

/// A release that the table refuses, and would refuse on every try (a
/// Laravel 5.x table's `reserved` column, NOT NULL without a default, which
/// Laravel's insert since 5.3 does not fill), is given up at once with the
/// reason: the job stays reserved, to come back after `retry_after`, and
/// the worker moves on (before: the release was tried again for the whole
/// `retry_after`, its slot held, with the migration's hint).
#[test]
fn a_release_the_table_always_refuses_is_given_up_at_once() {
    let dbs = Databases::start();
    let (name, jobs, failed) = &dbs.each[0];
    let dir = dbs.dir.path().join("sqlite-refused");
    std::fs::create_dir_all(&dir).unwrap();
    // SQLite adds a NOT NULL column only with a default: the table is
    // made again with the 5.x column as it was.
    jobs.execute("DROP TABLE jobs");
    jobs.execute(
        "CREATE TABLE jobs (id integer not null primary key autoincrement, \
         queue varchar not null, payload text not null, attempts integer not null, \
         reserved integer not null, reserved_at integer, available_at integer not null, \
         created_at integer not null)",
    );
    let now = common::now();
    jobs.execute(&format!(
        "INSERT INTO jobs (queue, attempts, reserved, reserved_at, available_at, created_at, \
         payload) VALUES ('default', 0, 0, NULL, {now}, {now}, {})",
        literal(jobs.kind, &payload("Flaky", "u-flaky"))
    ));
    let config = config(&dir, jobs, failed.url(), 90, "exit 3");
    let mut d = until_empty(&config, &["--tries=3"]);
    d.expect_stop(0, "empty");
    let log = d.stderr_text();
    assert!(
        log.contains("refused to release the job") && log.contains("NOT NULL"),
        "{name}: the refusal is named once, with the reason:\n{log}"
    );
    assert!(!log.contains("trying again"), "{name}: {log}");
    assert_eq!(jobs.count(), 1, "{name}: the row stays, reserved");
    assert!(failed.rows().is_empty(), "{name}");
}

/// A `failed_jobs` table that does not exist is refused at start, exit 1,
/// with the commands that make it, as a missing `jobs` table is (before:
/// the worker started, and the first failing job came back every
/// `retry_after`, never recorded). Nothing runs.
#[test]
fn a_missing_failed_jobs_table_is_refused_at_start() {
    let dbs = Databases::start();
    let (_, jobs, _) = &dbs.each[0];
    let dir = dbs.dir.path().join("sqlite-nofailed");
    std::fs::create_dir_all(&dir).unwrap();
    // A SQLite file with a jobs table and no failed_jobs table.
    let other = common::jobs_table::JobsTable::sqlite(&dir.join("nofailed.sqlite"));
    jobs.insert(
        "default",
        &payload("Kept", "u-kept"),
        0,
        None,
        common::now(),
    );
    let config = config(&dir, jobs, &other.url, 90, NOTE_RUN);
    let mut d = until_empty(&config, &[]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("failed jobs table failed_jobs does not exist")
            && log.contains("queue:failed-table"),
        "{log}"
    );
    assert!(runs(&dir).is_empty(), "nothing ran");
    assert_eq!(jobs.count(), 1, "the job is left as it was");
}
