//! The Composer package `laravel-worker/laravel-worker` (`php/`, issue 44
//! part 1) in the tests' real Laravel 8.83 app: installed as Composer
//! installs a path repository, found by Laravel's own package discovery;
//! `laravel-worker:install` fetching the binary from a local HTTP server
//! (a release archive made here with `tar` from the test build, checked
//! against its SHA256SUMS) or from a file; `php artisan laravel-worker`
//! running the first job of the app's SQLite database queue through the
//! package's bridge; and the version checks of both sides. The install
//! page (docs/src/install.md) is followed to the letter: its `sh` blocks
//! are what runs here.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::Scene;
use common::composer::{self, StaticServer, VERSION};
use common::jobs_table::JobsTable;
use common::laravel::{self, App};
use serde_json::json;

/// The install page, whose `sh` blocks the first test runs.
const INSTALL_PAGE: &str = include_str!("../../docs/src/install.md");

/// The release folder of the install page's URL, replaced by the local server's.
const PAGE_RELEASES: &str = "https://downloads.example.com/laravel-worker/0.1.0";

/// A scene with the app on its SQLite database queue (`jobs` and
/// `failed_jobs` in one file) and a skeleton's composer.json; `None`
/// (after a note) when PHP, Laravel or Composer is missing.
fn composer_app() -> Option<(Scene, App, JobsTable)> {
    if !laravel::available() || !composer::available() {
        return None;
    }
    let s = Scene::new();
    let app = App::new(&s)?;
    app.set_env("QUEUE_CONNECTION", "database");
    let jobs = JobsTable::sqlite(&s.path("failed.sqlite"));
    composer::make_composer_project(&app);
    Some((s, app, jobs))
}

/// The `sh` blocks of the install page, with the page's paths and URL
/// made this test's.
fn page_blocks(app: &App, releases: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in INSTALL_PAGE.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
        .into_iter()
        .map(|b| {
            b.replace("/srv/app", app.dir.to_str().unwrap())
                .replace("/opt/laravel-worker", env!("CARGO_MANIFEST_DIR"))
                .replace(PAGE_RELEASES, releases)
        })
        .collect()
}

/// Installs the package as the page says, but with `--binary` (a copy
/// of the test build): the route of tests that are not about the
/// download. Returns the binary given.
fn install_from_file(app: &App) -> PathBuf {
    install_package_only(app, &composer::package_dir());
    let binary = composer::binary_copy(app.scene());
    let install = format!(
        "php artisan laravel-worker:install --binary={}",
        binary.display()
    );
    composer::run_ok(app, &install);
    binary
}

/// The install page, followed to the letter on the app's SQLite database
/// queue: `composer require` through a path repository (Packagist off,
/// no network) with Laravel's package discovery registering the
/// commands; `laravel-worker:install` downloading the release archive
/// from a local HTTP server, checking it against SHA256SUMS, placing the
/// binary (0755) and writing the config (absolute paths, the package's
/// bridge); `php artisan laravel-worker --stop-when-empty` running the
/// first job, dispatched by the app, through the bridge.
#[test]
fn the_install_page_takes_an_app_to_its_first_job() {
    let Some((s, app, jobs)) = composer_app() else {
        return;
    };
    let releases = s.path("releases");
    std::fs::create_dir_all(&releases).unwrap();
    let archived = composer::release_archive(&releases);
    let server = StaticServer::start(&releases);
    let blocks = page_blocks(&app, &server.url);
    assert_eq!(blocks.len(), 2, "the page's sh blocks: install, run");

    let installed = strip_colours(&composer::run_ok(&app, &blocks[0]));
    assert!(
        installed.contains("Discovered Package: laravel-worker/laravel-worker"),
        "{installed}"
    );
    assert!(installed.contains("SHA-256 checked"), "{installed}");
    let list = app.artisan_ok(&["list"]);
    assert!(list.contains("laravel-worker:install"), "{list}");
    assert!(list.contains("  laravel-worker "), "{list}");
    check_placed(&app, &archived);

    app.dispatch(json!([{"kind": "plain", "tag": "first"}]));
    assert_eq!(jobs.count(), 1, "the app queued its job on its jobs table");
    let ran = composer::run_ok(&app, &blocks[1]);
    assert_eq!(app.attempts("first"), vec![1], "{ran}");
    assert_eq!(jobs.count(), 0, "done and deleted: {ran}");
    assert!(
        ran.contains("Processed:  App\\Jobs\\PlainJob"),
        "queue:work's job lines: {ran}"
    );
}

