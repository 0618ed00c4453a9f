//! HTTP handlers (`url = ...`) against a real HTTP/1.1 server on
//! 127.0.0.1, started by each test: the real daemon binary POSTs real jobs
//! over real sockets. Each test asserts the Redis state and failed_jobs
//! afterwards.
//!
//! The server is a small std `TcpListener` one written here rather than a
//! framework: a test needs to count accepted connections (keep-alive), hold
//! a request without answering (timeouts), and see the request bytes
//! exactly as sent (signatures), which is simplest with nothing in between.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::payloads::Job;
use common::{Daemon, Scene, now, q};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    /// Lower-cased names.
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// Which accepted connection carried it (from 1).
    connection: usize,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    fn h(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn mode(&self) -> &str {
        self.h("x-laravel-worker-mode")
    }

    fn name(&self) -> &str {
        self.h("x-laravel-worker-job-name")
    }
}

/// What the server does with a request.
enum Reply {
    /// Answer with this status, extra headers and body.
    Send(u16, Vec<(&'static str, String)>, String),
    /// Never answer; wait until the client closes the connection.
    Hang,
}

fn ok() -> Reply {
    Reply::Send(200, vec![], String::new())
}

fn status(code: u16, body: &str) -> Reply {
    Reply::Send(code, vec![], body.to_string())
}

type Script = dyn Fn(&Request) -> Reply + Send + Sync;

struct Server {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Starts a server answering each request with `script`.
    fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        {
            let (requests, connections, stop) =
                (requests.clone(), connections.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let id = connections.fetch_add(1, Ordering::SeqCst) + 1;
                    let (requests, script) = (requests.clone(), script.clone());
                    std::thread::spawn(move || serve(stream, id, &requests, &*script));
                }
            });
        }
        Server {
            addr,
            requests,
            connections,
            stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Serves one connection: requests one after another (keep-alive) until
/// the client closes it.
fn serve(stream: TcpStream, connection: usize, log: &Mutex<Vec<Request>>, script: &Script) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        let length: usize = headers
            .get("content-length")
            .map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Request {
            method,
            path,
            headers,
            body,
            connection,
        };
        let reply = script(&request);
        log.lock().unwrap().push(request);
        match reply {
            Reply::Send(code, extra, body) => {
                let mut head = format!(
                    "HTTP/1.1 {code} Status\r\nContent-Length: {}\r\n",
                    body.len()
                );
                for (name, value) in extra {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                if writer.write_all(head.as_bytes()).is_err()
                    || writer.write_all(body.as_bytes()).is_err()
                {
                    return;
                }
            }
            Reply::Hang => {
                // Until the client gives up and closes the connection.
                let mut sink = [0u8; 1024];
                while reader.read(&mut sink).unwrap_or(0) > 0 {}
                return;
            }
        }
    }
}

/// A config with a SQLite failed store and `handlers` (TOML text).
fn config(s: &Scene, handlers: &str) -> std::path::PathBuf {
    let db = s.failed_db();
    s.config(&format!("[failed]\nurl = \"{db}\"\n\n{handlers}"))
}

/// One `[[handlers]]` entry matching everything, POSTing to `url`.
fn http_handler(url: &str, extra: &str) -> String {
    format!("[[handlers]]\nmatch = \"*\"\nurl = \"{url}\"\n{extra}\n")
}

/// Runs `work ARGS` with `env` until the daemon exits.
fn work(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend_from_slice(args);
    let mut env = env.to_vec();
    // An HTTP proxy from the environment must not sit between the daemon
    // and the test server.
    env.push(("NO_PROXY", "*"));
    let mut d = Daemon::start(&all, &env);
    d.wait_exit();
    d
}

fn delayed(s: &Scene) -> Vec<(String, i64)> {
    s.redis.zrange(&format!("{}:delayed", q("default")))
}

fn assert_near(score: i64, expected: i64) {
    assert!(
        (score - expected).abs() <= 2,
        "score {score}, expected {expected}"
    );
}

fn assert_no_keys(s: &Scene) {
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
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
    let config = config(&s, &http_handler(&server.url("/_queue"), ""));
    let first = Job::laravel13("App\\Jobs\\Empty")
        .set("maxTries", json!(3))
        .set("timeout", json!(40));
    s.redis.push("default", &first.build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Text").build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Json").build());

