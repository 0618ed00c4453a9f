//! The Packages page (docs/src/packages.md) followed to the letter with the
//! .deb `packaging/build` made (the build packages.rs shares): the
//! download's sums checked, the .deb unpacked with `dpkg-deb -x` into a
//! scratch root (in place of `apt install`, which needs root and this
//! machine's dpkg database; packages.rs installs it on a throwaway copy),
//! its config pointed at the app with the page's `sed` line, and the worker
//! started with the command of the page's systemd drop-in, on the tests'
//! Laravel 8.83 app and its SQLite database queue. The scratch root stands
//! for `/`: the page's `/etc/…` and `/usr/…` paths are read under it, and
//! `/var/www/shop` is the app.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::Scene;
use common::jobs_table::JobsTable;
use common::laravel::{self, App};
use serde_json::json;

/// The page whose commands run here.
const PACKAGES_PAGE: &str = include_str!("../../docs/src/packages.md");

/// The page's code blocks of language `lang`, in order.
fn blocks(lang: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in PACKAGES_PAGE.lines() {
        let line = line.trim();
        match &mut current {
            None if line == format!("```{lang}") => current = Some(String::new()),
            Some(block) if line == "```" => {
                found.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    found
}

/// The one line of the page's `lang` blocks that starts with `start`.
fn page_line(lang: &str, start: &str) -> String {
    let lines: Vec<String> = blocks(lang)
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| l.starts_with(start))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one {start:?} line in packages.md: {lines:?}"
    );
    lines[0].clone()
}

/// `line` with the page's paths made this test's: `/etc` and `/usr` under
/// the scratch `root`, `/var/www/shop` the app.
fn relocated(line: &str, root: &Path, app: &Path) -> String {
    let root = root.display();
    line.replace("/var/www/shop", app.to_str().unwrap())
        .replace(" /etc/", &format!(" {root}/etc/"))
        .replace("/usr/bin/", &format!("{root}/usr/bin/"))
        .replace("\"/usr/share/", &format!("\"{root}/usr/share/"))
}

#[test]
fn the_packages_page_takes_the_deb_to_an_apps_first_job() {
    let Some(built) = crate::packages::built() else {
        return;
    };
    if !laravel::available() {
        return;
    }
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.set_env("QUEUE_CONNECTION", "database");
    let jobs = JobsTable::sqlite(&s.path("failed.sqlite"));

    let check = page_line("sh", "sha256sum -c");
    let sums = Command::new("sh")
        .args(["-ec", &check])
        .current_dir(&built.dir)
        .output()
        .unwrap();
    assert!(sums.status.success(), "{check}: {sums:?}");

    let root = s.path("root");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .args([&built.deb, &root])
        .status()
        .unwrap();
    assert!(unpacked.success(), "dpkg-deb -x");
    let sed = page_line("sh", "sed -i 's#/srv/app#");
    common::composer::run_ok(&app, &relocated(&sed, &root, &app.dir));
    // What the config names of the package's own files, read under the root.
    let config = root.join("etc/laravel-worker/laravel-worker.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, relocated(&text, &root, &app.dir)).unwrap();

    app.dispatch(json!([{"kind": "plain", "tag": "first"}]));
    assert_eq!(jobs.count(), 1, "the app queued its job on its jobs table");
    let exec = page_line("ini", "ExecStart=/usr/bin/laravel-worker ");
    let command = relocated(exec.trim_start_matches("ExecStart="), &root, &app.dir);
    let ran = common::composer::run_ok(&app, &format!("{command} --stop-when-empty"));
    assert_eq!(app.attempts("first"), vec![1], "{command}\n{ran}");
    assert_eq!(jobs.count(), 0, "done and deleted: {ran}");
}
