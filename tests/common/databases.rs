//! Real database servers for the failed_jobs tests, and a small client for
//! Laravel's `failed_jobs` table on SQLite, PostgreSQL and MySQL/MariaDB.
//!
//! Each server is private to one test: started in a temporary directory,
//! listening on a unix socket there and on no TCP port, never the
//! machine's own services, and killed when dropped. When its binaries are
//! not installed, `start` prints a note and returns `None` so the test can
//! skip.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::{Connection, MySqlConnection, PgConnection, Row, SqliteConnection};

use super::sqlite::{FailedRow, block_on};

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `(uid, gid)` of a local user, from /etc/passwd.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 3 && fields[0] == name)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// The first `name` found in `PATH` or in `extra` directories.
fn find_binary(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Kills `child` with `signal`, then SIGKILL if it has not exited within
/// 10 s, and reaps it.
fn stop(child: &mut Child, signal: Signal) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let _ = kill(Pid::from_raw(child.id() as i32), signal);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `program`, to run in `dir` with no stdin nor stdout and its stderr
/// written to `log` (truncated).
fn quiet(program: &Path, dir: &Path, log: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log).unwrap());
    cmd
}

/// Runs `cmd` (a set-up step called `what`) to its end; fails the test,
/// showing `log`, when it does not succeed.
fn set_up(cmd: &mut Command, what: &str, log: &Path) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        status.success(),
        "{what} failed ({status}):\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Waits until `connect` succeeds; panics with `log` if the server exits
/// or does not accept connections in time.
fn wait_accepting(child: &mut Child, log: &Path, what: &str, connect: impl Fn() -> bool) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if connect() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{what} exited ({status}) at start:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not accept connections in time:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

/// A private PostgreSQL cluster (`initdb` + `postgres`) with a unix socket
/// in its temporary directory and `listen_addresses = ''`. As root it runs
/// as the `postgres` user, which owns the directory.
pub struct Postgres {
    child: Child,
    dir: tempfile::TempDir,
}

/// `initdb` and `postgres` of the newest Debian-style install
/// (/usr/lib/postgresql/N/bin), else from `PATH`.
fn postgres_binaries() -> Option<(PathBuf, PathBuf)> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file() && bin.join("postgres").is_file())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some((bin.join("initdb"), bin.join("postgres")));
    }
    Some((find_binary("initdb", &[])?, find_binary("postgres", &[])?))
}

impl Postgres {
    /// Starts a cluster with an empty database `postgres`; `None` (after a
    /// note on stderr) when PostgreSQL is not installed, or when running as
    /// root without a `postgres` user.
    pub fn start() -> Option<Self> {
        let Some((initdb, postgres)) = postgres_binaries() else {
            super::skip::note(
                "postgresql",
                "PostgreSQL (initdb, postgres) is not installed",
            );
            return None;
        };
        let owner = if running_as_root() {
            let Some(ids) = user_ids("postgres") else {
                super::skip::note(
                    "postgres user",
                    "running as root and there is no postgres user",
                );
                return None;
            };
            Some(ids)
        } else {
            None
        };
        let dir = tempfile::Builder::new().prefix("lw-pg-").tempdir().unwrap();
        let as_owner = |cmd: &mut Command| {
            if let Some((uid, gid)) = owner {
                cmd.uid(uid).gid(gid);
            }
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let log = dir.path().join("postgres.log");

        let mut init = quiet(&initdb, dir.path(), &log);
        init.arg("-D")
            .arg(&data)
            .args("-U postgres -A trust -E UTF8 --locale=C --no-sync".split(' '));
        as_owner(&mut init);
        set_up(&mut init, "initdb", &log);

        let mut server = quiet(&postgres, dir.path(), &log);
        server.arg("-D").arg(&data).arg("-k").arg(dir.path());
        for setting in [
            "listen_addresses=",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
        ] {
            server.args(["-c", setting]);
        }
        as_owner(&mut server);
        let mut child = server.spawn().expect("start postgres");
        let url = format!(
            "postgres:///postgres?host={}&user=postgres",
            dir.path().display()
        );
        wait_accepting(&mut child, &log, "postgres", || {
            block_on(PgConnection::connect(&url)).is_ok()
        });
        Some(Postgres { child, dir })
    }

    /// Creates database `name` with Laravel's `failed_jobs` table and
    /// returns its client.
    pub fn database(&self, name: &str) -> FailedDb {
        let admin = format!(
            "postgres:///postgres?host={}&user=postgres",
            self.dir.path().display()
        );
        block_on(async {
            let mut c = PgConnection::connect(&admin).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut c)
                .await
                .unwrap();
        });
        let db = FailedDb::Postgres(format!(
            "postgres:///{name}?host={}&user=postgres",
            self.dir.path().display()
        ));
        db.create_table();
        db
    }
}

