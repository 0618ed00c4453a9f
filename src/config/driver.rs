//! Which queue driver a connection has, and its settings resolved: the
//! one place that picks a driver ([`Driver::of`]) and turns the merged
//! layer into [`QueueDriverSettings`] ([`resolve_driver`]), with the
//! words a driver's settings give the start line
//! ([`QueueDriverSettings::idle_wait_words`]). A new driver adds its
//! variant, its settings and its words here; the rest of the worker reaches
//! its queue through `queue::driver::Driver`.
//!
//! Laravel's rule, mirrored: a queue connection's **driver** decides
//! (`queue.connections.NAME.driver`), never its name; without the app's
//! answer the skeleton's names stand for their drivers (`database`,
//! `sqs`), and `[queue] driver` says it for any other name.

use anyhow::bail;

use super::database::spec;
use super::failover::FailoverMember;
use super::file::{Layer, Nullable, QueueLayer};
use super::sqs::sqs_spec;
use crate::queue::beanstalkd::BeanstalkdQueueSpec;
use crate::queue::database::DatabaseQueueSpec;
use crate::queue::sqs::SqsQueueSpec;

/// The queue drivers the worker runs, as `queue.connections.NAME.driver`
/// names them.
pub const SERVED_DRIVERS: &[&str] = &["redis", "database", "sqs", "beanstalkd"];

/// [`SERVED_DRIVERS`] in words, for messages: `"redis", "database", "sqs"
/// and "beanstalkd"`.
pub fn served_drivers_words() -> String {
    let quoted: Vec<String> = SERVED_DRIVERS.iter().map(|d| format!("{d:?}")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// [`SERVED_DRIVERS`] as a choice: `redis, database, sqs or beanstalkd`.
fn served_drivers_choice() -> String {
    match SERVED_DRIVERS.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => SERVED_DRIVERS.join(""),
    }
}

/// The skeleton's queue connections whose driver (of the same name) the
/// worker does not run (`config/queue.php` of Laravel 8 to 13).
pub(crate) const UNSERVED_SKELETON_CONNECTIONS: &[&str] =
    &["sync", "null", "deferred", "background", "failover"];

/// The queue driver of the worker's connection, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueDriverSettings {
    /// Laravel's `RedisQueue`: the `[redis]` settings and the prefix of
    /// [`super::Settings`].
    Redis,
    /// Laravel's `DatabaseQueue`: the jobs table of one database.
    Database(DatabaseQueueSpec),
    /// Laravel's `SqsQueue`: the queues of one AWS account and region.
    Sqs(SqsQueueSpec),
    /// Laravel's `BeanstalkdQueue`: the tubes of one beanstalkd server.
    Beanstalkd(BeanstalkdQueueSpec),
    /// The app's connection `connection` has a `driver` the worker does
    /// not run (`sync`, `failover`, `deferred`…): every command that
    /// opens the queue refuses it (see [`QueueDriverSettings::refusal`]).
    Unserved {
        /// The connection's name.
        connection: String,
        /// Its driver.
        driver: String,
        /// A `failover` connection's members, as the app's
        /// `queue.connections.NAME.connections` lists them; `None`: not
        /// known (no app answer) or not a failover connection.
        members: Option<Vec<FailoverMember>>,
    },
}

