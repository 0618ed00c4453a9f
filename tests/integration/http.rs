//! HTTP handlers (`url = ...`) against a real HTTP/1.1 server on
//! 127.0.0.1 (`common::http_server`), started by each test: the real daemon
//! binary POSTs real jobs over real sockets. Each test asserts the Redis
//! state and failed_jobs afterwards.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::http_server::{Reply, Request, Server, ok, status};
use common::{Daemon, Failed, Handler, Job, Payload, QueueState, Scene, Score, now};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const DELAYED: &str = "laravel_database_queues:default:delayed";

/// The default config with one catch-all HTTP handler.
fn config(s: &Scene, handler: Handler) -> PathBuf {
    s.config().handler(handler).write()
}

/// Runs `work ARGS` with `env` until the daemon exits, and asserts it
/// exited `code`.
fn work(config: &Path, args: &[&str], env: &[(&str, &str)], code: i32) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend_from_slice(args);
    let mut env = env.to_vec();
    // An HTTP proxy from the environment must not sit between the daemon
    // and the test server.
    env.push(("NO_PROXY", "*"));
    let mut d = Daemon::run(&all, &env);
    d.expect_exit(code);
    d
}

/// Runs `work ARGS` to its end; it must exit 0.
fn run(config: &Path, args: &[&str]) -> Daemon {
    work(config, args, &[], 0)
}

/// The last try of the job `job` that the first run released: makes it
/// due, runs `work ARGS` again, and asserts the job failed with an
/// exception starting `exception` and containing `detail`.
#[track_caller]
fn last_try_fails(s: &Scene, config: &Path, args: &[&str], job: &Job, exception: [&str; 2]) {
    s.redis.make_due(DELAYED);
    run(config, args);
    let row = Failed::job(job)
        .exception(exception[0])
        .containing(exception[1]);
    s.assert_state(QueueState::empty().failed([row]));
}

/// A 2xx answer is done, whatever its body (empty, plain text, JSON without
/// `action`); every metadata header is sent and the body is the reserved
/// payload.
#[test]
fn done_on_2xx_with_metadata_headers() {
    let s = Scene::new();
    let server = Server::start(|r| match r.name() {
        "App\\Jobs\\Empty" => status(204, ""),
        "App\\Jobs\\Text" => status(200, "OK"),
        _ => Reply::Send(
            201,
            vec![("Content-Type", "application/json".into())],
            r#"{"ok":true}"#.into(),
        ),
    });
    let config = config(&s, Handler::url(&server.url("/_queue")));
    let first = Job::laravel13("App\\Jobs\\Empty")
        .set("maxTries", json!(3))
        .set("timeout", json!(40));
    let others = Job::named(["Text", "Json"]);
    s.push(&first);
    s.push_on("default", &others);

    let d = run(&config, &["--stop-when-empty", "--sleep=0", "--json"]);
    let done = d.events_with("success");
    assert_eq!(done.len(), 3, "three jobs done: {:?}", d.stdout);

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "one request a job");
    let r = &requests[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/_queue"));
    assert_eq!(r.h("content-type"), "application/json");
    let body = Payload::Bytes(String::from_utf8_lossy(&r.body).into_owned());
    assert_eq!(body, Payload::reserved(&first, 1), "the reserved payload");
    for (header, value) in [
        ("x-laravel-worker-mode", "run"),
        ("x-laravel-worker-job-id", first.id().as_str()),
        ("x-laravel-worker-job-uuid", first.uuid().as_str()),
        ("x-laravel-worker-job-name", "App\\Jobs\\Empty"),
        ("x-laravel-worker-queue", "default"),
        ("x-laravel-worker-connection", "redis"),
        ("x-laravel-worker-attempt", "1"),
        ("x-laravel-worker-max-tries", "3"),
        ("x-laravel-worker-timeout", "40"),
    ] {
        assert_eq!(r.h(header), value, "{header}");
    }
    assert_eq!(requests[1].h("x-laravel-worker-max-tries"), "1", "--tries");
    assert_eq!(requests[1].h("x-laravel-worker-timeout"), "60", "--timeout");
    for r in &requests {
        for unsent in [
            "authorization",
            "x-laravel-worker-signature",
            "x-laravel-worker-exception",
        ] {
            assert_eq!(r.header(unsent), None, "{unsent} header sent");
        }
    }
    s.assert_state(QueueState::empty());
}

