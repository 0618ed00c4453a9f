//! The metrics and health endpoint (`[metrics] listen`), read over real
//! HTTP while the worker runs.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::Scene;
use common::payloads::Job;

/// `GET path` → (status, body).
fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap().parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn metrics_count_jobs_and_health_answers() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_JOB_NAME\" != 'App\\Jobs\\Bad' ]",
    );
    let db = s.failed_db();
    let config = s.config_toml(&format!(
        "[metrics]\nlisten = \"127.0.0.1:0\"\n\n[failed]\nurl = \"{db}\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        handler.display()
    ));
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Good").build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Good").build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Bad").build());

    let mut d = s.work(&config, &["--sleep=0.05", "--json", "--tries=1"]);
    let line = d.wait_stderr(|l| l.contains("metrics endpoint listening"));
    let address = line
        .split("address=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        d.wait_stdout(|l| l.contains("\"status\":\"success\""));
    }
    d.wait_event("failed");
    // The worker polls again after the third job, so readiness is set.
    let deadline = std::time::Instant::now() + common::WAIT;
    while get(&address, "/readyz").0 != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let (status, text) = get(&address, "/metrics");
    assert_eq!(status, 200);
    let metric = |needle: &str| {
        text.lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} missing in:\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        metric("laravel_worker_jobs_total{queue=\"default\",outcome=\"done\"}"),
        "2"
    );
    assert_eq!(
        metric("laravel_worker_jobs_total{queue=\"default\",outcome=\"failed\"}"),
        "1"
    );
    assert_eq!(
        metric("laravel_worker_job_duration_seconds_count{queue=\"default\"}"),
        "3"
    );
    assert_eq!(metric("laravel_worker_jobs_in_flight"), "0");
    assert_eq!(metric("laravel_worker_reserve_errors_total"), "0");
    assert_eq!(get(&address, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(&address, "/nope").0, 404);

    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.code(), Some(0));
}
