//! Whole jobs, parts 2 and 3 (issue 45): `Bus::chain([A, B, C])`
//! dispatched by the real Laravel 8.83 app, its steps run by a process
//! handler (a shell script), finished by the PHP bridge's finish mode: the
//! chain runs in order, a failure runs the chain's `catch`, no bridge is a
//! loud failure, and a crash between the finish and the delete does not
//! dispatch the next step twice.

use crate::common;

use common::config::Handler;
use common::laravel::{self, App, LARAVEL, Transport};
use common::{Scene, q};
use nix::sys::signal::Signal;
use serde_json::json;

/// The step handler: appends the step's tag (the command's last `tag`, its
/// own: the chained steps' come before it) to `$DIR/ran`, and fails (exit
/// 1) when its own `fail` (its first property) is true.
const STEP: &str = r#"payload=$(cat)
[ "$LARAVEL_WORKER_MODE" = run ] || exit 0
tag=$(printf '%s' "$payload" | grep -o 's:3:\\"tag\\";s:[0-9]*:\\"[^\\]*' | tail -n 1 | sed 's/.*"//')
echo "$tag" >> "$DIR/ran"
own=$(printf '%s' "$payload" | grep -o 's:4:\\"fail\\";b:[01]' | head -n 1)
case "$own" in *b:1) echo "step $tag failed" >&2; exit 1;; esac"#;

/// The scene and app with a chain of `steps` (the step `fail`, if any,
/// throws) dispatched; `None` when PHP or Laravel is missing.
fn chain(fail: Option<&str>) -> Option<(Scene, App)> {
    let s = Scene::new();
    let app = App::new(&s)?;
    let mut spec = json!({"kind": "chain", "tag": "c", "steps": ["a", "b", "c"]});
    if let Some(step) = fail {
        spec["fail"] = json!(step);
    }
    app.dispatch(json!([spec]));
    Some((s, app))
}

/// Steps on the process handler, then `finisher` (the bridge) for
/// everything else.
fn config(s: &Scene, finisher: Option<Handler>) -> std::path::PathBuf {
    let step = Handler::command(&s.script("step.sh", STEP)).matching("App\\Jobs\\ChainStep");
    let config = s.config().laravel(LARAVEL).handler(step);
    match finisher {
        Some(f) => config.handler(f).write(),
        None => config.write(),
    }
}

/// Runs the daemon once with `--stop-when-empty`, four jobs at a time: as
/// `queue:work --stop-when-empty` runs the step a finish pushed before it
/// finds the queue empty, the daemon does not stop on a poll made while a
/// step was still running (and finishing) beside it.
fn drain(s: &Scene, config: &std::path::Path, tries: &str) {
    s.run(
        config,
        &["--stop-when-empty", "--sleep=0", "--concurrency=4", tries],
    );
    assert_eq!(queued(s), 0, "a pushed step was left: ran {:?}", ran(s));
}

