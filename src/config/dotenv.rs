//! Settings derived from a Laravel app's `.env` (`--env-file`), read as
//! Laravel reads it ([`super::phpdotenv`]).
//!
//! The variables mean what they mean to Laravel ([`super::env`]). What the
//! `.env` leaves out is taken from the app's own files, never from a guess
//! at its framework version:
//!
//! - the prefix conventions from `config/database.php` and
//!   `config/cache.php` (`'_database_'` / `'-database-'`, `'_cache'` /
//!   `'_cache_'` / `'-cache-'`), applied to `APP_NAME` from the `.env`,
//!   else the process environment, else `laravel` (`Str::slug`);
//! - the cache store from `CACHE_STORE` / `CACHE_DRIVER`, else the default
//!   written in `config/cache.php`;
//! - whether the Redis cache prefix is joined with `:` (Laravel ≤ 10), and
//!   `[app] laravel` (the wording of recorded exceptions), from the
//!   installed framework's `Application::VERSION`, when
//!   `vendor/laravel/framework` is there;
//! - SQLite's database file relative to the app (default
//!   `database/database.sqlite`), for the failed store and the database
//!   queue;
//! - the default queue connection from `config/queue.php` when the `.env`
//!   sets no `QUEUE_CONNECTION` (`database` on 11+).
//!
//! The app's root (the `.env`'s directory) becomes `[app] path`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::env::{Conventions, layer_for_app};
use super::file::Layer;
use crate::exception::LaravelVersion;

/// Reads `.env` at `path` and the app files beside it into a layer.
///
/// # Errors
/// The file cannot be read or parsed.
pub fn layer(path: &Path) -> anyhow::Result<Layer> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read env file {}", path.display()))?;
    let vars: HashMap<String, String> =
        super::phpdotenv::load(&String::from_utf8_lossy(&bytes), |k| std::env::var(k).ok())
            .with_context(|| format!("invalid env file {}", path.display()))?;
    let app = app_root(path);
    let config =
        |name: &str| std::fs::read_to_string(app.join("config").join(name)).unwrap_or_default();
    let database_php = config("database.php");
    let cache_php = config("cache.php");

    // `env('APP_NAME', 'laravel')`: the `.env`, else the process
    // environment (Docker, Kubernetes), else 'laravel'.
    let mut layer = layer_for_app(
        |k| {
            vars.get(k).cloned().or_else(|| {
                (k == "APP_NAME").then(|| std::env::var(k).unwrap_or_else(|_| "laravel".into()))
            })
        },
        conventions(&database_php, &cache_php),
        Some(&app),
    )?;
    layer.app.path = Some(app.clone());

    if layer.queue.connection.is_none() {
        layer.queue.connection = default_queue_connection(&config("queue.php"));
    }

    let store = ["CACHE_STORE", "CACHE_DRIVER"]
        .iter()
        .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()).cloned())
        .or_else(|| default_cache_store(&cache_php));
    layer.cache.store = match store.as_deref() {
        Some(store @ ("redis" | "file" | "database")) => Some(store.into()),
        Some(other) => {
            tracing::warn!(
                store = other,
                "the app's cache store is not supported (redis, file and database are; \
                 memcached, dynamodb, array and octane are not): queue:restart and \
                 queue:pause will not reach this worker, and maxExceptions is not counted \
                 (such jobs are released until maxTries instead of failing)"
            );
            Some("none".into())
        }
        None => None,
    };
    let version = framework_version(&app);
    layer.cache.colon = version.map(|v| v.major <= 10);
    layer.app.laravel = version.map(|v| format!("{}.{}", v.major, v.minor));

    Ok(layer)
}

