//! Settings from the environment, under Laravel's own variable names.
//!
//! | variable                          | setting                                  |
//! |-----------------------------------|------------------------------------------|
//! | `REDIS_URL`                       | `[redis] url`                            |
//! | `REDIS_HOST`, `REDIS_PORT`, `REDIS_USERNAME`, `REDIS_PASSWORD`, `REDIS_DB` | `[redis] url`, when `REDIS_URL` is unset |
//! | `REDIS_SCHEME`                    | `tls` (or `rediss`): the URL becomes `rediss://` |
//! | `REDIS_TLS_CA_FILE`, `REDIS_TLS_CERT_FILE`, `REDIS_TLS_KEY_FILE` | `[redis] tls_ca_file`, `tls_cert_file`, `tls_key_file` |
//! | `REDIS_CLUSTER`                   | `[redis] cluster` (`redis` or `true`: a Redis Cluster) |
//! | `REDIS_SENTINELS`                 | `[redis] sentinels` (comma list of `host:port`) |
//! | `REDIS_SENTINEL_SERVICE`          | `[redis] service`                        |
//! | `REDIS_SENTINEL_PASSWORD`         | `[redis] sentinel_password`              |
//! | `REDIS_PREFIX`                    | `[redis] prefix`                         |
//! | `APP_NAME`                        | prefixes `slug-database-` / `slug-cache-` when no prefix is set |
//! | `HORIZON_PREFIX`                  | `[horizon] prefix` (else `{slug}_horizon:` from `APP_NAME`) |
//! | `REDIS_CACHE_DB`                  | `[cache] database` (a database in `REDIS_URL` wins) |
//! | `CACHE_PREFIX`                    | `[cache] prefix`                         |
//! | `DB_CACHE_TABLE`                  | `[cache] table` (database store)         |
//! | `QUEUE_CONNECTION`                | `[queue] connection`                     |
//! | `REDIS_QUEUE`                     | `[queue] queue`                          |
//! | `REDIS_QUEUE_RETRY_AFTER`         | `[queue] retry_after` (`null` allowed)   |
//! | `DB_CONNECTION`, `DB_URL` (`DATABASE_URL`), `DB_HOST`, `DB_PORT`, `DB_DATABASE`, `DB_USERNAME`, `DB_PASSWORD`, `DB_SOCKET` | `[failed] url` (the default connection) |
//! | `DB_QUEUE_CONNECTION` (else `DB_CONNECTION`) with the `DB_*` above | `[database] url` (the database queue's database) |
//! | `DB_QUEUE_TABLE`                  | `[database] table`                       |
//! | `DB_QUEUE`, `DB_QUEUE_RETRY_AFTER`| `[queue] queue`, `[queue] retry_after` on the database driver (`null`: 60 s) |
//! | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` | `[sqs] key`, `secret`, `token` |
//! | `AWS_DEFAULT_REGION`              | `[sqs] region`                           |
//! | `SQS_PREFIX`, `SQS_SUFFIX`        | `[sqs] prefix`, `suffix`                 |
//! | `AWS_ENDPOINT_URL_SQS` (else `AWS_ENDPOINT_URL`) | `[sqs] endpoint`          |
//! | `SQS_QUEUE`                       | `[queue] queue` on the sqs driver        |
//! | `BEANSTALKD_QUEUE`                | `[queue] queue` on the beanstalkd driver |
//! | `BEANSTALKD_QUEUE_HOST`           | `[queue] host`                           |
//! | `BEANSTALKD_QUEUE_RETRY_AFTER`    | `[queue] retry_after` on the beanstalkd driver (`null`: 0, refused) |
//! | `SQS_OVERFLOW_ENABLED`            | `[sqs] overflow_enabled`                 |
//! | `SQS_OVERFLOW_STORE`              | `[sqs] overflow_store`                   |
//! | `PULSE_ENABLED`                   | `false`: `[pulse] enabled = false`       |
//! | `PULSE_INGEST_DRIVER`             | `[pulse] ingest`                         |
//! | `PULSE_DB_CONNECTION` (else `DB_CONNECTION`) with the `DB_*` above | `[pulse] url` |
//! | `PULSE_QUEUES_ENABLED`, `PULSE_QUEUES_SAMPLE_RATE` | `[pulse] queues`, `queues_sample_rate` |
//! | `PULSE_SLOW_JOBS_ENABLED`, `PULSE_SLOW_JOBS_SAMPLE_RATE`, `PULSE_SLOW_JOBS_THRESHOLD` | `[pulse] slow_jobs`, `slow_jobs_sample_rate`, `slow_jobs_threshold` |
//!
//! Values are read as Laravel's `env()` returns them: `null` and `(null)`
//! are unset (`REDIS_PASSWORD=null` is no password), `empty` is empty,
//! `(true)`/`(false)` are `true`/`false`, and one pair of quotes around the
//! whole value is removed. Empty values count as unset. As Laravel then
//! uses them: `REDIS_PASSWORD=false` (and `REDIS_USERNAME`,
//! `REDIS_SENTINEL_PASSWORD`) is no password, and `REDIS_PREFIX` or
//! `CACHE_PREFIX` set to `null` or `false` is no prefix (not the default).

