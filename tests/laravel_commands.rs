//! Laravel's own queue commands against laravel-worker:
//! `php artisan queue:restart` stops it (and a PHP worker beside it), and
//! `queue:failed`, `queue:retry`, `queue:forget` and `queue:flush` work on
//! the failed_jobs rows it writes.

mod common;

use common::laravel::{App, Transport};
use common::{Scene, q};
use serde_json::{Value, json};

#[test]
fn queue_restart_stops_laravel_worker_and_queue_work() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    let config = app.config(&s, Transport::PerJob);

    // Each worker proves it is in its loop (and has read the restart key)
    // by running a job from its own queue.
    app.dispatch(json!([{"kind": "plain", "tag": "for-php", "queue": "php"}]));
    let mut php = app.queue_work(&["--queue=php", "--sleep=0.1"]);
    app.wait_for_events("handle", 1);
    let mut d = s.work(&config, &["--sleep=0.1", "--json"]);
    app.dispatch(json!([{"kind": "plain", "tag": "for-us"}]));
    let done = d.wait_event("success");
    assert_eq!(done["job"], "App\\Jobs\\PlainJob");
    assert_eq!(
        app.events("handle", "for-us")[0]["runner"],
        "LaravelWorker\\BridgeJob"
    );

    let out = app.artisan_ok(&["queue:restart"]);
    assert!(out.contains("Broadcasting queue restart signal."), "{out}");
    let stamp: String = redis::cmd("GET")
        .arg("laravel_database_laravel_cache:illuminate:queue:restart")
        .query(&mut s.redis.conn(1))
        .unwrap();
    assert!(stamp.bytes().all(|b| b.is_ascii_digit()), "{stamp}");

    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
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

#[test]
fn queue_failed_retry_forget_and_flush_use_our_rows() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    let config = app.config(&s, Transport::PerJob);
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
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 4);
    let uuids: Vec<&str> = pushed.iter().map(|p| p["uuid"].as_str().unwrap()).collect();
    assert_eq!(
        rows.iter().map(|r| r.uuid.as_str()).collect::<Vec<_>>(),
        uuids
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
    let retried = ready(&s);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["uuid"], pushed[0]["uuid"]);
    assert_eq!(retried[0]["id"], pushed[0]["id"]);
    assert_eq!(retried[0]["attempts"], 0);
    assert_eq!(s.failed_rows().len(), 3);

    // ...and laravel-worker runs it again, successfully this time.
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--json"]);
    assert_eq!(d.code(), Some(0));
    let done = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "success")
        .expect("the retried job ran");
    assert_eq!(done["uuid"], uuids[0]);
    assert_eq!(app.attempts("g1"), [1, 1]);
    assert_eq!(app.attempts("g2"), [1]);

    // queue:forget one row; queue:flush the rest.
    let out = app.artisan_ok(&["queue:forget", uuids[1]]);
    assert!(out.contains("Failed job deleted successfully!"), "{out}");
    let left: Vec<String> = s.failed_rows().into_iter().map(|r| r.uuid).collect();
    assert_eq!(left, [uuids[2], uuids[3]]);
    let out = app.artisan_ok(&["queue:flush"]);
    assert!(
        out.contains("All failed jobs deleted successfully!"),
        "{out}"
    );
    assert!(s.failed_rows().is_empty());
    assert!(
        app.artisan_ok(&["queue:failed"])
            .contains("No failed jobs!")
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// The other direction: `php artisan queue:work` fails a job and writes the
/// row; our `retry` pushes it back (attempts 0, same uuid and id) and our
/// worker runs it again.
#[test]
fn our_retry_of_a_row_written_by_queue_work() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    let config = app.config(&s, Transport::PerJob);
    let gate = s.path("gate");
    app.dispatch(
        json!([{"kind": "gated", "tag": "php-failed", "gate": gate.display().to_string()}]),
    );
    let pushed = ready(&s);
    let uuid = pushed[0]["uuid"].as_str().unwrap().to_string();

    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0", "--tries=1"]);
    assert!(php.wait().success(), "{}", php.output());
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1, "queue:work wrote the row");
    assert_eq!(rows[0].uuid, uuid);

    std::fs::write(&gate, "").unwrap();
    let mut retry =
        common::Daemon::start(&["--config", config.to_str().unwrap(), "retry", &uuid], &[]);
    assert_eq!(retry.code(), Some(0), "{}", retry.stderr.join("\n"));
    let retried = ready(&s);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["uuid"], pushed[0]["uuid"]);
    assert_eq!(retried[0]["id"], pushed[0]["id"]);
    assert_eq!(retried[0]["attempts"], 0);
    assert!(s.failed_rows().is_empty());

    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--json"]);
    assert_eq!(d.code(), Some(0));
    let done = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "success")
        .expect("ran again");
    assert_eq!(done["uuid"], uuid.as_str());
    assert_eq!(app.attempts("php-failed"), [1, 1]);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