impl QueueDriverSettings {
    /// The connection name when none is given: `redis` or `database`, the
    /// skeleton's connection of the driver.
    pub fn default_connection(&self) -> &'static str {
        match self {
            QueueDriverSettings::Redis => "redis",
            QueueDriverSettings::Database(_) => "database",
            QueueDriverSettings::Sqs(_) => "sqs",
            QueueDriverSettings::Beanstalkd(_) => "beanstalkd",
            QueueDriverSettings::Unserved { .. } => "",
        }
    }

    /// The driver's name as `queue.connections.NAME.driver` writes it
    /// (`redis`, `database`, `sqs`, `beanstalkd`, or the unserved one's).
    pub fn name(&self) -> &str {
        match self {
            QueueDriverSettings::Unserved { driver, .. } => driver,
            served => served.default_connection(),
        }
    }

    /// Why a command that opens the queue refuses an
    /// [`QueueDriverSettings::Unserved`] connection, with what to run
    /// instead; `None` for the drivers the worker runs.
    pub fn refusal(&self) -> Option<String> {
        let QueueDriverSettings::Unserved {
            connection,
            driver,
            members,
        } = self
        else {
            return None;
        };
        let choice = served_drivers_choice();
        let why = match driver.as_str() {
            "sync" | "deferred" | "background" | "null" => format!(
                "jobs pushed on it never reach a queue (sync runs them in the request, \
                 deferred after the response, background in a process of their own, null \
                 drops them), so no worker serves it; to queue them, set QUEUE_CONNECTION to \
                 a {choice} connection"
            ),
            "failover" => {
                super::failover::refusal_words(connection, members.as_deref(), SERVED_DRIVERS)
            }
            _ => format!("run queue:work for it, or move its jobs to a {choice} connection"),
        };
        Some(format!(
            "the app's queue connection {connection:?} has driver {driver:?}: laravel-worker \
             runs the {} drivers; {why}. To serve another connection, name it: \
             laravel-worker work CONNECTION",
            served_drivers_words()
        ))
    }

    /// How an idle worker of this driver waits for jobs, in the words of
    /// the start line's `block_for` field; `block_for` is the connection's
    /// (seconds; `None`: unset).
    pub fn idle_wait_words(&self, block_for: Option<u64>) -> String {
        match self {
            QueueDriverSettings::Redis => match block_for {
                Some(seconds) => format!("{seconds} s"),
                None => "unset (BLPOP on :notify for up to --sleep)".into(),
            },
            QueueDriverSettings::Database(_) => "none (a table is polled every --sleep)".into(),
            QueueDriverSettings::Sqs(_) => {
                "none (20 s long polls on every queue at once while idle)".into()
            }
            QueueDriverSettings::Beanstalkd(spec) => match spec.block_for {
                0 => "0 s (a reserve that does not wait, then --sleep)".into(),
                n => format!("{n} s (reserve-with-timeout, then --sleep)"),
            },
            QueueDriverSettings::Unserved { .. } => "none".into(),
        }
    }

    /// Whether the queue's jobs are in Redis (a refused cache Redis then
    /// needs no hint that the cache store is a setting of its own).
    pub fn queue_on_redis(&self) -> bool {
        matches!(
            self,
            QueueDriverSettings::Redis | QueueDriverSettings::Unserved { .. }
        )
    }
}

/// The driver of a merged layer with its `retry_after` and `block_for`
/// (seconds; `None`: null): Redis reads them from `[queue]` (default 90
/// and null); the database driver always reclaims (null is 60 s) and
/// never blocks.
///
/// # Errors
/// An unknown `[queue] driver`; on the database driver, what [`spec`]
/// and [`check_redis_only_keys`] refuse.
pub fn resolve_driver(
    layer: &Layer,
) -> anyhow::Result<(QueueDriverSettings, Option<u64>, Option<u64>)> {
    Ok(match Driver::of(&layer.queue)? {
        Driver::Redis => (
            QueueDriverSettings::Redis,
            super::retry_after::redis(&layer.queue)?,
            layer.queue.block_for.and_then(Nullable::seconds),
        ),
        Driver::Database => {
            check_redis_only_keys(layer, "database")?;
            let spec = spec(layer)?;
            let retry_after = Some(spec.retry_after);
            (QueueDriverSettings::Database(spec), retry_after, None)
        }
        Driver::Sqs => {
            check_redis_only_keys(layer, "SQS")?;
            let spec = sqs_spec(layer)?;
            let visibility = Some(spec.visibility);
            (QueueDriverSettings::Sqs(spec), visibility, None)
        }
        Driver::Beanstalkd => {
            let spec = beanstalkd_spec(layer)?;
            let (retry_after, block_for) = (Some(spec.retry_after), Some(spec.block_for));
            (
                QueueDriverSettings::Beanstalkd(spec),
                retry_after,
                block_for,
            )
        }
        Driver::Unserved => (
            QueueDriverSettings::Unserved {
                connection: layer.queue.connection.clone().unwrap_or_default(),
                driver: layer.queue.driver.clone().unwrap_or_default(),
                members: layer.queue.members.clone(),
            },
            None,
            None,
        ),
    })
}