use super::database::DbConnection;
use super::driver::UNSERVED_SKELETON_CONNECTIONS;
use super::file::{
    CacheLayer, DatabaseLayer, FailedLayer, HorizonLayer, Layer, Nullable, PulseLayer, QueueLayer,
    RedisLayer, SqsLayer,
};
use super::phpdotenv::EnvValue;
use crate::redact::Secret;
pub use crate::slug::{slug, slug_with};

/// How an app's skeleton builds its default prefixes from `APP_NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conventions {
    /// `Str::slug` separator: `-` (12.x/13.x skeleton) or `_` (5.8–11.x).
    pub separator: char,
    /// Appended to the slug for `REDIS_PREFIX`: `-database-` or `_database_`.
    pub database_suffix: &'static str,
    /// Appended to the slug for `CACHE_PREFIX`: `-cache-`, `_cache_` or `_cache`.
    pub cache_suffix: &'static str,
}

impl Default for Conventions {
    /// The current skeleton's (12.x since mid-2025, 13.x).
    fn default() -> Self {
        Conventions {
            separator: '-',
            database_suffix: "-database-",
            cache_suffix: "-cache-",
        }
    }
}

/// Builds the environment layer from `get` (a variable lookup), with the
/// current skeleton's prefix conventions.
///
/// # Errors
/// A variable whose value cannot be used (a port that is not a number...).
pub fn layer(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Layer> {
    layer_with(get, Conventions::default())
}

/// As [`layer`], with the prefix conventions of a given app.
///
/// # Errors
/// As [`layer`].
pub fn layer_with(
    get: impl Fn(&str) -> Option<String>,
    conventions: Conventions,
) -> anyhow::Result<Layer> {
    layer_for_app(get, conventions, None)
}

/// As [`layer_with`], for the app at `app` (its `.env`'s directory): a
/// relative SQLite file, and the default `database/database.sqlite`, are
/// the app's, as `php artisan` (run in the app's root) opens them.
///
/// # Errors
/// As [`layer`].
pub fn layer_for_app(
    get: impl Fn(&str) -> Option<String>,
    conventions: Conventions,
    app: Option<&std::path::Path>,
) -> anyhow::Result<Layer> {
    let vars = Vars(&get);
    // The checks in this order: the first problem is the one reported.
    let queue = queue_layer(&vars)?;
    check_ports(&vars)?;
    let cache = cache_layer(&vars)?;
    let redis = redis_layer(&vars)?;
    let database = database_layer(&vars, app)?;
    let failed_url = match vars.get("DB_CONNECTION") {
        Some(name) => match DbConnection::from_env(&name, &|k: &str| vars.get(k)) {
            Some(conn) => conn.url(app)?,
            None => None,
        },
        None => None,
    };
    let app_slug = vars
        .get("APP_NAME")
        .map(|n| slug_with(&n, conventions.separator));
    let suffixed = |suffix: &str| app_slug.as_ref().map(|s| format!("{s}{suffix}"));
    Ok(Layer {
        redis: RedisLayer {
            // `REDIS_PREFIX=` (empty), `null` or `false` is no prefix.
            prefix: vars
                .kept("REDIS_PREFIX")
                .or_else(|| suffixed(conventions.database_suffix)),
            ..redis
        },
        queue,
        cache: CacheLayer {
            prefix: vars
                .kept("CACHE_PREFIX")
                .or_else(|| suffixed(conventions.cache_suffix)),
            ..cache
        },
        failed: FailedLayer {
            url: failed_url,
            ..FailedLayer::default()
        },
        database,
        sqs: sqs_layer(&vars),
        horizon: HorizonLayer {
            prefix: horizon_prefix(&vars),
            ..HorizonLayer::default()
        },
        pulse: pulse_layer(&vars, app)?,
        ..Layer::default()
    })
}

/// Laravel Pulse's settings (`config/pulse.php`): `PULSE_ENABLED=false`
/// turns the feed off; the storage database is `PULSE_DB_CONNECTION`,
/// else `DB_CONNECTION`; the recorders' switches, rates and threshold as
/// Pulse casts them (`(float)`, `(int)`; a value that is not a number is
/// left unset).
fn pulse_layer<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    app: Option<&std::path::Path>,
) -> anyhow::Result<PulseLayer> {
    let flag = |name: &str| {
        vars.get(name).map(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "false" | "0" | "off" | "no"
            )
        })
    };
    let url = match vars
        .get("PULSE_DB_CONNECTION")
        .or_else(|| vars.get("DB_CONNECTION"))
    {
        Some(name) => match DbConnection::from_env(&name, &|k: &str| vars.get(k)) {
            Some(conn) => conn.url(app)?,
            None => None,
        },
        None => None,
    };
    Ok(PulseLayer {
        enabled: flag("PULSE_ENABLED").filter(|on| !on),
        ingest: vars.get("PULSE_INGEST_DRIVER"),
        url,
        redis_url: None,
        queues: flag("PULSE_QUEUES_ENABLED"),
        queues_sample_rate: vars
            .get("PULSE_QUEUES_SAMPLE_RATE")
            .and_then(|v| v.parse().ok()),
        slow_jobs: flag("PULSE_SLOW_JOBS_ENABLED"),
        slow_jobs_sample_rate: vars
            .get("PULSE_SLOW_JOBS_SAMPLE_RATE")
            .and_then(|v| v.parse().ok()),
        slow_jobs_threshold: vars
            .get("PULSE_SLOW_JOBS_THRESHOLD")
            .and_then(|v| v.parse().ok()),
        // Only in config/pulse.php (or [pulse]): no variable names them.
        slow_jobs_thresholds: None,
        queues_ignore: None,
        slow_jobs_ignore: None,
    })
}

