//! The shipped example config (config/laravel-worker.toml) beside a real
//! Laravel app: it cannot reach the app's queue, restart or failed keys, and
//! its relative handler path is found from the config file's directory,
//! wherever the worker is started from.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Daemon, Job};
use laravel_worker::config::{CacheSettings, Layer, Settings};

/// The example config's path in the repository.
fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/laravel-worker.toml")
}

/// The Redis prefixes a Laravel app uses by default: the skeletons' two
/// spellings and the ones derived from an APP_NAME (`{slug}_database_`).
fn is_app_prefix(prefix: &str) -> bool {
    prefix.is_empty() || prefix.ends_with("_database_") || prefix.ends_with("-database-")
}

#[test]
fn example_config_cannot_reach_a_laravel_apps_default_keys() {
    let text = std::fs::read_to_string(example()).unwrap();
    let settings = Settings::resolve(Layer::from_toml(&text).unwrap()).unwrap();
    assert!(
        !is_app_prefix(&settings.redis_prefix),
        "the example's queue prefix {:?} is a Laravel app's",
        settings.redis_prefix
    );
    if let CacheSettings::Redis { key_prefix, .. } = &settings.cache {
        for app in [
            "laravel_database_laravel_cache:",
            "laravel_database_laravel_cache_",
            "laravel-database-laravel-cache-",
        ] {
            assert_ne!(key_prefix, app, "the restart key would be an app's");
        }
        assert!(
            key_prefix.starts_with(&settings.redis_prefix),
            "{key_prefix}"
        );
    }
    // No catch-all: a job of a class the example does not know is never
    // handed to the example handler (which deletes what it runs).
    for handler in &settings.handlers {
        let pattern = handler.pattern.as_str();
        assert!(
            !pattern.starts_with('*'),
            "catch-all handler {pattern:?} in the example config"
        );
    }
}

#[test]
fn example_config_leaves_an_apps_queue_alone_and_finds_its_handler_from_anywhere() {
    let s = common::Scene::new();
    let job = Job::laravel8("App\\Jobs\\Hello");
    // An app's jobs under both skeleton prefixes.
    for key in [
        "laravel_database_queues:default",
        "laravel-database-queues:default",
    ] {
        let _: () = redis::cmd("RPUSH")
            .arg(key)
            .arg(job.build())
            .query(&mut s.redis.conn(0))
            .unwrap();
    }
    // The example's own job.
    let _: () = redis::cmd("RPUSH")
        .arg("laravel_worker_example_queues:default")
        .arg(job.build())
        .query(&mut s.redis.conn(0))
        .unwrap();

    // Started from the scene directory, far from the repository: the
    // handler path in the config is relative to the config file.
    let config = example();
    let url = s.redis.url(0);
    let cd = format!("cd '{}' && exec \"$0\" \"$@\"", s.dir.path().display());
    let mut d = Daemon::start_wrapped(
        &["sh", "-c", &cd],
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            "--stop-when-empty",
            "--sleep=0",
        ],
        &[("REDIS_URL", &url)],
    );
    d.expect_exit(0);
    let out = d.stdout.join("\n");
    assert!(
        out.contains("App\\Jobs\\Hello") && out.contains("DONE"),
        "the example's job did not run:\n{out}\n{}",
        d.stderr_text()
    );
    for key in [
        "laravel_database_queues:default",
        "laravel-database-queues:default",
    ] {
        let left: i64 = s.redis.cmd(&["LLEN", key]);
        assert_eq!(left, 1, "{key} was touched");
    }
    let left: i64 = s
        .redis
        .cmd(&["LLEN", "laravel_worker_example_queues:default"]);
    assert_eq!(left, 0);
}
