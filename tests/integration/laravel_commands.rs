//! Laravel's own queue commands against laravel-worker:
//! `php artisan queue:restart` stops it (and a PHP worker beside it), and
//! `queue:failed`, `queue:retry`, `queue:forget` and `queue:flush` work on
//! the failed_jobs rows it writes.

use crate::common;

use common::laravel::{self, Transport};
use common::{Daemon, QueueState, Scene, q};
use serde_json::{Value, json};

#[test]
fn queue_restart_stops_laravel_worker_and_queue_work() {
    let Some((s, app, config)) = laravel::scene(Transport::PerJob) else {
        return;
    };

    // Each worker proves it is in its loop (and has read the restart key)
    // by running a job from its own queue.
    app.dispatch(json!([{"kind": "plain", "tag": "for-php", "queue": "php"}]));
    let mut php = app.queue_work(&["--queue=php", "--sleep=0.1"]);
    app.wait_for_events("handle", 1);
    let mut d = s.work(&config, &["--sleep=0.1", "--json"]);
    app.dispatch(json!([{"kind": "plain", "tag": "for-us"}]));
    let done = d.wait_event("success");
    assert_eq!(done["job"], "App\\Jobs\\PlainJob", "{done}");
    assert_eq!(
        app.events("handle", "for-us")[0]["runner"],
        "LaravelWorker\\BridgeJob"
    );

    let out = app.artisan_ok(&["queue:restart"]);
    assert!(out.contains("Broadcasting queue restart signal."), "{out}");
    let key = "laravel_database_laravel_cache:illuminate:queue:restart";
    let stamp: String = s.redis.cache(&["GET", key]);
    assert!(stamp.bytes().all(|b| b.is_ascii_digit()), "{stamp}");

    d.expect_exit(0);
    let status = php.wait();
    assert!(status.success(), "{status}: {}", php.output());
}

/// The payload now in the ready list.
fn ready(s: &Scene) -> Vec<Value> {
    s.redis
        .lrange(&q("default"))
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect()
}

/// The ready list holds one job, back from the failed store: `pushed`'s
/// uuid and id, attempts 0.
#[track_caller]
fn assert_retried(s: &Scene, pushed: &Value) {
    let retried = ready(s);
    assert_eq!(retried.len(), 1, "one job back: {retried:?}");
    for field in ["uuid", "id"] {
        assert_eq!(retried[0][field], pushed[field], "{field} kept");
    }
    assert_eq!(retried[0]["attempts"], 0, "attempts reset");
}

/// Runs laravel-worker until the queue is empty (exit 0); returns the
/// uuid of the first job it ran successfully.
#[track_caller]
fn run_again(s: &Scene, config: &std::path::Path) -> Value {
    let d = s.run(config, &["--stop-when-empty", "--sleep=0", "--json"]);
    d.event("success")["uuid"].clone()
}