impl Postgres {
    /// The directory of the server's unix socket (`host` for a client,
    /// as PHP's `pgsql` connection takes it).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Creates the empty database `name` and returns its URL (for tables
    /// other than `failed_jobs`, which the test makes itself).
    pub fn create_database(&self, name: &str) -> String {
        let admin = format!(
            "postgres:///postgres?host={}&user=postgres",
            self.dir.path().display()
        );
        block_on(async {
            let mut c = PgConnection::connect(&admin).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut c)
                .await
                .unwrap();
        });
        format!(
            "postgres:///{name}?host={}&user=postgres",
            self.dir.path().display()
        )
    }

    /// Stops the server (fast shutdown: open connections are cut, committed
    /// work is kept, unlike a crash of this unsynced test server) and waits
    /// until it is gone; its data stays for [`Postgres::start_again`].
    pub fn stop_server(&mut self) {
        // No SIGKILL after a while (as `stop` does): on a loaded machine a
        // killed postmaster would lose the unsynced commits the test checks.
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT);
        let _ = self.child.wait();
    }

    /// Starts the stopped server again on the same data and socket, and
    /// waits until it accepts connections.
    pub fn start_again(&mut self) {
        let (_, postgres) = postgres_binaries().expect("postgres was found at start");
        let log = self.dir.path().join("postgres-again.log");
        let mut server = quiet(&postgres, self.dir.path(), &log);
        server
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-k")
            .arg(self.dir.path());
        for setting in ["listen_addresses=", "fsync=off", "synchronous_commit=off"] {
            server.args(["-c", setting]);
        }
        if running_as_root() {
            let (uid, gid) = user_ids("postgres").expect("the postgres user");
            server.uid(uid).gid(gid);
        }
        self.child = server.spawn().expect("start postgres again");
        let url = format!(
            "postgres:///postgres?host={}&user=postgres",
            self.dir.path().display()
        );
        wait_accepting(&mut self.child, &log, "postgres", || {
            block_on(PgConnection::connect(&url)).is_ok()
        });
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown; the postmaster takes its backends down.
        stop(&mut self.child, Signal::SIGQUIT);
    }
}

// ---------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------

/// A private MariaDB server (`mariadb-install-db` + `mariadbd
/// --skip-networking`) with a unix socket in its temporary directory; root
/// has no password.
pub struct MariaDb {
    child: Child,
    dir: tempfile::TempDir,
}

impl MariaDb {
    /// Starts a server; `None` (after a note on stderr) when MariaDB is not
    /// installed.
    pub fn start() -> Option<Self> {
        let sbin = ["/usr/sbin", "/usr/local/sbin", "/usr/bin"];
        let (Some(install), Some(server)) = (
            find_binary("mariadb-install-db", &sbin),
            find_binary("mariadbd", &sbin),
        ) else {
            super::skip::note(
                "mariadb",
                "MariaDB (mariadb-install-db, mariadbd) is not installed",
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("lw-maria-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        let log = dir.path().join("mariadb.log");
        // Its own directory for temporary tables: with the shared /tmp, a
        // bootstrap once failed deleting its own temporary file (CI, stop 36).
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let tmpdir = format!("--tmpdir={}", tmp.display());
        let user: &[&str] = if running_as_root() {
            &["--user=root"]
        } else {
            &[]
        };

        let mut install = quiet(&install, dir.path(), &log);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .arg(&tmpdir)
            .args(user);
        set_up(&mut install, "mariadb-install-db", &log);

        let socket = dir.path().join("mariadb.sock");
        let mut child = Command::new(&server)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!(
                "--pid-file={}",
                dir.path().join("mariadb.pid").display()
            ))
            .arg(format!("--log-error={}", log.display()))
            .args([
                "--skip-networking",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
                "--innodb-flush-log-at-trx-commit=0",
            ])
            .arg(&tmpdir)
            .args(user)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        let url = format!("mysql://root@localhost/mysql?socket={}", socket.display());
        wait_accepting(&mut child, &log, "mariadbd", || {
            socket.exists() && block_on(MySqlConnection::connect(&url)).is_ok()
        });
        Some(MariaDb { child, dir })
    }

    fn url(&self, database: &str) -> String {
        format!(
            "mysql://root@localhost/{database}?socket={}",
            self.dir.path().join("mariadb.sock").display()
        )
    }

    /// Creates database `name` with Laravel's `failed_jobs` table and
    /// returns its client.
    pub fn database(&self, name: &str) -> FailedDb {
        block_on(async {
            let mut c = MySqlConnection::connect(&self.url("mysql")).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut c)
                .await
                .unwrap();
        });
        let db = FailedDb::MySql(self.url(name));
        db.create_table();
        db
    }
}

impl MariaDb {
    /// The server's unix socket (`unix_socket` of PHP's `mysql`
    /// connection).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("mariadb.sock")
    }

    /// Creates the empty database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        block_on(async {
            let mut c = MySqlConnection::connect(&self.url("mysql")).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut c)
                .await
                .unwrap();
        });
        self.url(name)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        // Nothing in a test database needs a clean shutdown.
        stop(&mut self.child, Signal::SIGKILL);
    }
}

// ---------------------------------------------------------------------------
// The failed_jobs table
// ---------------------------------------------------------------------------

