//! Laravel's failed_jobs table in SQLite (schema of the 8.x–13.x migration).

use std::path::Path;

use sqlx::{Connection, Row, SqliteConnection};

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

fn block_on<F: std::future::Future>(f: F) -> F::Output {
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

pub fn rows(path: &Path) -> Vec<FailedRow> {
    if !path.exists() {
        return vec![];
    }
    block_on(async {
        let mut c = open(path).await;
        sqlx::query("SELECT uuid, connection, queue, payload, exception, failed_at FROM failed_jobs ORDER BY id")
            .fetch_all(&mut c)
            .await
            .unwrap()
            .into_iter()
            .map(|r| FailedRow {
                uuid: r.get(0),
                connection: r.get(1),
                queue: r.get(2),
                payload: r.get(3),
                exception: r.get(4),
                failed_at: r.get(5),
            })
            .collect()
    })
}
