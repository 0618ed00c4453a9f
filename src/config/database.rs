//! Where a `database` queue connection's jobs are: its database (as
//! `config/database.php` builds it, `url` included), table, default queue
//! and `retry_after`. Which driver a connection has is decided in
//! [`super::driver`].
//!
//! Laravel's rules, mirrored here:
//!
//! - the database is the connection's `connection` key
//!   (`DB_QUEUE_CONNECTION`, 11+), else the app's default connection
//!   (`DB_CONNECTION`); its `url` (`DB_URL`, `DATABASE_URL` before 11)
//!   wins over its parts as `ConfigurationUrlParser` merges them;
//! - a SQLite file given relative is the app's (`php artisan` runs in the
//!   app's root), and the default file is `database/database.sqlite`;
//! - `DB_QUEUE_TABLE` (default `jobs`), `DB_QUEUE` (default `default`),
//!   `DB_QUEUE_RETRY_AFTER` (default 90; `null` is 60 s on this driver,
//!   as `DatabaseConnector` passes `retry_after ?? 60`).

use std::path::Path;

use anyhow::{Context, bail};
use percent_encoding::percent_decode_str;

use super::env::encode;
use super::file::Layer;
use crate::queue::database::DatabaseQueueSpec;

/// `[database]` and `[queue]`, resolved for the database driver.
///
/// # Errors
/// No database to be found (naming the keys that give one), or a table
/// name that is empty.
pub fn spec(layer: &Layer) -> anyhow::Result<DatabaseQueueSpec> {
    let url = layer.database.url.clone().context(
        "the database queue needs a database: set DB_CONNECTION (sqlite, mysql, mariadb or \
         pgsql) with DB_DATABASE and DB_* or DB_URL in the app's .env (--env-file), or \
         [database] url (sqlite:///path, mysql://, postgres://) in the config file, or \
         pass --app so the app answers",
    )?;
    let table = layer
        .database
        .table
        .clone()
        .unwrap_or_else(|| "jobs".into());
    if table.trim().is_empty() {
        bail!("[database] table = {table:?}: name the jobs table (DB_QUEUE_TABLE, default jobs)");
    }
    let retry_after = super::retry_after::database(&layer.queue)?;
    Ok(DatabaseQueueSpec {
        url,
        table,
        retry_after,
    })
}

/// One connection of `config/database.php`, as Laravel holds it (every
/// value a string, as `env()` gives it; `None`: not set).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DbConnection {
    /// `sqlite`, `mysql`, `mariadb` or `pgsql` (`sqlsrv` is not run).
    pub driver: Option<String>,
    /// `url` (`DB_URL`, `DATABASE_URL` before 11): wins over the parts.
    pub url: Option<String>,
    /// `host` (`DB_HOST`).
    pub host: Option<String>,
    /// `port` (`DB_PORT`).
    pub port: Option<String>,
    /// `database` (`DB_DATABASE`): a SQLite file, else the schema.
    pub database: Option<String>,
    /// `username` (`DB_USERNAME`).
    pub username: Option<String>,
    /// `password` (`DB_PASSWORD`).
    pub password: Option<String>,
    /// `unix_socket` (`DB_SOCKET`, MySQL and MariaDB).
    pub socket: Option<String>,
}

impl DbConnection {
    /// The skeleton's connection `name` (`sqlite`, `mysql`, `mariadb`,
    /// `pgsql`) from `DB_*` variables (`get`), as its
    /// `config/database.php` reads them; `None` for another name.
    pub fn from_env(name: &str, get: &impl Fn(&str) -> Option<String>) -> Option<DbConnection> {
        if !matches!(name, "sqlite" | "mysql" | "mariadb" | "pgsql") {
            return None;
        }
        let sqlite = name == "sqlite";
        Some(DbConnection {
            driver: Some(name.to_string()),
            url: get("DB_URL").or_else(|| get("DATABASE_URL")),
            host: get("DB_HOST").filter(|_| !sqlite),
            port: get("DB_PORT").filter(|_| !sqlite),
            database: get("DB_DATABASE"),
            username: get("DB_USERNAME").filter(|_| !sqlite),
            password: get("DB_PASSWORD").filter(|_| !sqlite),
            socket: get("DB_SOCKET").filter(|_| !sqlite),
        })
    }

