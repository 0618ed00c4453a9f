//! The metrics and health endpoint (`[metrics] listen`), read over real
//! HTTP while the worker runs.

mod common;

use common::http_server::get;
use common::{Job, Scene};

#[test]
fn metrics_count_jobs_and_health_answers() {
    let s = Scene::new();
    let fail_bad = "[ \"$LARAVEL_WORKER_JOB_NAME\" != 'App\\Jobs\\Bad' ]";
    let config = s.config().script(fail_bad).metrics_listen("127.0.0.1:0");
    let config = config.write();
    let jobs = Job::named(["Good", "Good", "Bad"]);
    s.push_on("default", &jobs);

    let mut d = s.work(&config, &["--sleep=0.05", "--json", "--tries=1"]);
    let address = d.metrics_address();
    for _ in 0..2 {
        d.wait_stdout(|l| l.contains("\"status\":\"success\""));
    }
    d.wait_event("failed");
    // The worker polls again after the third job, so readiness is set.
    common::wait_until("/readyz to answer 200", || {
        get(&address, "/readyz").0 == 200
    });

    let (status, text) = get(&address, "/metrics");
    assert_eq!(status, 200, "GET /metrics: {text}");
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
    assert_eq!(get(&address, "/nope").0, 404, "GET /nope");

    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}