/// Horizon's `config/horizon.php` prefix: `env('HORIZON_PREFIX',
/// Str::slug(env('APP_NAME', 'laravel'), '_').'_horizon:')`. A set
/// `HORIZON_PREFIX` wins whatever it holds (`null`, `false`, empty: an
/// empty prefix, which [`super::resolve`] turns into Horizon's
/// `horizon:`); a set `APP_NAME` is slugged even when empty (`_horizon:`,
/// as `Str::slug('')`); unset, `None` (Horizon's `laravel_horizon:`).
fn horizon_prefix<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> Option<String> {
    vars.kept("HORIZON_PREFIX").or_else(|| {
        vars.kept("APP_NAME")
            .map(|name| format!("{}_horizon:", slug_with(&name, '_')))
    })
}

/// A variable lookup, read the ways Laravel's config reads a variable.
struct Vars<'a, F: Fn(&str) -> Option<String>>(&'a F);

impl<F: Fn(&str) -> Option<String>> Vars<'_, F> {
    /// As `env()` returns it: `null` is unset, `empty` is "", `(true)` is
    /// "true", quotes around the whole value are removed; empty is unset.
    fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
            .and_then(|v| setting_value(name, &v))
            .filter(|v| !v.is_empty())
    }

    /// As written, empty being unset.
    fn raw(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.is_empty())
    }

    /// A key prefix, set even when empty (see [`prefix_value`]).
    fn kept(&self, name: &str) -> Option<String> {
        (self.0)(name).map(|v| prefix_value(&v))
    }
}

