//! systemd's notification protocol (`Type=notify`), seen from systemd's
//! side: the test binds the notification socket itself (a real unix
//! datagram socket in a temporary directory), runs the real binary with
//! `NOTIFY_SOCKET` and `WATCHDOG_USEC` as systemd would set them, and reads
//! what arrives: `READY=1`, `WATCHDOG=1` on time through long idle waits
//! and long jobs, `STATUS=` as jobs start and end, `STOPPING=1` when the
//! drain starts.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use common::{Daemon, Job, Scene, WAIT};
use nix::sys::signal::Signal;

/// The watchdog period the tests give the worker: pings are due every
/// 3 s, and systemd would kill it after 6 s without one (wide enough for
/// a loaded CI machine; the waits under test last 30 s).
const WATCHDOG_USEC: u64 = 6_000_000;

/// One notification datagram: its arrival time and its `KEY=value` lines.
#[derive(Debug, Clone)]
struct Message {
    at: Instant,
    lines: Vec<String>,
}

impl Message {
    fn has(&self, line: &str) -> bool {
        self.lines.iter().any(|l| l == line)
    }

    fn status(&self) -> Option<&str> {
        self.lines.iter().find_map(|l| l.strip_prefix("STATUS="))
    }
}

/// The socket systemd would listen on. A thread receives every datagram
/// as it arrives and stamps it, so the times are right even while the test
/// is busy elsewhere.
struct NotifySocket {
    rx: Receiver<Message>,
    /// Every message taken from `rx` so far, in order.
    seen: Vec<Message>,
}

impl NotifySocket {
    fn bind(path: &Path) -> Self {
        let socket = UnixDatagram::bind(path).unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                let at = Instant::now();
                let text = String::from_utf8_lossy(&buf[..n]);
                let lines = text.lines().map(str::to_string).collect();
                if tx.send(Message { at, lines }).is_err() {
                    break;
                }
            }
        });
        NotifySocket {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits for the next datagram (at most [`WAIT`]).
    fn next(&mut self) -> Message {
        let message = self
            .rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no notification in time ({e}); saw {:?}", self.seen));
        self.seen.push(message.clone());
        message
    }

    /// Waits for a datagram matching `pred`, skipping others.
    fn until(&mut self, pred: impl Fn(&Message) -> bool) -> Message {
        loop {
            let m = self.next();
            if pred(&m) {
                return m;
            }
        }
    }

    /// Waits for `n` more `WATCHDOG=1` pings.
    fn watchdog_pings(&mut self, n: usize) {
        for _ in 0..n {
            self.until(|m| m.has("WATCHDOG=1"));
        }
    }

    /// Every message, after the worker has exited.
    fn all(&mut self) -> Vec<Message> {
        // The worker has exited: whatever it sent is in the socket already;
        // give the reader thread a moment to hand it over.
        while let Ok(m) = self.rx.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(m);
        }
        self.seen.clone()
    }
}

/// The longest time between READY and the first ping, between two pings,
/// and between the last ping and `end`: what systemd's watchdog measures.
fn longest_watchdog_gap(all: &[Message], end: Instant) -> Duration {
    let mut times: Vec<Instant> = all
        .iter()
        .filter(|m| m.has("READY=1") || m.has("WATCHDOG=1"))
        .map(|m| m.at)
        .collect();
    times.push(end);
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Starts `work` with the notification environment `env`.
fn work(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend_from_slice(args);
    Daemon::start(&all, env)
}

/// A handler that marks its call `started.N` (N = 0, 1, ...) and runs
/// until the test creates `go.N`.
fn gated_handler(s: &Scene) -> std::path::PathBuf {
    s.script(
        "gated.sh",
        "n=$(ls \"$DIR\" | grep -c '^started\\.')\n\
         touch \"$DIR/started.$n\"\n\
         while [ ! -f \"$DIR/go.$n\" ]; do sleep 0.01; done",
    )
}

/// The environment systemd gives a `Type=notify` unit with `WatchdogSec=`.
fn systemd_env(socket: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("NOTIFY_SOCKET", socket.to_str().unwrap().to_string()),
        ("WATCHDOG_USEC", WATCHDOG_USEC.to_string()),
    ]
}

