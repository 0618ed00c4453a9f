//! Clean exits and bounds (issue 22, item 7), each on real processes: a
//! closed stdout pipe, `demo` stopped by a signal, `push --delay` past the
//! bound, Laravel's `.env` words for the password and prefix, config keys
//! that cannot mean what they say, a 1 MB value in a log line, and a
//! service on the Redis port that is not Redis.

use crate::common;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{Daemon, Job, Scene};
use nix::sys::signal::Signal;

/// Runs `laravel-worker --config CONFIG ARGS` with its stdout on a pipe
/// whose reader is already gone; (exit code, stderr).
fn into_closed_pipe(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_laravel-worker"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn monitor_and_failed_on_a_closed_pipe_exit_quietly() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").write();
    s.push_on("default", &Job::named(["A"]));
    for (args, code) in [
        (&["monitor", "default"][..], 0),
        (&["monitor", "default", "--max=1"], 3),
        (&["monitor", "default", "--json"], 0),
        (&["failed"], 0),
        (&["failed", "--json"], 0),
    ] {
        let (status, stderr) = into_closed_pipe(&config, args);
        assert_eq!(status, Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The demo's `redis-server`, through a shim on the `PATH` that records
/// its pid and waits for the test's `go` file before it becomes the real
/// server (so the signal arrives while the demo runs, whatever the
/// machine's speed).
fn gated_redis_server(s: &Scene) -> Option<std::path::PathBuf> {
    let real = common::skip::which("redis-server")?;
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let shim = s.script(
        "bin/redis-server",
        &format!(
            "echo $$ > \"$DIR/redis.pid\"\nfor a in \"$@\"; do echo \"$a\"; done > \"$DIR/redis.args\"\n\
             while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done\nexec '{}' \"$@\"",
            real.display()
        ),
    );
    Some(shim.parent().unwrap().to_path_buf())
}

/// `demo --driver redis` stopped by SIGINT or SIGTERM leaves no `redis-server` running
/// and no temporary directory behind.
#[test]
fn a_stopped_demo_leaves_no_redis_server_nor_directory() {
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let s = Scene::new();
        if !common::skip::have("redis-server", "the demo test needs redis-server") {
            return;
        }
        let Some(bin) = gated_redis_server(&s) else {
            return;
        };
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let mut d = Daemon::start(&["demo", "--driver", "redis"], &[("PATH", &path)]);
        s.wait_for_file("redis.pid");
        d.signal(signal);
        std::fs::write(s.path("go"), "").unwrap();
        d.expect_exit(code);
        let pid = s.read_pid("redis.pid");
        common::wait_until("redis-server to be gone", || {
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| stat.contains(") Z "))
        });
        let args = s.read("redis.args");
        let dir = args
            .lines()
            .skip_while(|a| *a != "--dir")
            .nth(1)
            .expect("the demo's --dir");
        assert!(!Path::new(dir).exists(), "{dir} is left behind");
    }
}

#[test]
fn push_refuses_a_delay_past_the_bound() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").write();
    let mut d = Daemon::cli(
        &config,
        &[
            "push",
            "default",
            "--job",
            "App\\Jobs\\A",
            "--delay",
            "18446744073709551615",
        ],
    );
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("--delay must be a number of seconds from 0 to 2147483647"),
        "{log}"
    );
    assert!(s.redis.keys(0).is_empty(), "{:?}", s.redis.keys(0));
}

/// `REDIS_PASSWORD=false` is no password and `REDIS_PREFIX=null` no prefix,
/// as Laravel's `env()` and Redis connectors read them.
#[test]
fn false_password_and_null_prefix_follow_laravel() {
    let s = Scene::new();
    let config = s
        .config()
        .settings_from_app()
        .failed_driver("null")
        .recording("exit 0")
        .write();
    let _: () = s
        .redis
        .cmd(&["RPUSH", "queues:default", &Job::named(["A"])[0].build()]);
    let socket = s.redis.socket.to_str().unwrap();
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend(["work", "--stop-when-empty", "--sleep=0"]);
    let mut d = Daemon::start(
        &all,
        &[
            ("REDIS_HOST", socket),
            ("REDIS_PORT", "0"),
            ("REDIS_PASSWORD", "false"),
            ("REDIS_PREFIX", "null"),
            ("APP_NAME", "Shop"),
        ],
    );
    d.expect_exit(0);
    assert_eq!(s.log().len(), 1, "{}", d.stderr_text());
    assert!(d.stderr_text().contains("first_key=queues:default"));
}

