//! Laravel's `jobs` table (the database queue) on SQLite, PostgreSQL and
//! MariaDB, made as the framework's migration makes it, and a small client
//! that reads and writes its rows directly, as a PHP worker's queries would.

use std::path::Path;

use sqlx::{Connection, MySqlConnection, PgConnection, Row, SqliteConnection};

use super::databases::{MariaDb, Postgres};
use super::sqlite::block_on;

/// Which migration made the table (the `attempts` column differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `unsignedTinyInteger('attempts')`: Laravel 8.83–13.5 (MySQL
    /// `tinyint unsigned`, at most 255).
    Before13_6,
    /// `unsignedSmallInteger('attempts')`: Laravel 13.6+.
    Since13_6,
}

/// The engine of a [`JobsTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    MariaDb,
}

/// One row, every column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub id: i64,
    pub queue: String,
    pub payload: String,
    pub attempts: i64,
    pub reserved_at: Option<i64>,
    pub available_at: i64,
    pub created_at: i64,
}

/// The `jobs` table of one database, by URL.
#[derive(Debug, Clone)]
pub struct JobsTable {
    pub url: String,
    pub kind: Kind,
}

/// Runs `$body` with `$c` bound to a fresh connection to `$t`'s database.
macro_rules! on_connection {
    ($t:expr, |$c:ident| $body:expr) => {
        match $t.kind {
            Kind::Sqlite => {
                let mut $c = SqliteConnection::connect(&$t.url).await.unwrap();
                $body
            }
            Kind::Postgres => {
                let mut $c = PgConnection::connect(&$t.url).await.unwrap();
                $body
            }
            Kind::MariaDb => {
                let mut $c = MySqlConnection::connect(&$t.url).await.unwrap();
                $body
            }
        }
    };
}

impl JobsTable {
    /// The table in the SQLite file at `path` (created when missing).
    pub fn sqlite(path: &Path) -> Self {
        let t = JobsTable {
            url: format!("sqlite://{}", path.display()),
            kind: Kind::Sqlite,
        };
        block_on(async {
            SqliteConnection::connect(&format!("{}?mode=rwc", t.url))
                .await
                .unwrap();
        });
        t.create(Shape::Before13_6);
        t
    }

    /// The table in a new database `name` of `server`.
    pub fn postgres(server: &Postgres, name: &str) -> Self {
        let t = JobsTable {
            url: server.create_database(name),
            kind: Kind::Postgres,
        };
        t.create(Shape::Before13_6);
        t
    }

    /// The table of `shape` in a new database `name` of `server`.
    pub fn mariadb(server: &MariaDb, name: &str, shape: Shape) -> Self {
        let t = JobsTable {
            url: server.create_database(name),
            kind: Kind::MariaDb,
        };
        t.create(shape);
        t
    }

    /// The DDL Laravel 8.83's schema grammars generate from the jobs stub
    /// (`attempts` as `shape` has it; PostgreSQL and SQLite ignore
    /// `unsigned`, so both shapes give `smallint` and `integer` there).
    fn create(&self, shape: Shape) {
        let attempts = match shape {
            Shape::Before13_6 => "tinyint unsigned",
            Shape::Since13_6 => "smallint unsigned",
        };
        let statements = match self.kind {
            Kind::Sqlite => vec![
                "create table \"jobs\" (\"id\" integer not null primary key autoincrement, \
                 \"queue\" varchar not null, \"payload\" text not null, \
                 \"attempts\" integer not null, \"reserved_at\" integer, \
                 \"available_at\" integer not null, \"created_at\" integer not null)"
                    .to_string(),
                "create index \"jobs_queue_index\" on \"jobs\" (\"queue\")".to_string(),
            ],
            Kind::Postgres => vec![
                "create table \"jobs\" (\"id\" bigserial primary key not null, \
                 \"queue\" varchar(255) not null, \"payload\" text not null, \
                 \"attempts\" smallint not null, \"reserved_at\" integer null, \
                 \"available_at\" integer not null, \"created_at\" integer not null)"
                    .to_string(),
                "create index \"jobs_queue_index\" on \"jobs\" (\"queue\")".to_string(),
            ],
            Kind::MariaDb => vec![
                format!(
                    "create table `jobs` (`id` bigint unsigned not null auto_increment \
                     primary key, `queue` varchar(255) not null, `payload` longtext not null, \
                     `attempts` {attempts} not null, `reserved_at` int unsigned null, \
                     `available_at` int unsigned not null, `created_at` int unsigned not null) \
                     default character set utf8mb4 collate 'utf8mb4_unicode_ci'"
                ),
                "alter table `jobs` add index `jobs_queue_index`(`queue`)".to_string(),
            ],
        };
        for sql in statements {
            self.execute(&sql);
        }
    }

