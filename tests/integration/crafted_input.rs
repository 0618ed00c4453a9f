//! Crafted and oversized jobs against the real daemon: deep nesting,
//! numeric-string attempts, odd names. None may crash the worker or fail a
//! job Laravel would run.

use crate::common;

use std::path::PathBuf;

use common::payloads::Job;
use common::{Handler, Scene, q};
use serde_json::{Value, json};

/// `O:3:"Foo":1:{s:1:"x";` + `levels` nested one-element arrays + `}`.
fn deep_command(levels: usize) -> String {
    let mut s = String::from("O:3:\"Foo\":1:{s:1:\"x\";");
    s.push_str(&"a:1:{i:0;".repeat(levels));
    s.push_str("N;");
    s.push_str(&"}".repeat(levels));
    s.push('}');
    s
}

fn job_with_command(command: &str) -> Job {
    Job::laravel8("App\\Jobs\\Deep").set(
        "data",
        json!({"commandName": "App\\Jobs\\Deep", "command": command}),
    )
}

/// A process-mode handler that logs `NAME has-command|no-command`.
fn recording_handler(s: &Scene) -> PathBuf {
    s.script(
        "h.sh",
        "cat > /dev/null\n\
         if [ -n \"$LARAVEL_WORKER_COMMAND_FILE\" ]; then c=has-command; else c=no-command; fi\n\
         echo \"$LARAVEL_WORKER_JOB_NAME $c\" >> \"$LOG\"",
    )
}

/// A persistent handler's script: appends each request line to the job
/// log and answers it `done`.
const LOGS_EACH_REQUEST: &str = "while IFS= read -r line; do printf '%s\\n' \"$line\" >> \"$LOG\"; \
     call=${line#{\\\"call\\\":}; echo \"{\\\"call\\\":${call%%,*},\\\"action\\\":\\\"done\\\"}\" >&3; done";

/// The reproduction of the stack overflow: 40,000 levels (the crash began
/// near 30,781). The worker must survive, run the job without the decoded
/// command, say why, and go on with the next job.
#[test]
fn a_deeply_nested_command_runs_without_its_json_and_the_worker_survives() {
    let s = Scene::new();
    let config = s.config().command(&recording_handler(&s)).write();
    s.redis
        .push("default", &job_with_command(&deep_command(40_000)).build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\After").build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    assert_eq!(
        s.log(),
        ["App\\Jobs\\Deep no-command", "App\\Jobs\\After has-command"]
    );
    assert!(
        d.stderr
            .iter()
            .any(|l| l.contains("WARN") && l.contains("deeper than 510 levels")),
        "a warning says why: {:?}",
        d.stderr
    );
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert!(s.failed_rows().is_empty());
}

/// Persistent handlers read the command from the request line; a command
/// deep enough to make that line unreadable by PHP's json_decode (512) is
/// left out, and one just within the limit is passed whole.
#[test]
fn persistent_requests_carry_the_command_only_within_the_depth_limit() {
    let (s, config) = Scene::configured(|c| c.script(LOGS_EACH_REQUEST).tune(Handler::persistent));
    // The object is one level, the arrays the rest.
    s.redis
        .push("default", &job_with_command(&deep_command(509)).build());
    s.redis
        .push("default", &job_with_command(&deep_command(510)).build());
    s.redis
        .push("default", &job_with_command(&deep_command(40_000)).build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    let lines = s.log();
    assert_eq!(lines.len(), 3);
    // Read the way a PHP handler reads them: the line must stay within
    // json_decode's depth (checked by counting, as serde_json stops at 128).
    let depth = |line: &str| {
        let (mut depth, mut max, mut in_str, mut esc) = (0i32, 0i32, false, false);
        for c in line.chars() {
            match (in_str, esc, c) {
                (true, true, _) => esc = false,
                (true, false, '\\') => esc = true,
                (true, false, '"') => in_str = false,
                (true, ..) => {}
                (false, _, '"') => in_str = true,
                (false, _, '[' | '{') => {
                    depth += 1;
                    max = max.max(depth);
                }
                (false, _, ']' | '}') => depth -= 1,
                _ => {}
            }
        }
        max
    };
    assert_eq!(depth(&lines[0]), 511, "request + object + 509 arrays");
    assert!(lines[0].contains("\"command\":{\"__class\":\"Foo\""));
    assert!(
        !lines[1].contains("\"command\""),
        "511 levels would not be readable"
    );
    assert!(!lines[2].contains("\"command\""));
    assert!(s.failed_rows().is_empty());
}

/// `"attempts":"0"`: Laravel's pop script adds 1 in Lua, which converts the
/// string, so Laravel runs the job. So must we, counting attempt 1.
#[test]
fn string_attempts_are_counted_as_laravel_counts_them() {
    let (s, config) = Scene::recording("exit 1");
    let job = Job::laravel8("App\\Jobs\\Str").set("attempts", json!("0"));
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once", "--tries=3"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    assert_eq!(
        s.log(),
        [format!("run App\\Jobs\\Str {} 1 default", job.id())]
    );
    // Released with the attempt counted, as a number.
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(
        delayed.len(),
        1,
        "released, not failed: {:?}",
        s.failed_rows()
    );
    let released: Value = serde_json::from_str(&delayed[0].0).unwrap();
    assert_eq!(released["attempts"], json!(1));
}