/// A port that is not a number would make a URL that does not parse, and
/// its error would show the whole URL, password included: say so here,
/// naming only the port.
///
/// # Errors
/// `REDIS_PORT` or `DB_PORT`, where used, is not a port number.
fn check_ports<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> anyhow::Result<()> {
    let redis_port_used = vars.get("REDIS_URL").is_none()
        && !vars.get("REDIS_HOST").is_some_and(|h| h.starts_with('/'));
    let db_port_used = ["DB_CONNECTION", "DB_QUEUE_CONNECTION"].iter().any(|name| {
        matches!(
            vars.get(name).as_deref(),
            Some("mysql" | "mariadb" | "pgsql")
        )
    });
    for (port, used) in [("REDIS_PORT", redis_port_used), ("DB_PORT", db_port_used)] {
        if let Some(v) = vars.get(port).filter(|_| used)
            && v.trim().parse::<u16>().is_err()
        {
            anyhow::bail!("{port}={v:?} is not a port number");
        }
    }
    Ok(())
}

/// `[redis]` from the `REDIS_*` variables (the prefix apart).
///
/// # Errors
/// A `REDIS_CLUSTER` that is neither `redis` nor a boolean.
fn redis_layer<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> anyhow::Result<RedisLayer> {
    let get = |name: &str| vars.get(name);
    Ok(RedisLayer {
        url: get("REDIS_URL").or_else(|| redis_url_from_parts(&get)),
        cluster: match get("REDIS_CLUSTER") {
            Some(v) => Some(cluster_flag(&v).ok_or_else(|| {
                anyhow::anyhow!(
                    "REDIS_CLUSTER={v:?}: expected \"redis\" (a Redis Cluster) or \"false\""
                )
            })?),
            None => None,
        },
        sentinels: get("REDIS_SENTINELS").map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        }),
        service: get("REDIS_SENTINEL_SERVICE"),
        sentinel_password: get("REDIS_SENTINEL_PASSWORD"),
        tls_ca_file: get("REDIS_TLS_CA_FILE").map(Into::into),
        tls_cert_file: get("REDIS_TLS_CERT_FILE").map(Into::into),
        tls_key_file: get("REDIS_TLS_KEY_FILE").map(Into::into),
        scheme: get("REDIS_SCHEME"),
        ..RedisLayer::default()
    })
}

/// `[queue]` from `QUEUE_CONNECTION`, `REDIS_QUEUE` and
/// `REDIS_QUEUE_RETRY_AFTER`.
///
/// # Errors
/// A `REDIS_QUEUE_RETRY_AFTER` that is neither seconds nor null.
fn queue_layer<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> anyhow::Result<QueueLayer> {
    // Read as written: `null` here means "never reclaimed".
    let retry_after = match vars.raw("REDIS_QUEUE_RETRY_AFTER") {
        Some(v) => Some(Nullable::parse(&v).ok_or_else(|| {
            anyhow::anyhow!("REDIS_QUEUE_RETRY_AFTER={v:?} is neither seconds nor null")
        })?),
        None => None,
    };
    let connection = vars.get("QUEUE_CONNECTION");
    // The skeleton's connections of a driver the worker does not run are
    // named after their driver: kept, marked, and refused when a command
    // opens the queue (they were served as Redis before).
    let unserved = connection
        .as_deref()
        .filter(|c| UNSERVED_SKELETON_CONNECTIONS.contains(c));
    Ok(QueueLayer {
        driver: unserved.map(str::to_string),
        unserved: unserved.map(|_| true),
        connection,
        queue: vars.get("REDIS_QUEUE"),
        retry_after,
        host: vars.get("BEANSTALKD_QUEUE_HOST"),
        beanstalkd_queue: vars.get("BEANSTALKD_QUEUE"),
        beanstalkd_retry_after: int_seconds(vars, "BEANSTALKD_QUEUE_RETRY_AFTER")?,
        ..QueueLayer::default()
    })
}

