//! The Composer package (`php/`) in the tests' Laravel app: the app copy
//! given a `composer.json` as a Laravel skeleton has one (Packagist off:
//! the app needs nothing from it, and nothing here reaches the network),
//! Debian's `composer` run in it, a release archive of the binary laid
//! out as a release's, and a static HTTP server (`python3 -m
//! http.server`) to download it from.
//!
//! Tests skip (with a note) without `composer`, `python3` or PHP's `phar`
//! extension, besides what [`super::laravel::App`] needs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::laravel::App;

/// The package's version (`Cargo.toml`'s, as the package must carry).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The release archive's file name, as the packaging script names it.
pub fn archive_name() -> String {
    format!("laravel-worker-{VERSION}-x86_64-linux-gnu.tar.gz")
}

/// The package folder of this repository.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("php")
}

/// True when `composer`, `python3` and PHP's phar extension are there;
/// else records the skip and returns false.
pub fn available() -> bool {
    let why = "the Composer package's install and run commands (php/composer.json)";
    super::skip::have("composer", why)
        && super::skip::have("python3", why)
        && super::laravel::have_extension("phar", "php-common", why)
}

/// The app's `composer.json`, as a Laravel skeleton's: its own classes,
/// package discovery after every autoload dump, Packagist turned off.
const APP_COMPOSER_JSON: &str = r#"{
    "name": "laravel-worker-tests/app",
    "type": "project",
    "require": {},
    "autoload": {"psr-4": {"App\\": "app/"}},
    "scripts": {"post-autoload-dump": ["@php artisan package:discover --ansi"]},
    "repositories": {"packagist.org": false}
}
"#;

/// Gives `app` a skeleton's `composer.json`.
pub fn make_composer_project(app: &App) {
    std::fs::write(app.dir.join("composer.json"), APP_COMPOSER_JSON).unwrap();
}

/// A shell (`sh -e`) in the app's directory running `script`, with
/// Composer kept in the scene and off the network, and none of the
/// test runner's Laravel or laravel-worker variables.
pub fn shell(app: &App, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-ec", script])
        .current_dir(&app.dir)
        .stdin(Stdio::null())
        .env("COMPOSER_HOME", app.scene().join("composer-home"))
        .env("COMPOSER_ALLOW_SUPERUSER", "1")
        .env("COMPOSER_NO_INTERACTION", "1")
        .env("COMPOSER_DISABLE_NETWORK", "1");
    for (key, _) in std::env::vars() {
        let laravel = [
            "REDIS_",
            "DB_",
            "QUEUE_",
            "CACHE_",
            "APP_",
            "LARAVEL_WORKER_",
        ];
        if laravel.iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Runs `script` in the app (see [`shell`]) and returns what it did.
pub fn run(app: &App, script: &str) -> Output {
    shell(app, script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run sh: {e}"))
}

/// Runs `script`, asserting it succeeded; returns stdout and stderr.
pub fn run_ok(app: &App, script: &str) -> String {
    let out = run(app, script);
    let text = both(&out);
    assert!(out.status.success(), "{script}: {}\n{text}", out.status);
    text
}

/// stdout then stderr of `out`.
pub fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Makes the release archive in `dir` as a release lays it out (one
/// folder `laravel-worker-VERSION-x86_64-linux-gnu/` with the binary at
/// its root, beside README.md and LICENSE) with `tar`, and its
/// `SHA256SUMS` beside it. The binary is [`binary_copy`]'s. Returns the
/// binary as archived.
pub fn release_archive(dir: &Path) -> PathBuf {
    let folder = format!("laravel-worker-{VERSION}-x86_64-linux-gnu");
    let staging = dir.join("staging");
    let root = staging.join(&folder);
    std::fs::create_dir_all(&root).unwrap();
    let binary = binary_copy(&root);
    for doc in ["README.md", "LICENSE"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(doc),
            root.join(doc),
        )
        .unwrap();
    }
    let archive = dir.join(archive_name());
    super::succeeds(
        Command::new("tar")
            .arg("-czf")
            .arg(&archive)
            .arg("-C")
            .arg(&staging)
            .arg(&folder),
    );
    let sums = super::succeeds(
        Command::new("sha256sum")
            .arg(archive_name())
            .current_dir(dir),
    );
    std::fs::write(dir.join("SHA256SUMS"), sums.stdout).unwrap();
    binary
}

/// A copy of the test build at `dir/laravel-worker`, stripped as a
/// release's binary is when `strip` is there (a debug build is some
/// 300 MB, slow to pack, hash and copy).
pub fn binary_copy(dir: &Path) -> PathBuf {
    let binary = dir.join("laravel-worker");
    std::fs::copy(env!("CARGO_BIN_EXE_laravel-worker"), &binary).unwrap();
    if super::skip::on_path("strip") {
        super::succeeds(Command::new("strip").arg(&binary));
    }
    binary
}

/// Whether the files `a` and `b` hold the same bytes (`cmp`).
pub fn same_file(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg("-s")
        .arg(a)
        .arg(b)
        .status()
        .is_ok_and(|s| s.success())
}

/// `python3 -m http.server` serving one directory on a private port of
/// 127.0.0.1; stopped when dropped.
pub struct StaticServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl StaticServer {
    /// Serves `dir`; returns once the server has said its port.
    pub fn start(dir: &Path) -> StaticServer {
        let mut child = Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m http.server");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .unwrap_or_else(|| panic!("no port in {line:?}"))
            .to_string();
        StaticServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