/// A 2xx JSON body may release the job with a delay, fail it with a reason
/// (no failed-mode call: the endpoint asked for it) or delete it.
#[test]
fn json_body_asks_for_release_fail_or_delete() {
    let s = Scene::new();
    let server = Server::start(|r| match r.name() {
        "App\\Jobs\\Later" => status(200, r#"{"action":"release","delay":30}"#),
        "App\\Jobs\\Bad" => status(200, r#"{"action":"fail","reason":"bad input"}"#),
        _ => status(200, r#"{"action":"delete"}"#),
    });
    let config = config(&s, Handler::url(&server.url("/q")));
    let [later, bad, gone] = Job::named(["Later", "Bad", "Gone"]);
    s.push_on("default", [&later, &bad, &gone]);

    run(&config, &["--stop-when-empty", "--sleep=0", "--tries=3"]);
    let row = Failed::job(&bad).exception("Illuminate\\Queue\\ManuallyFailedException: bad input");
    let expected = QueueState::empty()
        .delayed(Payload::job(&later, 1), Score::In(30))
        .failed([row]);
    s.assert_state(expected);
    let names: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.name().to_string())
        .collect();
    assert_eq!(
        names,
        ["App\\Jobs\\Later", "App\\Jobs\\Bad", "App\\Jobs\\Gone"]
    );
}

/// 429 and 503 with `Retry-After` release the job after that delay (seconds
/// or an HTTP date), the attempt counted; 503 without it is an exception,
/// released with the worker's backoff.
#[test]
fn retry_after_in_seconds_and_as_an_http_date_releases() {
    let s = Scene::new();
    let server = Server::start(|r| match r.name() {
        "App\\Jobs\\Seconds" => Reply::Send(429, vec![("Retry-After", "120".into())], "".into()),
        "App\\Jobs\\Date" => {
            let at = chrono::Utc::now() + chrono::Duration::seconds(300);
            let date = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
            Reply::Send(503, vec![("Retry-After", date)], "".into())
        }
        _ => status(503, "down for maintenance"),
    });
    let config = config(&s, Handler::url(&server.url("/q")));
    let [seconds, date, bare] = Job::named(["Seconds", "Date", "Bare"]);
    s.push_on("default", [&seconds, &date, &bare]);

    let args = [
        "--stop-when-empty",
        "--sleep=0",
        "--tries=3",
        "--backoff=7",
        "--json",
    ];
    let d = run(&config, &args);
    // The bare 503 is an exception.
    let released = d.event("released_after_exception");
    assert_eq!(released["id"], bare.id(), "{released}");
    let message = released["message"].as_str().unwrap_or_default();
    assert!(message.contains("HTTP 503"), "{released}");

    // Lowest score first: each after its own delay.
    let expected = QueueState::empty()
        .delayed(Payload::job(&bare, 1), Score::In(7))
        .delayed(Payload::job(&seconds, 1), Score::In(120))
        .delayed(Payload::job(&date, 1), Score::In(300));
    s.assert_state(expected);
}

/// Any other 4xx fails the job at once, though tries are left, with the
/// status and a bounded excerpt of the body as the reason.
#[test]
fn other_client_errors_fail_now() {
    let s = Scene::new();
    let huge = format!("start {}", "x".repeat(100_000));
    let server = Server::start(move |r| match r.name() {
        "App\\Jobs\\Missing" => status(404, "no such route"),
        _ => status(422, &huge),
    });
    let config = config(&s, Handler::url(&server.url("/q")));
    let [missing, invalid] = Job::named(["Missing", "Invalid"]);
    s.push_on("default", [&missing, &invalid]);

    run(&config, &["--stop-when-empty", "--sleep=0", "--tries=5"]);
    let not_found = format!(
        "Illuminate\\Queue\\ManuallyFailedException: HTTP 404 Not Found from {}: no such route",
        server.url("/q")
    );
    let unprocessable = Failed::job(&invalid)
        .payload(&invalid)
        .containing("HTTP 422 Unprocessable Entity")
        .containing("start xxx");
    let rows = [Failed::job(&missing).exception(&not_found), unprocessable];
    s.assert_state(QueueState::empty().failed(rows));
    let excerpt = s.failed_rows()[1].exception.len();
    assert!(excerpt < 2048, "a bounded excerpt: {excerpt} bytes");
    assert_eq!(server.requests().len(), 2, "no retry, no failed-mode call");
}

/// Issue 22, item 8: a 3xx fails the job now (redirects are not followed),
/// but unlike a 4xx the endpoint did not fail it itself, so the failed hook
/// is called, as the book says. It used to be skipped.
#[test]
fn a_redirect_fails_now_and_calls_the_failed_hook() {
    let s = Scene::new();
    let server = Server::start(|r| match r.mode() {
        "run" => status(302, ""),
        _ => ok(),
    });
    let config = config(&s, Handler::url(&server.url("/q")));
    let job = Job::laravel8("App\\Jobs\\Moved");
    s.push(&job);

    run(&config, &["--once", "--tries=5"]);
    let redirected = Failed::job(&job)
        .containing("HTTP 302 Found")
        .containing("redirects are not followed");
    s.assert_state(QueueState::empty().failed([redirected]));
    let requests = server.requests();
    let modes: Vec<&str> = requests.iter().map(|r| r.mode()).collect();
    assert_eq!(modes, ["run", "failed"]);
}

/// A 5xx is an exception: released with backoff while tries are left, then
/// failed on the last try, and the endpoint gets the failed-mode call with
/// the recorded failure.
#[test]
fn server_error_releases_with_backoff_then_fails_with_a_failed_call() {
    let s = Scene::new();
    let server = Server::start(|r| match r.mode() {
        "run" => status(500, "boom"),
        _ => ok(),
    });
    let config = config(&s, Handler::url(&server.url("/q")));
    let job = Job::laravel8("App\\Jobs\\Flaky");
    s.push(&job);

    let args = ["--once", "--tries=2", "--backoff=5"];
    run(&config, &args);
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(5)));

    let exception = [
        "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky: HTTP 500 Internal Server Error",
        "Its body began with:\nboom",
    ];
    last_try_fails(&s, &config, &args, &job, exception);

    let requests = server.requests();
    let modes: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.mode(), r.h("x-laravel-worker-attempt")))
        .collect();
    assert_eq!(modes, [("run", "1"), ("run", "2"), ("failed", "2")]);
    let failed = &requests[2];
    let exception = failed.h("x-laravel-worker-exception");
    assert!(!exception.contains(' '), "percent-encoded: {exception}");
    let decoded = percent_encoding::percent_decode_str(exception).decode_utf8_lossy();
    assert!(
        s.failed_rows()[0].exception.starts_with(decoded.as_ref()),
        "the header carries the start of the recorded text: {exception}"
    );
    assert_eq!(failed.json()["uuid"], job.uuid(), "the failed call's body");
    assert_eq!(failed.json()["attempts"], 2, "the failed call's body");
}