/// A `retry_after` the skeleton reads as `(int) env(NAME, 90)`
/// (`DB_QUEUE_RETRY_AFTER`, `BEANSTALKD_QUEUE_RETRY_AFTER`): `null` is 0
/// there, not the connector's 60 (which only a config holding null gets),
/// and 0 is then refused by the driver's `retry_after` rule.
///
/// # Errors
/// A value that is neither seconds nor null.
fn int_seconds<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    name: &str,
) -> anyhow::Result<Option<Nullable>> {
    let Some(v) = vars.raw(name) else {
        return Ok(None);
    };
    Ok(Some(match Nullable::parse(&v) {
        Some(Nullable::Null) => Nullable::Seconds(0),
        Some(seconds) => seconds,
        None => anyhow::bail!("{name}={v:?} is not a number of seconds"),
    }))
}

/// `[database]` from `DB_QUEUE_CONNECTION` (else `DB_CONNECTION`) and the
/// `DB_*` variables its skeleton connection reads, `DB_QUEUE_TABLE`, and
/// (for [`super::database::for_driver`]) `DB_QUEUE` and
/// `DB_QUEUE_RETRY_AFTER`. A relative SQLite file is below `app` when
/// known.
///
/// # Errors
/// A `DB_QUEUE_RETRY_AFTER` that is neither seconds nor null; a `DB_URL`
/// Laravel would refuse as malformed (see [`DbConnection::url`]).
fn database_layer<F: Fn(&str) -> Option<String>>(
    vars: &Vars<'_, F>,
    app: Option<&std::path::Path>,
) -> anyhow::Result<DatabaseLayer> {
    let get = |name: &str| vars.get(name);
    let retry_after = int_seconds(vars, "DB_QUEUE_RETRY_AFTER")?;
    Ok(DatabaseLayer {
        url: match queue_db_connection(&get) {
            Some(conn) => conn.url(app)?,
            None => None,
        },
        table: get("DB_QUEUE_TABLE"),
        queue: get("DB_QUEUE"),
        retry_after,
    })
}

/// The database connection of the skeleton's `database` queue connection:
/// `DB_QUEUE_CONNECTION`, else the default `DB_CONNECTION`.
pub(super) fn queue_db_connection(get: &impl Fn(&str) -> Option<String>) -> Option<DbConnection> {
    let name = get("DB_QUEUE_CONNECTION").or_else(|| get("DB_CONNECTION"))?;
    DbConnection::from_env(&name, get)
}

/// `[sqs]` from the variables the skeleton's `sqs` connection reads, and
/// the AWS SDKs' endpoint variables.
fn sqs_layer<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> SqsLayer {
    SqsLayer {
        prefix: vars.get("SQS_PREFIX"),
        suffix: vars.get("SQS_SUFFIX"),
        region: vars.get("AWS_DEFAULT_REGION"),
        key: vars.get("AWS_ACCESS_KEY_ID"),
        secret: vars.get("AWS_SECRET_ACCESS_KEY").map(Secret::from),
        token: vars.get("AWS_SESSION_TOKEN").map(Secret::from),
        endpoint: vars
            .get("AWS_ENDPOINT_URL_SQS")
            .or_else(|| vars.get("AWS_ENDPOINT_URL")),
        queue: vars.get("SQS_QUEUE"),
        overflow_enabled: vars.raw("SQS_OVERFLOW_ENABLED").map(|v| php_truthy(&v)),
        overflow_store: vars.get("SQS_OVERFLOW_STORE"),
        overflow_delete_after_processing: None,
    }
}