    let mut d = work(&config, &["--stop-when-empty", "--sleep=0", "--json"], &[]);
    assert_eq!(d.code(), Some(0));
    let done: Vec<_> = d
        .events()
        .into_iter()
        .filter(|e| e["status"] == "success")
        .collect();
    assert_eq!(done.len(), 3, "{:?}", d.stdout);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let r = &requests[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/_queue"));
    assert_eq!(r.h("content-type"), "application/json");
    let mut expected: Value = serde_json::from_str(&first.build()).unwrap();
    expected["attempts"] = json!(1);
    assert_eq!(r.json(), expected, "the body is the reserved payload");
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
        assert!(r.header("authorization").is_none());
        assert!(r.header("x-laravel-worker-signature").is_none());
        assert!(r.header("x-laravel-worker-exception").is_none());
    }
    assert_no_keys(&s);
    assert!(s.failed_rows().is_empty());
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
    let config = config(&s, &http_handler(&server.url("/q"), ""));
    let later = Job::laravel8("App\\Jobs\\Later");
    let bad = Job::laravel8("App\\Jobs\\Bad");
    s.redis.push("default", &later.build());
    s.redis.push("default", &bad.build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Gone").build());

    let mut d = work(
        &config,
        &["--stop-when-empty", "--sleep=0", "--tries=3"],
        &[],
    );
    assert_eq!(d.code(), Some(0));

    let delayed = delayed(&s);
    assert_eq!(delayed.len(), 1);
    let member: Value = serde_json::from_str(&delayed[0].0).unwrap();
    assert_eq!(
        (member["uuid"].as_str(), member["attempts"].as_i64()),
        (Some(later.uuid().as_str()), Some(1))
    );
    assert_near(delayed[0].1, now() + 30);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);

    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, bad.uuid());
    assert!(
        rows[0]
            .exception
            .starts_with("Illuminate\\Queue\\ManuallyFailedException: bad input"),
        "{}",
        rows[0].exception
    );
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
    let config = config(&s, &http_handler(&server.url("/q"), ""));
    let seconds = Job::laravel8("App\\Jobs\\Seconds");
    let date = Job::laravel8("App\\Jobs\\Date");
    let bare = Job::laravel8("App\\Jobs\\Bare");
    for job in [&seconds, &date, &bare] {
        s.redis.push("default", &job.build());
    }

    let mut d = work(
        &config,
        &[
            "--stop-when-empty",
            "--sleep=0",
            "--tries=3",
            "--backoff=7",
            "--json",
        ],
        &[],
    );
    assert_eq!(d.code(), Some(0));
    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .expect("the bare 503 is an exception");
    assert_eq!(released["id"], bare.id());
    assert!(
        released["message"].as_str().unwrap().contains("HTTP 503"),
        "{released}"
    );

    let by_uuid: HashMap<String, (Value, i64)> = delayed(&s)
        .into_iter()
        .map(|(m, score)| {
            let v: Value = serde_json::from_str(&m).unwrap();
            (v["uuid"].as_str().unwrap().to_string(), (v, score))
        })
        .collect();
    assert_eq!(by_uuid.len(), 3);
    for (job, delay) in [(&seconds, 120), (&date, 300), (&bare, 7)] {
        let (member, score) = &by_uuid[&job.uuid()];
        assert_eq!(member["attempts"], 1);
        assert_near(*score, now() + delay);
    }
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert!(s.failed_rows().is_empty());
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
    let config = config(&s, &http_handler(&server.url("/q"), ""));
    let missing = Job::laravel8("App\\Jobs\\Missing");
    let invalid = Job::laravel8("App\\Jobs\\Invalid");
    s.redis.push("default", &missing.build());
    s.redis.push("default", &invalid.build());

    let mut d = work(
        &config,
        &["--stop-when-empty", "--sleep=0", "--tries=5"],
        &[],
    );
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].uuid, missing.uuid());
    assert!(
        rows[0].exception.starts_with(&format!(
            "Illuminate\\Queue\\ManuallyFailedException: HTTP 404 Not Found from {}: no such route",
            server.url("/q")
        )),
        "{}",
        rows[0].exception
    );
    assert_eq!(rows[1].uuid, invalid.uuid());
    assert!(rows[1].exception.contains("HTTP 422 Unprocessable Entity"));
    assert!(rows[1].exception.contains("start xxx"));
    assert!(
        rows[1].exception.len() < 2048,
        "{}",
        rows[1].exception.len()
    );
    assert_eq!(rows[1].payload, invalid.build());
    assert_eq!(server.requests().len(), 2, "no retry, no failed-mode call");
    assert_no_keys(&s);
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
    let config = config(&s, &http_handler(&server.url("/q"), ""));
    let job = Job::laravel8("App\\Jobs\\Flaky");
    s.redis.push("default", &job.build());

    let args = ["--once", "--tries=2", "--backoff=5"];
    let mut d = work(&config, &args, &[]);
    assert_eq!(d.code(), Some(0));
    let delayed = delayed(&s);
    assert_eq!(delayed.len(), 1);
    assert!(delayed[0].0.contains(r#""attempts":1"#), "{}", delayed[0].0);
    assert_near(delayed[0].1, now() + 5);
    assert!(s.failed_rows().is_empty());

    s.redis.make_due(&format!("{}:delayed", q("default")));
    let mut d = work(&config, &args, &[]);
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert!(
        rows[0].exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky: HTTP 500 Internal Server Error"
        ),
        "{}",
        rows[0].exception
    );
    assert!(rows[0].exception.contains("Its body began with:\nboom"));
    assert_no_keys(&s);

    let requests = server.requests();
    let modes: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.mode(), r.h("x-laravel-worker-attempt")))
        .collect();
    assert_eq!(modes, [("run", "1"), ("run", "2"), ("failed", "2")]);
    let failed = &requests[2];
    let exception = failed.h("x-laravel-worker-exception");
    assert!(!exception.contains(' '), "percent-encoded: {exception}");
    assert!(
        rows[0].exception.starts_with(
            percent_encoding::percent_decode_str(exception)
                .decode_utf8()
                .unwrap()
                .as_ref()
        ),
        "the header carries the start of the recorded text: {exception}"
    );
    assert_eq!(failed.json()["uuid"], job.uuid());
    assert_eq!(failed.json()["attempts"], 2);
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
    let config = config(&s, &http_handler(&server.url("/q"), "timeout = 30"));
    let slow = Job::laravel8("App\\Jobs\\Slow")
        .set("timeout", json!(1))
        .set("failOnTimeout", json!(true));
    let next = Job::laravel8("App\\Jobs\\Next");
    s.redis.push("default", &slow.build());
    s.redis.push("default", &next.build());

    let mut d = work(
        &config,
        &["--stop-when-empty", "--sleep=0", "--tries=3", "--json"],
        &[],
    );
    assert_eq!(d.code(), Some(0));
    let statuses: Vec<(String, String)> = d
        .events()
        .iter()
        .filter(|e| e["status"] != "starting")
        .map(|e| {
            (
                e["id"].as_str().unwrap().into(),
                e["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (slow.id(), "failed".to_string()),
            (next.id(), "success".to_string())
        ]
    );
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].exception.starts_with(
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Slow has timed out."
        ),
        "{}",
        rows[0].exception
    );
    assert!(rows[0].exception.contains("no complete answer within 1 s"));
    let calls: Vec<(String, String, String)> = server
        .requests()
        .iter()
        .map(|r| {
            (
                r.name().into(),
                r.mode().into(),
                r.h("x-laravel-worker-timeout").into(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("App\\Jobs\\Slow".into(), "run".into(), "1".into()),
            ("App\\Jobs\\Slow".into(), "failed".into(), "1".into()),
            ("App\\Jobs\\Next".into(), "run".into(), "30".into()),
        ]
    );
    assert_no_keys(&s);
}

/// Nothing listening: an exception (released with backoff), then failed on
/// the last try with the cause.
#[test]
fn connection_refused_is_an_exception() {
    let s = Scene::new();
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/q");
    let config = config(&s, &http_handler(&url, "connect_timeout = 2"));
    let job = Job::laravel8("App\\Jobs\\Nowhere");
    s.redis.push("default", &job.build());

    let args = ["--once", "--tries=2", "--backoff=3", "--json"];
    let mut d = work(&config, &args, &[]);
    assert_eq!(d.code(), Some(0));
    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .unwrap();
    assert!(
        released["message"]
            .as_str()
            .unwrap()
            .contains("HTTP request failed"),
        "{released}"
    );
    let delayed = delayed(&s);
    assert_eq!(delayed.len(), 1);
    assert_near(delayed[0].1, now() + 3);

    s.redis.make_due(&format!("{}:delayed", q("default")));
    let mut d = work(&config, &args, &[]);
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Nowhere: the HTTP request failed"
        ),
        "{}",
        rows[0].exception
    );
    assert!(
        rows[0].exception.contains("Connection refused"),
        "{}",
        rows[0].exception
    );
    assert_no_keys(&s);
}