#[test]
fn queue_failed_retry_forget_and_flush_use_our_rows() {
    let Some((s, app, config)) = laravel::scene(Transport::PerJob) else {
        return;
    };
    let gate = s.path("gate");
    let gate_str = gate.display().to_string();
    app.dispatch(json!([
        {"kind": "gated", "tag": "g1", "gate": gate_str},
        {"kind": "gated", "tag": "g2", "gate": gate_str},
        {"kind": "gated", "tag": "g3", "gate": gate_str},
        {"kind": "gated", "tag": "g4", "gate": gate_str},
    ]));
    let pushed = ready(&s);

    // laravel-worker fails all four (one try each) and writes the rows.
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let uuids: Vec<&str> = pushed.iter().map(|p| p["uuid"].as_str().unwrap()).collect();
    assert_eq!(
        rows.iter().map(|r| r.uuid.as_str()).collect::<Vec<_>>(),
        uuids,
        "rows in the order failed"
    );

    // queue:failed lists them: id (uuid), connection, queue, class.
    let listed = app.artisan_ok(&["queue:failed"]);
    for uuid in &uuids {
        let line = listed
            .lines()
            .find(|l| l.contains(uuid))
            .unwrap_or_else(|| panic!("{uuid} not listed:\n{listed}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(
            &cells[1..5],
            &[*uuid, "redis", "default", "App\\Jobs\\GatedJob"],
            "{line}"
        );
    }

    // queue:retry: back on the queue with attempts 0, same uuid and id.
    std::fs::write(&gate, "").unwrap();
    let out = app.artisan_ok(&["queue:retry", uuids[0]]);
    assert!(out.contains(uuids[0]), "{out}");
    assert_retried(&s, &pushed[0]);
    assert_eq!(s.failed_rows().len(), 3, "the other rows are kept");

    // ...and laravel-worker runs it again, successfully this time.
    assert_eq!(run_again(&s, &config), uuids[0], "the retried job ran");
    assert_eq!(app.attempts("g1"), [1, 1]);
    assert_eq!(app.attempts("g2"), [1]);

    // queue:forget one row; queue:flush the rest.
    let out = app.artisan_ok(&["queue:forget", uuids[1]]);
    assert!(out.contains("Failed job deleted successfully!"), "{out}");
    let left: Vec<String> = s.failed_rows().into_iter().map(|r| r.uuid).collect();
    assert_eq!(left, [uuids[2], uuids[3]], "rows left");
    let out = app.artisan_ok(&["queue:flush"]);
    assert!(
        out.contains("All failed jobs deleted successfully!"),
        "{out}"
    );
    let listed = app.artisan_ok(&["queue:failed"]);
    assert!(listed.contains("No failed jobs!"), "{listed}");
    s.assert_state(QueueState::empty());
}

/// The other direction: `php artisan queue:work` fails a job and writes the
/// row; our `retry` pushes it back (attempts 0, same uuid and id) and our
/// worker runs it again.
#[test]
fn our_retry_of_a_row_written_by_queue_work() {
    let Some((s, app, config)) = laravel::scene(Transport::PerJob) else {
        return;
    };
    let gate = s.path("gate");
    app.dispatch(
        json!([{"kind": "gated", "tag": "php-failed", "gate": gate.display().to_string()}]),
    );
    let pushed = ready(&s);
    let uuid = pushed[0]["uuid"].as_str().unwrap_or_default().to_string();

    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0", "--tries=1"]);
    assert!(php.wait().success(), "{}", php.output());
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1, "queue:work wrote the row");
    assert_eq!(rows[0].uuid, uuid, "the row's uuid");

    std::fs::write(&gate, "").unwrap();
    Daemon::cli(&config, &["retry", &uuid]).expect_exit(0);
    assert_retried(&s, &pushed[0]);
    assert_eq!(s.failed_rows().len(), 0, "the row is deleted");

    assert_eq!(run_again(&s, &config), uuid.as_str(), "ran again");
    assert_eq!(app.attempts("php-failed"), [1, 1]);
    s.assert_state(QueueState::empty());
}

/// Case 2: `php artisan queue:work --once` runs a job our `push` wrote
/// (a string job, `Class@method`), as attempt 1, and leaves no key behind.
#[test]
fn case02_queue_work_runs_a_job_our_push_wrote() {
    let Some((s, app, config)) = laravel::scene(Transport::PerJob) else {
        return;
    };
    let data = r#"{"tag":"pushed-by-us"}"#;
    let job = "App\\Jobs\\StringJob@handle";
    Daemon::cli(&config, &["push", "default", "--job", job, "--data", data]).expect_exit(0);
    let mut php = app.queue_work(&["--once"]);
    let status = php.wait();
    assert!(status.success(), "{status}: {}", php.output());
    let runs = app.events("handle", "pushed-by-us");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["attempt"], 1, "{runs:?}");
    s.assert_redis(QueueState::empty());
}