/// No answer within the job's time limit is a timeout (so failOnTimeout
/// fails the job though tries are left), the failed call is made, and the
/// daemon goes on to the next job.
#[test]
fn timeout_is_timed_out_and_the_daemon_carries_on() {
    let s = Scene::new();
    let server = Server::start(|r| match (r.name(), r.mode()) {
        ("App\\Jobs\\Slow", "run") => Reply::Hang,
        _ => ok(),
    });
    let config = config(&s, Handler::url(&server.url("/q")).timeout(30));
    let slow = Job::laravel8("App\\Jobs\\Slow")
        .set("timeout", json!(1))
        .set("failOnTimeout", json!(true));
    let next = Job::laravel8("App\\Jobs\\Next");
    s.push_on("default", [&slow, &next]);

    let d = run(
        &config,
        &["--stop-when-empty", "--sleep=0", "--tries=3", "--json"],
    );
    let statuses: Vec<(String, String)> = d
        .events()
        .iter()
        .filter(|e| e["status"] != "starting")
        .map(|e| {
            (
                e["id"].as_str().unwrap_or_default().into(),
                e["status"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    let expected = [(slow.id(), "failed".into()), (next.id(), "success".into())];
    assert_eq!(statuses, expected, "(id, status) of each settled job");
    let row = Failed::job(&slow)
        .exception("Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Slow has timed out.")
        .containing("no complete answer within 1 s");
    s.assert_state(QueueState::empty().failed([row]));
    let log = d.stderr_text();
    assert!(
        log.lines()
            .any(|l| l.contains("ran past its timeout of 1 s") && l.contains(&slow.id())),
        "the abandoned request is logged with the job and its timeout:\n{log}"
    );
    let calls: Vec<[String; 3]> = server
        .requests()
        .iter()
        .map(|r| [r.name(), r.mode(), r.h("x-laravel-worker-timeout")].map(str::to_string))
        .collect();
    assert_eq!(
        calls,
        [
            ["App\\Jobs\\Slow", "run", "1"],
            ["App\\Jobs\\Slow", "failed", "1"],
            ["App\\Jobs\\Next", "run", "30"],
        ]
        .map(|call| call.map(str::to_string)),
        "(name, mode, timeout) of each request"
    );
}

/// Nothing listening: an exception (released with backoff), then failed on
/// the last try with the cause.
#[test]
fn connection_refused_is_an_exception() {
    let s = Scene::new();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/q");
    let config = config(&s, Handler::url(&url).connect_timeout(2));
    let job = Job::laravel8("App\\Jobs\\Nowhere");
    s.push(&job);

    let args = ["--once", "--tries=2", "--backoff=3", "--json"];
    let d = run(&config, &args);
    let released = d.event("released_after_exception");
    let message = released["message"].as_str().unwrap_or_default();
    assert!(message.contains("HTTP request failed"), "{released}");
    s.assert_state(QueueState::empty().delayed(Payload::Any, Score::In(3)));

    let exception = [
        "LaravelWorker\\HandlerFailedException: App\\Jobs\\Nowhere: the HTTP request failed",
        "Connection refused",
    ];
    last_try_fails(&s, &config, &args, &job, exception);
}

/// Jobs one after another share one kept-alive TCP connection.
#[test]
fn keep_alive_reuses_one_connection() {
    let s = Scene::new();
    let server = Server::start(|_| ok());
    let config = config(&s, Handler::url(&server.url("/q")));
    s.push_on("default", &Job::numbered("App\\Jobs\\Ping@handle", 5));
    run(&config, &["--stop-when-empty", "--sleep=0"]);
    let requests = server.requests();
    let order: Vec<i64> = requests
        .iter()
        .map(|r| r.json()["data"]["i"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(order, [0, 1, 2, 3, 4], "one request a job, in order");
    let carried: Vec<usize> = requests.iter().map(|r| r.connection).collect();
    assert_eq!(carried, [1; 5], "the connection each request came on");
    assert_eq!(server.connections(), 1, "connections accepted");
    s.assert_state(QueueState::empty());
}

const SECRET: &str = "s3cr3t-signing-key-8f2a";
const TOKEN: &str = "t0ken-bearer-77c1";

/// The headers a signature covers, in order: the timestamp, then every
/// signed metadata header (`handler::metadata::SIGNED_FIELDS`).
fn signed_headers() -> Vec<&'static str> {
    std::iter::once("x-laravel-worker-timestamp")
        .chain(
            laravel_worker::metadata::SIGNED_FIELDS
                .iter()
                .map(|f| f.header),
        )
        .collect()
}

/// The server's check: HMAC-SHA256 over the timestamp and every metadata
/// header as received (absent ones empty), one per line, then the body;
/// timestamp within 300 s of now.
fn verify(r: &Request, secret: &str) -> bool {
    let (Some(ts), Some(sig)) = (
        r.header("x-laravel-worker-timestamp"),
        r.header("x-laravel-worker-signature"),
    ) else {
        return false;
    };
    let Ok(at) = ts.parse::<i64>() else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    for name in signed_headers() {
        mac.update(r.header(name).unwrap_or("").as_bytes());
        mac.update(b"\n");
    }
    mac.update(&r.body);
    let Ok(sig) = hex::decode(sig) else {
        return false;
    };
    (now() - at).abs() <= 300 && mac.verify_slice(&sig).is_ok()
}

/// The code block of the book's HTTP handlers page that starts with
/// `first` (up to its closing fence), so the tests run the verification
/// code the documentation shows.
fn documented_block(first: &str) -> String {
    let readme = include_str!("../../docs/src/handlers/http.md");
    let start = readme
        .find(first)
        .unwrap_or_else(|| panic!("docs/src/handlers/http.md has no code starting {first:?}"));
    let end = start + readme[start..].find("\n```").expect("a closing fence");
    readme[start..end].to_string()
}

/// Writes `r`'s headers (as JSON) and body for a verifier in another
/// language; returns the two paths.
fn request_files(s: &Scene, r: &Request) -> [std::path::PathBuf; 2] {
    let headers = s.path("signed-headers.json");
    let body = s.path("signed-body");
    std::fs::write(&headers, json!(r.headers).to_string()).unwrap();
    std::fs::write(&body, &r.body).unwrap();
    [headers, body]
}

/// The documented PHP check (from the Laravel route), run by PHP on the
/// request as received, with `$request`, `config()` and `abort_unless()`
/// standing in for Laravel's. `None` (with a skip note) when PHP is not
/// installed.
fn php_verifies(s: &Scene, r: &Request, secret: &str) -> Option<bool> {
    if !common::skip::have("php", "the documented PHP signature check is not run") {
        return None;
    }
    let route = documented_block("Route::post('/_queue'");
    let check_start = route.find("    $h = fn").expect("the route builds $h");
    let end_marker = "        401\n    );";
    let check_end = route.find(end_marker).expect("the route aborts with 401") + end_marker.len();
    let code = format!(
        r#"
        [$_, $headers, $body, $secret] = $argv;
        $request = new class(json_decode(file_get_contents($headers), true), file_get_contents($body)) {{
            public function __construct(private array $headers, private string $body) {{}}
            public function header(string $name) {{ return $this->headers[strtolower($name)] ?? null; }}
            public function getContent(): string {{ return $this->body; }}
        }};
        function config($key) {{ global $secret; return $secret; }}
        function abort_unless($ok, $code) {{ exit($ok ? 0 : 1); }}
        {}
        exit(2);
        "#,
        &route[check_start..check_end]
    );
    let status = std::process::Command::new("php")
        .args(["-r", &code, "--"])
        .args(request_files(s, r))
        .arg(secret)
        .status()
        .expect("php runs");
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "the documented PHP check did not decide: {status}"
    );
    Some(status.success())
}

/// The documented Python check, run by Python on the request as received;
/// `None` (with a note) when python3 is not installed.
fn python_verifies(s: &Scene, r: &Request, secret: &str) -> Option<bool> {
    let check = documented_block("import hashlib, hmac, time");
    let code = format!(
        "{check}\n\nimport json, sys\n\
         class Headers(dict):\n    def get(self, name, default=None):\n        return super().get(name.lower(), default)\n\
         headers = Headers(json.load(open(sys.argv[1])))\n\
         body = open(sys.argv[2], 'rb').read()\n\
         sys.exit(0 if signature_ok(headers, body, sys.argv[3].encode()) else 1)\n"
    );
    match std::process::Command::new("python3")
        .args(["-c", &code])
        .args(request_files(s, r))
        .arg(secret)
        .status()
    {
        Ok(status) => {
            assert!(
                matches!(status.code(), Some(0 | 1)),
                "the documented Python check failed to run: {status}"
            );
            Some(status.success())
        }
        Err(e) => {
            common::skip::note(
                "python3",
                &format!("the documented Python signature check cannot run ({e})"),
            );
            None
        }
    }
}

/// stdout and stderr of `d`, asserted to hold neither `secrets`.
#[track_caller]
fn assert_no_secret(d: &Daemon, secrets: [&str; 2]) -> String {
    let logs = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    for secret in secrets {
        assert!(!logs.contains(secret), "a secret leaked: {logs}");
    }
    logs
}

/// With `secret_env` and `token_env`, each request carries a bearer token
/// and a signature the server can verify (in Rust and in PHP); the server
/// rejects a wrong one with 401, which fails the job. Neither secret shows
/// up in the daemon's output, even at trace level, nor in failed_jobs.
#[test]
fn signed_requests_verify_and_secrets_stay_out_of_logs() {
    let s = Scene::new();
    let server = Server::start(|r| {
        let bearer = r.header("authorization") == Some(&format!("Bearer {TOKEN}"));
        if bearer && verify(r, SECRET) {
            ok()
        } else {
            status(401, "bad signature")
        }
    });
    let handler = Handler::url(&server.url("/q"))
        .token_env("QUEUE_TOKEN")
        .secret_env("QUEUE_SECRET");
    let config = config(&s, handler);
    s.push(&Job::laravel13("App\\Jobs\\Signed"));
    let env = [
        ("QUEUE_TOKEN", TOKEN),
        ("QUEUE_SECRET", SECRET),
        ("RUST_LOG", "trace"),
    ];
    let d = work(&config, &["--once"], &env, 0);
    // The server accepted the signature: no failed row.
    s.assert_state(QueueState::empty());
    let r = &server.requests()[0];
    assert_ne!(
        php_verifies(&s, r, SECRET),
        Some(false),
        "PHP's hash_hmac agrees"
    );
    assert_ne!(
        php_verifies(&s, r, "another key"),
        Some(true),
        "PHP rejects another key"
    );
    assert_ne!(
        python_verifies(&s, r, SECRET),
        Some(false),
        "Python's hmac agrees"
    );
    assert_ne!(
        python_verifies(&s, r, "another key"),
        Some(true),
        "Python rejects another key"
    );
    let logs = assert_no_secret(&d, [TOKEN, SECRET]);
    // The HTTP client's own trace lines and ours are in the output.
    assert!(
        logs.contains("TRACE") && logs.contains("HTTP handler answered"),
        "trace logging is on: {logs}"
    );

    // A wrong key: 401, the job fails at once.
    let bad = Job::laravel8("App\\Jobs\\Forged");
    s.push(&bad);
    let env = [
        ("QUEUE_TOKEN", TOKEN),
        ("QUEUE_SECRET", "wrong-key-0000"),
        ("RUST_LOG", "debug"),
    ];
    let d = work(&config, &["--once", "--tries=3"], &env, 0);
    let row = Failed::job(&bad).containing("HTTP 401 Unauthorized");
    s.assert_state(QueueState::empty().failed([row]));
    let exception = s.failed_rows().remove(0).exception;
    for secret in ["wrong-key-0000", TOKEN] {
        assert!(!exception.contains(secret), "a secret leaked: {exception}");
    }
    assert_no_secret(&d, ["wrong-key-0000", TOKEN]);
}

/// The signature covers every header the endpoint acts on: a captured
/// request (run or failed mode) with any signed header changed (a `run`
/// replayed as `failed`, another attempt, job id, queue, timestamp...)
/// verifies neither in Rust nor with the documented PHP and Python checks.
#[test]
fn a_signed_request_with_any_header_changed_does_not_verify() {
    let s = Scene::new();
    let server = Server::start(|r| match r.mode() {
        "run" => status(500, "no"),
        _ => ok(),
    });
    let handler = Handler::url(&server.url("/q")).secret_env("QUEUE_SECRET");
    let config = config(&s, handler);
    s.push(&Job::laravel13("App\\Jobs\\Signed"));
    work(
        &config,
        &["--once", "--tries=1"],
        &[("QUEUE_SECRET", SECRET)],
        0,
    );
    let requests = server.requests();
    let modes: Vec<&str> = requests.iter().map(Request::mode).collect();
    assert_eq!(modes, ["run", "failed"]);
    for r in &requests {
        assert!(verify(r, SECRET), "{} request verifies as sent", r.mode());
        assert_ne!(
            php_verifies(&s, r, SECRET),
            Some(false),
            "{} request, PHP",
            r.mode()
        );
        assert_ne!(
            python_verifies(&s, r, SECRET),
            Some(false),
            "{} request, Python",
            r.mode()
        );
        for name in signed_headers() {
            let forged_value = match name {
                "x-laravel-worker-timestamp" => {
                    let sent: i64 = r.h("x-laravel-worker-timestamp").parse().unwrap();
                    (sent - 1).to_string()
                }
                "x-laravel-worker-mode" if r.mode() == "run" => "failed".to_string(),
                "x-laravel-worker-mode" => "run".to_string(),
                "x-laravel-worker-attempt" => "2".to_string(),
                _ => "forged".to_string(),
            };
            let mut forged = r.clone();
            forged.headers.insert(name.to_string(), forged_value);
            let what = format!("{} request with {name} changed", r.mode());
            assert!(!verify(&forged, SECRET), "{what}: Rust");
            assert_ne!(php_verifies(&s, &forged, SECRET), Some(true), "{what}: PHP");
            assert_ne!(
                python_verifies(&s, &forged, SECRET),
                Some(true),
                "{what}: Python"
            );
        }
    }
}

/// A `secret_env` naming an unset variable stops the daemon at start
/// (exit 1) with a message naming it; the queue is not touched.
#[test]
fn missing_secret_variable_is_a_startup_error() {
    let s = Scene::new();
    let handler = Handler::url("http://127.0.0.1:9/q").secret_env("LW_TEST_UNSET_SECRET");
    let config = config(&s, handler);
    let job = Job::laravel8("App\\Jobs\\Waiting");
    s.push(&job);
    let d = work(&config, &["--once"], &[], 1);
    let err = d.stderr_text();
    assert!(
        err.contains("secret_env = \"LW_TEST_UNSET_SECRET\": the environment variable is not set"),
        "the variable is named: {err}"
    );
    s.assert_state(QueueState::empty().ready([&job]).notify(1));
}

/// Subprocess and HTTP handlers in one config; the HTTP entry takes only
/// jobs from the queues it lists, the rest fall through to the next entry.
#[test]
fn mixed_transports_with_a_queue_restriction() {
    let s = Scene::new();
    let server = Server::start(|_| ok());
    let script = s.recording_script("h.sh", "exit 0");
    let config = s
        .config()
        .handler(
            Handler::url(&server.url("/q"))
                .matching("App\\Jobs\\*")
                .queues(&["high"]),
        )
        .command(&script)
        .write();
    let high = Job::laravel8("App\\Jobs\\Mail");
    let low = Job::laravel8("App\\Jobs\\Mail");
    let other = Job::laravel8("App\\Other\\Report");
    s.push_on("high", [&high, &other]);
    s.push(&low);

    run(
        &config,
        &["--queue=high,default", "--stop-when-empty", "--sleep=0"],
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one job went over HTTP");
    assert_eq!(requests[0].h("x-laravel-worker-job-id"), high.id());
    assert_eq!(requests[0].h("x-laravel-worker-queue"), "high");
    assert_eq!(
        s.log(),
        vec![other.line("run", 1, "high"), low.run_line(1)],
        "the rest ran through the script"
    );
    s.assert_state(QueueState::empty());
}

/// Every field of the call metadata (`handler::metadata::FIELDS`) reaches
/// every transport, in run and in failed mode: as an environment variable
/// of a process handler, a key of a persistent handler's request line and a
/// header of an HTTP request. Each job fails on its one try (so the failed
/// hook carries the exception field too).
#[test]
fn every_metadata_field_reaches_every_transport() {
    use laravel_worker::metadata::{FIELDS, Field};

    let s = Scene::new();
    let server = Server::start(|r| match r.mode() {
        "run" => status(500, "web says no"),
        _ => ok(),
    });
    // The process handler keeps its whole environment, NUL-separated.
    let process = s.script(
        "process.sh",
        "env -0 > \"$DIR/env.$LARAVEL_WORKER_MODE\"\n[ \"$LARAVEL_WORKER_MODE\" = failed ]",
    );
    // The persistent handler keeps each request line.
    let persistent = s.script(
        "persistent.sh",
        "while IFS= read -r line; do\n  printf '%s\\n' \"$line\" >> \"$DIR/requests\"\n  \
         call=$(printf '%s' \"$line\" | sed 's/.*\"call\":\\([0-9]*\\).*/\\1/')\n  \
         case \"$line\" in\n    *'\"mode\":\"run\"'*) echo \"{\\\"call\\\":$call,\\\"action\\\":\\\"exception\\\",\\\"message\\\":\\\"warm says no\\\"}\" >&3 ;;\n    \
         *) echo \"{\\\"call\\\":$call,\\\"action\\\":\\\"done\\\"}\" >&3 ;;\n  esac\ndone",
    );
    let config = s
        .config()
        .handler(Handler::command(&process).queues(&["proc"]))
        .handler(Handler::command(&persistent).queues(&["warm"]).persistent())
        .handler(Handler::url(&server.url("/q")).queues(&["web"]))
        .write();
    let jobs: Vec<(&str, Job)> = ["proc", "warm", "web"]
        .into_iter()
        .map(|queue| {
            let job = Job::laravel13(&format!("App\\Jobs\\On{queue}")).set("timeout", json!(45));
            s.push_on(queue, [&job]);
            (queue, job)
        })
        .collect();
    run(
        &config,
        &[
            "--queue=proc,warm,web",
            "--stop-when-empty",
            "--sleep=0",
            "--tries=1",
        ],
    );
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 3, "each job failed once: {rows:?}");

    // What each transport received, per mode, as (field -> JSON value).
    let env_of = |mode: &str| -> HashMap<String, String> {
        let raw = std::fs::read(s.path(&format!("env.{mode}")))
            .unwrap_or_else(|e| panic!("the process handler never ran in {mode} mode: {e}"));
        raw.split(|&b| b == 0)
            .filter_map(|kv| {
                String::from_utf8_lossy(kv)
                    .split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    };
    let lines: Vec<Value> = std::fs::read_to_string(s.path("requests"))
        .expect("the persistent handler got requests")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let requests = server.requests();
    for mode in ["run", "failed"] {
        let env = env_of(mode);
        let line = lines
            .iter()
            .find(|l| l["mode"] == mode)
            .unwrap_or_else(|| panic!("no {mode} request line in {lines:?}"));
        let request = requests
            .iter()
            .find(|r| r.mode() == mode)
            .unwrap_or_else(|| panic!("no {mode} HTTP request"));
        for (queue, job) in &jobs {
            let recorded = &rows
                .iter()
                .find(|r| r.uuid == job.uuid())
                .unwrap()
                .exception;
            let expected = |field: &Field| -> Option<Value> {
                Some(match field.key {
                    "mode" => json!(mode),
                    "id" => json!(job.id()),
                    "uuid" => json!(job.uuid()),
                    "name" => json!(format!("App\\Jobs\\On{queue}")),
                    "queue" => json!(queue),
                    "connection" => json!("redis"),
                    "attempt" => json!(1),
                    "max_tries" => json!(1),
                    "timeout" => json!(45),
                    "exception" if mode == "run" => return None,
                    "exception" => json!(recorded),
                    // In no batch: not sent.
                    "batch_cancelled" => return None,
                    other => panic!("a new metadata field {other:?}: give its expected value here"),
                })
            };
            let as_text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
            for field in &FIELDS {
                let want = expected(field);
                let got = match *queue {
                    "proc" => env.get(field.env).map(|v| json!(v)),
                    "warm" => line.get(field.key).cloned(),
                    _ => request.header(field.header).map(|v| {
                        json!(if field.key == "exception" {
                            percent_encoding::percent_decode_str(v)
                                .decode_utf8()
                                .unwrap()
                                .into_owned()
                        } else {
                            v.to_string()
                        })
                    }),
                };
                let (want, got) = match *queue {
                    // The environment and headers carry text.
                    "proc" | "web" => (want.as_ref().map(as_text), got.as_ref().map(as_text)),
                    _ => (want.map(|v| v.to_string()), got.map(|v| v.to_string())),
                };
                assert_eq!(
                    got, want,
                    "{mode} mode, {queue} transport, field {:?}",
                    field.key
                );
            }
        }
    }
}