/// Jobs one after another share one kept-alive TCP connection.
#[test]
fn keep_alive_reuses_one_connection() {
    let s = Scene::new();
    let server = Server::start(|_| ok());
    let config = config(&s, &http_handler(&server.url("/q"), ""));
    for i in 0..5 {
        s.redis.push(
            "default",
            &Job::string("App\\Jobs\\Ping@handle", json!({"i": i})).build(),
        );
    }
    let mut d = work(&config, &["--stop-when-empty", "--sleep=0"], &[]);
    assert_eq!(d.code(), Some(0));
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let order: Vec<i64> = requests
        .iter()
        .map(|r| r.json()["data"]["i"].as_i64().unwrap())
        .collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
    assert!(requests.iter().all(|r| r.connection == 1));
    assert_eq!(server.connections(), 1);
    assert_no_keys(&s);
    assert!(s.failed_rows().is_empty());
}

const SECRET: &str = "s3cr3t-signing-key-8f2a";
const TOKEN: &str = "t0ken-bearer-77c1";

/// The headers a signature covers, in order: the timestamp, then every
/// metadata header (`handler::metadata::FIELDS`).
fn signed_headers() -> Vec<&'static str> {
    std::iter::once("x-laravel-worker-timestamp")
        .chain(
            laravel_worker::handler::metadata::FIELDS
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

/// The README's code block that starts with `first` (up to its closing
/// fence), so the tests run the verification code the README shows.
fn readme_block(first: &str) -> String {
    let readme = include_str!("../README.md");
    let start = readme
        .find(first)
        .unwrap_or_else(|| panic!("the README has no code starting {first:?}"));
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

/// The README's PHP check (from the Laravel route), run by PHP on the
/// request as received, with `$request`, `config()` and `abort_unless()`
/// standing in for Laravel's.
fn php_verifies(s: &Scene, r: &Request, secret: &str) -> bool {
    let route = readme_block("Route::post('/_queue'");
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
        .expect("php must be installed (apt-get install php-cli)");
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "the README's PHP check did not decide: {status}"
    );
    status.success()
}

/// The README's Python check, run by Python on the request as received;
/// `None` (with a note) when python3 is not installed.
fn python_verifies(s: &Scene, r: &Request, secret: &str) -> Option<bool> {
    let check = readme_block("import hashlib, hmac, time");
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
                "the README's Python check failed to run: {status}"
            );
            Some(status.success())
        }
        Err(e) => {
            eprintln!("note: skipping the README's Python check: python3 cannot run ({e})");
            None
        }
    }
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
    let handler = http_handler(
        &server.url("/q"),
        "token_env = \"QUEUE_TOKEN\"\nsecret_env = \"QUEUE_SECRET\"",
    );
    let config = config(&s, &handler);
    let good = Job::laravel13("App\\Jobs\\Signed");
    s.redis.push("default", &good.build());
    let env = [
        ("QUEUE_TOKEN", TOKEN),
        ("QUEUE_SECRET", SECRET),
        ("RUST_LOG", "trace"),
    ];
    let mut d = work(&config, &["--once"], &env);
    assert_eq!(d.code(), Some(0));
    assert_no_keys(&s);
    assert!(
        s.failed_rows().is_empty(),
        "the server accepted the signature"
    );
    let r = &server.requests()[0];
    assert!(php_verifies(&s, r, SECRET), "PHP's hash_hmac agrees");
    assert!(!php_verifies(&s, r, "another key"));
    assert_ne!(
        python_verifies(&s, r, SECRET),
        Some(false),
        "Python's hmac agrees"
    );
    assert_ne!(python_verifies(&s, r, "another key"), Some(true));
    let logs = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    // The HTTP client's own trace lines and ours are in the output.
    assert!(
        logs.contains("TRACE") && logs.contains("HTTP handler answered"),
        "trace logging is on: {logs}"
    );
    assert!(
        !logs.contains(TOKEN) && !logs.contains(SECRET),
        "a secret leaked"
    );

    // A wrong key: 401, the job fails at once.
    let bad = Job::laravel8("App\\Jobs\\Forged");
    s.redis.push("default", &bad.build());
    let env = [
        ("QUEUE_TOKEN", TOKEN),
        ("QUEUE_SECRET", "wrong-key-0000"),
        ("RUST_LOG", "debug"),
    ];
    let mut d = work(&config, &["--once", "--tries=3"], &env);
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, bad.uuid());
    assert!(
        rows[0].exception.contains("HTTP 401 Unauthorized"),
        "{}",
        rows[0].exception
    );
    assert!(!rows[0].exception.contains("wrong-key-0000") && !rows[0].exception.contains(TOKEN));
    let logs = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    assert!(
        !logs.contains("wrong-key-0000") && !logs.contains(TOKEN),
        "a secret leaked"
    );
    assert_no_keys(&s);
}

