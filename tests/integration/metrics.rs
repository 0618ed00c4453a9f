//! The metrics and health endpoint (`[metrics] listen`), read over real
//! HTTP while the worker runs.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::http_server::{get, metric, try_get};
use common::{Daemon, Job, Scene, now};
use serde_json::json;

/// A scene whose worker runs every job successfully and serves its
/// metrics on a free loopback port, with `[metrics] key = seconds`.
fn serving_metrics(key: &str, seconds: i64) -> (Scene, std::path::PathBuf) {
    Scene::configured(|c| {
        c.recording("exit 0")
            .metrics_listen("127.0.0.1:0")
            .set("metrics", key, seconds)
    })
}

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
    let value = |needle: &str| {
        metric(&text, needle).unwrap_or_else(|| panic!("{needle} missing in:\n{text}"))
    };
    assert_eq!(
        value("laravel_worker_jobs_total{queue=\"default\",outcome=\"done\"}"),
        "2"
    );
    assert_eq!(
        value("laravel_worker_jobs_total{queue=\"default\",outcome=\"failed\"}"),
        "1"
    );
    assert_eq!(
        value("laravel_worker_job_duration_seconds_count{queue=\"default\"}"),
        "3"
    );
    assert_eq!(value("laravel_worker_jobs_in_flight"), "0");
    assert_eq!(value("laravel_worker_reserve_errors_total"), "0");
    assert_eq!(get(&address, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(&address, "/nope").0, 404, "GET /nope");

    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// 300 clients that send half a request and stop, against a worker with
/// 256 descriptors: the listener's cap and header timeout keep the
/// descriptors for the handlers and Redis, every job succeeds, and
/// `/healthz` answers again once the slow clients are timed out.
#[test]
fn slow_clients_cannot_starve_the_worker_of_descriptors() {
    let (s, config) = serving_metrics("header_timeout", 2);
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend(["--json", "--sleep=0.05", "--tries=1"]);
    let mut d = Daemon::start_wrapped(&["prlimit", "--nofile=256:256", "--"], &all, &[]);
    let address = d.metrics_address();
    // The default cap, 32, is below a quarter of 256.
    d.log_line("metrics endpoint listening", &["max_connections=32"]);

    let slow: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut stream = TcpStream::connect(&address).ok()?;
            // Over the cap the stream is closed at once: writing may fail.
            let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
            Some(stream)
        })
        .collect();
    assert_eq!(slow.len(), 300, "every slow client connected");

    let jobs = Job::named(["A"; 20]);
    s.push_on("default", &jobs);
    for _ in 0..20 {
        d.wait_event("success");
    }
    common::wait_until("/healthz to answer 200", || {
        try_get(&address, "/healthz").is_some_and(|(status, _)| status == 200)
    });
    assert!(d.events_with("failed").is_empty(), "{:?}", d.events());
    assert_eq!(s.log().len(), 20);
    let log = d.stderr_text();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("cannot accept a connection"), "{log}");
    drop(slow);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// A client that pipelines many scrapes and never reads the answers: the