/// A queue connection's driver, before its settings are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `redis`.
    Redis,
    /// `database`.
    Database,
    /// `sqs`.
    Sqs,
    /// `beanstalkd`.
    Beanstalkd,
    /// One the worker does not run, named by the app's own settings
    /// ([`QueueLayer::unserved`]).
    Unserved,
}

impl Driver {
    /// The driver of the connection `[queue]` names: `[queue] driver`
    /// (the app's `queue.connections.NAME.driver` with `--app`), else the
    /// skeleton's names `database` and `sqs` for their drivers, any other
    /// name (or none) for Redis, as the worker always did.
    ///
    /// # Errors
    /// A `[queue] driver` that is not `redis`, `database` or `sqs`.
    pub fn of(queue: &QueueLayer) -> anyhow::Result<Driver> {
        match queue.driver.as_deref() {
            Some(name) if let Some(driver) = Driver::named(name) => Ok(driver),
            Some(_) if queue.unserved == Some(true) => Ok(Driver::Unserved),
            Some(other) => bail!(
                "[queue] driver = {other:?}: laravel-worker runs the {} queue drivers",
                served_drivers_words()
            ),
            // The skeleton's connection of the same name (`redis` too).
            None => Ok(queue
                .connection
                .as_deref()
                .and_then(Driver::named)
                .unwrap_or(Driver::Redis)),
        }
    }

    /// The driver `queue.connections.NAME.driver = name` gives, when the
    /// worker runs it (one of [`SERVED_DRIVERS`]).
    pub fn named(name: &str) -> Option<Driver> {
        match name {
            "redis" => Some(Driver::Redis),
            "database" => Some(Driver::Database),
            "sqs" => Some(Driver::Sqs),
            "beanstalkd" => Some(Driver::Beanstalkd),
            _ => None,
        }
    }
}

/// A layer built from environment variables (`.env`, the process
/// environment), made to speak for `driver`: on the database driver,
/// `DB_QUEUE` and `DB_QUEUE_RETRY_AFTER` stand where `REDIS_QUEUE` and
/// `REDIS_QUEUE_RETRY_AFTER` stood (the skeleton reads each on its own
/// connection only). Never applied to the config file's layer, whose
/// `[queue]` keys apply to whichever driver runs.
pub fn for_driver(mut layer: Layer, driver: Driver) -> Layer {
    let queue = layer.database.queue.take();
    let retry_after = layer.database.retry_after.take();
    let sqs_queue = layer.sqs.queue.take();
    let beanstalkd_queue = layer.queue.beanstalkd_queue.take();
    let beanstalkd_retry_after = layer.queue.beanstalkd_retry_after.take();
    match driver {
        Driver::Database => {
            layer.queue.queue = queue;
            layer.queue.retry_after = retry_after;
        }
        // `SQS_QUEUE`; the skeleton's `sqs` connection has no
        // `retry_after` (the queue's visibility timeout plays its part).
        Driver::Sqs => {
            layer.queue.queue = sqs_queue;
            layer.queue.retry_after = None;
        }
        // `BEANSTALKD_QUEUE` and `BEANSTALKD_QUEUE_RETRY_AFTER`;
        // `REDIS_QUEUE_RETRY_AFTER` is Redis's.
        Driver::Beanstalkd => {
            layer.queue.queue = beanstalkd_queue;
            layer.queue.retry_after = beanstalkd_retry_after;
        }
        Driver::Redis | Driver::Unserved => {}
    }
    layer
}

