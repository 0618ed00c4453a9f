//! artisan's command-line habits: `-q`/`-v`, `pause`/`resume` refusing an
//! unknown connection, and the shell completions and man page generated
//! from the command line's definition.

use crate::common;

use common::{Daemon, Job, Scene};

#[test]
fn quiet_and_verbose_set_the_log_level() {
    let s = Scene::new();
    // A job that fails: its failed hook is logged at debug level.
    let config = s.config().script("cat > /dev/null; exit 1").write();
    let c = config.to_str().unwrap();
    let work = ["work", "--stop-when-empty", "--sleep=0", "--tries=1"];
    // A non-empty RUST_LOG (the harness sets one) wins over the flags;
    // an empty one counts as unset.
    let run = |flag: Option<&str>| {
        s.push(&Job::laravel8("App\\Jobs\\Fails"));
        let mut args = vec!["--config", c];
        args.extend(flag);
        args.extend(work);
        let mut d = Daemon::start(&args, &[("RUST_LOG", "")]);
        d.expect_exit(0);
        d.stderr_text()
    };
    let default = run(None);
    assert!(default.contains("worker starting"), "{default}");
    assert!(!default.contains("DEBUG"), "{default}");
    let quiet = run(Some("-q"));
    assert!(
        !quiet.contains("INFO") && !quiet.contains("WARN"),
        "-q still logs INFO or WARN:\n{quiet}"
    );
    let verbose = run(Some("-v"));
    assert!(verbose.contains("DEBUG"), "-v logs no DEBUG:\n{verbose}");
    assert!(!verbose.contains("TRACE"), "{verbose}");
}

/// Outside `work`, a command's output is not preceded by one `setting …`
/// line per value read from the `.env` (17 to 22 of them before): they are
/// logged with `-v`; `work` still logs them at start.
#[test]
fn settings_lines_come_with_work_or_verbose_only() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").write();
    let env = s.path(".env");
    std::fs::write(
        &env,
        "APP_NAME=shop\nQUEUE_CONNECTION=redis\nREDIS_QUEUE=mail\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), "--env-file"];
        all.push(env.to_str().unwrap());
        all.extend_from_slice(args);
        let mut d = Daemon::start(&all, &[("RUST_LOG", "")]);
        d.expect_exit(0);
        d.stderr_text()
    };
    let monitor = run(&["monitor", "redis:mail"]);
    assert!(!monitor.contains("setting "), "{monitor}");
    let verbose = run(&["-v", "monitor", "redis:mail"]);
    assert!(verbose.contains("setting "), "{verbose}");
    let work = run(&["work", "--stop-when-empty", "--sleep=0"]);
    assert!(work.contains("setting "), "{work}");
}

#[test]
fn pause_and_resume_refuse_an_unknown_connection() {
    let s = Scene::new();
    let config = s.config().write();
    for command in ["pause", "resume"] {
        let mut d = Daemon::cli(&config, &[command, "redis-typo:default"]);
        d.expect_exit(1);
        let log = d.stderr_text();
        assert!(
            log.contains("unknown queue connection \"redis-typo\"")
                && log.contains("configured connection is \"redis\""),
            "{command}: {log}"
        );
    }
    let keys: Vec<String> = s.redis.cache(&["KEYS", "*"]);
    assert!(keys.is_empty(), "keys written: {keys:?}");
    Daemon::cli(&config, &["pause", "redis:default"]).expect_exit(0);
}

#[test]
fn completions_and_man_page_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let mut d = Daemon::run(&["completions", shell], &[]);
        d.expect_exit(0);
        let script = d.stdout.join("\n");
        for word in ["laravel-worker", "prune-failed", "demo", "stop-when-empty"] {
            assert!(script.contains(word), "{shell}: no {word:?}");
        }
    }
    let mut d = Daemon::run(&["man"], &[]);
    d.expect_exit(0);
    let page = d.stdout.join("\n");
    assert!(
        page.starts_with(".ie") || page.contains(".TH laravel-worker"),
        "{page}"
    );
    for word in ["work", "prune\\-failed", "demo", "\\-\\-config"] {
        assert!(page.contains(word), "man page: no {word:?}");
    }
}

/// An app on Laravel 8.x (`[app] laravel = "8.83"`) gets Laravel 8's job
/// lines, `[time][id] Processing: Name` then `Processed:` or `Failed:`,
/// which its operators grep for; a newer app keeps the DONE/FAIL lines.
#[test]
fn job_lines_follow_the_apps_laravel_version() {
    let s = Scene::new();
    let fails = "cat > /dev/null\ncase \"$LARAVEL_WORKER_JOB_NAME\" in *Fails) exit 1 ;; esac";
    let config = s.config().script(fails).laravel("8.83").write();
    let ok = Job::laravel8("App\\Jobs\\Works");
    let bad = Job::laravel8("App\\Jobs\\Fails");
    let args = ["--stop-when-empty", "--sleep=0", "--tries=1"];

    s.push_on("default", [&ok, &bad]);
    let d = s.run(&config, &args);
    // After the `[Y-m-d H:i:s]` stamp (21 characters).
    let expected = [
        format!("[{}] Processing: App\\Jobs\\Works", ok.id()),
        format!("[{}] Processed:  App\\Jobs\\Works", ok.id()),
        format!("[{}] Processing: App\\Jobs\\Fails", bad.id()),
        format!("[{}] Failed:     App\\Jobs\\Fails", bad.id()),
    ];
    assert_eq!(d.stdout.len(), expected.len(), "{:?}", d.stdout);
    for (line, rest) in d.stdout.iter().zip(&expected) {
        let stamp = line.get(..21).unwrap_or_default();
        assert!(stamp.starts_with("[20") && stamp.ends_with(']'), "{line}");
        assert_eq!(&line[21..], rest.as_str(), "{line}");
    }

    s.push_on("default", [&ok]);
    let config = s.config().script(fails).laravel("11.0").write();
    let d = s.run(&config, &args);
    assert!(
        d.stdout.len() == 1 && d.stdout[0].ends_with(" DONE"),
        "{:?}",
        d.stdout
    );
}

/// `retry --range=N-M` adds the ids N…M to those given, as artisan's
/// `--range`; with a uuid store no numeric id names a job, and each is
/// reported as Laravel's uuid providers report it.
#[test]
fn retry_range_names_numeric_ids() {
    let s = Scene::new();
    let config = s.config().failed_driver("redis").write();
    let mut d = Daemon::cli(&config, &["retry", "--range=1-2", "--range=junk"]);
    d.expect_exit(0);
    for line in [
        "   ERROR  Unable to find failed job with ID [1].",
        "   ERROR  Unable to find failed job with ID [2].",
        "   INFO  No retryable jobs found.",
    ] {
        assert!(
            d.stdout.iter().any(|l| l == line),
            "{line:?} in {:?}",
            d.stdout
        );
    }
    assert!(
        !d.stdout
            .iter()
            .any(|l| l.contains("[junk]") || l.contains("[3]")),
        "{:?}",
        d.stdout
    );
    Daemon::cli(&config, &["retry", "--range=1-20000"]).expect_exit(1);
}

/// `health` without `--file` or a config says what to give, not an
/// unrelated error of a store it never touches (before: "[failed] driver =
/// \"database-uuids\" needs a database").
#[test]
fn health_without_a_file_says_what_to_give() {
    let mut d = Daemon::run(&["health"], &[]);
    d.expect_exit(1);
    let log = d.stderr_text();
    assert!(log.contains("no heartbeat file to check"), "{log}");
    assert!(!log.contains("[failed]"), "{log}");
}