    /// The URL the worker opens (`sqlite:///abs/path`, `mysql://…`,
    /// `postgres://…`): the `url` merged over the parts as Laravel's
    /// `ConfigurationUrlParser` does (its `sqlite:///x` is the file `x`,
    /// relative; `sqlite:////x` is `/x`), the skeleton's defaults for what
    /// is unset (`127.0.0.1`, 3306 or 5432, `laravel`, `root`), a relative
    /// SQLite file below `app` (the default `database/database.sqlite`,
    /// `database_path('database.sqlite')`). `None`: a driver the worker
    /// does not run, a `url` without `://`, or a SQLite connection without
    /// a file and no `app`.
    ///
    /// # Errors
    /// SQLite's `:memory:` (a database no other process sees); a `url`
    /// Laravel refuses as malformed, or one whose user part a raw
    /// `/`, `?`, `#` or `@` cuts (see [`parse_url`]); the message never
    /// shows the URL.
    pub fn url(&self, app: Option<&Path>) -> anyhow::Result<Option<String>> {
        let mut conn = self.clone();
        if let Some(url) = conn.url.take() {
            match conn.merged_with_url(&url)? {
                Some(merged) => conn = merged,
                None => return Ok(None),
            }
        }
        let Some(driver) = conn.driver.as_deref() else {
            return Ok(None);
        };
        if driver == "sqlite" {
            return sqlite_url(conn.database.as_deref(), app);
        }
        let (scheme, default_port) = match driver {
            "mysql" | "mariadb" => ("mysql", "3306"),
            "pgsql" => ("postgres", "5432"),
            _ => return Ok(None),
        };
        let host = conn.host.unwrap_or_else(|| "127.0.0.1".into());
        let port = conn.port.unwrap_or_else(|| default_port.into());
        let database = conn.database.unwrap_or_else(|| "laravel".into());
        let user = encode(&conn.username.unwrap_or_else(|| "root".into()));
        let pass = conn
            .password
            .map(|p| format!(":{}", encode(&p)))
            .unwrap_or_default();
        let database = encode(&database);
        // A socket: MySQL's `unix_socket`, PostgreSQL's host directory.
        Ok(Some(match (driver, conn.socket) {
            ("mysql" | "mariadb", Some(socket)) => format!(
                "{scheme}://{user}{pass}@localhost/{database}?socket={}",
                encode(&socket)
            ),
            ("pgsql", _) if host.starts_with('/') => format!(
                "{scheme}://{user}{pass}@localhost:{port}/{database}?host={}",
                encode(&host)
            ),
            _ => format!("{scheme}://{user}{pass}@{host}:{port}/{database}"),
        }))
    }

    /// This connection with what `url` names replacing its parts
    /// (`ConfigurationUrlParser::parseConfiguration`: PHP's `parse_url`,
    /// then `rawurldecode` of each part); `None` when `url` has no
    /// `scheme://`.
    ///
    /// # Errors
    /// As [`parse_url`].
    fn merged_with_url(mut self, url: &str) -> anyhow::Result<Option<DbConnection>> {
        // `sqlite:///x` (and `sqlite3:///x`) is the relative file `x`:
        // Laravel gives `parse_url` a host, `null`, to make it parse.
        let sqlite = url
            .strip_prefix("sqlite:///")
            .map(|rest| format!("sqlite://null/{rest}"))
            .or_else(|| {
                url.strip_prefix("sqlite3:///")
                    .map(|rest| format!("sqlite3://null/{rest}"))
            });
        let url = sqlite.as_deref().unwrap_or(url);
        let Some(parts) = parse_url(url)? else {
            return Ok(None);
        };
        let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
        let driver = match parts.scheme {
            "postgres" | "postgresql" => "pgsql",
            "sqlite3" => "sqlite",
            "mysql2" => "mysql",
            other => other,
        };
        self.driver = Some(driver.to_string());
        if let Some(user) = parts.user {
            self.username = Some(decode(user));
        }
        if let Some(pass) = parts.pass {
            self.password = Some(decode(pass));
        }
        self.host = Some(decode(parts.host));
        if let Some(port) = parts.port {
            self.port = Some(port.to_string());
        }
        if let Some(database) = parts.path.and_then(|p| p.strip_prefix('/'))
            && !database.is_empty()
        {
            self.database = Some(decode(database));
        }
        for pair in parts.query.unwrap_or_default().split('&') {
            if let Some(("unix_socket", socket)) = pair.split_once('=') {
                self.socket = Some(decode(socket));
            }
        }
        Ok(Some(self))
    }
}

