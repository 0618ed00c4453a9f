//! `laravel-worker demo`: the whole story on a private redis-server, with
//! its output checked line by line, and its advice when redis-server is
//! missing.

use crate::common;

use common::Daemon;

#[test]
fn the_demo_runs_the_whole_story_and_cleans_up() {
    if !common::skip::have("redis-server", "the demo test needs redis-server") {
        return;
    }
    let mut d = Daemon::run(&["demo"], &[]);
    d.expect_exit(0);
    let out: Vec<String> = d.stdout.iter().map(|l| common::daemon::plain(l)).collect();
    let text = out.join("\n");
    let has = |parts: &[&str]| out.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    for parts in [
        &["private redis-server on", "laravel_worker_demo_"][..],
        &["App\\Jobs\\SendWelcomeEmail", "DONE"],
        &["App\\Jobs\\SyncInventory", "FAIL"],
        &["App\\Jobs\\ChargeCard", "FAIL"],
        &["$ laravel-worker failed"],
        &["redis@default", "App\\Jobs\\ChargeCard"],
        &["redis:default", "[1] 0 / 1 / 0", "ALERT"],
        &["redis:emails", "[0] 0 / 0 / 0", "OK"],
        &["done: the private redis-server is stopped"],
    ] {
        assert!(has(parts), "no line with {parts:?} in:\n{text}");
    }
    // The job lines come in the order the worker took them: the `emails`
    // queue first.
    let position = |name: &str| {
        out.iter()
            .position(|l| l.contains(name) && (l.contains("DONE") || l.contains("FAIL")))
            .unwrap()
    };
    assert!(position("SendWelcomeEmail") < position("SyncInventory"));
    // Cleaned up: the temporary directory that held the socket is gone.
    let socket = out
        .iter()
        .find_map(|l| l.split("redis-server on ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .expect("the socket path");
    let dir = std::path::Path::new(socket).parent().unwrap();
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

#[test]
fn without_redis_server_the_demo_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    let mut d = Daemon::run(&["demo"], &[("PATH", path)]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(
        log.contains("needs redis-server") && log.contains("apt-get install redis-server"),
        "{log}"
    );
}
