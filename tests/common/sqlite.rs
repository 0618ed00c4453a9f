//! Laravel's failed_jobs table in SQLite (schema of the 8.x–13.x migration).

use std::path::Path;

use sqlx::{Connection, SqliteConnection};

/// The columns the tests look at.
#[derive(Debug, Clone)]
pub struct FailedRow {
    pub uuid: String,
    pub connection: String,
    pub queue: String,
    pub payload: String,
    pub exception: String,
    pub failed_at: String,
}

/// Runs `f` to its end on a fresh single-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn open(path: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap()
}

/// Creates the SQLite file at `path` (if missing) with Laravel's
/// failed_jobs table and its uuid index.
pub fn create_failed_jobs(path: &Path) {
    block_on(async {
        let mut c = open(path).await;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS failed_jobs (
                id integer primary key autoincrement not null,
                uuid varchar not null,
                connection text not null,
                queue text not null,
                payload text not null,
                exception text not null,
                failed_at datetime not null default CURRENT_TIMESTAMP)",
        )
        .execute(&mut c)
        .await
        .unwrap();
        sqlx::query(
            "CREATE UNIQUE INDEX IF NOT EXISTS failed_jobs_uuid_unique ON failed_jobs (uuid)",
        )
        .execute(&mut c)
        .await
        .unwrap();
    });
}

/// Every row of the failed_jobs table in the SQLite file at `path`, in id
/// order (none when the file does not exist).
pub fn rows(path: &Path) -> Vec<FailedRow> {
    if !path.exists() {
        return vec![];
    }
    super::databases::FailedDb::Sqlite(format!("sqlite://{}", path.display())).rows()
}

/// The first column of every row `sql` returns from the SQLite file at
/// `path`, as text; empty when the file or the table does not exist.
pub fn strings(path: &Path, sql: &'static str) -> Vec<String> {
    if !path.exists() {
        return vec![];
    }
    block_on(async {
        let mut c = open(path).await;
        match sqlx::query_scalar::<_, String>(sql).fetch_all(&mut c).await {
            Ok(rows) => rows,
            Err(sqlx::Error::Database(e)) if e.message().contains("no such table") => vec![],
            Err(e) => panic!("{sql}: {e}"),
        }
    })
}

/// One row of Laravel's `job_batches` table (the database batch
/// repository), the columns the tests compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    pub name: String,
    pub total_jobs: i64,
    pub pending_jobs: i64,
    pub failed_jobs: i64,
    /// How many uuids `failed_job_ids` lists.
    pub failed_job_ids: usize,
    pub cancelled: bool,
    pub finished: bool,
}

/// The rows of `job_batches` in the SQLite file at `path`, by name.
pub fn batches(path: &Path) -> Vec<BatchRow> {
    block_on(async {
        let mut c = open(path).await;
        let rows = sqlx::query(
            "SELECT name, total_jobs, pending_jobs, failed_jobs, failed_job_ids, \
             cancelled_at, finished_at FROM job_batches ORDER BY name",
        )
        .fetch_all(&mut c)
        .await
        .unwrap();
        rows.iter()
            .map(|row| {
                use sqlx::Row;
                let ids: Vec<String> =
                    serde_json::from_str(&row.get::<String, _>("failed_job_ids")).unwrap();
                BatchRow {
                    name: row.get("name"),
                    total_jobs: row.get("total_jobs"),
                    pending_jobs: row.get("pending_jobs"),
                    failed_jobs: row.get("failed_jobs"),
                    failed_job_ids: ids.len(),
                    cancelled: row.get::<Option<i64>, _>("cancelled_at").is_some(),
                    finished: row.get::<Option<i64>, _>("finished_at").is_some(),
                }
            })
            .collect()
    })
}

/// Runs each statement of `sql` (separated by `;`) on the SQLite file at
/// `path` (created when missing), each with `binds` as its parameters.
pub fn execute(path: &Path, sql: &str, binds: &[&str]) {
    block_on(async {
        let mut c = open(path).await;
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for bind in binds {
            query = query.bind(*bind);
        }
        query
            .execute(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    });
}