/// The parts of a `scheme://authority[/path][?query][#fragment]` URL as
/// PHP's `parse_url` cuts them (still percent-encoded).
#[derive(Debug, PartialEq, Eq)]
struct UrlParts<'a> {
    scheme: &'a str,
    user: Option<&'a str>,
    pass: Option<&'a str>,
    host: &'a str,
    port: Option<u16>,
    path: Option<&'a str>,
    query: Option<&'a str>,
}

/// What a URL refused by [`parse_url`] is told: never the URL itself,
/// whose user part holds the password.
const MALFORMED: &str = "the database URL (DB_URL, DATABASE_URL, or a connection's `url`) is \
     malformed as Laravel reads it (its ConfigurationUrlParser uses PHP's parse_url: \
     \"The database configuration URL is malformed\"). The host part ends at the first `/`, \
     `?` or `#`, so such a character in the user name or password cuts the URL there and \
     the rest of the password would be read as the port or the database: percent-encode \
     them in the URL (`/` %2F, `?` %3F, `#` %23, `@` %40, `%` %25; Laravel decodes them), \
     or set DB_PASSWORD and leave the password out of the URL";

/// `url` cut into its parts as PHP's `parse_url` cuts a URL with an
/// authority: the authority ends at the first `/`, `?` or `#`; the user
/// part is what comes before its last `@` (user, then password after the
/// first `:`); the port is what follows the host's last `:` (digits, at
/// most 5 characters, 65535 at most; brackets of an IPv6 host excepted);
/// then the path, `?query` and `#fragment`. `Ok(None)`: no `scheme://`.
///
/// # Errors
/// Where `parse_url` gives false (Laravel then throws "The database
/// configuration URL is malformed"): no host, or a port that is not a
/// number (e.g. `postgres://u:pa/ss@h/db`, whose authority is `u:pa`);
/// and, where PHP would go on with pieces of the password as the host,
/// port or database, an `@` in the path or fragment, or in the query of
/// a URL whose authority had none (`postgres://u:12/ss@h/db`: host `u`,
/// port 12, database `ss@h/db`). The error never shows the URL.
fn parse_url(url: &str) -> anyhow::Result<Option<UrlParts<'_>>> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let valid_scheme = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !valid_scheme {
        return Ok(None);
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    let (user, pass) = match userinfo.map(|u| u.split_once(':').ok_or(u)) {
        Some(Ok((user, pass))) => (Some(user), Some(pass)),
        Some(Err(user)) => (Some(user), None),
        None => (None, None),
    };
    let ipv6 = hostport.starts_with('[') && hostport.ends_with(']');
    let (host, port) = match hostport.rsplit_once(':').filter(|_| !ipv6) {
        Some((host, "")) => (host, None),
        Some((host, port)) => {
            let digits = port.bytes().take_while(u8::is_ascii_digit).count();
            let number = port[..digits].parse::<u16>().ok();
            match number {
                Some(number) if port.len() <= 5 => (host, Some(number)),
                _ => anyhow::bail!(MALFORMED),
            }
        }
        None => (hostport, None),
    };
    if host.is_empty() {
        anyhow::bail!(MALFORMED);
    }
    let (tail, fragment) = match tail.split_once('#') {
        Some((tail, fragment)) => (tail, Some(fragment)),
        None => (tail, None),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let cut = path.contains('@')
        || fragment.is_some_and(|f| f.contains('@'))
        || (userinfo.is_none() && query.is_some_and(|q| q.contains('@')));
    if cut {
        anyhow::bail!(MALFORMED);
    }
    Ok(Some(UrlParts {
        scheme,
        user,
        pass,
        host,
        port,
        path: Some(path).filter(|p| !p.is_empty()),
        query,
    }))
}