/// `text` without its ANSI colour codes (`package:discover --ansi`).
fn strip_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The binary placed as config('laravel-worker.binary') says (0755,
/// the bytes of `source`) and the config file written with the app's and
/// the package bridge's absolute paths.
fn check_placed(app: &App, source: &Path) {
    let binary = app.dir.join("bin/laravel-worker");
    let mode = std::fs::metadata(&binary).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "{}", binary.display());
    assert!(
        composer::same_file(&binary, source),
        "{} is not {}",
        binary.display(),
        source.display()
    );
    let config = std::fs::read_to_string(app.dir.join("laravel-worker.toml")).unwrap();
    let base = app.dir.to_str().unwrap();
    assert!(config.contains(&format!("path = \"{base}\"")), "{config}");
    let bridge = app
        .dir
        .join("vendor/laravel-worker/laravel-worker/laravel-worker-bridge.php");
    let bridge = bridge.canonicalize().unwrap();
    assert!(
        config.contains(&format!("\"{}\", \"--app={base}\"", bridge.display())),
        "the package's own bridge, absolute: {config}"
    );
}

/// A download whose SHA-256 differs from the one given (`--sha256`) or
/// from its line in SHA256SUMS is refused (exit 1, saying so): no binary
/// and no config file are left, nor anything in the temporary
/// directory. A URL the server answers with 404 is refused too, naming
/// the status.
#[test]
fn a_wrong_checksum_is_refused_and_nothing_is_placed() {
    let Some((s, app, _jobs)) = composer_app() else {
        return;
    };
    let releases = s.path("releases");
    std::fs::create_dir_all(&releases).unwrap();
    composer::release_archive(&releases);
    let server = StaticServer::start(&releases);
    install_package_only(&app, &composer::package_dir());
    let url = format!("{}/{}", server.url, composer::archive_name());
    let tmp = s.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let wrong = "0".repeat(64);
    let install = |extra: &str| {
        let script = format!("php artisan laravel-worker:install --url={url} {extra}");
        let mut cmd = composer::shell(&app, &script);
        cmd.env("TMPDIR", &tmp);
        cmd.output().unwrap()
    };
    let out = install(&format!("--sha256={wrong}"));
    let text = composer::both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("not the expected {wrong}")),
        "{text}"
    );
    assert!(text.contains("nothing was installed"), "{text}");

    // The published sum says otherwise than the archive.
    std::fs::write(
        releases.join("SHA256SUMS"),
        format!("{wrong}  {}\n", composer::archive_name()),
    )
    .unwrap();
    let out = install("");
    assert_eq!(out.status.code(), Some(1), "{}", composer::both(&out));

    let missing = format!(
        "{}/laravel-worker-9.9.9-x86_64-linux-gnu.tar.gz",
        server.url
    );
    let out = composer::run(
        &app,
        &format!("php artisan laravel-worker:install --url={missing} --sha256={wrong}"),
    );
    let text = composer::both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("answered HTTP 404"), "{text}");

    assert!(!app.dir.join("bin").exists(), "no binary placed");
    assert!(!app.dir.join("laravel-worker.toml").exists(), "no config");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// The install page's `composer` lines alone, with the package at `package`.
fn install_package_only(app: &App, package: &Path) {
    let ours = composer::package_dir();
    let require: String = page_blocks(app, "unused")[0]
        .lines()
        .filter(|l| l.starts_with("composer "))
        .map(|l| format!("{l}\n").replace(ours.to_str().unwrap(), package.to_str().unwrap()))
        .collect();
    composer::run_ok(app, &require);
}