/// What Lua cannot turn into a number is a job Laravel loses; here it goes
/// to the failed store instead, never to a handler.
#[test]
fn non_numeric_attempts_are_failed_not_run() {
    let (s, config) = Scene::recording("");
    let job = Job::laravel8("App\\Jobs\\Bad").set("attempts", json!("zero"));
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once"]);
    assert_eq!(d.code(), Some(0));
    assert!(s.log().is_empty());
    assert_eq!(s.failed_rows().len(), 1);
}

/// JSON nested 300 levels is valid for Laravel (json_decode allows 511)
/// and must run; 600 levels is what PHP refuses too: failed as invalid.
#[test]
fn payload_nesting_is_accepted_up_to_php_json_decode_depth() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "cat > /dev/null");
    let config = s.config().command(&handler).write();
    let deep_data = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    for (name, levels) in [("App\\Jobs\\Ok", 300), ("App\\Jobs\\TooDeep", 600)] {
        let job = Job::string(&format!("{name}@handle"), json!({"x": 0}));
        let text = job
            .build()
            .replace("{\"x\":0}", &format!("{{\"x\":{}}}", deep_data(levels)));
        s.redis.push("default", &text);
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    let log = s.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].starts_with("run App\\Jobs\\Ok "));
    let failed = s.failed_rows();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].exception.contains("deeper than 511"),
        "{}",
        failed[0].exception
    );
}