/// The signature covers every header the endpoint acts on: a captured
/// request (run or failed mode) with any signed header changed (a `run`
/// replayed as `failed`, another attempt, job id, queue, timestamp...)
/// verifies neither in Rust nor with the README's PHP and Python checks.
#[test]
fn a_signed_request_with_any_header_changed_does_not_verify() {
    let s = Scene::new();
    let server = Server::start(|r| match r.mode() {
        "run" => status(500, "no"),
        _ => ok(),
    });
    let handler = http_handler(&server.url("/q"), "secret_env = \"QUEUE_SECRET\"");
    let config = config(&s, &handler);
    s.redis
        .push("default", &Job::laravel13("App\\Jobs\\Signed").build());
    let mut d = work(
        &config,
        &["--once", "--tries=1"],
        &[("QUEUE_SECRET", SECRET)],
    );
    assert_eq!(d.code(), Some(0), "{}", d.stderr.join("\n"));
    let requests = server.requests();
    let modes: Vec<&str> = requests.iter().map(Request::mode).collect();
    assert_eq!(modes, ["run", "failed"]);
    for r in &requests {
        assert!(verify(r, SECRET), "{} request verifies as sent", r.mode());
        assert!(php_verifies(&s, r, SECRET), "{} request, PHP", r.mode());
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
            assert!(!php_verifies(&s, &forged, SECRET), "{what}: PHP");
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
    let config = config(
        &s,
        &http_handler(
            "http://127.0.0.1:9/q",
            "secret_env = \"LW_TEST_UNSET_SECRET\"",
        ),
    );
    let job = Job::laravel8("App\\Jobs\\Waiting");
    s.redis.push("default", &job.build());
    let mut d = work(&config, &["--once"], &[]);
    assert_eq!(d.code(), Some(1));
    let err = d.stderr.join("\n");
    assert!(
        err.contains("secret_env = \"LW_TEST_UNSET_SECRET\": the environment variable is not set"),
        "{err}"
    );
    assert_eq!(s.redis.lrange(&q("default")), vec![job.build()]);
    assert!(s.failed_rows().is_empty());
}

/// Subprocess and HTTP handlers in one config; the HTTP entry takes only
/// jobs from the queues it lists, the rest fall through to the next entry.
#[test]
fn mixed_transports_with_a_queue_restriction() {
    let s = Scene::new();
    let server = Server::start(|_| ok());
    let script = s.recording_script("h.sh", "exit 0");
    let handlers = format!(
        "[[handlers]]\nmatch = \"App\\\\Jobs\\\\*\"\nurl = \"{}\"\nqueues = [\"high\"]\n\n\
         [[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        server.url("/q"),
        script.display()
    );
    let config = config(&s, &handlers);
    let high = Job::laravel8("App\\Jobs\\Mail");
    let low = Job::laravel8("App\\Jobs\\Mail");
    let other = Job::laravel8("App\\Other\\Report");
    s.redis.push("high", &high.build());
    s.redis.push("high", &other.build());
    s.redis.push("default", &low.build());

    let mut d = work(
        &config,
        &["--queue=high,default", "--stop-when-empty", "--sleep=0"],
        &[],
    );
    assert_eq!(d.code(), Some(0));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].h("x-laravel-worker-job-id"), high.id());
    assert_eq!(requests[0].h("x-laravel-worker-queue"), "high");
    assert_eq!(
        s.log(),
        vec![
            format!("run App\\Other\\Report {} 1 high", other.id()),
            format!("run App\\Jobs\\Mail {} 1 default", low.id()),
        ]
    );
    assert_no_keys(&s);
    assert!(s.failed_rows().is_empty());
}

