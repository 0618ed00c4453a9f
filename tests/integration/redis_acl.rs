//! The documented minimal ACL user (docs/src/production-redis.md), created
//! from the book's own line, runs
//! the whole job lifecycle (push, pop, block, release, lease renewal,
//! delete, fail into the Redis failed store, pause and restart keys,
//! failed/retry/monitor/clear/flush) on a real redis-server; a user missing
//! one permission gets Redis's error naming the command.

use crate::common;

use std::path::{Path, PathBuf};

use common::redis_topologies::{
    Server, cli, cmd, logging_job_script, plain_args, require, text, write_config,
};

/// The `ACL SETUSER` line of docs/src/production-redis.md, split into its
/// arguments (after `ACL SETUSER`).
fn readme_acl() -> Vec<String> {
    let readme = include_str!("../../docs/src/production-redis.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER laravel-worker "))
        .expect("docs/src/production-redis.md shows the worker's ACL SETUSER line");
    line.split_whitespace()
        .skip(2)
        .map(str::to_string)
        .collect()
}

fn password(acl: &[String]) -> String {
    acl.iter()
        .find_map(|t| t.strip_prefix('>'))
        .expect("the ACL line sets a password")
        .to_string()
}

struct Acl {
    dir: tempfile::TempDir,
    server: Server,
}

impl Acl {
    fn start(test: &str) -> Option<Self> {
        if !require(test, &["redis-server"]) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("lw-acl-")
            .tempdir()
            .unwrap();
        let server = Server::start_free(dir.path(), "acl", |port| (None, plain_args(port)));
        Some(Acl { dir, server })
    }

    fn admin(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/0", self.server.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Creates the user `name` with the documented rules, less `without`.
    fn create_user(&self, name: &str, without: Option<&str>) -> String {
        let mut acl = readme_acl();
        acl[0] = name.to_string();
        if let Some(rule) = without {
            let before = acl.len();
            acl.retain(|t| t != rule);
            assert_eq!(
                acl.len(),
                before - 1,
                "{rule} is not in the documented line"
            );
        }
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER").arg(&acl);
        let _: () = c.query(&mut self.admin()).unwrap();
        password(&acl)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Logs `NAME ATTEMPT`; `*Slow` jobs take 2 s, `*Release` ones ask to
    /// be released on their first attempt, `*Fails` ones fail.
    fn handler(&self) -> PathBuf {
        let then = r#"case "$LARAVEL_WORKER_JOB_NAME" in
  *Slow) sleep 2 ;;
  *Release) [ "$LARAVEL_WORKER_ATTEMPT" = 1 ] && echo '{"action":"release","delay":0}' > "$LARAVEL_WORKER_RESULT" ;;
  *Fails) exit 1 ;;
esac
exit 0"#;
        let line = "$LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT";
        logging_job_script(self.dir.path(), line, then)
    }

    fn jobs(&self) -> Vec<String> {
        let mut jobs: Vec<String> = std::fs::read_to_string(self.path("jobs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        jobs.sort();
        jobs
    }

    /// A config with no URL: the user comes from Laravel's variables
    /// ([`Acl::env`]).
    fn config(&self) -> PathBuf {
        let queue = "[queue]\nretry_after = 2\nblock_for = 1";
        write_config(&self.path("config.toml"), "", queue, &self.handler())
    }

    fn env(&self, user: &str, password: &str) -> Vec<(String, String)> {
        vec![
            ("REDIS_HOST".into(), "127.0.0.1".into()),
            ("REDIS_PORT".into(), self.server.port.to_string()),
            ("REDIS_USERNAME".into(), user.into()),
            ("REDIS_PASSWORD".into(), password.into()),
        ]
    }
}

fn run(config: &Path, env: &[(String, String)], args: &[&str]) -> std::process::Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    cli(config, args, &env)
}