/// A NUL and 200 KiB in displayName / id are valid JSON strings; the
/// payload layer keeps them and the job runs (persistent handlers get them
/// in the request, not in the environment).
#[test]
fn odd_display_names_and_ids_do_not_fail_the_job() {
    let (s, config) = Scene::configured(|c| c.script(LOGS_EACH_REQUEST).tune(Handler::persistent));
    let long_id = "i".repeat(200 * 1024);
    let job = Job::laravel8("App\\Jobs\\Odd")
        .set("displayName", json!("App\\Jobs\\Odd\u{0}x"))
        .set("id", json!(long_id));
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    let request: Value = serde_json::from_str(&s.log()[0]).unwrap();
    assert_eq!(request["name"], json!("App\\Jobs\\Odd\u{0}x"));
    assert_eq!(request["id"].as_str().map(str::len), Some(200 * 1024));
    assert!(s.failed_rows().is_empty());
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

/// A displayName and handler output carrying newlines and terminal escapes
/// are printed escaped: one artisan line per job, one log line per event.
#[test]
fn control_characters_are_escaped_in_job_lines_and_logs() {
    let noisy = "cat > /dev/null\nprintf 'out\\nFAKE-STDOUT-LINE\\033[2J\\n'\nprintf 'err\\r\\nFAKE-STDERR-LINE\\033]0;title\\007\\n' >&2\nexit 1";
    let (s, config) = Scene::configured(|c| c.script(noisy));
    let job = Job::laravel8("App\\Jobs\\Ctl").set(
        "displayName",
        json!("App\\Jobs\\Ctl\nFAKE-NAME-LINE\u{1b}[31m\u{202e}"),
    );
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once"]);
    assert_eq!(d.code(), Some(0));
    let job_lines: Vec<&String> = d
        .stdout
        .iter()
        .filter(|l| l.contains("FAKE-NAME-LINE"))
        .collect();
    assert_eq!(job_lines.len(), 1, "{:?}", d.stdout);
    assert!(
        job_lines[0].contains("App\\Jobs\\Ctl\\nFAKE-NAME-LINE\\x1b[31m\\u{202e}")
            && job_lines[0].ends_with("FAIL"),
        "{}",
        job_lines[0]
    );
    for line in d.stdout.iter().chain(&d.stderr) {
        assert!(
            !line.contains('\u{1b}') && !line.contains('\r') && !line.contains('\u{202e}'),
            "raw control: {line:?}"
        );
        for fake in ["FAKE-NAME-LINE", "FAKE-STDOUT-LINE", "FAKE-STDERR-LINE"] {
            assert!(!line.starts_with(fake), "forged line: {line:?}");
        }
    }
    assert!(
        d.stderr
            .iter()
            .any(|l| l.contains("out\\nFAKE-STDOUT-LINE\\x1b[2J")),
        "the output is logged, escaped: {:?}",
        d.stderr
    );
}

/// Absurd option values stop `work` at start (exit 1) with a message naming
/// the flag or setting, instead of a panic (exit 101) or a silent change.
#[test]
fn absurd_options_are_refused_at_start() {
    let (s, config) = Scene::recording("");
    s.push(&Job::laravel8("App\\Jobs\\Waits"));
    let config = config.to_str().unwrap();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 8] = [
        (&["--sleep", "1e20"], &[], "--sleep"),
        (&["--backoff=1,99999999999"], &[], "--backoff"),
        (&["--delay=18446744073709551615"], &[], "--delay"),
        (&["--rest", "1e20"], &[], "--rest"),
        (&["--memory=-1"], &[], "--memory"),
        (&["--queue=high,,low"], &[], "--queue"),
        (
            &[],
            &[("REDIS_QUEUE_RETRY_AFTER", "18446744073709551615")],
            "retry_after",
        ),
        (
            &[],
            &[("REDIS_QUEUE_RETRY_AFTER", "9223372036854775808")],
            "retry_after",
        ),
    ];
    for (flags, env, named) in cases {
        let mut args = vec!["--config", config, "work", "--once"];
        args.extend_from_slice(flags);
        refused_naming(&args, env, named);
    }
    // The settings added since: counts of processes and slots (bounded as
    // --concurrency), durations (as retry_after), Horizon's trims.
    const NEAR_2_63: i64 = i64::MAX;
    type Edit = for<'c> fn(common::config::Config<'c>) -> common::config::Config<'c>;
    let settings: [(Edit, &[&str], &str); 16] = [
        (
            |c| c.set("worker", "max_processes", 1i64 << 61),
            &["--balance=simple"],
            "max_processes = 2305843009213693952",
        ),
        (
            |c| c.set("worker", "max_processes", 1_000_000_000),
            &["--balance=simple"],
            "max_processes = 1000000000",
        ),
        (
            |c| c,
            &["--balance=auto", "--max-processes=100000"],
            "max_processes",
        ),
        (
            |c| c.set("worker", "balance_max_shift", NEAR_2_63),
            &["--balance=auto"],
            "balance_max_shift",
        ),
        (
            |c| c.set("worker", "min_processes", NEAR_2_63),
            &[],
            "min_processes",
        ),
        (
            |c| c.set("worker", "trip_backoff", NEAR_2_63),
            &[],
            "trip_backoff",
        ),
        (
            |c| c.set("metrics", "idle_timeout", NEAR_2_63),
            &[],
            "[metrics] idle_timeout",
        ),
        (
            |c| c.set("metrics", "header_timeout", NEAR_2_63),
            &[],
            "[metrics] header_timeout",
        ),
        (
            |c| c.set("worker", "kill_grace", NEAR_2_63),
            &[],
            "kill_grace",
        ),
        (
            |c| c.set("worker", "drain_timeout", NEAR_2_63),
            &[],
            "drain_timeout",
        ),
        (
            |c| c.tune(|h| h.persistent().idle_timeout(NEAR_2_63)),
            &[],
            "idle_timeout = 9223372036854775807",
        ),
        (
            |c| c.tune(|h| h.persistent().processes(100_000)),
            &[],
            "processes = 100000",
        ),
        (
            |c| c.tune(|h| h.persistent().processes(100_000).min_processes(100_000)),
            &[],
            "processes = 100000",
        ),
        (
            |c| c.tune(|h| h.persistent().max_memory(NEAR_2_63)),
            &[],
            "max_memory",
        ),
        (
            |c| {
                c.set("horizon", "enabled", true)
                    .set("horizon", "trim_recent", NEAR_2_63)
            },
            &[],
            "trim_recent",
        ),
        (
            |c| {
                c.set("horizon", "enabled", true)
                    .set("horizon", "trim_failed", 1i64 << 60)
            },
            &[],
            "trim_failed",
        ),
    ];
    for (i, (edit, flags, named)) in settings.iter().enumerate() {
        let config = edit(s.config().recording("")).write_as(&format!("absurd-{i}.toml"));
        let mut args = vec!["--config", config.to_str().unwrap(), "work", "--once"];
        args.extend_from_slice(flags);
        refused_naming(&args, &[], named);
    }
    assert!(s.log().is_empty());
    assert_eq!(s.redis.llen(&q("default")), 1, "the job waits, untouched");
}