/// `sqlite://` and the file's path: `database` as given when absolute,
/// else below `app`; the app's `database/database.sqlite` when unset.
/// The path's `%`, `?` and `#` are percent-encoded, so a file named
/// `jobs%41.sqlite` or `a?b.sqlite` is that file (sqlx decodes the path
/// and would read `?` as the start of its options).
///
/// # Errors
/// `:memory:`: a database only the process that opens it sees, which no
/// worker can share with the app.
fn sqlite_url(database: Option<&str>, app: Option<&Path>) -> anyhow::Result<Option<String>> {
    let file = match database {
        Some(":memory:") => bail!(
            "DB_DATABASE = \":memory:\" is an in-memory SQLite database, which only the \
             process that opens it sees: the worker cannot share it with the app; point \
             DB_DATABASE at a file (the skeleton's database/database.sqlite)"
        ),
        Some(db) if Path::new(db).is_absolute() => Path::new(db).to_path_buf(),
        Some(db) => app.map_or_else(|| Path::new(db).to_path_buf(), |app| app.join(db)),
        None => match app {
            Some(app) => app.join("database/database.sqlite"),
            None => return Ok(None),
        },
    };
    const URL_SYNTAX: &percent_encoding::AsciiSet =
        &percent_encoding::CONTROLS.add(b'%').add(b'?').add(b'#');
    let path = file.to_string_lossy();
    Ok(Some(format!(
        "sqlite://{}",
        percent_encoding::utf8_percent_encode(&path, URL_SYNTAX)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::Nullable;
    use crate::queue::database::NULL_RETRY_AFTER;
    use std::collections::HashMap;

    fn conn(pairs: &[(&str, &str)], name: &str) -> Option<DbConnection> {
        let map: HashMap<&str, String> = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
        DbConnection::from_env(name, &|k: &str| map.get(k).cloned())
    }

    #[test]
    fn the_skeletons_connections_from_db_variables() {
        let app = Path::new("/srv/app");
        let url = |pairs: &[(&str, &str)], name: &str| {
            conn(pairs, name).and_then(|c| c.url(Some(app)).unwrap())
        };
        assert_eq!(
            url(&[], "sqlite").as_deref(),
            Some("sqlite:///srv/app/database/database.sqlite")
        );
        assert_eq!(
            url(&[("DB_DATABASE", "db/app.sqlite")], "sqlite").as_deref(),
            Some("sqlite:///srv/app/db/app.sqlite")
        );
        assert_eq!(
            url(
                &[("DB_DATABASE", "/data/q.sqlite"), ("DB_HOST", "x")],
                "sqlite"
            )
            .as_deref(),
            Some("sqlite:///data/q.sqlite")
        );
        let memory = conn(&[("DB_DATABASE", ":memory:")], "sqlite").unwrap();
        let e = memory.url(Some(app)).unwrap_err().to_string();
        assert!(e.contains(":memory:") && e.contains("DB_DATABASE"), "{e}");
        // A file name that looks like URL syntax is that file.
        assert_eq!(
            url(&[("DB_DATABASE", "/data/a?b%41#c.sqlite")], "sqlite").as_deref(),
            Some("sqlite:///data/a%3Fb%2541%23c.sqlite")
        );
        assert_eq!(
            url(&[("DB_PASSWORD", "p@ss w")], "mariadb").as_deref(),
            Some("mysql://root:p%40ss%20w@127.0.0.1:3306/laravel")
        );
        assert_eq!(
            url(&[("DB_HOST", "db"), ("DB_USERNAME", "u")], "pgsql").as_deref(),
            Some("postgres://u@db:5432/laravel")
        );
        assert_eq!(
            url(&[("DB_SOCKET", "/run/mysqld/mysqld.sock")], "mysql").as_deref(),
            Some("mysql://root@localhost/laravel?socket=%2Frun%2Fmysqld%2Fmysqld.sock")
        );
        assert_eq!(
            url(&[("DB_HOST", "/var/run/postgresql")], "pgsql").as_deref(),
            Some("postgres://root@localhost:5432/laravel?host=%2Fvar%2Frun%2Fpostgresql")
        );
        assert_eq!(conn(&[], "sqlsrv"), None);
        assert_eq!(
            conn(&[], "sqlite").unwrap().url(None).unwrap(),
            None,
            "no app, no file"
        );
    }

    /// `ConfigurationUrlParser`'s merge, checked against Laravel 8.83's
    /// own code (`/usr/share/php/Illuminate/Support`) by hand: the URL's
    /// parts win, the rest stays, `sqlite:///x` is the relative file `x`.
    #[test]
    fn db_url_wins_over_the_parts() {
        let app = Path::new("/srv/app");
        let url =
            |pairs: &[(&str, &str)], name: &str| conn(pairs, name).unwrap().url(Some(app)).unwrap();
        assert_eq!(
            url(
                &[
                    ("DB_URL", "postgresql://app:s%40cret@pg.internal/shop"),
                    ("DB_PORT", "6432"),
                ],
                "mysql"
            )
            .as_deref(),
            Some("postgres://app:s%40cret@pg.internal:6432/shop"),
            "the URL's driver, user, password, host and database; the port of DB_PORT"
        );
        assert_eq!(
            url(&[("DATABASE_URL", "mysql://u@h:3307/q")], "pgsql").as_deref(),
            Some("mysql://u@h:3307/q")
        );
        assert_eq!(
            url(&[("DB_URL", "sqlite:///database/jobs.sqlite")], "sqlite").as_deref(),
            Some("sqlite:///srv/app/database/jobs.sqlite")
        );
        assert_eq!(
            url(&[("DB_URL", "sqlite:////data/jobs.sqlite")], "sqlite").as_deref(),
            Some("sqlite:///data/jobs.sqlite")
        );
        assert_eq!(
            url(
                &[("DB_URL", "mysql://u:p@localhost/q?unix_socket=/tmp/m.sock")],
                "mysql"
            )
            .as_deref(),
            Some("mysql://u:p@localhost/q?socket=%2Ftmp%2Fm.sock")
        );
        assert_eq!(url(&[("DB_URL", "no scheme")], "mysql"), None);
    }

    /// Issue 47, 4: a password with a raw `/`, `?`, `#` or `@` in `DB_URL`
    /// is read as PHP's `parse_url` reads it (the host part ends at the
    /// first `/`, `?` or `#`): Laravel refuses most such URLs as
    /// malformed, and so does the worker, where it used to read the rest
    /// of the password as the database (and print it); the error never
    /// shows any part of the URL. `%` is decoded as `rawurldecode` does
    /// (a `%` not followed by two hex digits stays as it is).
    #[test]
    fn a_db_url_password_with_raw_reserved_characters() {
        let url = |db_url: &str| {
            conn(&[("DB_URL", db_url), ("DB_PASSWORD", "pw")], "pgsql")
                .unwrap()
                .url(None)
        };
        for bad in [
            "postgres://lw:pa/wrongPW-x7@127.0.0.1:5432/lw",
            "postgres://lw:pa?wrongPW-x7@127.0.0.1:5432/lw",
            "postgres://lw:pa#wrongPW-x7@127.0.0.1:5432/lw",
            "postgres://lw:12/wrongPW-x7@127.0.0.1:5432/lw",
            "postgres://lw:p@ss/wrongPW-x7@127.0.0.1:5432/lw",
            "postgres://lw:pw@127.0.0.1:5432/lw#wrongPW-x7@x",
            "postgres://lw:pw@127.0.0.1:99999/lw",
            "postgres:///lw",
            "mysql://lw:pa/wrongPW-x7@db/lw?unix_socket=/s",
        ] {
            let e = format!("{:#}", url(bad).unwrap_err());
            assert!(
                e.contains("malformed") && e.contains("percent-encode"),
                "{e}"
            );
            for part in ["lw:", "wrongPW", "x7", "127.0.0.1", "/lw"] {
                assert!(!e.contains(part), "{part:?} shown: {e}");
            }
        }
        assert_eq!(
            url("postgres://lw:pa%2FwrongPW%23x%40y@db.internal:6432/shop")
                .unwrap()
                .as_deref(),
            Some("postgres://lw:pa%2FwrongPW%23x%40y@db.internal:6432/shop"),
            "the encoded characters are the password's"
        );
        assert_eq!(
            url("postgres://lw:pa%zz%41@db/shop").unwrap().as_deref(),
            Some("postgres://lw:pa%25zzA@db:5432/shop"),
            "rawurldecode: %zz stays, %41 is A"
        );
        assert_eq!(
            url("postgres://lw@db:5432/shop").unwrap().as_deref(),
            Some("postgres://lw:pw@db:5432/shop"),
            "no password in the URL: DB_PASSWORD's"
        );
        assert_eq!(
            url("postgres://lw:pw@db:5432/shop?sslmode=require&application_name=a@b")
                .unwrap()
                .as_deref(),
            Some("postgres://lw:pw@db:5432/shop"),
            "an @ in the query of a URL with a user part is the query's"
        );
        assert_eq!(
            url("postgres://lw:pw@[::1]:5433/shop").unwrap().as_deref(),
            Some("postgres://lw:pw@[::1]:5433/shop")
        );
    }

    #[test]
    fn retry_after_null_is_60_seconds_on_this_driver() {
        let mut layer = Layer::default();
        layer.database.url = Some("sqlite:///tmp/q.sqlite".into());
        assert_eq!(spec(&layer).unwrap().retry_after, 90);
        layer.queue.retry_after = Some(Nullable::Null);
        assert_eq!(spec(&layer).unwrap().retry_after, NULL_RETRY_AFTER);
        layer.queue.retry_after = Some(Nullable::Seconds(0));
        assert!(
            spec(&layer)
                .unwrap_err()
                .to_string()
                .contains("retry_after = 0")
        );
        layer.queue.retry_after = Some(Nullable::Seconds(300));
        let s = spec(&layer).unwrap();
        assert_eq!((s.retry_after, s.table.as_str()), (300, "jobs"));
        layer.database.table = Some(" ".into());
        assert!(
            spec(&layer)
                .unwrap_err()
                .to_string()
                .contains("[database] table")
        );
        let e = spec(&Layer::default()).unwrap_err().to_string();
        assert!(
            e.contains("needs a database") && e.contains("DB_CONNECTION"),
            "{e}"
        );
    }

    // ---- the rules end to end: sources merged, then resolved ----

    use crate::config::{
        CacheSettings, FailedSettings, QueueDriverSettings, Settings, merge_sources,
    };

    fn env_layer(pairs: &[(&str, &str)]) -> Layer {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        crate::config::env::layer(|k| map.get(k).cloned()).unwrap()
    }

    fn settings(
        cli: Option<&str>,
        dotenv: Layer,
        file: &str,
        environment: Layer,
    ) -> anyhow::Result<Settings> {
        let file = Layer::from_toml(file)?;
        Settings::resolve(merge_sources(
            cli,
            dotenv,
            Layer::default(),
            file,
            environment,
        )?)
    }

    fn spec_of(s: &Settings) -> &DatabaseQueueSpec {
        match &s.driver {
            QueueDriverSettings::Database(spec) => spec,
            other => panic!("{other:?}, not the database's driver"),
        }
    }

    /// The process environment alone: the 11+ variables, each on its own
    /// driver.
    #[test]
    fn environment_alone() {
        let vars = [
            ("QUEUE_CONNECTION", "database"),
            ("DB_CONNECTION", "pgsql"),
            ("DB_DATABASE", "shop"),
            ("DB_QUEUE_CONNECTION", "mysql"),
            ("DB_HOST", "pg.internal"),
            ("DB_USERNAME", "app"),
            ("DB_PASSWORD", "pw"),
            ("DB_QUEUE_TABLE", "queue_jobs"),
            ("DB_QUEUE", "mail"),
            ("DB_QUEUE_RETRY_AFTER", "300"),
            ("REDIS_QUEUE", "not-this"),
            ("REDIS_QUEUE_RETRY_AFTER", "5"),
        ];
        let s = settings(None, Layer::default(), "", env_layer(&vars)).unwrap();
        let spec = spec_of(&s);
        assert_eq!(spec.url, "mysql://app:pw@pg.internal:3306/shop");
        assert_eq!(spec.table, "queue_jobs");
        assert_eq!(spec.retry_after, 300);
        assert_eq!(s.retry_after, Some(300));
        assert_eq!(s.block_for, None);
        assert_eq!(s.default_queue, "mail");
        assert_eq!(s.connection, "database");
        assert_eq!(
            s.failed,
            FailedSettings::Database {
                url: "postgres://app:pw@pg.internal:5432/shop".into(),
                table: "failed_jobs".into()
            },
            "failed_jobs stays on the default connection"
        );

        // `work redis` on the same environment: Redis, REDIS_QUEUE.
        let s = settings(Some("redis"), Layer::default(), "", env_layer(&vars)).unwrap();
        assert_eq!(s.driver, QueueDriverSettings::Redis);
        assert_eq!(
            (s.default_queue.as_str(), s.retry_after),
            ("not-this", Some(5))
        );

        // DB_QUEUE_RETRY_AFTER=null is 0 to the skeleton's (int) cast.
        let mut null = vars.to_vec();
        null.push(("DB_QUEUE_RETRY_AFTER", "null"));
        null.retain(|(k, v)| *k != "DB_QUEUE_RETRY_AFTER" || *v == "null");
        let e = settings(None, Layer::default(), "", env_layer(&null))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("retry_after = 0") && e.contains("DB_QUEUE_RETRY_AFTER"),
            "{e}"
        );
    }

    /// The 11+ skeleton's `.env` (`DB_CONNECTION=sqlite`,
    /// `QUEUE_CONNECTION=database`, `CACHE_STORE=database`): one SQLite
    /// file for the queue, the cache and failed_jobs, below the app.
    #[test]
    fn the_11_skeleton_env_file_uses_one_database() {
        let dir = tempfile::tempdir().unwrap();
        let app = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(app.join("config")).unwrap();
        std::fs::write(
            app.join(".env"),
            "APP_NAME=Laravel\nDB_CONNECTION=sqlite\nQUEUE_CONNECTION=database\nCACHE_STORE=database\n",
        )
        .unwrap();
        let dotenv = || crate::config::dotenv::layer(&app.join(".env")).unwrap();
        let s = settings(None, dotenv(), "", Layer::default()).unwrap();
        let file = format!(
            "sqlite://{}",
            app.join("database/database.sqlite").display()
        );
        assert_eq!(spec_of(&s).url, file);
        assert_eq!(
            (spec_of(&s).table.as_str(), spec_of(&s).retry_after),
            ("jobs", 90)
        );
        assert_eq!(s.default_queue, "default");
        let CacheSettings::Database { url, .. } = &s.cache else {
            panic!("{:?}", s.cache)
        };
        assert_eq!(url, &file);
        assert_eq!(
            s.failed,
            FailedSettings::Database {
                url: file.clone(),
                table: "failed_jobs".into()
            }
        );

        // No QUEUE_CONNECTION: config/queue.php's default decides.
        std::fs::write(
            app.join(".env"),
            "DB_CONNECTION=sqlite\nDB_DATABASE=db/app.sqlite\nCACHE_STORE=database\n",
        )
        .unwrap();
        let s = settings(None, dotenv(), "", Layer::default()).unwrap();
        assert_eq!(s.driver, QueueDriverSettings::Redis, "no config/queue.php");
        std::fs::write(
            app.join("config/queue.php"),
            "'default' => env('QUEUE_CONNECTION', 'database'),",
        )
        .unwrap();
        let s = settings(None, dotenv(), "", Layer::default()).unwrap();
        assert_eq!(
            spec_of(&s).url,
            format!("sqlite://{}", app.join("db/app.sqlite").display())
        );
    }

    /// The config file: `[queue] connection = "database"` with
    /// `[database]`; `[queue] driver` for another name; the file's keys
    /// over the `.env`'s, the environment's over the file's.
    #[test]
    fn config_file_keys() {
        let s = settings(
            None,
            Layer::default(),
            "[queue]\nconnection = \"database\"\nretry_after = \"null\"\n\
             [database]\nurl = \"mysql://u@db/app\"\ntable = \"q\"\n\
             [failed]\ndriver = \"null\"",
            Layer::default(),
        )
        .unwrap();
        let spec = spec_of(&s);
        assert_eq!(
            (spec.url.as_str(), spec.table.as_str(), spec.retry_after),
            ("mysql://u@db/app", "q", NULL_RETRY_AFTER)
        );

        let file = "[queue]\nconnection = \"jobs-db\"\ndriver = \"database\"\nretry_after = 30\n\
                    [database]\nurl = \"sqlite:///tmp/q.sqlite\"\n[failed]\ndriver = \"null\"";
        let dotenv = env_layer(&[("DB_QUEUE_RETRY_AFTER", "120"), ("DB_QUEUE", "mail")]);
        let s = settings(None, dotenv.clone(), file, Layer::default()).unwrap();
        assert_eq!(s.connection, "jobs-db");
        assert_eq!(spec_of(&s).retry_after, 30, "the file over the .env");
        assert_eq!(s.default_queue, "mail");
        let s = settings(None, Layer::default(), file, dotenv).unwrap();
        assert_eq!(
            spec_of(&s).retry_after,
            120,
            "the environment over the file"
        );
        // `work other`: the file's driver was for jobs-db; the name decides.
        let s = settings(Some("other"), Layer::default(), file, Layer::default()).unwrap();
        assert_eq!(s.driver, QueueDriverSettings::Redis);
        assert_eq!(s.connection, "other");
    }

    #[test]
    fn refusals_name_the_key() {
        let e = settings(
            None,
            env_layer(&[("QUEUE_CONNECTION", "database")]),
            "[failed]\ndriver = \"null\"",
            Layer::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("needs a database") && e.contains("[database] url"),
            "{e}"
        );

        let db = "[queue]\nconnection = \"database\"\n[database]\nurl = \"sqlite:///tmp/q\"\n\
                  [failed]\ndriver = \"null\"\n";
        let e = settings(
            None,
            Layer::default(),
            &format!("{db}[horizon]\nenabled = true"),
            Layer::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("[horizon] enabled = true") && e.contains("Horizon reads only Redis"));
        // block_for: ignored with a warning (one file may serve both drivers).
        let s = settings(
            None,
            Layer::default(),
            &db.replace("[database]", "block_for = 5\n[database]"),
            Layer::default(),
        );
        assert_eq!(s.unwrap().block_for, None);
        let e = settings(
            None,
            Layer::default(),
            "[queue]\ndriver = \"rabbitmq\"",
            Layer::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("[queue] driver = \"rabbitmq\""), "{e}");

        // The app's config/horizon.php alone on a database queue: records
        // off, a warning, no refusal.
        let mut app = Layer::default();
        app.horizon.enabled = Some(true);
        let merged = merge_sources(
            None,
            Layer::default(),
            app,
            Layer::from_toml(db).unwrap(),
            Layer::default(),
        )
        .unwrap();
        assert!(Settings::resolve(merged).unwrap().horizon.is_none());
    }
}