/// `REDIS_PASSWORD=true` authenticates with `1`, as phpredis sends PHP's
/// `true` (Laravel's `env()` turns the word into the boolean), not with the
/// word `true`.
#[test]
fn a_true_password_is_sent_as_php_sends_it() {
    let s = Scene::new();
    let config = s
        .config()
        .settings_from_app()
        .failed_driver("null")
        .recording("exit 0")
        .write();
    let _: () = s.redis.cmd(&[
        "RPUSH",
        "laravel-database-queues:default",
        &Job::named(["A"])[0].build(),
    ]);
    let _: () = s.redis.cmd(&["CONFIG", "SET", "requirepass", "1"]);
    let socket = s.redis.socket.to_str().unwrap();
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend(["work", "--stop-when-empty", "--sleep=0"]);
    let env = [
        ("REDIS_HOST", socket),
        ("REDIS_PORT", "0"),
        ("REDIS_PASSWORD", "true"),
        ("REDIS_DB", "0"),
    ];
    let mut d = Daemon::start(&all, &env);
    d.expect_exit(0);
    assert_eq!(s.log().len(), 1, "{}", d.stderr_text());
}

/// Keys that cannot mean what they say are refused at load, named.
#[test]
fn keys_that_cannot_work_are_refused_by_name() {
    let s = Scene::new();
    let persistent = |h: common::Handler| h.persistent().processes(0);
    let big = "a".repeat(1 << 20);
    for (config, expected) in [
        (
            s.config().recording("exit 0").tune(persistent),
            "processes = 0",
        ),
        (
            s.config().recording("exit 0").set("redis", "service", ""),
            "[redis] service = \"\"",
        ),
        (
            s.config()
                .recording("exit 0")
                .set("redis", "service", "mymaster")
                .set("redis", "sentinels", Vec::<String>::new()),
            "[redis] sentinels = [] with [redis] service",
        ),
        (
            s.config()
                .recording("exit 0")
                .set("redis", "service", "mymaster")
                .set("redis", "sentinels", vec![format!("{big}:x")]),
            "invalid [redis] sentinels entry",
        ),
    ] {
        let mut d = s.work_until_exit(&config.write(), &["--stop-when-empty"]);
        d.expect_exit(1);
        let log = d.stderr_text();
        assert!(
            log.contains(expected),
            "{expected}: {}",
            &log[..log.len().min(2000)]
        );
        // A 1 MB value is cut in the log line.
        assert!(
            log.len() < 40 * 1024,
            "{expected}: {} bytes of log",
            log.len()
        );
    }
}

/// A real HTTP server (Python's `http.server`) on port 0; its port and the
/// process, killed when dropped.
struct PythonHttp(std::process::Child, u16);

impl PythonHttp {
    fn start() -> Option<Self> {
        if !common::skip::have("python3", "an HTTP server on the Redis port") {
            return None;
        }
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        let port = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Some(PythonHttp(child, port))
    }
}

impl Drop for PythonHttp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP server, and a TCP server that writes garbage, on the Redis
/// port: a clear message at once, not five retries of a parse error.
#[test]
fn a_service_that_is_not_redis_is_named_at_start() {
    let Some(http) = PythonHttp::start() else {
        return;
    };
    let garbage = TcpListener::bind("127.0.0.1:0").unwrap();
    let garbage_url = format!("redis://{}", garbage.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in garbage.incoming().flatten() {
            let _ = stream.write_all(b"\x00\x01garbage\xff\r\n");
        }
    });
    let s = Scene::new();
    for url in [format!("redis://127.0.0.1:{}", http.1), garbage_url] {
        let config = s
            .config()
            .recording("exit 0")
            .set("redis", "url", url.as_str());
        let mut d = s.work_until_exit(&config.write(), &["--stop-when-empty"]);
        d.expect_exit(1);
        let log = d.stderr_text();
        assert!(log.contains("not in the Redis protocol"), "{url}: {log}");
        assert!(!log.contains("attempt=2"), "{url}: retried:\n{log}");
    }
}

/// A negative number or a bad `--backoff` entry on `work`'s command line
/// exits 1 with a message naming the flag, as the book says (before:
/// clap's "unexpected argument '-1'" and exit 2, and `--backoff 1,-2` was
/// taken); an empty queue name or `--job` on `push` is refused and
/// nothing is pushed.
#[test]
fn bad_numbers_and_empty_names_on_the_command_line_exit_1_naming_the_flag() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").write();
    let cases: [(&[&str], &str); 6] = [
        (&["work", "--sleep", "-1"], "--sleep"),
        (&["work", "--tries", "-1"], "--tries"),
        (&["work", "--backoff", "1,-2"], "--backoff"),
        (&["work", "--backoff", "-1"], "--backoff"),
        (
            &["push", "", "--job", "App\\Jobs\\A"],
            "queue name is empty",
        ),
        (&["push", "default", "--job", ""], "--job is empty"),
    ];
    for (args, named) in cases {
        let mut d = Daemon::cli(&config, args);
        d.expect_exit(1);
        let text = format!("{}\n{}", d.stdout.join("\n"), d.stderr_text());
        assert!(text.contains(named), "{args:?} names {named}: {text}");
    }
    assert!(s.redis.keys(0).is_empty(), "{:?}", s.redis.keys(0));
}
