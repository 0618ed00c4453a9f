//! Redis Sentinel: a master, a replica and three sentinels started by the
//! test. 2,000 jobs are pushed through the sentinels; a worker with
//! `--concurrency=8` runs them; the master is SIGKILLed mid-run. The worker
//! must follow the failover to the promoted replica without a restart and
//! finish every job. The test prints the jobs lost and run twice and the
//! time to resume.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::redis_topologies::{SentinelSet, cli, require, text};
use common::{Daemon, WAIT};
use nix::sys::signal::Signal;

const JOBS: usize = 2_000;
const CONCURRENCY: usize = 8;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `(job id, completion time)` per line of the handler's log.
fn completions(log: &PathBuf) -> Vec<(String, f64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (id, at) = l.split_once(' ')?;
            Some((id.to_string(), at.parse().ok()?))
        })
        .collect()
}

fn queue_left(port: u16) -> Option<i64> {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
        .ok()?
        .get_connection()
        .ok()?;
    let key = "laravel_database_queues:default";
    let (ready, delayed, reserved): (i64, i64, i64) = redis::pipe()
        .llen(key)
        .zcard(format!("{key}:delayed"))
        .zcard(format!("{key}:reserved"))
        .query(&mut conn)
        .ok()?;
    Some(ready + delayed + reserved)
}

/// A Sentinel set in a fresh temporary directory; `None` (the skip
/// printed) without redis-server.
fn start_set(test: &str) -> Option<(tempfile::TempDir, SentinelSet)> {
    if !require(test, &["redis-server"]) {
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("lw-sentinel-")
        .tempdir()
        .unwrap();
    let set = SentinelSet::start(dir.path());
    Some((dir, set))
}

/// Writes `{dir}/config.toml`: `[redis]` through the sentinels of `set`
/// (the URL's host is never used), then `rest`.
fn write_config(dir: &Path, set: &SentinelSet, rest: &str) -> PathBuf {
    let sentinels: Vec<String> = set.addresses().iter().map(|a| format!("\"{a}\"")).collect();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"redis://unused:6379/0\"\nprefix = \"laravel_database_\"\n\
             sentinels = [{}]\nservice = \"{}\"\n{rest}",
            sentinels.join(", "),
            SentinelSet::SERVICE,
        ),
    )
    .unwrap();
    config
}