fn ok(out: std::process::Output) -> String {
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("NOPERM"), "{}", text(&out));
    assert!(
        !err.contains("WARN") && !err.contains("ERROR"),
        "{}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_readme_acl_user_runs_the_whole_lifecycle() {
    let Some(t) = Acl::start("the_readme_acl_user_runs_the_whole_lifecycle") else {
        return;
    };
    let password = t.create_user("laravel-worker", None);
    let config = t.config();
    let env = t.env("laravel-worker", &password);

    for job in ["Hello", "Slow", "Release", "Fails"] {
        ok(run(
            &config,
            &env,
            &["push", "default", "--job", &format!("App\\Jobs\\{job}")],
        ));
    }
    ok(run(
        &config,
        &env,
        &[
            "push",
            "default",
            "--job",
            "App\\Jobs\\Later",
            "--delay",
            "1",
        ],
    ));
    ok(run(&config, &env, &["pause", "redis:default"]));
    ok(run(&config, &env, &["resume", "redis:default"]));
    ok(run(&config, &env, &["restart"]));

    // Two slots: the slow job's reservation (retry_after = 2) is renewed
    // while the others are popped, released, deleted and failed.
    let out = run(
        &config,
        &env,
        &[
            "work",
            "--stop-when-empty",
            "--concurrency=2",
            "--tries=1",
            "--sleep=1",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    assert!(err.contains("worker stopped"), "{err}");
    let mut jobs = t.jobs();
    jobs.retain(|j| !j.starts_with("App\\Jobs\\Later"));
    assert_eq!(
        jobs,
        [
            "App\\Jobs\\Fails 1",
            "App\\Jobs\\Hello 1",
            "App\\Jobs\\Release 1",
            "App\\Jobs\\Slow 1"
        ]
    );
    // The released job came back with its attempt counted: --tries=1
    // fails it without running it again.
    let failed: serde_json::Value =
        serde_json::from_str(&ok(run(&config, &env, &["failed", "--json"]))).unwrap();
    let mut classes: Vec<&str> = failed
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["class"].as_str().unwrap())
        .collect();
    classes.sort_unstable();
    assert_eq!(
        classes,
        ["App\\Jobs\\Fails", "App\\Jobs\\Release"],
        "{failed}"
    );

    ok(run(&config, &env, &["retry", "all"]));
    let sizes: serde_json::Value = serde_json::from_str(&ok(run(
        &config,
        &env,
        &["monitor", "redis:default", "--json"],
    )))
    .unwrap();
    assert!(sizes[0]["size"].as_u64().unwrap() >= 2, "{sizes}");
    ok(run(&config, &env, &["clear"]));
    ok(run(
        &config,
        &env,
        &["push", "default", "--job", "App\\Jobs\\Fails"],
    ));
    ok(run(&config, &env, &["work", "--once"]));
    ok(run(&config, &env, &["flush"]));
    let left: serde_json::Value =
        serde_json::from_str(&ok(run(&config, &env, &["failed", "--json"]))).unwrap();
    assert_eq!(left, serde_json::json!([]));

    // The user touched nothing outside its prefix, and could not have.
    let mut admin = t.admin();
    let _: () = cmd(&mut admin, &["SET", "other-app:secret", "x"]);
    let mut as_worker = redis::Client::open(format!(
        "redis://laravel-worker:{password}@127.0.0.1:{}/0",
        t.server.port
    ))
    .unwrap()
    .get_connection()
    .unwrap();
    let denied: redis::RedisResult<Option<String>> = redis::cmd("MGET")
        .arg("other-app:secret")
        .query(&mut as_worker);
    let e = denied.unwrap_err().to_string();
    assert!(e.contains("no permissions to access"), "{e}");
}

#[test]
fn a_missing_permission_is_reported_naming_the_command() {
    let Some(t) = Acl::start("a_missing_permission_is_reported_naming_the_command") else {
        return;
    };
    let config = t.config();
    let admin = t.create_user("admin-pusher", None);
    let admin_env = t.env("admin-pusher", &admin);
    // (rule removed, job pushed, what Redis names)
    for (rule, job) in [
        ("+zrem", "App\\Jobs\\Hello"),
        ("+lpop", "App\\Jobs\\Hello"),
        ("+mget", "App\\Jobs\\Hello"),
        ("+hsetnx", "App\\Jobs\\Fails"),
    ] {
        let command = rule.trim_start_matches('+');
        let user = format!("without-{command}");
        let password = t.create_user(&user, Some(rule));
        ok(run(&config, &admin_env, &["clear"]));
        ok(run(&config, &admin_env, &["push", "default", "--job", job]));
        let out = run(
            &config,
            &t.env(&user, &password),
            &["work", "--once", "--sleep=0"],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let named = format!("no permissions to run the '{command}' command");
        eprintln!(
            "without {rule}: {}",
            err.lines().find(|l| l.contains(&named)).unwrap_or("")
        );
        assert!(err.contains(&named), "without {rule}: {}", text(&out));
    }
}