/// Before the install, the run command says to install (exit 1), and
/// an install with no binary to take (no --binary, no URL, none placed
/// nor on the PATH) says where to get one (exit 1). `--binary=PATH`
/// copies a binary (0755); the config file is then kept: a second
/// install refuses to overwrite it (exit 1, naming `--force`) and leaves
/// it as it was, `--force` writes it anew, `--binary-only` leaves it
/// alone.
#[test]
fn install_from_a_file_keeps_an_existing_config_without_force() {
    let Some((_s, app, _jobs)) = composer_app() else {
        return;
    };
    install_package_only(&app, &composer::package_dir());
    for (command, advice) in [
        (
            "php artisan laravel-worker",
            "run php artisan laravel-worker:install first",
        ),
        (
            "php artisan laravel-worker:install",
            "set LARAVEL_WORKER_BINARY_URL",
        ),
    ] {
        let out = composer::run(&app, command);
        let text = composer::both(&out);
        assert_eq!(out.status.code(), Some(1), "{command}: {text}");
        assert!(text.contains(advice), "{command}: {text}");
    }
    let built = install_from_file(&app);
    check_placed(&app, &built);
    let config = app.dir.join("laravel-worker.toml");
    std::fs::write(&config, "# edited\n").unwrap();
    let again = format!(
        "php artisan laravel-worker:install --binary={}",
        built.display()
    );
    let out = composer::run(&app, &again);
    let text = composer::both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("--force"), "{text}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# edited\n");
    composer::run_ok(&app, &format!("{again} --binary-only"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# edited\n");
    composer::run_ok(&app, &format!("{again} --force"));
    check_placed(&app, &built);
}

/// Without pcntl_exec (disabled here), the run command runs the binary
/// as a child: the job runs, and the binary's exit status is the
/// command's, 0 after `--stop-when-empty`, 1 for a connection whose
/// driver the worker does not run (`sync`, refused by the binary).
/// queue:work's options are passed through as given (`--queue`).
#[test]
fn without_pcntl_exec_the_run_command_runs_the_binary_as_a_child() {
    let Some((_s, app, jobs)) = composer_app() else {
        return;
    };
    install_from_file(&app);
    app.dispatch(json!([{"kind": "plain", "tag": "child", "queue": "emails"}]));
    let php = "php -d disable_functions=pcntl_exec artisan laravel-worker";
    let out = composer::run(&app, &format!("{php} --queue=default --stop-when-empty"));
    assert_eq!(out.status.code(), Some(0), "{}", composer::both(&out));
    assert_eq!(jobs.count(), 1, "--queue=default leaves the emails job");
    let ran = composer::run_ok(&app, &format!("{php} --queue=emails --stop-when-empty"));
    assert_eq!(app.attempts("child"), vec![1], "{ran}");
    for run in [php, "php artisan laravel-worker"] {
        let out = composer::run(&app, &format!("{run} sync --stop-when-empty"));
        let text = composer::both(&out);
        assert_eq!(out.status.code(), Some(1), "{run}: {text}");
        assert!(text.contains("\"sync\""), "the binary's refusal: {text}");
    }
}

/// The package carries Cargo.toml's version, in its one constant.
#[test]
fn the_package_version_is_the_binary_version() {
    let text = std::fs::read_to_string(composer::package_dir().join("src/Version.php")).unwrap();
    assert!(
        text.contains(&format!("public const PACKAGE = '{VERSION}';")),
        "php/src/Version.php must carry {VERSION}"
    );
}

/// `composer validate --strict` passes on the package's composer.json.
#[test]
fn the_package_composer_json_is_valid() {
    if !composer::available() {
        return;
    }
    let out = std::process::Command::new("composer")
        .args(["validate", "--strict", "--no-interaction"])
        .current_dir(composer::package_dir())
        .env("COMPOSER_ALLOW_SUPERUSER", "1")
        .env("COMPOSER_DISABLE_NETWORK", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", composer::both(&out));
}

/// A copy of the package whose version is `version`, in the scene.
fn package_of_version(s: &Scene, version: &str) -> std::path::PathBuf {
    let copy = s.path(&format!("package-{version}"));
    laravel::copy_dir(&composer::package_dir(), &copy);
    let file = copy.join("src/Version.php");
    let text = std::fs::read_to_string(&file).unwrap();
    let ours = format!("PACKAGE = '{VERSION}'");
    assert!(text.contains(&ours), "{text}");
    std::fs::write(
        &file,
        text.replace(&ours, &format!("PACKAGE = '{version}'")),
    )
    .unwrap();
    copy
}

/// A package and a binary of different major.minor: `laravel-worker:install`
/// refuses the binary (exit 1, nothing placed) and `php artisan
/// laravel-worker` refuses to start (exit 1), each naming both versions
/// and the older side to upgrade: the package (`composer require`) when
/// the binary is newer, the binary (`laravel-worker:install
/// --binary-only`) when it is older.
#[test]
fn a_binary_of_another_version_is_refused_naming_which_to_upgrade() {
    for (package, advice) in [
        (
            "0.0.1",
            "upgrade the package (composer require laravel-worker/laravel-worker:^",
        ),
        (
            "99.0.0",
            "upgrade the binary to 99.0.x (php artisan laravel-worker:install --binary-only",
        ),
    ] {
        let Some((s, app, _jobs)) = composer_app() else {
            return;
        };
        install_package_only(&app, &package_of_version(&s, package));
        let binary = composer::binary_copy(s.dir.path());
        let binary = binary.to_str().unwrap();
        let both = format!(
            "the laravel-worker binary is {VERSION} and the Composer package laravel-worker/laravel-worker is {package}"
        );
        let out = composer::run(
            &app,
            &format!("php artisan laravel-worker:install --binary={binary}"),
        );
        let text = composer::both(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains(&both) && text.contains(advice),
            "{package}: {text}"
        );
        assert!(!app.dir.join("bin").exists(), "nothing placed");
        assert!(!app.dir.join("laravel-worker.toml").exists(), "no config");

        // Placed by hand, as an old install would have left them.
        std::fs::create_dir_all(app.dir.join("bin")).unwrap();
        std::fs::copy(binary, app.dir.join("bin/laravel-worker")).unwrap();
        std::fs::write(app.dir.join("laravel-worker.toml"), "").unwrap();
        let out = composer::run(&app, "php artisan laravel-worker --stop-when-empty");
        let text = composer::both(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("Not started") && text.contains(advice),
            "{package}: {text}"
        );
    }
}

/// The bridge of the package compares the daemon's version
/// (LARAVEL_WORKER_VERSION, which the daemon gives every handler, see
/// `control.rs::handler_gets_metadata_env_and_the_reserved_payload_on_stdin`)
/// with its own: one stderr line naming the side to upgrade when the
/// major.minor differ, none when they match; the job runs all the same.
#[test]
fn the_bridge_says_which_side_to_upgrade() {
    let Some((_s, app, _jobs)) = composer_app() else {
        return;
    };
    install_package_only(&app, &composer::package_dir());
    let bridge = "vendor/laravel-worker/laravel-worker/laravel-worker-bridge.php";
    let payload = app.scene().join("payload.json");
    let job = json!({"job": "App\\Jobs\\Missing@handle", "data": {}, "attempts": 1});
    std::fs::write(&payload, job.to_string()).unwrap();
    for (daemon, advice) in [
        (
            "99.1.0",
            Some("upgrade the package (composer require laravel-worker/laravel-worker:^99.1)"),
        ),
        ("0.0.1", Some("upgrade the binary to")),
        (VERSION, None),
    ] {
        let script = format!(
            "LARAVEL_WORKER_VERSION={daemon} php {bridge} --app={} < {}",
            app.dir.display(),
            payload.display()
        );
        let out = composer::run(&app, &script);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("\"action\""),
            "the job ran: {stdout}{stderr}"
        );
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("major.minor"))
            .collect();
        match advice {
            Some(advice) => {
                assert_eq!(lines.len(), 1, "{stderr}");
                assert!(
                    lines[0].starts_with("laravel-worker-bridge: the laravel-worker binary is"),
                    "{stderr}"
                );
                assert!(lines[0].contains(advice), "{daemon}: {stderr}");
            }
            None => assert!(lines.is_empty(), "{stderr}"),
        }
    }
}