/// endpoint's writes stall (the header timeout does not apply to them), and
/// `idle_timeout` closes the connection.
#[test]
fn a_client_that_stops_reading_is_closed_after_the_idle_timeout() {
    let (_s, config) = serving_metrics("idle_timeout", 1);
    let all = ["--config", config.to_str().unwrap(), "work"];
    let mut d = Daemon::start(&all, &[("RUST_LOG", "info,laravel_worker::metrics=debug")]);
    let address = d.metrics_address();
    let mut stream = TcpStream::connect(&address).unwrap();
    let mut writer = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let scrapes = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20_000);
        // The endpoint stops reading once its answers back up: this may
        // block until the connection is closed, then fail.
        let _ = writer.write_all(scrapes.as_bytes());
    });
    d.wait_log(&["metrics endpoint: idle connection closed"]);
    assert_eq!(get(&address, "/healthz"), (200, "ok\n".to_string()));
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// An odd `createdAt` at the head of a queue never costs the queue its
/// gauges nor `monitor` its table: a space after the colon is read, a
/// string, `null` or an object gives no age, and a `createdAt` inside
/// `data` (or the log context) is never taken for the job's.
#[test]
fn an_odd_created_at_keeps_the_backlog_gauges_and_monitor() {
    let s = Scene::new();
    let config = s.config().script("exit 0").metrics_listen("127.0.0.1:0");
    let config = config.set("metrics", "backlog_interval", 1).write();
    let t = now();
    let spaced = Job::laravel13("App\\Jobs\\A")
        .set("createdAt", json!(t - 30))
        .build()
        .replace("\"createdAt\":", "\"createdAt\": ");
    let nested = Job::string(
        "App\\Jobs\\B@handle",
        json!({"createdAt": 0, "x": [{"createdAt": 1}]}),
    )
    .set("createdAt", json!(t - 60))
    .set(
        "illuminate:log:context",
        json!({"data": {"createdAt": "i:0;"}}),
    )
    .build();
    let heads = [
        ("spaced", spaced, Some(30)),
        ("nested", nested, Some(60)),
        (
            "text",
            Job::laravel13("C").set("createdAt", json!("soon")).build(),
            None,
        ),
        (
            "null",
            Job::laravel13("D").set("createdAt", json!(null)).build(),
            None,
        ),
        (
            "inside",
            Job::string("E@handle", json!({"createdAt": 0})).build(),
            None,
        ),
    ];
    let queues: Vec<&str> = heads.iter().map(|(queue, ..)| *queue).collect();
    for queue in &queues {
        Daemon::cli(&config, &["pause", &format!("redis:{queue}")]).expect_exit(0);
    }
    for (queue, head, _) in &heads {
        s.redis.push(queue, head);
    }
    let mut d = s.work(
        &config,
        &[&format!("--queue={}", queues.join(",")), "--sleep=0.1"],
    );
    let address = d.metrics_address();
    let gauge = |text: &str, name: &str, queue: &str| -> Option<i64> {
        let needle = format!("laravel_worker_queue_{name}{{queue=\"{queue}\"}} ");
        metric(text, &needle)?.parse().ok()
    };
    let mut text = String::new();
    common::wait_until("the backlog gauges of every queue", || {
        text = get(&address, "/metrics").1;
        queues.iter().all(|q| gauge(&text, "backlog", q).is_some())
    });
    for (queue, _, age) in &heads {
        for name in ["ready", "backlog"] {
            assert_eq!(
                gauge(&text, name, queue),
                Some(1),
                "{name} of {queue}: {text}"
            );
        }
        for name in ["delayed", "delayed_due", "reserved"] {
            assert_eq!(
                gauge(&text, name, queue),
                Some(0),
                "{name} of {queue}: {text}"
            );
        }
        let read = gauge(&text, "oldest_ready_age_seconds", queue);
        match age {
            Some(age) => {
                let read = read.unwrap_or_else(|| panic!("the age of {queue}: {text}"));
                assert!((*age..age + 10).contains(&read), "{queue}: {read}: {text}");
            }
            None => assert_eq!(read, None, "no age for {queue}: {text}"),
        }
    }
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);

    let list = format!("redis:{}", queues.join(","));
    let mut m = Daemon::cli(&config, &["monitor", &list]);
    m.expect_exit(0);
    for queue in &queues {
        assert!(
            m.stdout.iter().any(|l| l.contains(queue)),
            "{queue} in the table: {:?}",
            m.stdout
        );
    }
    let mut m = Daemon::cli(&config, &["monitor", &list, "--json"]);
    m.expect_exit(0);
    let report: serde_json::Value = serde_json::from_str(&m.stdout[0]).unwrap();
    assert_eq!(report[0]["oldest_pending"], json!(t - 30), "{report}");
    assert_eq!(report[1]["oldest_pending"], json!(t - 60), "{report}");
    assert_eq!(report[4]["oldest_pending"], json!(null), "{report}");
}