/// `[queue]` resolved for the beanstalkd driver as `BeanstalkdConnector`
/// reads the connection: `host` (default `localhost`), `port` (default
/// 11300), `retry_after` the `ttr` of every push (see
/// [`super::retry_after`]), `block_for` the seconds a reserve waits
/// (default 0; `null` is 0).
///
/// # Errors
/// `[horizon]` records (Horizon reads only Redis); a `retry_after`
/// [`super::retry_after::beanstalkd`] refuses; a `block_for` of
/// 30 s or more (a reserve must answer within the worker's command time
/// limit; an idle worker sleeps `--sleep` after it anyway).
pub fn beanstalkd_spec(layer: &Layer) -> anyhow::Result<BeanstalkdQueueSpec> {
    if layer.horizon.enabled == Some(true) {
        bail!(
            "[horizon] enabled = true with the beanstalkd queue driver: Horizon reads only \
             Redis; remove [horizon] (or HORIZON_* settings) or run this worker on a Redis \
             connection"
        );
    }
    let queue = &layer.queue;
    let retry_after = super::retry_after::beanstalkd(queue)?;
    let block_for = queue.block_for.and_then(Nullable::seconds).unwrap_or(0);
    if block_for >= crate::queue::COMMAND_TIMEOUT.as_secs() {
        bail!(
            "[queue] block_for = {block_for} on the beanstalkd queue: a reserve waits at most \
             29 s here (the worker's command time limit is 30 s); an idle worker sleeps \
             --sleep after each empty reserve, as Laravel's does"
        );
    }
    Ok(BeanstalkdQueueSpec {
        host: queue.host.clone().unwrap_or_else(|| "localhost".into()),
        port: queue.port.unwrap_or(11300),
        retry_after,
        block_for,
    })
}