fn as_env<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn ready_watchdog_status_and_stopping_in_order() {
    let s = Scene::new();
    let socket_path = s.path("notify.sock");
    let mut systemd = NotifySocket::bind(&socket_path);
    // Idle waits are a 30 s BLPOP (a push wakes it at once); a job is held
    // open for several watchdog periods: neither may starve the pings.
    let config = s.config().command(&gated_handler(&s)).block_for(30).write();
    let env = systemd_env(&socket_path);
    let mut d = work(&config, &[], &as_env(&env));

    // READY comes first, with the first status.
    let ready = systemd.next();
    assert!(ready.has("READY=1"), "{ready:?}");
    assert_eq!(ready.status(), Some("0 in flight, 0 processed"));
    systemd.watchdog_pings(3);

    // A job starts: the status says so; it runs for several periods.
    s.push(&Job::laravel8("App\\Jobs\\Long"));
    let busy = systemd.until(|m| m.status().is_some());
    assert_eq!(busy.status(), Some("1 in flight, 0 processed"));
    s.wait_for_file("started.0");
    systemd.watchdog_pings(3);
    s.touch("go.0");
    let done = systemd.until(|m| m.status().is_some());
    assert_eq!(done.status(), Some("0 in flight, 1 processed"));

    // A second job is in flight when SIGTERM comes: STOPPING while it
    // drains, pings during the drain, and a last status when it is done.
    s.push(&Job::laravel8("App\\Jobs\\Long"));
    s.wait_for_file("started.1");
    systemd.until(|m| m.status() == Some("1 in flight, 1 processed"));
    d.signal(Signal::SIGTERM);
    let stopping = systemd.until(|m| m.has("STOPPING=1"));
    assert_eq!(
        stopping.status(),
        Some("stopping (interrupted): 1 in flight, 1 processed")
    );
    systemd.watchdog_pings(2);
    s.touch("go.1");
    let drained = systemd.until(|m| m.status().is_some());
    assert_eq!(
        drained.status(),
        Some("stopping (interrupted): 0 in flight, 2 processed")
    );
    d.expect_exit(0);
    let exited = Instant::now();

    // systemd would never have fired: no gap reached WATCHDOG_USEC, idle,
    // busy or draining.
    let all = systemd.all();
    let gap = longest_watchdog_gap(&all, exited);
    assert!(gap < Duration::from_micros(WATCHDOG_USEC), "a {gap:?} gap");
    // Nothing came out of order: one READY, first; one STOPPING, after
    // which every status is a stopping one; nothing after the exit.
    let count = |line: &str| all.iter().filter(|m| m.has(line)).count();
    assert_eq!(count("READY=1"), 1, "one READY: {all:?}");
    assert!(all[0].has("READY=1"), "READY first: {all:?}");
    assert_eq!(count("STOPPING=1"), 1, "one STOPPING: {all:?}");
    let stop_at = all.iter().position(|m| m.has("STOPPING=1")).unwrap_or(0);
    assert!(
        all[stop_at + 1..]
            .iter()
            .all(|m| m.status().is_none_or(|st| st.starts_with("stopping"))),
        "only stopping statuses after STOPPING: {all:?}"
    );
    assert!(
        all.iter().all(|m| m.at <= exited),
        "nothing after the exit: {all:?}"
    );
}

#[test]
fn a_long_sleep_does_not_starve_the_watchdog() {
    let s = Scene::new();
    let socket_path = s.path("notify.sock");
    let mut systemd = NotifySocket::bind(&socket_path);
    let handler = s.script("ok.sh", "exit 0");
    // No block_for: the idle wait is the 30 s --sleep.
    let config = s.config_for(&handler);
    let env = systemd_env(&socket_path);
    let mut d = work(&config, &["--sleep=30"], &as_env(&env));
    let ready = systemd.next();
    assert!(ready.has("READY=1"), "READY first: {ready:?}");
    systemd.watchdog_pings(4);
    d.signal(Signal::SIGTERM);
    let stopping = systemd.until(|m| m.has("STOPPING=1"));
    assert_eq!(
        stopping.status(),
        Some("stopping (interrupted): 0 in flight, 0 processed"),
        "{stopping:?}"
    );
    d.expect_exit(0);
    let gap = longest_watchdog_gap(&systemd.all(), Instant::now());
    assert!(gap < Duration::from_micros(WATCHDOG_USEC), "a {gap:?} gap");
}

#[test]
fn no_watchdog_pings_unless_the_watchdog_is_for_this_process() {
    let s = Scene::new();
    let handler = s.script("ok.sh", "exit 0");
    let config = s.config_for(&handler);
    s.push(&Job::laravel8("App\\Jobs\\Quick"));
    for (name, env) in [
        ("no WATCHDOG_USEC", vec![]),
        (
            "WATCHDOG_PID of another process",
            vec![("WATCHDOG_PID", "1")],
        ),
    ] {
        let socket_path = s.path("notify.sock");
        let _ = std::fs::remove_file(&socket_path);
        let mut systemd = NotifySocket::bind(&socket_path);
        let mut env: Vec<(&str, &str)> = env;
        env.push(("NOTIFY_SOCKET", socket_path.to_str().unwrap()));
        if name != "no WATCHDOG_USEC" {
            env.push(("WATCHDOG_USEC", "200000"));
        }
        work(&config, &["--stop-when-empty"], &env).expect_exit(0);
        let all = systemd.all();
        assert!(
            all.first().is_some_and(|m| m.has("READY=1")),
            "{name}: {all:?}"
        );
        assert!(all.iter().any(|m| m.has("STOPPING=1")), "{name}: {all:?}");
        assert!(!all.iter().any(|m| m.has("WATCHDOG=1")), "{name}: {all:?}");
    }
}
