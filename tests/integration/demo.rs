//! `laravel-worker demo`: the whole story on a SQLite file (the default:
//! nothing to install), or a private redis-server (`--driver redis`), with
//! its output checked line by line, and its advice when redis-server is
//! missing.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::Daemon;
use nix::sys::signal::Signal;

#[test]
fn the_demo_runs_the_whole_story_and_cleans_up() {
    if !common::skip::have("redis-server", "the demo test needs redis-server") {
        return;
    }
    let mut d = Daemon::run(&["demo", "--driver", "redis"], &[]);
    d.expect_exit(0);
    let out = story_lines(&d, "redis");
    let text = out.join("\n");
    let has = |parts: &[&str]| out.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    for parts in [
        &["private redis-server on", "laravel_worker_demo_"][..],
        &["done: the private redis-server is stopped"],
    ] {
        assert!(has(parts), "no line with {parts:?} in:\n{text}");
    }
    // Cleaned up: the temporary directory that held the socket is gone.
    let socket = out
        .iter()
        .find_map(|l| l.split("redis-server on ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .expect("the socket path");
    let dir = std::path::Path::new(socket).parent().unwrap();
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

/// The demo's stdout (colours aside), checked for the story both drivers
/// tell on `connection`: the three job lines, in the order the worker
/// took them (the `emails` queue first); `failed` listing the failed job
/// on `connection@default`; `monitor` counting the released job as
/// delayed.
fn story_lines(d: &Daemon, connection: &str) -> Vec<String> {
    let out: Vec<String> = d.stdout.iter().map(|l| common::daemon::plain(l)).collect();
    let text = out.join("\n");
    let has = |parts: &[&str]| out.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    let failed = format!("{connection}@default");
    let default = format!("{connection}:default");
    let emails = format!("{connection}:emails");
    for parts in [
        &["App\\Jobs\\SendWelcomeEmail", "DONE"][..],
        &["App\\Jobs\\SyncInventory", "FAIL"],
        &["App\\Jobs\\ChargeCard", "FAIL"],
        &["$ laravel-worker failed"],
        &[&failed, "App\\Jobs\\ChargeCard"],
        &[&default, "[1] 0 / 1 / 0", "ALERT"],
        &[&emails, "[0] 0 / 0 / 0", "OK"],
    ] {
        assert!(has(parts), "no line with {parts:?} in:\n{text}");
    }
    let position = |name: &str| {
        out.iter()
            .position(|l| l.contains(name) && (l.contains("DONE") || l.contains("FAIL")))
            .unwrap()
    };
    assert!(position("SendWelcomeEmail") < position("SyncInventory"));
    out
}

/// `demo`, as README's first command runs it: the story on a SQLite file
/// (the `jobs`, `failed_jobs` and `cache` tables), run with nothing on the
/// `PATH` but `cat` (which the demo's handlers use), so nothing needs
/// installing; the file's directory is removed at the end.
#[test]
fn the_default_demo_tells_the_story_on_a_sqlite_file_without_redis() {
    let bin = tempfile::tempdir().unwrap();
    let cat = common::skip::which("cat").expect("cat on the PATH");
    std::os::unix::fs::symlink(cat, bin.path().join("cat")).unwrap();
    let path = bin.path().to_str().unwrap();
    let mut d = Daemon::run(&["demo"], &[("PATH", path)]);
    d.expect_exit(0);
    let out = story_lines(&d, "database");
    let text = out.join("\n");
    let file = out
        .iter()
        .find_map(|l| l.split("a SQLite file at ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no SQLite file named in:\n{text}"));
    assert!(file.ends_with("/database.sqlite"), "{text}");
    assert!(
        out.iter()
            .any(|l| l.contains("done: the SQLite file and its directory are removed")),
        "{text}"
    );
    let dir = std::path::Path::new(file).parent().unwrap();
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn without_redis_server_the_demo_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    let mut d = Daemon::run(&["demo", "--driver", "redis"], &[("PATH", path)]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("needs redis-server") && log.contains("apt-get install redis-server"),
        "{log}"
    );
}

/// `demo --driver database` stopped by SIGTERM or SIGINT while a handler
/// runs (a `cat` on the `PATH` that waits for a gate) exits 143 or 130
/// and leaves no directory behind.
#[test]
fn a_stopped_database_demo_leaves_no_directory() {
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let dir = tempfile::tempdir().unwrap();
        let cat = common::skip::which("cat").expect("cat on the PATH");
        let sleep = common::skip::which("sleep").expect("sleep on the PATH");
        let gate = dir.path().join("go");
        let started = dir.path().join("started");
        let shim = dir.path().join("cat");
        std::fs::write(
            &shim,
            format!(
                // Gone with the test's folder, a shim the worker left
                // behind stops waiting instead of looping for good.
                "#!/bin/sh\n: > '{}'\nwhile [ ! -f '{}' ]; do [ -d '{}' ] || exit 1; '{}' 0.01; done\n\
                 exec '{}' \"$@\"\n",
                started.display(),
                gate.display(),
                dir.path().display(),
                sleep.display(),
                cat.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().to_str().unwrap();
        let mut d = Daemon::start(&["demo", "--driver", "database"], &[("PATH", path)]);
        let line = d.wait_stdout(|l| l.contains("a SQLite file at "));
        let file = line
            .split("a SQLite file at ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap()
            .to_string();
        common::wait_until("the handler to start", || started.exists());
        d.signal(signal);
        std::fs::write(&gate, "").unwrap();
        d.expect_exit(code);
        let demo_dir = std::path::Path::new(&file).parent().unwrap();
        assert!(!demo_dir.exists(), "{} is left behind", demo_dir.display());
        let out = d.stdout.join("\n");
        assert!(
            out.contains("stopped: the SQLite file and its directory are removed"),
            "{out}"
        );
    }
}