    /// Runs one statement with no parameters.
    pub fn execute(&self, sql: &str) {
        block_on(async {
            on_connection!(self, |c| {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
                    .execute(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            })
        });
    }

    /// Inserts a row as Laravel's `pushToDatabase` would, with the given
    /// columns; returns its id.
    pub fn insert(
        &self,
        queue: &str,
        payload: &str,
        attempts: i64,
        reserved_at: Option<i64>,
        available_at: i64,
    ) -> i64 {
        let sql = match self.kind {
            Kind::Postgres => {
                "INSERT INTO jobs (queue, attempts, reserved_at, available_at, created_at, \
                 payload) VALUES ($1, $2, $3, $4, $4, $5)"
            }
            Kind::Sqlite | Kind::MariaDb => {
                "INSERT INTO jobs (queue, attempts, reserved_at, available_at, created_at, \
                 payload) VALUES (?, ?, ?, ?, ?, ?)"
            }
        };
        let postgres = self.kind == Kind::Postgres;
        block_on(async {
            on_connection!(self, |c| {
                let q = sqlx::query(sql)
                    .bind(queue)
                    .bind(attempts)
                    .bind(reserved_at)
                    .bind(available_at);
                let q = if postgres { q } else { q.bind(available_at) };
                q.bind(payload).execute(&mut c).await.unwrap();
            })
        });
        self.rows().last().unwrap().id
    }

    /// Inserts one row per payload on `queue`, as `pushToDatabase` would
    /// (`attempts` 0, available and created at `now`), a thousand rows a
    /// statement: for queues of thousands of jobs.
    pub fn insert_many(&self, queue: &str, payloads: &[String], now: i64) {
        block_on(async {
            on_connection!(self, |c| {
                for chunk in payloads.chunks(1000) {
                    let mut insert = sqlx::QueryBuilder::new(
                        "INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, \
                         created_at) ",
                    );
                    insert.push_values(chunk, |mut row, payload| {
                        row.push_bind(queue.to_string())
                            .push_bind(payload.clone())
                            .push_bind(0_i64)
                            .push_bind(None::<i64>)
                            .push_bind(now)
                            .push_bind(now);
                    });
                    insert.build().execute(&mut c).await.unwrap();
                }
            })
        });
    }

    /// How many rows the table holds.
    pub fn count(&self) -> i64 {
        block_on(async {
            on_connection!(self, |c| {
                sqlx::query("SELECT COUNT(*) FROM jobs")
                    .fetch_one(&mut c)
                    .await
                    .unwrap()
                    .get(0)
            })
        })
    }

    /// Every row, in id order.
    pub fn rows(&self) -> Vec<JobRow> {
        let sql = match self.kind {
            Kind::Sqlite => {
                "SELECT id, queue, payload, attempts, reserved_at, available_at, created_at \
                 FROM jobs ORDER BY id"
            }
            Kind::Postgres => {
                "SELECT id, queue, payload, CAST(attempts AS BIGINT), CAST(reserved_at AS BIGINT), \
                 CAST(available_at AS BIGINT), CAST(created_at AS BIGINT) FROM jobs ORDER BY id"
            }
            Kind::MariaDb => {
                "SELECT CAST(id AS SIGNED), queue, payload, CAST(attempts AS SIGNED), \
                 CAST(reserved_at AS SIGNED), CAST(available_at AS SIGNED), \
                 CAST(created_at AS SIGNED) FROM jobs ORDER BY id"
            }
        };
        block_on(async {
            on_connection!(self, |c| {
                sqlx::query(sql)
                    .fetch_all(&mut c)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| JobRow {
                        id: r.get(0),
                        queue: r.get(1),
                        payload: r.get(2),
                        attempts: r.get(3),
                        reserved_at: r.get(4),
                        available_at: r.get(5),
                        created_at: r.get(6),
                    })
                    .collect()
            })
        })
    }

    /// The row `id`, if it is there.
    pub fn row(&self, id: i64) -> Option<JobRow> {
        self.rows().into_iter().find(|r| r.id == id)
    }
}