/// `[cache]` from `REDIS_URL`, `REDIS_CACHE_DB` and `DB_CACHE_TABLE` (the
/// prefix apart).
///
/// # Errors
/// A `REDIS_CACHE_DB` that is not a number.
fn cache_layer<F: Fn(&str) -> Option<String>>(vars: &Vars<'_, F>) -> anyhow::Result<CacheLayer> {
    let cache_db = match vars.get("REDIS_CACHE_DB") {
        Some(v) => Some(
            v.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("REDIS_CACHE_DB={v:?} is not a number"))?,
        ),
        None => None,
    };
    Ok(CacheLayer {
        // The skeleton's `cache` connection has `url => env('REDIS_URL')`
        // too: a database in the URL wins over REDIS_CACHE_DB there, as on
        // the queue connection (12.67 kept its cache keys in the URL's DB).
        database: vars
            .get("REDIS_URL")
            .as_deref()
            .and_then(url_database)
            .or(cache_db),
        table: vars.get("DB_CACHE_TABLE"),
        ..CacheLayer::default()
    })
}

/// `REDIS_CLUSTER`: Laravel's `redis` (the native cluster) or a boolean.
/// The database number a Redis URL names in its path
/// (`redis://host:6379/3` → 3), as Laravel's URL parser reads it; `None`
/// when the path is empty or not a number.
fn url_database(url: &str) -> Option<i64> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.split(['?', '#']).next()?.split_once('/')?.1;
    path.trim_matches('/').parse().ok()
}

/// Whether a variable's value is true where PHP tests it as a boolean
/// (`if ($config['enabled'])`): `env()`'s `true`/`false`/`null` (with or
/// without parentheses) as such, else any string but `""` and `"0"`.
fn php_truthy(raw: &str) -> bool {
    match super::phpdotenv::env_value(raw) {
        EnvValue::Bool(b) => b,
        EnvValue::Null => false,
        EnvValue::Str(s) => !(s.is_empty() || s == "0"),
    }
}

fn cluster_flag(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "redis" | "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "none" | "null" => Some(false),
        _ => None,
    }
}

/// The whole process environment as a layer.
///
/// # Errors
/// As [`layer`].
pub fn from_process() -> anyhow::Result<Layer> {
    layer(|name| std::env::var(name).ok())
}

/// Variables Laravel's Redis connectors test with PHP's `empty()`: `false`
/// there is none at all (no AUTH), not the word "false"; `true` is sent
/// as PHP turns it into a string, `1` (phpredis's `AUTH 1`).
const FALSE_IS_NONE: &[&str] = &[
    "REDIS_USERNAME",
    "REDIS_PASSWORD",
    "REDIS_SENTINEL_PASSWORD",
];

/// `raw` as the setting `name` reads it (see [`FALSE_IS_NONE`] and
/// [`super::phpdotenv::setting_value`]).
fn setting_value(name: &str, raw: &str) -> Option<String> {
    match super::phpdotenv::env_value(raw) {
        EnvValue::Bool(false) if FALSE_IS_NONE.contains(&name) => None,
        EnvValue::Bool(true) if FALSE_IS_NONE.contains(&name) => Some("1".into()),
        _ => super::phpdotenv::setting_value(raw),
    }
}

/// A key prefix (`REDIS_PREFIX`, `CACHE_PREFIX`) as Laravel applies it:
/// `env()` gives null for `null` (not the config's default) and false for
/// `false`, and the connectors and the cache store skip an `empty()`
/// prefix: both are no prefix. `true` is PHP's "1".
fn prefix_value(raw: &str) -> String {
    match super::phpdotenv::env_value(raw) {
        EnvValue::Null | EnvValue::Bool(false) => String::new(),
        EnvValue::Bool(true) => "1".into(),
        EnvValue::Str(s) => s,
    }
}

