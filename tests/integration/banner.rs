//! The start-up banner of `work`: one INFO line (or one JSON line with
//! `--json`) that names the version and build, the config sources, the
//! Redis address, each queue's full key, the cache store and the exact
//! restart key, the failed store, the handlers and the concurrency, in
//! human units.

use crate::common;

use common::{Daemon, Handler, Scene};

/// The banner line of a finished daemon's log.
fn banner_line(d: &Daemon) -> String {
    d.stderr_text()
        .lines()
        .find(|l| l.contains("worker starting"))
        .unwrap_or_else(|| panic!("no banner in:\n{}", d.stderr_text()))
        .to_string()
}

#[test]
fn the_banner_lists_what_the_worker_watches() {
    let mail = Handler::url("http://127.0.0.1:9/queue")
        .matching("App\\Mail\\*")
        .queues(&["mail"]);
    let (s, config) =
        Scene::configured(|c| c.script("cat > /dev/null").handler(mail).retry_after(90));
    let d = s.run(
        &config,
        &[
            "--queue=high,default",
            "--stop-when-empty",
            "--sleep=0",
            "--concurrency=2",
        ],
    );
    let line = banner_line(&d);
    let socket = s.redis.socket.display().to_string();
    for part in [
        " INFO ",
        &format!("version={}", env!("CARGO_PKG_VERSION")),
        "build=",
        &format!("config=defaults < --config {}", config.display()),
        &format!("redis={socket} db 0"),
        "connection=redis",
        "queues=high (laravel_database_queues:high), default (laravel_database_queues:default)",
        "retry_after=90 s",
        "block_for=unset (BLPOP on :notify for up to --sleep)",
        &format!("cache=redis {socket} db 1"),
        "restart_key=laravel_database_laravel_cache:illuminate:queue:restart",
        "failed=",
        &format!("* → process {}", s.path("h.sh").display()),
        "App\\Mail\\* → http http://127.0.0.1:9/queue (queues mail)",
        "concurrency=2",
    ] {
        assert!(line.contains(part), "{part:?} not in the banner:\n{line}");
    }
    // One line, no Rust debug values.
    let log = d.stderr_text();
    assert_eq!(log.matches("worker starting").count(), 1, "{log}");
    for wrong in ["Some(", "None", "\\n"] {
        assert!(!line.contains(wrong), "{wrong:?} in the banner:\n{line}");
    }
}

#[test]
fn with_json_the_banner_is_one_json_line() {
    let s = Scene::new();
    let handler = s.script("h.sh", "cat > /dev/null");
    let config = s.config().command(&handler).retry_after_null().write();
    let d = s.run(&config, &["--json", "--stop-when-empty", "--sleep=0"]);
    let log = d.stderr_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("worker starting"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    let banner = &lines[0];
    assert_eq!(banner["level"], "info");
    assert_eq!(banner["version"], env!("CARGO_PKG_VERSION"));
    assert!(banner["build"].as_str().is_some_and(|b| !b.is_empty()));
    assert_eq!(
        banner["queues"][0]["key"],
        "laravel_database_queues:default"
    );
    assert_eq!(banner["retry_after"], "never");
    assert_eq!(
        banner["restart_key"],
        "laravel_database_laravel_cache:illuminate:queue:restart"
    );
    assert_eq!(banner["handlers"][0]["transport"], "process");
    assert_eq!(
        banner["handlers"][0]["target"],
        handler.display().to_string()
    );
    assert_eq!(banner["concurrency"], 1);
    assert!(
        banner["config_sources"][1]
            .as_str()
            .is_some_and(|c| c.starts_with("--config ")),
        "{banner}"
    );
}

#[test]
fn version_names_the_build() {
    let d = Daemon::run(&["--version"], &[]);
    let out = d.stdout.join("\n");
    assert!(
        out.starts_with(&format!(
            "laravel-worker {} (git ",
            env!("CARGO_PKG_VERSION")
        )),
        "{out}"
    );
}