/// Checks the Redis-only settings given with the database driver:
/// `[horizon]` records are refused (Horizon reads only Redis), and
/// `[queue] block_for` is ignored with a warning, as Laravel ignores a
/// key the driver does not read (one config file may serve `work redis`
/// and `work database` workers).
///
/// # Errors
/// `[horizon] enabled = true`.
pub fn check_redis_only_keys(layer: &Layer, driver: &str) -> anyhow::Result<()> {
    if layer.horizon.enabled == Some(true) {
        bail!(
            "[horizon] enabled = true with the {driver} queue driver: Horizon reads only \
             Redis, so its records would describe no queue it can see; remove [horizon] \
             (or HORIZON_* settings) or run this worker on a Redis connection"
        );
    }
    if layer.queue.block_for.is_some() {
        tracing::warn!(
            "[queue] block_for is ignored on the {driver} queue driver: it has no list to \
             block on (an idle database worker polls every --sleep; an idle SQS worker \
             long-polls 20 s)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The skeleton's `sqs` connection from `.env` variables: the driver
    /// from the name `sqs`, `SQS_QUEUE` as the queue, the keys, region
    /// (default `us-east-1`) and endpoint; `[queue] retry_after` is the
    /// visibility timeout (default 30 s, 2 to 43,200); overflow payloads
    /// are read from `[cache]` unless `SQS_OVERFLOW_STORE` names another
    /// store; no prefix and `[horizon]` are refused.
    #[test]
    fn the_sqs_connection_from_env_variables() {
        let vars: HashMap<&str, &str> = [
            ("QUEUE_CONNECTION", "sqs"),
            (
                "SQS_PREFIX",
                "https://sqs.eu-west-1.amazonaws.com/123456789012",
            ),
            ("SQS_QUEUE", "emails"),
            ("SQS_SUFFIX", "-prod"),
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s3cret"),
            ("AWS_ENDPOINT_URL", "http://other"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4566"),
            ("REDIS_QUEUE", "not-this"),
        ]
        .into_iter()
        .collect();
        let env = crate::config::env::layer(|k| vars.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(Driver::of(&env.queue).unwrap(), Driver::Sqs);
        let layer = for_driver(env, Driver::Sqs);
        assert_eq!(layer.queue.queue.as_deref(), Some("emails"));
        let (driver, retry_after, block_for) = resolve_driver(&layer).unwrap();
        let QueueDriverSettings::Sqs(spec) = driver else {
            panic!("{driver:?}")
        };
        assert_eq!((retry_after, block_for), (Some(30), None));
        assert_eq!(spec.region, "us-east-1");
        assert_eq!(spec.key.as_deref(), Some("AKIA1"));
        assert_eq!(spec.endpoint.as_deref(), Some("http://127.0.0.1:4566"));
        assert_eq!(
            spec.url_of("emails"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/emails-prod"
        );
        assert!(
            !format!("{spec:?}").contains("s3cret"),
            "no secret in Debug"
        );

        let mut wrong = layer.clone();
        wrong.queue.retry_after = Some(Nullable::Seconds(1));
        assert!(resolve_driver(&wrong).is_err(), "visibility 1 s");
        wrong.queue.retry_after = Some(Nullable::Seconds(43_201));
        assert!(resolve_driver(&wrong).is_err(), "visibility above 12 h");
        let mut no_prefix = layer.clone();
        no_prefix.sqs.prefix = None;
        let e = resolve_driver(&no_prefix).unwrap_err().to_string();
        assert!(e.contains("SQS_PREFIX"), "{e}");
        // Overflow payloads (13.9+): in the [cache] store unless the app
        // names another one.
        assert_eq!(spec.overflow, crate::queue::sqs::Overflow::default());
        let mut overflow = layer.clone();
        overflow.sqs.overflow_store = Some("redis".into());
        let QueueDriverSettings::Sqs(same) = resolve_driver(&overflow).unwrap().0 else {
            panic!()
        };
        assert_eq!(same.overflow.elsewhere, None, "the [cache] store (redis)");
        overflow.cache.store = Some("database".into());
        overflow.sqs.overflow_delete_after_processing = Some(false);
        let QueueDriverSettings::Sqs(other) = resolve_driver(&overflow).unwrap().0 else {
            panic!()
        };
        assert_eq!(other.overflow.elsewhere.as_deref(), Some("redis"));
        assert!(!other.overflow.delete_after_processing);
        let mut horizon = layer;
        horizon.horizon.enabled = Some(true);
        let e = resolve_driver(&horizon).unwrap_err().to_string();
        assert!(e.contains("SQS queue driver"), "{e}");
    }

    #[test]
    fn the_driver_decides_not_the_name() {
        let queue = |connection: Option<&str>, driver: Option<&str>| QueueLayer {
            connection: connection.map(Into::into),
            driver: driver.map(Into::into),
            ..QueueLayer::default()
        };
        assert_eq!(Driver::of(&queue(None, None)).unwrap(), Driver::Redis);
        assert_eq!(
            Driver::of(&queue(Some("database"), None)).unwrap(),
            Driver::Database
        );
        assert_eq!(
            Driver::of(&queue(Some("jobs-db"), Some("database"))).unwrap(),
            Driver::Database
        );
        assert_eq!(
            Driver::of(&queue(Some("database"), Some("redis"))).unwrap(),
            Driver::Redis
        );
        assert_eq!(Driver::of(&queue(None, Some("sqs"))).unwrap(), Driver::Sqs);
        assert_eq!(
            Driver::of(&queue(Some("beanstalkd"), None)).unwrap(),
            Driver::Beanstalkd
        );
        let e = Driver::of(&queue(None, Some("rabbitmq")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[queue] driver = \"rabbitmq\""), "{e}");
    }

    #[test]
    fn db_queue_variables_speak_only_for_the_database_driver() {
        let mut layer = Layer::default();
        layer.queue.queue = Some("from-redis-queue".into());
        layer.queue.retry_after = Some(Nullable::Seconds(120));
        layer.database.queue = Some("jobs".into());
        let redis = for_driver(layer.clone(), Driver::Redis);
        assert_eq!(redis.queue.queue.as_deref(), Some("from-redis-queue"));
        assert_eq!(redis.database.queue, None);
        let db = for_driver(layer, Driver::Database);
        assert_eq!(db.queue.queue.as_deref(), Some("jobs"));
        assert_eq!(
            db.queue.retry_after, None,
            "REDIS_QUEUE_RETRY_AFTER does not apply"
        );
    }

    #[test]
    fn horizon_is_refused_and_block_for_ignored() {
        let mut layer = Layer::default();
        layer.queue.block_for = Some(Nullable::Seconds(5));
        assert!(check_redis_only_keys(&layer, "database").is_ok());
        layer.horizon.enabled = Some(true);
        let e = check_redis_only_keys(&layer, "database")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Horizon reads only Redis"), "{e}");
    }

    /// The skeleton's `beanstalkd` connection from `.env` variables: the
    /// driver from the name, `BEANSTALKD_QUEUE_HOST` and `BEANSTALKD_QUEUE`,
    /// port 11300, `retry_after` (the ttr) 90 and `block_for` 0 by default;
    /// `REDIS_QUEUE_RETRY_AFTER` does not apply, `BEANSTALKD_QUEUE_RETRY_AFTER`
    /// does (the 11+ skeleton's `(int)` cast: `null` is 0, refused); a
    /// `block_for` a reserve cannot wait within the command time limit is
    /// refused.
    #[test]
    fn the_beanstalkd_connection_from_env_variables() {
        let vars: HashMap<&str, &str> = [
            ("QUEUE_CONNECTION", "beanstalkd"),
            ("BEANSTALKD_QUEUE_HOST", "beans.internal"),
            ("BEANSTALKD_QUEUE", "emails"),
            ("REDIS_QUEUE", "not-this"),
            ("REDIS_QUEUE_RETRY_AFTER", "5"),
        ]
        .into_iter()
        .collect();
        let env = crate::config::env::layer(|k| vars.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(Driver::of(&env.queue).unwrap(), Driver::Beanstalkd);
        let layer = for_driver(env, Driver::Beanstalkd);
        assert_eq!(layer.queue.queue.as_deref(), Some("emails"));
        let (driver, retry_after, block_for) = resolve_driver(&layer).unwrap();
        let QueueDriverSettings::Beanstalkd(spec) = driver else {
            panic!("{driver:?}")
        };
        assert_eq!((retry_after, block_for), (Some(90), Some(0)));
        assert_eq!(spec.addr(), "beans.internal:11300");
        let mut other = layer.clone();
        other.queue.port = Some(11301);
        other.queue.retry_after = Some(Nullable::Null);
        other.queue.block_for = Some(Nullable::Seconds(5));
        let QueueDriverSettings::Beanstalkd(spec) = resolve_driver(&other).unwrap().0 else {
            panic!()
        };
        assert_eq!(
            (spec.port, spec.retry_after, spec.block_for),
            (11301, 60, 5)
        );
        other.queue.block_for = Some(Nullable::Seconds(30));
        let e = resolve_driver(&other).unwrap_err().to_string();
        assert!(e.contains("block_for = 30"), "{e}");
        other.queue.block_for = None;
        other.queue.retry_after = Some(Nullable::Seconds(0));
        let e = resolve_driver(&other).unwrap_err().to_string();
        assert!(e.contains("retry_after = 0"), "{e}");

        let from_env = |value: &'static str| {
            let mut with = vars.clone();
            with.insert("BEANSTALKD_QUEUE_RETRY_AFTER", value);
            let env = crate::config::env::layer(|k| with.get(k).map(|v| v.to_string())).unwrap();
            resolve_driver(&for_driver(env, Driver::Beanstalkd))
        };
        assert_eq!(from_env("300").unwrap().1, Some(300), "the ttr");
        let e = from_env("null").unwrap_err().to_string();
        assert!(e.contains("retry_after = 0"), "(int) null: {e}");
        let redis = for_driver(
            crate::config::env::layer(|k| match k {
                "BEANSTALKD_QUEUE_RETRY_AFTER" => Some("300".into()),
                _ => None,
            })
            .unwrap(),
            Driver::Redis,
        );
        assert_eq!(redis.queue.retry_after, None, "beanstalkd's only");
    }
}