/// The app's root: the `.env`'s directory, made absolute.
fn app_root(env_file: &Path) -> PathBuf {
    let dir = env_file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// The prefix conventions an app's config files use.
pub fn conventions(database_php: &str, cache_php: &str) -> Conventions {
    let underscore = database_php.contains("'_database_'");
    let mut c = if underscore {
        Conventions {
            separator: '_',
            database_suffix: "_database_",
            cache_suffix: "_cache",
        }
    } else {
        Conventions::default()
    };
    if cache_php.contains("'_cache_'") {
        c.cache_suffix = "_cache_";
    } else if cache_php.contains("'_cache'") {
        c.cache_suffix = "_cache";
    } else if cache_php.contains("'-cache-'") {
        c.cache_suffix = "-cache-";
    }
    c
}

/// The default store in `config/cache.php`: `env('CACHE_DRIVER', 'file')`
/// or `env('CACHE_STORE', 'database')`.
fn default_cache_store(cache_php: &str) -> Option<String> {
    ["env('CACHE_STORE', '", "env('CACHE_DRIVER', '"]
        .iter()
        .find_map(|needle| {
            let rest = &cache_php[cache_php.find(needle)? + needle.len()..];
            Some(rest[..rest.find('\'')?].to_string())
        })
}

/// The default queue connection written in `config/queue.php` when the
/// `.env` sets no `QUEUE_CONNECTION`: `env('QUEUE_CONNECTION', 'database')`
/// (11+ skeleton), `'sync'` (8–10), or what the app wrote; only `redis`
/// and `database` are kept.
fn default_queue_connection(queue_php: &str) -> Option<String> {
    let needle = "env('QUEUE_CONNECTION', '";
    let rest = &queue_php[queue_php.find(needle)? + needle.len()..];
    let name = &rest[..rest.find('\'')?];
    matches!(name, "redis" | "database").then(|| name.to_string())
}

/// Version of the installed framework (`Application::VERSION`).
fn framework_version(app: &Path) -> Option<LaravelVersion> {
    let file = app.join("vendor/laravel/framework/src/Illuminate/Foundation/Application.php");
    let text = std::fs::read_to_string(file).ok()?;
    let rest = &text[text.find("const VERSION = '")? + "const VERSION = '".len()..];
    LaravelVersion::parse(&rest[..rest.find('\'')?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn laravel_8_app() {
        let dir = app(&[
            (
                ".env",
                "APP_NAME=\"My Shop\"\nREDIS_HOST=10.0.0.5\nCACHE_DRIVER=redis\nQUEUE_CONNECTION=redis\nDB_CONNECTION=sqlite\n",
            ),
            (
                "config/database.php",
                "'prefix' => env('REDIS_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_database_'),",
            ),
            (
                "config/cache.php",
                "'default' => env('CACHE_DRIVER', 'file'),\n'prefix' => env('CACHE_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_cache'),",
            ),
            (
                "vendor/laravel/framework/src/Illuminate/Foundation/Application.php",
                "const VERSION = '8.83.27';",
            ),
        ]);
        let l = layer(&dir.path().join(".env")).unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(l.app.path.as_deref(), Some(root.as_path()));
        assert_eq!(l.redis.url.as_deref(), Some("redis://10.0.0.5:6379/0"));
        assert_eq!(l.redis.prefix.as_deref(), Some("my_shop_database_"));
        assert_eq!(l.cache.prefix.as_deref(), Some("my_shop_cache"));
        assert_eq!(l.cache.colon, Some(true));
        assert_eq!(l.app.laravel.as_deref(), Some("8.83"));
        assert_eq!(l.cache.store.as_deref(), Some("redis"));
        assert_eq!(l.queue.connection.as_deref(), Some("redis"));
        assert_eq!(
            l.failed.url,
            Some(format!(
                "sqlite://{}",
                root.join("database/database.sqlite").display()
            ))
        );
    }

    #[test]
    fn laravel_13_app() {
        let dir = app(&[
            (".env", "APP_NAME=Laravel\nQUEUE_CONNECTION=database\n"),
            (
                "config/database.php",
                "'prefix' => env('REDIS_PREFIX', Str::slug((string) env('APP_NAME', 'laravel')).'-database-'),",
            ),
            (
                "config/cache.php",
                "'default' => env('CACHE_STORE', 'database'),\n'prefix' => env('CACHE_PREFIX', Str::slug((string) env('APP_NAME', 'laravel')).'-cache-'),",
            ),
            (
                "vendor/laravel/framework/src/Illuminate/Foundation/Application.php",
                "const VERSION = '13.26.1';",
            ),
        ]);
        let l = layer(&dir.path().join(".env")).unwrap();
        assert_eq!(l.redis.prefix.as_deref(), Some("laravel-database-"));
        assert_eq!(l.cache.prefix.as_deref(), Some("laravel-cache-"));
        assert_eq!(l.cache.colon, Some(false));
        assert_eq!(l.cache.store.as_deref(), Some("database"));
        assert_eq!(
            l.queue.connection.as_deref(),
            Some("database"),
            "the database queue"
        );
        assert_eq!(
            l.database.url.as_deref(),
            l.failed.url.as_deref(),
            "one database for the queue and the failed store"
        );
    }

    #[test]
    fn a_parse_error_names_the_line_not_its_value() {
        let dir = app(&[(".env", "APP_NAME=x\nREDIS_PASSWORD=s3cret pw'\n")]);
        let e = format!("{:#}", layer(&dir.path().join(".env")).unwrap_err());
        assert!(e.contains("line 2 (REDIS_PASSWORD=***)"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn file_cache_default_and_unknown_version() {
        let dir = app(&[
            (".env", "APP_NAME=Laravel\n"),
            (
                "config/cache.php",
                "'default' => env('CACHE_DRIVER', 'file'),",
            ),
        ]);
        let l = layer(&dir.path().join(".env")).unwrap();
        assert_eq!(l.cache.store.as_deref(), Some("file"));
        assert_eq!(l.cache.colon, None);
    }

    #[test]
    fn prefix_without_app_name_follows_the_apps_config() {
        let dir = app(&[
            (".env", "REDIS_HOST=127.0.0.1\nCACHE_PREFIX=\n"),
            (
                "config/database.php",
                "'prefix' => env('REDIS_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_database_'),",
            ),
        ]);
        let l = layer(&dir.path().join(".env")).unwrap();
        // (APP_NAME is not set in the test process.)
        if std::env::var_os("APP_NAME").is_none() {
            assert_eq!(l.redis.prefix.as_deref(), Some("laravel_database_"));
        }
        assert_eq!(
            l.cache.prefix.as_deref(),
            Some(""),
            "CACHE_PREFIX= is no prefix"
        );
        let dir = app(&[(".env", "APP_NAME=shop.example.com\nREDIS_PREFIX=\n")]);
        let l = layer(&dir.path().join(".env")).unwrap();
        assert_eq!(
            l.redis.prefix.as_deref(),
            Some(""),
            "REDIS_PREFIX= is no prefix"
        );
        assert_eq!(l.cache.prefix.as_deref(), Some("shopexamplecom-cache-"));
    }
}
