//! A real Redis Cluster: three masters and three replicas started by the
//! test. Queues `high` and `default` become `queues:{high}` and
//! `queues:{default}` (Laravel 13.5+'s hash tags), in different slots.
//! Two daemons with `--concurrency=8` each run 5,000 jobs pushed through
//! the cluster: every job exactly once up to the failover, `high` before
//! `default`; then the master serving `{default}` is SIGKILLed mid-run and
//! the run completes after its replica is promoted. The test prints the
//! jobs lost and run twice.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::redis_topologies::{
    Cluster, cli, cli_ok, cluster_for, executable, job_script, require, text,
};
use common::{Daemon, WAIT};
use nix::sys::signal::Signal;

const HIGH: usize = 1_000;
const DEFAULT: usize = 4_000;
const CONCURRENCY: usize = 8;
const DAEMONS: usize = 2;

const HIGH_KEY: &str = "laravel_database_queues:{high}";
const DEFAULT_KEY: &str = "laravel_database_queues:{default}";

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One line per handler start: queue, job id, time.
struct Start {
    queue: String,
    id: String,
    at: f64,
}

fn starts(log: &Path) -> Vec<Start> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split(' ');
            Some(Start {
                queue: parts.next()?.to_string(),
                id: parts.next()?.to_string(),
                at: parts.next()?.parse().ok()?,
            })
        })
        .collect()
}