/// Every field of the call metadata (`handler::metadata::FIELDS`) reaches
/// every transport, in run and in failed mode: as an environment variable
/// of a process handler, a key of a persistent handler's request line and a
/// header of an HTTP request. Each job fails on its one try (so the failed
/// hook carries the exception field too).
#[test]
fn every_metadata_field_reaches_every_transport() {
    use laravel_worker::handler::metadata::{FIELDS, Field};

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
    let handlers = format!(
        "[[handlers]]\nmatch = \"*\"\nqueues = [\"proc\"]\ncommand = [\"{}\"]\n\n\
         [[handlers]]\nmatch = \"*\"\nqueues = [\"warm\"]\ncommand = [\"{}\"]\nmode = \"persistent\"\n\n\
         {}",
        process.display(),
        persistent.display(),
        http_handler(&server.url("/q"), "queues = [\"web\"]"),
    );
    let config = config(&s, &handlers);
    let jobs: Vec<(&str, Job)> = ["proc", "warm", "web"]
        .into_iter()
        .map(|queue| {
            let job = Job::laravel13(&format!("App\\Jobs\\On{queue}")).set("timeout", json!(45));
            s.redis.push(queue, &job.build());
            (queue, job)
        })
        .collect();
    let mut d = work(
        &config,
        &[
            "--queue=proc,warm,web",
            "--stop-when-empty",
            "--sleep=0",
            "--tries=1",
        ],
        &[],
    );
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
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
