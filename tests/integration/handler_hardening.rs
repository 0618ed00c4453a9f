//! Handlers against crafted jobs and careless setups: metadata that an
//! environment variable cannot hold, secrets in the daemon's environment,
//! files other users could read, and handler programs that cannot run.
//! Real daemon, real Redis, real handler processes.

use crate::common;

use std::path::Path;

use common::{Daemon, Failed, Handler, Job, QueueState, Scene};
use serde_json::json;

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
    let config = s.config_for(&handler);
    let long_id = "i".repeat(200 * 1024);
    let odd = Job::laravel8("App\\Jobs\\Nul\u{0}Name").set("id", json!(long_id));
    s.push(&odd);
    s.run(&config, &["--once", "--tries=1"]);
    // The job ran and is done.
    s.assert_state(QueueState::empty());
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
    s.push(&fails);
    s.run(&config, &["--once", "--tries=1"]);
    let row = Failed::job(&fails).containing("bad\0byte");
    s.assert_state(QueueState::empty().failed([row]));
    let env = env_file(&s.path("env.failed"));
    let exception = env_var(&env, "LARAVEL_WORKER_EXCEPTION").expect("the failed hook ran");
    assert!(exception.contains("bad\u{fffd}byte"), "{exception}");
}

/// The daemon started with `work ARGS` and extra environment `env`, run to
/// its end.
fn work_with_env(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap(), "work"];
    all.extend_from_slice(args);
    Daemon::run(&all, env)
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
    let config = s
        .config()
        .handler(
            Handler::command(&process)
                .queues(&["inherit"])
                .env(&[("EXTRA", "added")]),
        )
        .handler(
            Handler::command(&process)
                .queues(&["clear"])
                .env_clear()
                .env(&[("ONLY", "this"), ("PATH", "/usr/bin:/bin")]),
        )
        .handler(Handler::command(&persistent).queues(&["warm"]).persistent())
        .handler(
            Handler::url("http://127.0.0.1:9/q")
                .queues(&["web"])
                .secret_env("QUEUE_HANDLER_SECRET")
                .token_env("QUEUE_HANDLER_TOKEN"),
        )
        .write();
    for queue in ["inherit", "clear", "warm"] {
        s.push_on(queue, [&Job::laravel8("App\\Jobs\\Env")]);
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
    d.expect_exit(0);
    // Every job ran and is done.
    s.assert_state(QueueState::empty());

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
}

/// A handler program that cannot run, or no `[[handlers]]` at all, used to
/// send every job to failed_jobs. Now `work` refuses to start (exit 1) with
/// a message naming the handler and the program, and the queue is left as
/// it was. A relative path is resolved against the config file's
/// directory (not the working directory); a bare name looked up in PATH and
/// not found there is only a warning.
#[test]
fn handler_programs_that_cannot_run_stop_the_worker_at_start() {
    let s = Scene::new();
    let not_executable = s.path("plain.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let not_executable = not_executable.display().to_string();
    // The config with one handler for `App\Jobs\*` running `program
    // --flag`, or with no handler at all.
    let config_with = |program: Option<&str>| {
        let config = s.config();
        match program {
            Some(program) => {
                config.handler(Handler::argv(&[program, "--flag"]).matching("App\\Jobs\\*"))
            }
            None => config,
        }
        .write()
    };
    let job = Job::laravel8("App\\Jobs\\Waiting");
    s.push(&job);
    let missing = format!("{:?}", s.path("handlers/missing.sh").display().to_string());
    for (program, expected) in [
        (
            Some("/nonexistent/handler.sh"),
            vec![
                "match = \"App\\\\Jobs\\\\*\"",
                "\"/nonexistent/handler.sh\"",
                "does not exist",
            ],
        ),
        (
            Some(not_executable.as_str()),
            vec![&*format!("{not_executable:?}"), "is not executable"],
        ),
        (
            Some("handlers/missing.sh"),
            vec![missing.as_str(), "does not exist"],
        ),
        (None, vec!["no [[handlers]] are configured"]),
    ] {
        let config = config_with(program);
        let mut d = s.work_until_exit(&config, &["--once"]);
        d.expect_exit(1);
        let logs = d.stderr_text();
        for part in expected {
            assert!(logs.contains(part), "{program:?}: {part:?} not in:\n{logs}");
        }
        assert!(!logs.contains("worker started"), "{logs}");
        // The queue is untouched.
        s.assert_state(QueueState::empty().ready([&job]).notify(1));
    }

    // Runnable: a path relative to the config file (in the scene
    // directory, while the working directory is the crate's root), and a
    // bare name PATH may provide later (a warning).
    s.redis.cmd::<i64>(&["DEL", &common::q("default")]);
    s.script("ok.sh", "cat > /dev/null");
    for (program, warns) in [("./ok.sh", false), ("lw-surely-not-installed", true)] {
        let config = config_with(Some(program));
        let d = s.run(&config, &["--once", "--sleep=0"]);
        let logs = d.stderr_text();
        assert_eq!(
            logs.contains("WARN") && logs.contains("not found as an executable file in its PATH"),
            warns,
            "{program}: {logs}"
        );
    }
}

/// An argument that is an absolute path to nothing (the bridge script of an
/// example config whose `/srv/app` was not changed) is warned about at
/// start, naming it; an existing one and a non-path argument are not.
#[test]
fn a_handler_argument_naming_a_missing_path_is_warned_about() {
    let s = Scene::new();
    let program = s.script("ok.sh", "cat > /dev/null");
    let program = program.to_str().unwrap();
    let existing = s.path("bridge.php");
    std::fs::write(&existing, "<?php\n").unwrap();
    let existing = existing.to_str().unwrap();
    for (argument, warns) in [
        ("/srv/nowhere/laravel-worker-bridge.php", true),
        (existing, false),
        ("--app=/srv/nowhere", false),
    ] {
        let config = s
            .config()
            .handler(Handler::argv(&[program, argument]))
            .write();
        let d = s.run(&config, &["--once", "--sleep=0"]);
        let logs = d.stderr_text();
        let warned = logs.lines().any(|l| {
            l.contains("WARN")
                && l.contains("names a path that does not exist")
                && l.contains(argument)
        });
        assert_eq!(warned, warns, "{argument}: {logs}");
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
    let config = s.config_for(&handler);
    let job = Job::laravel8("App\\Jobs\\Verbose");
    s.push(&job);
    s.run(&config, &["--once", "--tries=1"]);
    let row =
        Failed::job(&job).containing("the handler wrote a result file of more than 1048576 bytes");
    s.assert_state(QueueState::empty().failed([row]));
}