fn ids(conn: &mut redis::cluster::ClusterConnection, key: &str) -> Vec<String> {
    let payloads: Vec<String> = redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    payloads
        .iter()
        .map(|p| {
            let v: serde_json::Value = serde_json::from_str(p).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Ready + delayed + reserved of both queues, or `None` while the cluster
/// does not answer.
fn left(cluster: &Cluster) -> Option<i64> {
    let mut total = 0;
    for key in [HIGH_KEY, DEFAULT_KEY] {
        let port = cluster.master_of(key);
        let ready: i64 = cluster.node_cmd(port, &["LLEN", key])?;
        let delayed: i64 = cluster.node_cmd(port, &["ZCARD", &format!("{key}:delayed")])?;
        let reserved: i64 = cluster.node_cmd(port, &["ZCARD", &format!("{key}:reserved")])?;
        total += ready + delayed + reserved;
    }
    Some(total)
}

fn handler(dir: &Path, log: &Path) -> PathBuf {
    job_script(
        &dir.join("handler.sh"),
        &format!(
            "echo \"$LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_ID $(date +%s.%N)\" >> '{}'",
            log.display()
        ),
    )
}

#[test]
fn two_daemons_on_a_six_node_cluster_survive_a_master_failover() {
    let test = "two_daemons_on_a_six_node_cluster_survive_a_master_failover";
    let Some((dir, mut cluster)) = cluster_for(test) else {
        return;
    };
    let log = dir.path().join("jobs.log");
    let handler = handler(dir.path(), &log);
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let nodes: Vec<String> = ports[1..]
        .iter()
        .map(|p| format!("\"redis://127.0.0.1:{p}\""))
        .collect();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:{}\"\nnodes = [{}]\ncluster = true\n\
             prefix = \"laravel_database_\"\n\
             [queue]\nretry_after = 5\nblock_for = 1\n\
             [cache]\nprefix = \"laravel_cache\"\ncolon = true\n\
             [failed]\ndriver = \"redis\"\n\
             [[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            ports[0],
            nodes.join(", "),
            handler.display()
        ),
    )
    .unwrap();
    // Put the two queues on different masters (their slots may fall in one
    // master's range), so the failover of one leaves the other served.
    let default_master = cluster.master_of(DEFAULT_KEY);
    let other = cluster
        .masters()
        .into_iter()
        .find(|&m| m != default_master)
        .unwrap();
    cluster.move_slot_of(HIGH_KEY, other);
    let high_master = cluster.master_of(HIGH_KEY);
    assert_ne!(high_master, default_master);
    eprintln!("queues:{{high}} on :{high_master}, queues:{{default}} on :{default_master}");

    for (queue, count) in [("high", HIGH), ("default", DEFAULT)] {
        let out = cli(
            &config,
            &[
                "push",
                queue,
                "--job",
                "App\\Jobs\\Work",
                "--count",
                &count.to_string(),
            ],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    // The cache signals (restart + pause keys, several slots) go through
    // the cluster too.
    for args in [
        &["restart"][..],
        &["pause", "redis:low"],
        &["resume", "redis:low"],
    ] {
        let out = cli(&config, args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    let mut conn = cluster.client();
    let high: HashSet<String> = ids(&mut conn, HIGH_KEY).into_iter().collect();
    let default: HashSet<String> = ids(&mut conn, DEFAULT_KEY).into_iter().collect();
    assert_eq!((high.len(), default.len()), (HIGH, DEFAULT));
    // Every push is on the replicas before anything is killed.
    for master in cluster.masters() {
        let acked: i64 = cluster.node_cmd(master, &["WAIT", "1", "5000"]).unwrap();
        assert_eq!(acked, 1, "the replica of :{master} did not confirm");
    }

    let mut daemons: Vec<Daemon> = (0..DAEMONS)
        .map(|_| {
            Daemon::start(
                &[
                    "--config",
                    config.to_str().unwrap(),
                    "work",
                    "--queue=high,default",
                    &format!("--concurrency={CONCURRENCY}"),
                    "--sleep=0.2",
                    // A reservation whose answer died with the master (or a
                    // handler stopped because its lease ran out during the
                    // failover) counts as an attempt, as in Laravel; with
                    // queue:work's default of one try such a job would be
                    // failed on reclaim instead of run. Lost means never run.
                    "--tries=3",
                ],
                &[],
            )
        })
        .collect();

    // Kill the master serving {default} once high is done and part of
    // default is.
    let deadline = Instant::now() + WAIT * 2;
    loop {
        let done = starts(&log);
        let high_done = done.iter().filter(|s| s.queue == "high").count();
        if high_done >= HIGH && done.len() >= HIGH + DEFAULT / 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the daemons did not get going");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = unix_now();
    let before_kill = starts(&log);
    cluster.node(default_master).kill();

    let deadline = Instant::now() + Duration::from_secs(90);
    let all: HashSet<&String> = high.iter().chain(&default).collect();
    loop {
        let seen: HashSet<String> = starts(&log).into_iter().map(|s| s.id).collect();
        if all.iter().all(|id| seen.contains(*id)) && left(&cluster) == Some(0) {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let promoted = cluster.master_of(DEFAULT_KEY);
    for daemon in &mut daemons {
        daemon.signal(Signal::SIGTERM);
    }
    for daemon in &mut daemons {
        assert_eq!(daemon.code(), Some(0), "{}", daemon.stderr.join("\n"));
        let log = daemon.stderr.join("\n");
        assert!(!log.contains("CROSSSLOT"), "{log}");
        // Before the failover nothing went wrong: the cache MGET over
        // several slots, the per-queue waits and the scripts all worked.
        assert!(log.contains("cluster, 6 seed node(s)"), "{log}");
    }

    let done = starts(&log);
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for s in &done {
        *runs.entry(s.id.as_str()).or_default() += 1;
    }
    let lost = all
        .iter()
        .filter(|id| !runs.contains_key(id.as_str()))
        .count();
    let duplicated: usize = runs.values().map(|n| n - 1).sum();
    let mut before: HashMap<&str, usize> = HashMap::new();
    for s in &before_kill {
        *before.entry(s.id.as_str()).or_default() += 1;
    }
    let duplicated_before: usize = before.values().map(|n| n - 1).sum();
    // Priority: with 16 slots polling high first, a default job can start
    // before the last high job only when it was popped while that one was
    // being popped by another slot; never hundreds.
    let last_high = done
        .iter()
        .filter(|s| s.queue == "high")
        .map(|s| s.at)
        .fold(0.0, f64::max);
    let default_early = done
        .iter()
        .filter(|s| s.queue == "default" && s.at < last_high)
        .count();
    let mut after: Vec<f64> = done
        .iter()
        .map(|s| s.at)
        .filter(|&at| at > killed_at)
        .collect();
    after.sort_by(f64::total_cmp);
    let resumed = after.get(CONCURRENCY * DAEMONS).map(|at| at - killed_at);
    eprintln!(
        "CLUSTER FAILOVER: {} jobs ({HIGH} high, {DEFAULT} default), {DAEMONS} daemons x \
         {CONCURRENCY}; master :{default_master} killed after {} starts, :{promoted} promoted; \
         first job after the kill beyond those in flight after {}; lost {lost}, run twice \
         {duplicated} (before the kill: {duplicated_before}); default jobs started before the \
         last high one: {default_early}",
        HIGH + DEFAULT,
        before_kill.len(),
        resumed.map_or("-".into(), |s| format!("{s:.2} s")),
    );
    assert_ne!(promoted, default_master, "no replica was promoted");
    assert_eq!(lost, 0, "jobs lost in the failover");
    assert_eq!(duplicated_before, 0, "jobs run twice before any failure");
    assert!(
        default_early <= CONCURRENCY * DAEMONS,
        "{default_early} default jobs started before the high queue was drained"
    );
    assert_eq!(left(&cluster), Some(0));

    // The commands work on the cluster.
    let out = cli(&config, &["monitor", "redis:high,default", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let sizes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sizes.as_array().unwrap().len(), 2, "{sizes}");
    assert!(
        sizes.as_array().unwrap().iter().all(|q| q["size"] == 0),
        "{sizes}"
    );
    cli_ok(&config, &["push", "default", "--job", "App\\Jobs\\After"]);
    let out = cli(&config, &["clear", "--queue=high,default"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Cleared 1 jobs from the [default]"));
}

#[test]
fn failed_store_commands_idle_wait_and_php_pushes_on_a_cluster() {
    let test = "failed_store_commands_idle_wait_and_php_pushes_on_a_cluster";
    let Some((dir, cluster)) = cluster_for(test) else {
        return;
    };
    let handler = executable(&dir.path().join("fail.sh"), "#!/bin/sh\nexit 1\n");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:{}\"\ncluster = true\n\
             prefix = \"laravel_database_\"\n\
             [queue]\nblock_for = 1\n\
             [cache]\nprefix = \"laravel_cache\"\ncolon = true\n\
             [failed]\ndriver = \"redis\"\n\
             [[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            cluster.nodes[0].port,
            handler.display()
        ),
    )
    .unwrap();
    for queue in ["high", "default"] {
        let out = cli(&config, &["push", queue, "--job", "App\\Jobs\\Fails"], &[]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // A job of 3 MB: the pop sets its strings aside in pieces in the
    // queue's own slot, and the worker reads them back from there.
    let mut conn = cluster.client();
    let large = serde_json::json!({
        "uuid": "large-on-a-cluster", "displayName": "App\\Jobs\\Large",
        "job": "Illuminate\\Queue\\CallQueuedHandler@call", "maxTries": null,
        "timeout": null, "data": {"blob": "z/\"".repeat(1_000_000)},
        "id": "large", "attempts": 0,
    })
    .to_string();
    let _: () = redis::cmd("RPUSH")
        .arg("laravel_database_queues:{default}")
        .arg(&large)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("laravel_database_queues:{default}:notify")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    cli_ok(
        &config,
        &["work", "--queue=high,default", "--stop-when-empty"],
    );
    let out = cli(&config, &["failed", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let failed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(failed.as_array().unwrap().len(), 3, "{failed:.500}");
    assert!(
        failed.to_string().contains("large-on-a-cluster"),
        "the large job is recorded"
    );
    let left: Vec<String> = cluster
        .nodes
        .iter()
        .filter_map(|n| cluster.node_cmd::<Vec<String>>(n.port, &["KEYS", "*popped*"]))
        .flatten()
        .collect();
    assert!(left.is_empty(), "set-aside pieces left: {left:?}");
    // Both keys of the store share the {laravel-worker:failed_jobs} slot.
    let mut conn = cluster.client();
    let exists: i64 = redis::cmd("EXISTS")
        .arg("laravel_database_{laravel-worker:failed_jobs}")
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, 1);

    let out = cli(&config, &["retry", "all"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(&config, &["monitor", "redis:high,default", "--json"], &[]);
    let sizes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sizes[0]["pending"], 1, "{sizes}");
    assert_eq!(sizes[1]["pending"], 2, "{sizes}");
    let out = cli(&config, &["flush"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(&config, &["failed", "--json"], &[]);
    let failed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(failed, serde_json::json!([]));

    // An idle worker waits on both queues at once (one BLPOP per queue, as
    // the two :notify lists are in different slots) and a push to the
    // second queue wakes it, long before block_for or --sleep would.
    let out = cli(&config, &["clear", "--queue=high,default"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let done = dir.path().join("done");
    let ok = executable(
        &dir.path().join("ok.sh"),
        &format!("#!/bin/sh\ntouch '{}'\n", done.display()),
    );
    let idle = dir.path().join("idle.toml");
    let text_config = std::fs::read_to_string(&config)
        .unwrap()
        .replace("block_for = 1", "block_for = 25")
        .replace(&handler.display().to_string(), &ok.display().to_string());
    std::fs::write(&idle, text_config).unwrap();
    let mut worker = Daemon::start(
        &[
            "--config",
            idle.to_str().unwrap(),
            "work",
            "--queue=high,default",
            "--sleep=30",
        ],
        &[],
    );
    worker.wait_stderr(|l| l.contains("worker started"));
    let deadline = Instant::now() + WAIT;
    loop {
        let blocked: usize = cluster
            .nodes
            .iter()
            .filter_map(|n| cluster.node_cmd::<String>(n.port, &["CLIENT", "LIST"]))
            .map(|list| list.lines().filter(|l| l.contains("cmd=blpop")).count())
            .sum();
        if blocked == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never waited on both queues"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pushed = Instant::now();
    cli_ok(&config, &["push", "default", "--job", "App\\Jobs\\Wake"]);
    while !done.exists() {
        assert!(
            Instant::now() < deadline,
            "the push did not wake the worker"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        pushed.elapsed() < Duration::from_secs(20),
        "woken by the time-out, not the push"
    );
    worker.signal(Signal::SIGTERM);
    assert_eq!(worker.code(), Some(0));

    laravel_pushes_through_phpredis_cluster(&cluster, dir.path(), &config);
}

/// Laravel's own `RedisQueue` on a phpredis `RedisCluster` connection (the
/// `clusters` config) pushes jobs onto `{default}`, as an app on a cluster
/// does; the worker, given the plain name `default`, runs them.
fn laravel_pushes_through_phpredis_cluster(cluster: &Cluster, dir: &Path, config: &Path) {
    let probe = std::process::Command::new("php")
        .args([
            "-r",
            "exit(extension_loaded('redis') && stream_resolve_include_path('Illuminate/autoload.php') ? 0 : 3);",
        ])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!(
            "SKIP laravel_pushes_through_phpredis_cluster: php with the redis extension and \
             Debian's Laravel (php-redis, php-laravel-framework) is not installed"
        );
        return;
    }
    let script = dir.join("push.php");
    std::fs::write(
        &script,
        r#"<?php
require 'Illuminate/autoload.php';
$app = new Illuminate\Container\Container;
$redis = new Illuminate\Redis\RedisManager($app, 'phpredis', [
    'options' => ['cluster' => 'redis', 'prefix' => 'laravel_database_'],
    'clusters' => ['default' => [['host' => '127.0.0.1', 'port' => (int) $argv[1]]]],
]);
$queue = new Illuminate\Queue\RedisQueue($redis, '{default}', 'default', 90);
$queue->setContainer($app);
for ($i = 0; $i < 20; $i++) {
    $queue->push('App\Jobs\FromPhp@handle', ['i' => $i], '{default}');
}
"#,
    )
    .unwrap();
    let out = std::process::Command::new("php")
        .arg(&script)
        .arg(cluster.nodes[0].port.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "php: {}", text(&out));
    let mut conn = cluster.client();
    assert_eq!(
        ids(&mut conn, DEFAULT_KEY).len(),
        20,
        "PHP pushed elsewhere"
    );

    let log = dir.join("php-jobs.log");
    let handler = handler(dir, &log);
    let php_config = dir.join("php.toml");
    let text_config = std::fs::read_to_string(config).unwrap();
    let old_handler = text_config
        .lines()
        .find_map(|l| l.strip_prefix("command = [\"")?.strip_suffix("\"]"))
        .unwrap()
        .to_string();
    std::fs::write(
        &php_config,
        text_config.replace(&old_handler, &handler.display().to_string()),
    )
    .unwrap();
    let out = cli_ok(
        &php_config,
        &["work", "--queue=default", "--stop-when-empty"],
    );
    let done = starts(&log);
    assert_eq!(done.len(), 20, "{}", text(&out));
    assert!(done.iter().all(|s| s.queue == "default"));
}

#[test]
fn cluster_true_on_a_single_server_stops_at_once_saying_so() {
    if !require(
        "cluster_true_on_a_single_server_stops_at_once_saying_so",
        &["redis-server"],
    ) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("lw-cluster-")
        .tempdir()
        .unwrap();
    let server = common::redis_topologies::Server::start_free(dir.path(), "single", |port| {
        (None, common::redis_topologies::plain_args(port))
    });
    let port = server.port;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[redis]\nurl = \"redis://127.0.0.1:{port}\"\ncluster = true\n[failed]\ndriver = \"null\"\n"),
    )
    .unwrap();
    let out = cli(&config, &["work", "--once"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("it is not a cluster node"), "{err}");
    assert!(!err.contains("attempt=2"), "{err}");
}