/// `redis://` URL from `REDIS_HOST`/`PORT`/`USERNAME`/`PASSWORD`/`DB`, when
/// any of them is set; unset parts take Laravel's defaults.
fn redis_url_from_parts(get: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let parts = [
        "REDIS_HOST",
        "REDIS_PORT",
        "REDIS_USERNAME",
        "REDIS_PASSWORD",
        "REDIS_DB",
    ];
    if parts.iter().all(|p| get(p).is_none()) {
        return None;
    }
    let host = get("REDIS_HOST").unwrap_or_else(|| "127.0.0.1".into());
    let port = get("REDIS_PORT").unwrap_or_else(|| "6379".into());
    let db = get("REDIS_DB").unwrap_or_else(|| "0".into());
    if host.starts_with('/') {
        // phpredis takes a socket path as the host.
        let pass = get("REDIS_PASSWORD")
            .map(|p| format!("&pass={}", encode(&p)))
            .unwrap_or_default();
        return Some(format!("unix://{host}?db={db}{pass}"));
    }
    let auth = match (get("REDIS_USERNAME"), get("REDIS_PASSWORD")) {
        (None, None) => String::new(),
        (user, pass) => format!(
            "{}:{}@",
            encode(&user.unwrap_or_default()),
            encode(&pass.unwrap_or_default())
        ),
    };
    Some(format!("redis://{auth}{host}:{port}/{db}"))
}

