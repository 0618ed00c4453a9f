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

/// The daemon started with `work ARGS` and extra environment `env`, run to
/// its end.
fn work_with_env(config: &Path, args: &[&str], env: &[(&str, &str)]) -> common::Daemon {
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend_from_slice(args);
    let mut d = common::Daemon::start(&all, env);
    d.wait_exit();
    d
}

/// Handlers used to inherit the daemon's whole environment, secrets named
/// by `secret_env`/`token_env` included. Now those are removed from every
/// handler's environment, `env` adds variables and `env_clear` starts from
/// nothing, for process and persistent handlers alike. The decoded command
/// file is 0600 in a 0700 directory (it was 0644 in 0755 under /tmp).
#[test]
fn handlers_see_only_the_environment_the_operator_chose_and_private_files() {
    let s = Scene::new();
    // Each handler keeps its environment in env.QUEUE, and the modes of the
    // command file and its directory in modes.QUEUE.
    let keep = "env -0 > \"$DIR/env.$LARAVEL_WORKER_QUEUE\"\n\
                stat -c '%a' \"$LARAVEL_WORKER_COMMAND_FILE\" \"$(dirname \"$LARAVEL_WORKER_COMMAND_FILE\")\" | tr '\\n' ' ' > \"$DIR/modes.$LARAVEL_WORKER_QUEUE\"";
    let process = s.script("process.sh", keep);
    let persistent = s.script(
        "persistent.sh",
        "while IFS= read -r line; do\n  \
         queue=${line#*\\\"queue\\\":\\\"}; queue=${queue%%\\\"*}\n  \
         env -0 > \"$DIR/env.$queue\"\n  \
         call=${line#{\\\"call\\\":}; echo \"{\\\"call\\\":${call%%,*},\\\"action\\\":\\\"done\\\"}\" >&3\ndone",
    );
    let db = s.failed_db();
    let config = s.config(&format!(
        "[failed]\nurl = \"{db}\"\n\n\
         [[handlers]]\nmatch = \"*\"\nqueues = [\"inherit\"]\ncommand = [\"{p}\"]\nenv = {{ EXTRA = \"added\" }}\n\n\
         [[handlers]]\nmatch = \"*\"\nqueues = [\"clear\"]\ncommand = [\"{p}\"]\nenv_clear = true\nenv = {{ ONLY = \"this\", PATH = \"/usr/bin:/bin\" }}\n\n\
         [[handlers]]\nmatch = \"*\"\nqueues = [\"warm\"]\ncommand = [\"{w}\"]\nmode = \"persistent\"\n\n\
         [[handlers]]\nmatch = \"*\"\nqueues = [\"web\"]\nurl = \"http://127.0.0.1:9/q\"\n\
         secret_env = \"QUEUE_HANDLER_SECRET\"\ntoken_env = \"QUEUE_HANDLER_TOKEN\"\n",
        p = process.display(),
        w = persistent.display(),
    ));
    for queue in ["inherit", "clear", "warm"] {
        s.redis
            .push(queue, &Job::laravel8("App\\Jobs\\Env").build());
    }
    let mut d = work_with_env(
        &config,
        &[
            "--queue=inherit,clear,warm",
            "--stop-when-empty",
            "--sleep=0",
        ],
        &[
            ("QUEUE_HANDLER_SECRET", "signing-key-5150"),
            ("QUEUE_HANDLER_TOKEN", "bearer-token-4242"),
            ("INHERITED", "daemon-value"),
        ],
    );
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let failures: Vec<String> = s.failed_rows().into_iter().map(|r| r.exception).collect();
    assert!(failures.is_empty(), "{failures:?}");

    for queue in ["inherit", "clear", "warm"] {
        let env = env_file(&s.path(&format!("env.{queue}")));
        for (secret, value) in [
            ("QUEUE_HANDLER_SECRET", "signing-key-5150"),
            ("QUEUE_HANDLER_TOKEN", "bearer-token-4242"),
        ] {
            assert!(
                env.iter().all(|(k, v)| k != secret && v != value),
                "{queue}: the handler sees {secret}"
            );
        }
        assert_eq!(
            env_var(&env, "LARAVEL_WORKER_QUEUE").or(env_var(&env, "LARAVEL_WORKER_PROTOCOL")),
            Some(if queue == "warm" { "persistent" } else { queue }),
            "{queue}: the daemon's own variables are there"
        );
    }
    let inherit = env_file(&s.path("env.inherit"));
    assert_eq!(env_var(&inherit, "INHERITED"), Some("daemon-value"));
    assert_eq!(env_var(&inherit, "EXTRA"), Some("added"));
    let warm = env_file(&s.path("env.warm"));
    assert_eq!(env_var(&warm, "INHERITED"), Some("daemon-value"));
    let clear = env_file(&s.path("env.clear"));
    assert_eq!(env_var(&clear, "ONLY"), Some("this"));
    assert_eq!(env_var(&clear, "PATH"), Some("/usr/bin:/bin"));
    let foreign: Vec<&str> = clear
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !k.starts_with("LARAVEL_WORKER_") && !["ONLY", "PATH", "PWD"].contains(k))
        .collect();
    assert!(
        foreign.is_empty(),
        "env_clear leaves only env and LARAVEL_WORKER_*: {foreign:?}"
    );

    for queue in ["inherit", "clear"] {
        let modes = std::fs::read_to_string(s.path(&format!("modes.{queue}"))).unwrap();
        assert_eq!(
            modes.trim(),
            "600 700",
            "{queue}: command file and its directory"
        );
    }
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// A handler program that cannot run, or no `[[handlers]]` at all, used to
/// send every job to failed_jobs. Now `work` refuses to start (exit 1) with
/// a message naming the handler and the program, and the queue is left as
/// it was. A relative path is resolved against the working directory; a
/// bare name looked up in PATH and not found there is only a warning.
#[test]
fn handler_programs_that_cannot_run_stop_the_worker_at_start() {
    let s = Scene::new();
    let db = s.failed_db();
    let not_executable = s.path("plain.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let handler = |program: &str| {
        format!(
            "[[handlers]]\nmatch = \"App\\\\Jobs\\\\*\"\ncommand = [\"{program}\", \"--flag\"]\n"
        )
    };
    let job = Job::laravel8("App\\Jobs\\Waiting");
    s.redis.push("default", &job.build());
    for (handlers, expected) in [
        (
            handler("/nonexistent/handler.sh"),
            vec![
                "match = \"App\\\\Jobs\\\\*\"",
                "\"/nonexistent/handler.sh\"",
                "does not exist",
            ],
        ),
        (
            handler(&not_executable.display().to_string()),
            vec![
                &*format!("{:?}", not_executable.display().to_string()),
                "is not executable",
            ],
        ),
        (
            handler("handlers/missing.sh"),
            vec![
                "\"handlers/missing.sh\"",
                "resolved against the working directory",
                "does not exist",
            ],
        ),
        (String::new(), vec!["no [[handlers]] are configured"]),
    ] {
        let config = s.config(&format!("[failed]\nurl = \"{db}\"\n\n{handlers}"));
        let mut d = s.work_until_exit(&config, &["--once"]);
        assert_eq!(d.code(), Some(1), "{handlers}: {}", logs(&d));
        let logs = logs(&d);
        for part in expected {
            assert!(logs.contains(part), "{handlers}: {part:?} not in:\n{logs}");
        }
        assert!(!logs.contains("worker started"), "{logs}");
        assert_eq!(
            s.redis.lrange(&common::q("default")),
            vec![job.build()],
            "{handlers}: the queue is untouched"
        );
        assert!(s.failed_rows().is_empty());
    }

    // Runnable: a relative path from the working directory (the crate's
    // root for tests), and a bare name PATH may provide later (a warning).
    s.redis.cmd::<i64>(&["DEL", &common::q("default")]);
    for (handlers, warns) in [
        (handler("examples/handlers/hello.sh"), false),
        (handler("lw-surely-not-installed"), true),
    ] {
        let config = s.config(&format!("[failed]\nurl = \"{db}\"\n\n{handlers}"));
        let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
        assert_eq!(d.code(), Some(0), "{handlers}: {}", logs(&d));
        let logs = logs(&d);
        assert_eq!(
            logs.contains("WARN") && logs.contains("not found as an executable file in its PATH"),
            warns,
            "{handlers}: {logs}"
        );
    }
}

/// A result file is read to at most 1 MiB, as a persistent handler's answer
/// line: a larger one (here 2 MiB of spaces before a valid request, which
/// used to be read whole and obeyed) is an exception saying so.
#[test]
fn an_oversized_result_file_is_an_exception() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "head -c 2097152 /dev/zero | tr '\\0' ' ' > \"$LARAVEL_WORKER_RESULT\"\n\
         printf '{\"action\":\"delete\"}' >> \"$LARAVEL_WORKER_RESULT\"",
    );
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Verbose");
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1, "the job failed");
    assert!(
        rows[0]
            .exception
            .contains("the handler wrote a result file of more than 1048576 bytes"),
        "{}",
        rows[0].exception
    );
}