#[test]
fn the_worker_follows_a_sentinel_failover_mid_run() {
    let Some((dir, mut set)) = start_set("the_worker_follows_a_sentinel_failover_mid_run") else {
        return;
    };
    let log = dir.path().join("jobs.log");
    let handler = dir.path().join("handler.sh");
    std::fs::write(
        &handler,
        format!(
            "#!/bin/sh\n[ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
             echo \"$LARAVEL_WORKER_JOB_ID $(date +%s.%N)\" >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&handler, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = write_config(
        dir.path(),
        &set,
        &format!(
            "[queue]\nretry_after = 5\nblock_for = 1\n\
             [cache]\nprefix = \"laravel_cache\"\ncolon = true\n\
             [failed]\ndriver = \"redis\"\n\
             [[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            handler.display()
        ),
    );

    // Push through the sentinels, then make sure the replica has every job
    // before anything is killed: what is measured is the worker's loss.
    let out = cli(
        &config,
        &[
            "push",
            "default",
            "--job",
            "App\\Jobs\\Work",
            "--count",
            &JOBS.to_string(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let mut master = redis::Client::open(format!("redis://127.0.0.1:{}/0", set.master.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let payloads: Vec<String> = redis::cmd("LRANGE")
        .arg("laravel_database_queues:default")
        .arg(0)
        .arg(-1)
        .query(&mut master)
        .unwrap();
    let pushed: HashSet<String> = payloads
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_str(p).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(pushed.len(), JOBS);
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut master)
        .unwrap();
    assert_eq!(acked, 1, "the replica did not confirm the pushes");

    let mut worker = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            &format!("--concurrency={CONCURRENCY}"),
            "--sleep=0.2",
            // A reservation whose answer died with the master, or a handler
            // stopped because its lease ran out during the failover, counts
            // as an attempt, as in Laravel; with queue:work's default of one
            // try such a job would be failed on reclaim instead of run.
            // Lost means never run.
            "--tries=3",
        ],
        &[],
    );
    worker.wait_stderr(|l| l.contains("Sentinel: master found"));

    // Kill the master once about a third of the jobs are done.
    let deadline = Instant::now() + WAIT;
    while completions(&log).len() < JOBS / 3 {
        assert!(Instant::now() < deadline, "the worker did not get going");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = unix_now();
    let killed = Instant::now();
    let old_master = set.master.port;
    set.master.kill();

    worker.wait_stderr(|l| l.contains("Sentinel: following the failover to the new master"));
    let followed = killed.elapsed();
    let new_master = set.master_port().unwrap();
    assert_eq!(new_master, set.replica.port);
    assert_ne!(new_master, old_master);

    // Every job done, and nothing left on the new master (jobs whose
    // settlement was lost come back after retry_after and run again).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: HashSet<String> = completions(&log).into_iter().map(|(id, _)| id).collect();
        if pushed.is_subset(&seen) && queue_left(new_master) == Some(0) {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    worker.signal(Signal::SIGTERM);
    assert_eq!(worker.code(), Some(0), "{}", worker.stderr.join("\n"));

    let done = completions(&log);
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &done {
        *runs.entry(id.as_str()).or_default() += 1;
    }
    let lost = pushed
        .iter()
        .filter(|id| !runs.contains_key(id.as_str()))
        .count();
    let duplicated: usize = runs.values().map(|n| n - 1).sum();
    // Up to CONCURRENCY jobs were running when the master died and finish
    // right after; the next completion is a job reserved on the new master.
    let mut after: Vec<f64> = done
        .iter()
        .map(|(_, at)| *at)
        .filter(|&at| at > killed_at)
        .collect();
    after.sort_by(f64::total_cmp);
    let resumed = after.get(CONCURRENCY).map(|at| at - killed_at);
    eprintln!(
        "SENTINEL FAILOVER: {JOBS} jobs, master killed after {} were done; worker followed \
         after {:.2} s; first job from the new master after {}; lost {lost}, run twice \
         {duplicated}; left on the new master: {:?}",
        JOBS / 3,
        followed.as_secs_f64(),
        resumed.map_or("-".into(), |s| format!("{s:.2} s")),
        queue_left(new_master),
    );
    assert_eq!(lost, 0, "jobs lost in the failover");
    assert_eq!(queue_left(new_master), Some(0));
    assert!(resumed.is_some());

    // The commands work through the sentinels too, on the new master.
    let out = cli(&config, &["monitor", "redis:default", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let sizes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sizes[0]["size"], 0, "{sizes}");
    for args in [
        &["push", "default", "--job", "App\\Jobs\\After"][..],
        &["clear"],
        &["failed", "--json"],
        &["restart"],
    ] {
        let out = cli(&config, args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
}

/// A separate `[cache] url` on a Sentinel setup is reached through the same
/// sentinels (its host unused, its database and credentials kept), not as
/// a single server at the URL's host.
#[test]
fn a_separate_cache_url_goes_through_the_sentinels() {
    let Some((dir, set)) = start_set("a_separate_cache_url_goes_through_the_sentinels") else {
        return;
    };
    let config = write_config(
        dir.path(),
        &set,
        "[cache]\nurl = \"redis://unused-too:6379/3\"\nprefix = \"laravel_cache\"\n\
         colon = true\n[failed]\ndriver = \"null\"\n",
    );

    let out = cli(&config, &["restart"], &[]);
    assert!(out.status.success(), "{}", text(&out));

    let mut master = redis::Client::open(format!("redis://127.0.0.1:{}/3", set.master.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let marker: Option<String> = redis::cmd("GET")
        .arg("laravel_database_laravel_cache:illuminate:queue:restart")
        .query(&mut master)
        .unwrap();
    assert!(marker.is_some(), "no restart marker in db 3 of the master");
}