/// The backlog gauges (for KEDA or an HPA) equal the Redis state of each
/// watched queue: ready, delayed (all and due), reserved, the head job's
/// age from its `createdAt`, and backlog = ready + due delayed + reserved.
/// The queues are paused so that the worker takes nothing meanwhile.
#[test]
fn backlog_gauges_equal_the_redis_state() {
    let s = Scene::new();
    let config = s.config().script("exit 0").metrics_listen("127.0.0.1:0");
    let config = config.set("metrics", "backlog_interval", 1).write();
    for queue in ["redis:default", "redis:idle"] {
        Daemon::cli(&config, &["pause", queue]).expect_exit(0);
    }
    let t = now();
    let oldest = Job::laravel13("App\\Jobs\\A").set("createdAt", json!(t - 30));
    s.push_on("default", [&oldest, &Job::laravel13("App\\Jobs\\B")]);
    for (at, name) in [(t - 5, "Due1"), (t - 1, "Due2"), (t + 600, "Later")] {
        s.redis.later("default", at, &Job::laravel13(name).build());
    }
    let running = Job::laravel13("App\\Jobs\\R").set("attempts", json!(1));
    let reserved = "laravel_database_queues:default:reserved";
    let _: () = s
        .redis
        .cmd(&["ZADD", reserved, &(t + 90).to_string(), &running.build()]);

    let mut d = s.work(&config, &["--queue=default,idle", "--sleep=0.1"]);
    let address = d.metrics_address();
    let gauge = |text: &str, name: &str, queue: &str| -> Option<i64> {
        let needle = format!("laravel_worker_queue_{name}{{queue=\"{queue}\"}} ");
        metric(text, &needle)?.parse().ok()
    };
    let mut text = String::new();
    common::wait_until("the backlog gauges", || {
        text = get(&address, "/metrics").1;
        gauge(&text, "backlog", "idle").is_some()
    });
    let default = |name| gauge(&text, name, "default");
    assert_eq!(default("ready"), Some(2), "{text}");
    assert_eq!(default("delayed"), Some(3), "{text}");
    assert_eq!(default("delayed_due"), Some(2), "{text}");
    assert_eq!(default("reserved"), Some(1), "{text}");
    assert_eq!(default("backlog"), Some(5), "{text}");
    let age = default("oldest_ready_age_seconds").expect("the head job's age");
    assert!((30..=40).contains(&age), "age {age}: {text}");
    assert_eq!(gauge(&text, "backlog", "idle"), Some(0), "{text}");
    assert_eq!(
        gauge(&text, "oldest_ready_age_seconds", "idle"),
        None,
        "{text}"
    );
    assert_eq!(
        s.redis.llen("laravel_database_queues:default"),
        2,
        "paused: nothing taken"
    );

    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// Calls of Redis command `name` so far, scripts' own calls included
/// (`INFO commandstats`).
fn calls(s: &Scene, name: &str) -> u64 {
    let info: String = s.redis.cmd(&["INFO", "commandstats"]);
    let line = format!("cmdstat_{name}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A large job at the head of a watched queue is copied out of Redis once,
/// not at every backlog sample (Redis can only copy a list element whole):
/// its age is reused while no job leaves the list, and read again once one
/// has, so the gauge then gives the new head's age.
#[test]
fn a_large_head_job_is_read_once_until_the_list_moves() {
    let s = Scene::new();
    let config = s.config().script("exit 0").metrics_listen("127.0.0.1:0");
    let config = config.set("metrics", "backlog_interval", 1).write();
    Daemon::cli(&config, &["pause", "redis:default"]).expect_exit(0);
    let t = now();
    let big = Job::string("App\\Jobs\\Big@handle", json!("x".repeat(8 << 20)))
        .set("createdAt", json!(t - 300));
    let next = Job::laravel13("App\\Jobs\\Next").set("createdAt", json!(t - 30));
    s.push_on("default", [&big, &next]);
    let _: () = s.redis.cmd(&["CONFIG", "RESETSTAT"]);

    let mut d = s.work(&config, &["--sleep=0.1"]);
    let address = d.metrics_address();
    let age = |text: &str| -> Option<i64> {
        let needle = "laravel_worker_queue_oldest_ready_age_seconds{queue=\"default\"} ";
        metric(text, needle)?.parse().ok()
    };
    common::wait_until("four backlog samples", || calls(&s, "zcount") >= 4);
    let text = get(&address, "/metrics").1;
    let read = age(&text).unwrap_or_else(|| panic!("the big head's age: {text}"));
    assert!((300..310).contains(&read), "{read}: {text}");
    assert_eq!(calls(&s, "lindex"), 1, "the big head was read once");

    let _: String = s.redis.cmd(&["LPOP", "laravel_database_queues:default"]);
    let mut text = String::new();
    common::wait_until("the next head's age", || {
        text = get(&address, "/metrics").1;
        age(&text).is_some_and(|a| a < 300)
    });
    let read = age(&text).unwrap_or_default();
    assert!((30..40).contains(&read), "{read}: {text}");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}
