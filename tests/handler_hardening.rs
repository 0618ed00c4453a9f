//! Handlers against crafted jobs and careless setups: metadata that an
//! environment variable cannot hold, secrets in the daemon's environment,
//! files other users could read, and handler programs that cannot run.
//! Real daemon, real Redis, real handler processes.

mod common;

use std::path::Path;

use common::Scene;
use common::payloads::Job;
use serde_json::json;

/// The daemon's log (stderr) as one text.
fn logs(d: &common::Daemon) -> String {
    d.stderr.join("\n")
}

/// The `NAME=value` entries of a file written by `env -0`.
fn env_file(path: &Path) -> Vec<(String, String)> {
    let raw =
        std::fs::read(path).unwrap_or_else(|e| panic!("{} was not written: {e}", path.display()));
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

fn env_var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A NUL in the displayName and a 200 KiB id cannot go into environment
/// variables as they are: the job used to fail with "cannot start handler"
/// without running. Now the variables carry the NUL as U+FFFD and the id
/// cut to 16 KiB, the payload on stdin carries both in full, and the job
/// runs. A NUL in the recorded failure (from the handler's stderr) no longer
/// stops the failed hook from starting either.
#[test]
fn metadata_an_environment_cannot_hold_is_passed_safely() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "env -0 > \"$DIR/env.$LARAVEL_WORKER_MODE\"\ncat > \"$DIR/stdin.$LARAVEL_WORKER_MODE\"\n\
         case \"$LARAVEL_WORKER_MODE:$LARAVEL_WORKER_JOB_NAME\" in\n  run:*Fails*) printf 'bad\\000byte\\n' >&2; exit 1 ;;\nesac",
    );
    let config = s.config_with_handler(&handler, "");
    let long_id = "i".repeat(200 * 1024);
    let odd = Job::laravel8("App\\Jobs\\Nul\u{0}Name").set("id", json!(long_id));
    s.redis.push("default", &odd.build());
    let mut d = s.work_until_exit(&config, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let failures: Vec<String> = s.failed_rows().into_iter().map(|r| r.exception).collect();
    assert!(failures.is_empty(), "the job ran: {failures:?}");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    let env = env_file(&s.path("env.run"));
    assert_eq!(
        env_var(&env, "LARAVEL_WORKER_JOB_NAME"),
        Some("App\\Jobs\\Nul\u{fffd}Name")
    );
    let id = env_var(&env, "LARAVEL_WORKER_JOB_ID").expect("the id variable");
    assert_eq!(id.len(), 16 * 1024, "cut to 16 KiB");
    assert!(long_id.starts_with(id));
    let stdin: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path("stdin.run")).unwrap()).unwrap();
    assert_eq!(stdin["id"], json!(long_id), "the payload keeps the full id");
    assert_eq!(stdin["displayName"], json!("App\\Jobs\\Nul\u{0}Name"));

    // A failure whose recorded text holds a NUL still gets its failed hook.
    let fails = Job::laravel8("App\\Jobs\\Fails");
    s.redis.push("default", &fails.build());
    let mut d = s.work_until_exit(&config, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1, "one failure");
    assert!(
        rows[0].exception.contains("bad\0byte"),
        "{}",
        rows[0].exception
    );
    let env = env_file(&s.path("env.failed"));
    let exception = env_var(&env, "LARAVEL_WORKER_EXCEPTION").expect("the failed hook ran");
    assert!(exception.contains("bad\u{fffd}byte"), "{exception}");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