/// Starts `work` with `args`, expects exit status 1 and an error line
/// naming `named`.
fn refused_naming(args: &[&str], env: &[(&str, &str)], named: &str) {
    let mut d = common::Daemon::start(args, env);
    assert_eq!(d.code(), Some(1), "{args:?} {env:?}: {:?}", d.stderr);
    assert!(
        d.stderr
            .iter()
            .any(|l| l.contains("ERROR") && l.contains(named)),
        "{args:?} {env:?}: {:?}",
        d.stderr
    );
}

/// A payload whose `backoff` is PHP's largest integer is released into the
/// far future, not wrapped around to a time already due.
#[test]
fn a_backoff_past_the_end_of_time_releases_into_the_future() {
    let (s, config) = Scene::recording("exit 1");
    let job = Job::laravel8("App\\Jobs\\Flaky").set("backoff", json!("9223372036854775807"));
    s.redis.push("default", &job.build());
    s.work_until_exit(&config, &["--once", "--tries=2"]);
    let key = format!("{}:delayed", q("default"));
    assert_eq!(s.redis.cmd::<i64>(&["ZCARD", &key]), 1, "released");
    let far: Vec<String> = s.redis.cmd(&["ZRANGEBYSCORE", &key, "1e18", "+inf"]);
    assert_eq!(far.len(), 1, "due after the year 30,000,000,000");
}

/// `--queue=` (empty) works the default queue, as artisan's
/// `option('queue') ?: default` does, instead of polling the key `queues:`.
#[test]
fn an_empty_queue_flag_means_the_default_queue() {
    let s = Scene::new();
    let config = s
        .config()
        .set("queue", "queue", "work")
        .recording("")
        .write();
    let job = Job::laravel8("App\\Jobs\\Default");
    s.redis.push("work", &job.build());
    let mut d = s.work_until_exit(&config, &["--queue=", "--once"]);
    assert_eq!(d.code(), Some(0), "{:?}", d.stderr);
    assert_eq!(
        s.log(),
        [format!("run App\\Jobs\\Default {} 1 work", job.id())]
    );
}

/// A job of 20 MB used to leave the daemon holding several times that
/// (the Redis client's buffers, the allocator's free pages), so that the
/// next check of `--memory` stopped the worker (exit 12). Memory is now
/// given back after a large job: two such jobs and a small one all run
/// under `--memory=64`.
#[test]
fn memory_is_given_back_after_large_jobs() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "cat > /dev/null; [ -s \"$LARAVEL_WORKER_COMMAND_FILE\" ] && echo decoded >> \"$DIR/decoded\"",
    );
    let config = s.config().command(&handler).write();
    let blob = "x\"\\/é".repeat(20 * 1024 * 1024 / 8);
    let command = format!(
        "O:3:\"Big\":1:{{s:4:\"blob\";s:{}:\"{blob}\";}}",
        blob.len()
    );
    for _ in 0..2 {
        s.redis.push("default", &job_with_command(&command).build());
    }
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Small").build());
    // Two 40 MB payloads take 13 s on an idle 2-core machine and more than
    // the usual 30 s under the whole suite's load: the test is of memory.
    let mut d = s.work(&config, &["--stop-when-empty", "--sleep=0", "--memory=64"]);
    d.wait_exit_within(std::time::Duration::from_secs(120));
    assert_eq!(
        d.code(),
        Some(0),
        "exit 12 means --memory was reached: {:?}",
        d.stderr
    );
    assert_eq!(s.log().len(), 3);
    let decoded = std::fs::read_to_string(s.path("decoded")).unwrap_or_default();
    assert_eq!(
        decoded.lines().count(),
        3,
        "each handler got the decoded command"
    );
}

/// `decode_command = false`: no command file for a process handler and no
/// `command` in a persistent request, though the job carries one; the
/// default passes it.
#[test]
fn decode_command_false_passes_no_decoded_command() {
    let s = Scene::new();
    let handler = recording_handler(&s);
    let command = "O:3:\"Foo\":1:{s:1:\"x\";i:1;}";
    for (decode, expected) in [(true, "has-command"), (false, "no-command")] {
        let config = s
            .config()
            .handler(Handler::command(&handler).decode_command(decode))
            .write();
        s.redis.push("default", &job_with_command(command).build());
        s.run(&config, &["--once", "--sleep=0"]);
        let log = s.log();
        assert_eq!(
            log.last().map(String::as_str),
            Some(format!("App\\Jobs\\Deep {expected}").as_str()),
            "decode_command = {decode}: {log:?}"
        );
    }
}