/// `php artisan laravel-worker` becomes the worker: with pcntl_exec the
/// process artisan ran in is the binary itself (its /proc exe), so
/// SIGTERM from a supervisor reaches the worker, which stops cleanly
/// (exit 0); without pcntl_exec the binary is a child and SIGTERM sent to
/// PHP is forwarded to it, PHP returning its exit status (0).
#[test]
fn the_run_command_becomes_the_worker_and_sigterm_stops_it() {
    let Some((s, app, _jobs)) = composer_app() else {
        return;
    };
    install_from_file(&app);
    let placed = app.dir.join("bin/laravel-worker").canonicalize().unwrap();
    for (n, php) in ["php", "php -d disable_functions=pcntl_exec"]
        .iter()
        .enumerate()
    {
        let out = s.path(&format!("run-{n}.out"));
        let file = std::fs::File::create(&out).unwrap();
        let mut child = composer::shell(&app, &format!("exec {php} artisan laravel-worker"))
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        common::wait_until("the worker's start line", || {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .contains("worker started")
        });
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert_eq!(
            exe == placed,
            n == 0,
            "{php}: pid {pid} runs {}",
            exe.display()
        );
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(status.code(), Some(0), "{php}: {text}");
        assert!(text.contains("worker stopped"), "{php}: {text}");
    }
}
