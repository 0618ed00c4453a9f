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