fn ran(s: &Scene) -> Vec<String> {
    std::fs::read_to_string(s.path("ran"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Steps on the process handler, finished by `finisher` (its match
/// named by `[bookkeeping] finish_with`), `retry_after` 60.
fn finished_by(s: &Scene, finisher: Handler) -> std::path::PathBuf {
    s.config()
        .laravel(LARAVEL)
        .handler(Handler::command(&s.script("step.sh", STEP)).matching("App\\Jobs\\ChainStep"))
        .handler(finisher)
        .set("bookkeeping", "finish_with", "LaravelWorker\\Finisher")
        .retry_after(60)
        .write()
}

/// The fifo `$DIR/gate` a finisher hangs on while the daemon is killed.
fn make_gate(s: &Scene) {
    let made = std::process::Command::new("mkfifo")
        .arg(s.path("gate"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
}

/// Lets a finisher hung on the gate go, if it outlived the daemon (with
/// no reader there, it did not).
fn open_gate(s: &Scene) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(s.path("gate"));
}

#[test]
fn a_chain_run_by_a_process_handler_runs_in_order() {
    let Some((s, app)) = chain(None) else { return };
    let config = config(&s, Some(app.handler(Transport::PerJob)));
    drain(&s, &config, "--tries=1");
    assert_eq!(ran(&s), ["c.a", "c.b", "c.c"]);
    assert!(
        app.events("handle", "c.a").is_empty(),
        "handle() not run by PHP"
    );
    assert!(s.failed_rows().is_empty());
    // A's and B's finish markers (C has no chain), kept retry_after + 1 h.
    let markers: Vec<String> = s.redis.cmd(&[
        "KEYS",
        "laravel_database_laravel_cache:laravel_worker_finished:*",
    ]);
    assert_eq!(markers.len(), 2, "{markers:?}");
}

#[test]
fn a_failing_step_runs_the_chain_s_catch_and_stops_it() {
    let Some((s, app)) = chain(Some("a")) else {
        return;
    };
    let finisher = app.handler(Transport::Persistent(1));
    let config = config(&s, Some(finisher));
    drain(&s, &config, "--tries=1");
    assert_eq!(ran(&s), ["c.a"], "the chain stops");
    let caught = app.events("chain-catch", "c");
    assert_eq!(caught.len(), 1, "the catch callback ran once: {caught:?}");
    assert_eq!(s.failed_rows().len(), 1);
}

/// The bridge as a finisher that fails (exit 1) its first finish while
/// `$DIR/fail-finish` exists: the step's run then ends as an exception.
fn flaky_finisher(s: &Scene, app: &App) -> Handler {
    let wrapper = s.script(
        "finisher.sh",
        &format!(
            "if [ \"$LARAVEL_WORKER_MODE\" = finish ] && [ -e \"$DIR/fail-finish\" ]; then\n\
               rm \"$DIR/fail-finish\"; echo 'the bridge is down' >&2; exit 1\n\
             fi\nexec php '{}' '{}'",
            laravel::bridge().display(),
            app.app_flag()
        ),
    );
    Handler::command(&wrapper).matching("LaravelWorker\\Finisher")
}

#[test]
fn a_finish_that_fails_releases_the_step_and_the_chain_goes_on() {
    let Some((s, app)) = chain(None) else { return };
    let config = finished_by(&s, flaky_finisher(&s, &app));
    std::fs::write(s.path("fail-finish"), "").unwrap();
    drain(&s, &config, "--tries=2");
    // A's first finish failed: A was released (the attempt counted, as an
    // exception from dispatchNextJobInChain is), ran again and was
    // finished; B and C each once. Before, A was deleted and B never ran.
    assert_eq!(ran(&s), ["c.a", "c.a", "c.b", "c.c"]);
    assert!(s.failed_rows().is_empty());
}

#[test]
fn a_finish_that_fails_on_the_last_try_fails_the_step_and_runs_the_catch() {
    let Some((s, app)) = chain(None) else { return };
    let config = finished_by(&s, flaky_finisher(&s, &app));
    std::fs::write(s.path("fail-finish"), "").unwrap();
    drain(&s, &config, "--tries=1");
    assert_eq!(ran(&s), ["c.a"], "the chain stops");
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].exception.contains("the bridge is down"),
        "the finish's own error is recorded: {}",
        rows[0].exception
    );
    // The failure's finish (finish-failed) ran the chain's catch.
    assert_eq!(app.events("chain-catch", "c").len(), 1);
}

#[test]
fn no_bridge_fails_the_chain_loudly() {
    let Some((s, _app)) = chain(None) else { return };
    let config = config(&s, None);
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert!(ran(&s).is_empty(), "the step is refused before it runs");
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].exception.starts_with(
            "LaravelWorker\\NoBridgeException: App\\Jobs\\ChainStep is part of a chain"
        ),
        "{}",
        rows[0].exception
    );
    assert!(rows[0].exception.contains("[bookkeeping] finish_with"));
}

/// Runs the chain on a daemon killed during A's finish: the finisher
/// hangs on the fifo `gate` (and the daemon is killed there) after the
/// bridge answered (`after_bridge`), or before the bridge starts. Returns
/// the config and the jobs then queued or reserved (`reserved`).
fn killed_in_the_finish(s: &Scene, app: &App, after_bridge: bool) -> (std::path::PathBuf, i64) {
    let hang = "if [ \"$LARAVEL_WORKER_MODE\" = finish ] && [ -e \"$DIR/block\" ]; then\n\
                  rm \"$DIR/block\"; touch \"$DIR/hung\"; cat \"$DIR/gate\" > /dev/null\n\
                fi";
    let php = format!("php '{}' '{}'", laravel::bridge().display(), app.app_flag());
    let body = if after_bridge {
        format!("{php}; rc=$?\n{hang}\nexit $rc")
    } else {
        format!("{hang}\nexec {php}")
    };
    let wrapper = s.script("finisher.sh", &body);
    let config = finished_by(
        s,
        Handler::command(&wrapper).matching("LaravelWorker\\Finisher"),
    );
    std::fs::write(s.path("block"), "").unwrap();
    make_gate(s);
    let mut d = s.work(&config, &["--sleep=0", "--concurrency=1", "--tries=3"]);
    s.wait_for_file("hung");
    d.signal(Signal::SIGKILL);
    d.wait_exit();
    open_gate(s);
    (config, queued(s))
}

/// The queue's `:reserved` key.
fn reserved() -> String {
    format!("{}:reserved", q("default"))
}

/// The jobs queued or reserved.
fn queued(s: &Scene) -> i64 {
    s.redis.llen(&q("default")) + s.redis.zcard(&reserved())
}

#[test]
fn a_crash_after_the_finish_does_not_dispatch_the_next_step_twice() {
    let Some((s, app)) = chain(None) else { return };
    let (config, queued) = killed_in_the_finish(&s, &app, true);
    // B is queued (or reserved ahead by the killed daemon), once.
    assert_eq!(queued, 2, "A and B, once: {:?}", ran(&s));

    // A is reclaimed and runs again; its finish is not done twice.
    s.redis.make_due(&reserved());
    drain(&s, &config, "--tries=3");
    // (B, queued, may run before the reclaimed A.)
    let mut runs = ran(&s);
    runs.sort();
    assert_eq!(
        runs,
        ["c.a", "c.a", "c.b", "c.c"],
        "B and C once: {:?}",
        s.failed_rows()
            .iter()
            .map(|r| r.exception.lines().next().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_crash_before_the_bridge_finished_finishes_again_and_loses_no_step() {
    let Some((s, app)) = chain(None) else { return };
    let (config, queued) = killed_in_the_finish(&s, &app, false);
    assert_eq!(queued, 1, "only A: B was not pushed");

    // A is reclaimed, runs again, and this time its finish pushes B
    // (before, the marker claimed for the killed finish made A's rerun
    // skip it: B and C were lost).
    s.redis.make_due(&reserved());
    drain(&s, &config, "--tries=3");
    assert_eq!(ran(&s), ["c.a", "c.a", "c.b", "c.c"]);
    assert!(s.failed_rows().is_empty());
}

#[test]
fn an_encrypted_job_without_a_bridge_runs_and_is_named_once() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([
        {"kind": "encrypted", "tag": "e1", "secret": "s"},
        {"kind": "encrypted", "tag": "e2", "secret": "s"},
    ]));
    let config = s
        .config()
        .laravel(LARAVEL)
        .script("echo ran >> \"$DIR/ran\"")
        .write();
    let d = s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(ran(&s), ["ran", "ran"], "both run");
    assert!(s.failed_rows().is_empty());
    let warned = d
        .stderr_text()
        .matches("an encrypted job (ShouldBeEncrypted) runs on a handler")
        .count();
    assert_eq!(warned, 1, "{}", d.stderr_text());
}