/// Runs `$body` with `$c` bound to a fresh connection to `$db`'s database
/// (each arm has its own connection type, so one body serves all three).
macro_rules! on_connection {
    ($db:expr, |$c:ident| $body:expr) => {
        match $db {
            FailedDb::Sqlite(url) => {
                let mut $c = SqliteConnection::connect(url).await.unwrap();
                $body
            }
            FailedDb::Postgres(url) => {
                let mut $c = PgConnection::connect(url).await.unwrap();
                $body
            }
            FailedDb::MySql(url) => {
                let mut $c = MySqlConnection::connect(url).await.unwrap();
                $body
            }
        }
    };
}

/// Laravel's `failed_jobs` table in one database, by URL.
pub enum FailedDb {
    /// `sqlite://path`.
    Sqlite(String),
    /// `postgres://…`.
    Postgres(String),
    /// `mysql://…` (MariaDB).
    MySql(String),
}

impl FailedDb {
    /// The table in the SQLite file at `path` (created with the table).
    pub fn sqlite(path: &Path) -> Self {
        super::sqlite::create_failed_jobs(path);
        FailedDb::Sqlite(format!("sqlite://{}", path.display()))
    }

    /// The URL for `[failed] url`.
    pub fn url(&self) -> &str {
        match self {
            FailedDb::Sqlite(u) | FailedDb::Postgres(u) | FailedDb::MySql(u) => u,
        }
    }

    /// Creates the table as Laravel's migration does on this database
    /// (`id` bigint auto-increment PK, `uuid` unique, `failed_at` timestamp
    /// defaulting to now).
    pub fn create_table(&self) {
        let statements: &[&'static str] = match self {
            FailedDb::Sqlite(_) => return, // made by `sqlite()`
            FailedDb::Postgres(_) => &[
                "create table \"failed_jobs\" (\"id\" bigserial not null primary key, \
                 \"uuid\" varchar(255) not null, \"connection\" text not null, \
                 \"queue\" text not null, \"payload\" text not null, \
                 \"exception\" text not null, \"failed_at\" timestamp(0) without time zone \
                 not null default CURRENT_TIMESTAMP)",
                "alter table \"failed_jobs\" add constraint \"failed_jobs_uuid_unique\" \
                 unique (\"uuid\")",
            ],
            FailedDb::MySql(_) => &[
                "create table `failed_jobs` (`id` bigint unsigned not null auto_increment \
                 primary key, `uuid` varchar(255) not null, `connection` text not null, \
                 `queue` text not null, `payload` longtext not null, \
                 `exception` longtext not null, `failed_at` timestamp not null default \
                 CURRENT_TIMESTAMP) default character set utf8mb4 collate 'utf8mb4_unicode_ci'",
                "alter table `failed_jobs` add unique `failed_jobs_uuid_unique`(`uuid`)",
            ],
        };
        for sql in statements {
            self.execute(sql, &[]);
        }
    }

    fn execute(&self, sql: &'static str, binds: &[&str]) {
        block_on(async {
            on_connection!(self, |c| {
                let mut q = sqlx::query(sql);
                for b in binds {
                    q = q.bind(*b);
                }
                q.execute(&mut c).await.unwrap();
            })
        });
    }

    /// Inserts `row` as Laravel would (`failed_at` as given, `Y-m-d H:i:s`).
    pub fn insert(&self, row: &FailedRow) {
        let sql = match self {
            FailedDb::Sqlite(_) | FailedDb::MySql(_) => {
                "INSERT INTO failed_jobs (uuid, connection, queue, payload, exception, failed_at) \
                 VALUES (?, ?, ?, ?, ?, ?)"
            }
            FailedDb::Postgres(_) => {
                "INSERT INTO failed_jobs (uuid, connection, queue, payload, exception, failed_at) \
                 VALUES ($1, $2, $3, $4, $5, CAST($6 AS timestamp))"
            }
        };
        self.execute(
            sql,
            &[
                &row.uuid,
                &row.connection,
                &row.queue,
                &row.payload,
                &row.exception,
                &row.failed_at,
            ],
        );
    }

    /// Every row, in `id` order, `failed_at` as `Y-m-d H:i:s`.
    pub fn rows(&self) -> Vec<FailedRow> {
        let read = |r: &dyn Fn(usize) -> String| FailedRow {
            uuid: r(0),
            connection: r(1),
            queue: r(2),
            payload: r(3),
            exception: r(4),
            failed_at: r(5),
        };
        let select = match self {
            FailedDb::Sqlite(_) => {
                "SELECT uuid, connection, queue, payload, exception, failed_at \
                 FROM failed_jobs ORDER BY id"
            }
            FailedDb::Postgres(_) => {
                "SELECT uuid, connection, queue, payload, exception, \
                 to_char(failed_at, 'YYYY-MM-DD HH24:MI:SS') FROM failed_jobs ORDER BY id"
            }
            FailedDb::MySql(_) => {
                "SELECT uuid, connection, queue, payload, exception, \
                 DATE_FORMAT(failed_at, '%Y-%m-%d %H:%i:%s') FROM failed_jobs ORDER BY id"
            }
        };
        block_on(async {
            on_connection!(self, |c| {
                sqlx::query(select)
                    .fetch_all(&mut c)
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| read(&|i| row.get(i)))
                    .collect()
            })
        })
    }
}
