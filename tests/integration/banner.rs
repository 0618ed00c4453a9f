//! The start-up banner of `work`: a short block of INFO lines, one per
//! subject (or one JSON line with `--json`), that names the version and
//! build, the config sources, the queue in its driver's words, each
//! queue's full key, the handlers, the limits, the failed and cache stores
//! with the exact restart key, and metrics and health, in human units.

use crate::common;

use common::{Daemon, Handler, Scene};

/// The start block of a finished daemon's log: its lines from `worker
/// starting` on, each without the log line's time, level and target.
pub(crate) fn start_block(d: &Daemon) -> Vec<String> {
    let log = d.stderr_text();
    let lines: Vec<String> = log
        .lines()
        .filter_map(|l| l.split_once("laravel_worker::commands::banner: "))
        .map(|(_, message)| message.to_string())
        .collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("worker starting: ")),
        "no start block in:\n{log}"
    );
    lines
}

/// The start block's line of `subject` (`queue`, `limits`…), its label
/// cut off.
pub(crate) fn start_line(d: &Daemon, subject: &str) -> String {
    let block = start_block(d);
    block
        .iter()
        .find_map(|l| {
            let rest = l.strip_prefix("  ")?.strip_prefix(subject)?;
            rest.starts_with(' ').then(|| rest.trim_start().to_string())
        })
        .unwrap_or_else(|| panic!("no {subject:?} line in:\n{}", block.join("\n")))
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
    let block = start_block(&d);
    let socket = s.redis.socket.display().to_string();
    let expected = [
        (
            "worker starting: ",
            vec![
                format!("laravel-worker {} (git ", env!("CARGO_PKG_VERSION")),
                format!("config defaults < --config {}", config.display()),
            ],
        ),
        (
            "  queue    ",
            vec![format!("redis connection \"redis\": {socket} db 0")],
        ),
        (
            "  queues   ",
            vec![
                "high (laravel_database_queues:high), default (laravel_database_queues:default)"
                    .to_string(),
                "retry_after 90 s".into(),
                "block_for unset (BLPOP on :notify for up to --sleep)".into(),
            ],
        ),
        (
            "  handlers ",
            vec![
                format!("* → process {}", s.path("h.sh").display()),
                "App\\Mail\\* → http http://127.0.0.1:9/queue (queues mail)".into(),
            ],
        ),
        (
            "  limits   ",
            vec![
                "concurrency 2, tries 1, timeout 60 s, memory 128 MB, sleep 0 s".into(),
                "--stop-when-empty".into(),
            ],
        ),
        (
            "  stores   ",
            vec![
                "failed ".into(),
                format!("cache redis {socket} db 1"),
                "restart key laravel_database_laravel_cache:illuminate:queue:restart".into(),
            ],
        ),
        (
            "  metrics  ",
            vec!["off; heartbeat off; horizon records off".into()],
        ),
    ];
    assert_eq!(block.len(), expected.len(), "{block:#?}");
    for ((label, parts), line) in expected.iter().zip(&block) {
        assert!(line.starts_with(label), "{label:?} is not {line:?}");
        for part in parts {
            assert!(line.contains(part.as_str()), "{part:?} not in {line:?}");
        }
    }
    // One block, no Rust debug values, no field labelled redis= anywhere.
    let log = d.stderr_text();
    assert_eq!(log.matches("worker starting").count(), 1, "{log}");
    for wrong in ["Some(", "None", "\\n", "redis="] {
        assert!(!block.concat().contains(wrong), "{wrong:?} in:\n{block:#?}");
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
    assert_eq!(banner["driver"], "redis");
    assert_eq!(banner["connection"], "redis");
    assert_eq!(banner["at"], banner["redis"], "0.1.0's field kept on Redis");
    assert_eq!(banner["limits"]["tries"], 1);
    assert_eq!(banner["limits"]["flags"][0], "--stop-when-empty");
    assert_eq!(banner["metrics"], "off");
    assert_eq!(banner["heartbeat"], "off");
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