/// Percent-encodes what may not stand in a URL's user or password part.
pub(super) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Layer {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        layer(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn pulses_variables_make_the_pulse_section() {
        let l = env(&[]);
        assert_eq!(l.pulse, PulseLayer::default());
        let l = env(&[
            ("PULSE_ENABLED", "true"),
            ("PULSE_INGEST_DRIVER", "redis"),
            ("PULSE_QUEUES_SAMPLE_RATE", "0.25"),
            ("PULSE_SLOW_JOBS_ENABLED", "false"),
            ("PULSE_SLOW_JOBS_SAMPLE_RATE", "nonsense"),
            ("PULSE_SLOW_JOBS_THRESHOLD", "2500"),
            ("DB_CONNECTION", "pgsql"),
            ("PULSE_DB_CONNECTION", "sqlite"),
            ("DB_DATABASE", "/srv/pulse.sqlite"),
        ]);
        assert_eq!(
            l.pulse.enabled, None,
            "true is Pulse's default: says nothing"
        );
        assert_eq!(l.pulse.ingest.as_deref(), Some("redis"));
        assert_eq!(l.pulse.queues_sample_rate, Some(0.25));
        assert_eq!(l.pulse.slow_jobs, Some(false));
        assert_eq!(l.pulse.slow_jobs_sample_rate, None);
        assert_eq!(l.pulse.slow_jobs_threshold, Some(2500));
        assert_eq!(l.pulse.url.as_deref(), Some("sqlite:///srv/pulse.sqlite"));
        let l = env(&[
            ("PULSE_ENABLED", "false"),
            ("DB_CONNECTION", "sqlite"),
            ("DB_DATABASE", "/a.sqlite"),
        ]);
        assert_eq!(l.pulse.enabled, Some(false));
        assert_eq!(
            l.pulse.url.as_deref(),
            Some("sqlite:///a.sqlite"),
            "DB_CONNECTION's"
        );
    }

    #[test]
    fn a_database_in_redis_url_is_the_cache_connections_too() {
        let l = env(&[("REDIS_URL", "redis://user:pass@127.0.0.1:7701/3")]);
        assert_eq!(l.cache.database, Some(3));
        let l = env(&[("REDIS_URL", "redis://h:1/3"), ("REDIS_CACHE_DB", "5")]);
        assert_eq!(l.cache.database, Some(3));
        let l = env(&[("REDIS_URL", "redis://h:1"), ("REDIS_CACHE_DB", "5")]);
        assert_eq!(l.cache.database, Some(5));
        assert_eq!(url_database("rediss://h:1/?x=1"), None);
    }

    #[test]
    fn redis_parts_make_a_url() {
        let l = env(&[
            ("REDIS_HOST", "redis.internal"),
            ("REDIS_PASSWORD", "p@ss"),
            ("REDIS_DB", "2"),
        ]);
        assert_eq!(
            l.redis.url.as_deref(),
            Some("redis://:p%40ss@redis.internal:6379/2")
        );
        assert_eq!(env(&[]).redis.url, None);
        let l = env(&[("REDIS_HOST", "/run/redis.sock"), ("REDIS_PORT", "0")]);
        assert_eq!(l.redis.url.as_deref(), Some("unix:///run/redis.sock?db=0"));
    }

    #[test]
    fn false_password_and_null_prefix_follow_laravel() {
        for (password, prefix) in [("false", "null"), ("(false)", "(NULL)"), ("false", "false")] {
            let l = env(&[
                ("APP_NAME", "Shop"),
                ("REDIS_HOST", "redis.internal"),
                ("REDIS_PASSWORD", password),
                ("REDIS_PREFIX", prefix),
                ("CACHE_PREFIX", prefix),
            ]);
            assert_eq!(
                l.redis.url.as_deref(),
                Some("redis://redis.internal:6379/0")
            );
            assert_eq!(l.redis.prefix.as_deref(), Some(""));
            assert_eq!(l.cache.prefix.as_deref(), Some(""));
        }
    }

    #[test]
    fn app_name_gives_skeleton_prefixes() {
        let l = env(&[("APP_NAME", "My App")]);
        assert_eq!(l.redis.prefix.as_deref(), Some("my-app-database-"));
        assert_eq!(l.cache.prefix.as_deref(), Some("my-app-cache-"));
        let l = env(&[("APP_NAME", "My App"), ("REDIS_PREFIX", "x_")]);
        assert_eq!(l.redis.prefix.as_deref(), Some("x_"));
    }

    #[test]
    fn retry_after_may_be_null() {
        assert_eq!(
            env(&[("REDIS_QUEUE_RETRY_AFTER", "null")])
                .queue
                .retry_after,
            Some(Nullable::Null)
        );
        assert_eq!(
            env(&[("REDIS_QUEUE_RETRY_AFTER", "30")]).queue.retry_after,
            Some(Nullable::Seconds(30))
        );
        assert!(layer(|k| (k == "REDIS_QUEUE_RETRY_AFTER").then(|| "soon".to_string())).is_err());
    }

    #[test]
    fn production_redis_variables() {
        let l = env(&[
            ("REDIS_CLUSTER", "redis"),
            ("REDIS_SENTINELS", "10.0.0.1:26379, 10.0.0.2:26379"),
            ("REDIS_SENTINEL_SERVICE", "mymaster"),
            ("REDIS_TLS_CA_FILE", "/etc/ca.pem"),
            ("REDIS_SCHEME", "tls"),
        ]);
        assert_eq!(l.redis.cluster, Some(true));
        assert_eq!(
            l.redis.sentinels,
            Some(vec!["10.0.0.1:26379".into(), "10.0.0.2:26379".into()])
        );
        assert_eq!(l.redis.service.as_deref(), Some("mymaster"));
        assert_eq!(l.redis.tls_ca_file, Some("/etc/ca.pem".into()));
        assert_eq!(l.redis.scheme.as_deref(), Some("tls"));
        assert!(layer(|k| (k == "REDIS_CLUSTER").then(|| "predis".to_string())).is_err());
    }

    #[test]
    fn db_variables_make_a_failed_jobs_url() {
        let l = env(&[
            ("DB_CONNECTION", "pgsql"),
            ("DB_DATABASE", "app"),
            ("DB_USERNAME", "u"),
        ]);
        assert_eq!(
            l.failed.url.as_deref(),
            Some("postgres://u@127.0.0.1:5432/app")
        );
        let l = env(&[
            ("DB_CONNECTION", "sqlite"),
            ("DB_DATABASE", "/srv/app/database.sqlite"),
        ]);
        assert_eq!(
            l.failed.url.as_deref(),
            Some("sqlite:///srv/app/database.sqlite")
        );
    }
}
