//! The installable packages (issue 44): `packaging/build --binary` on the
//! binary under test makes a .deb (cargo-deb), an .rpm (cargo-generate-rpm)
//! and a .tar.gz of Cargo.toml's version, with SHA256SUMS. Checked with the
//! distributions' own tools: lintian on the .deb, the file lists of
//! `dpkg-deb -c`, `rpm -qlp` and `tar -t` against the lists of
//! docs/src/packages.md, the binary taken out of each package (dpkg-deb -x,
//! rpm2cpio | cpio, tar) running `--version` and `man`, `sha256sum -c`.
//! Each part skips with a printed reason when its tool is absent.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Cargo.toml's version: the one every package must carry.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The packages made by one run of the script, shared by this file's tests.
pub(crate) struct Built {
    /// The folder holding the packages and SHA256SUMS.
    pub(crate) dir: PathBuf,
    /// The .deb.
    pub(crate) deb: PathBuf,
    rpm: PathBuf,
    tarball: PathBuf,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn repo_file(path: &str) -> String {
    let full = repo().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Runs `program args`, panicking with its output unless it exits 0.
fn run(program: &str, args: &[&str], cwd: Option<&Path>) -> Output {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The one file in `dir` whose name ends with `suffix`.
fn one_file(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "*{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap()
}

/// Builds the packages once (the first test to ask waits for it, the others
/// for the first); `None`, with the skip noted, without the packaging tools.
pub(crate) fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Result<Built, String>> = OnceLock::new();
    for tool in ["cargo-deb", "cargo-generate-rpm"] {
        if !common::skip::have(
            tool,
            "the packages are not built nor checked (.ci/run installs it)",
        ) {
            return None;
        }
    }
    // A failed build is kept too: the other tests report it, not build again.
    let built = BUILT.get_or_init(|| {
        let dir = repo().join("target/packaging/test-dist");
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new("bash")
            .arg("packaging/build")
            .args(["--binary", env!("CARGO_BIN_EXE_laravel-worker"), "--out"])
            .arg(&dir)
            .current_dir(repo())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("bash: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "packaging/build: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Built {
            deb: one_file(&dir, ".deb"),
            rpm: one_file(&dir, ".rpm"),
            tarball: one_file(&dir, ".tar.gz"),
            dir,
        })
    });
    match built {
        Ok(built) => Some(built),
        Err(failed) => panic!("{failed}"),
    }
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn the_script_makes_three_packages_of_one_version_with_their_sums() {
    let Some(built) = built() else { return };
    let arch = std::env::consts::ARCH;
    assert!(name(&built.deb).starts_with(&format!("laravel-worker_{VERSION}-1_")));
    assert_eq!(
        name(&built.rpm),
        format!("laravel-worker-{VERSION}-1.{arch}.rpm")
    );
    assert_eq!(
        name(&built.tarball),
        format!("laravel-worker-{VERSION}-{arch}-linux-gnu.tar.gz")
    );
    let sums = std::fs::read_to_string(built.dir.join("SHA256SUMS")).unwrap();
    let listed: BTreeSet<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let expected = [&built.deb, &built.rpm, &built.tarball].map(|p| name(p));
    assert_eq!(
        listed,
        expected.iter().map(String::as_str).collect(),
        "{sums}"
    );
    if common::skip::have("sha256sum", "SHA256SUMS is not verified") {
        let out = run("sha256sum", &["-c", "SHA256SUMS"], Some(&built.dir));
        assert_eq!(text(&out).matches(": OK").count(), 3, "{}", text(&out));
    }
}

#[test]
fn lintian_passes_on_the_deb() {
    let Some(built) = built() else { return };
    if !common::skip::have(
        "lintian",
        "the .deb is not linted (apt-get install lintian)",
    ) {
        return;
    }
    // Errors and warnings fail; packaging/deb/lintian-overrides justifies
    // each tag it silences.
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--no-tag-display-limit"])
        .arg(&built.deb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lintian: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The list of files in the fenced block that follows `<!-- files: KIND -->`
/// in docs/src/packages.md.
fn book_list(kind: &str) -> BTreeSet<String> {
    let page = repo_file("docs/src/packages.md");
    let marker = format!("<!-- files: {kind} -->");
    let after = page
        .split_once(&marker)
        .unwrap_or_else(|| panic!("no {marker} in docs/src/packages.md"))
        .1;
    let block = after
        .split("```")
        .nth(1)
        .unwrap_or_else(|| panic!("no code block after {marker}"));
    block
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The regular files of a `tar -tv`-style listing (`dpkg-deb -c`, `tar
/// -tvzf`), as absolute paths, `strip` removed from their front.
fn files_of_listing(listing: &str, strip: &str) -> BTreeSet<String> {
    listing
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_start_matches(strip))
        .map(String::from)
        .collect()
}

#[test]
fn the_file_lists_of_the_packages_are_the_books() {
    let Some(built) = built() else { return };
    let deb = text(&run("dpkg-deb", &["-c", built.deb.to_str().unwrap()], None));
    assert_eq!(files_of_listing(&deb, ""), book_list("deb"), "{deb}");

    let top = format!(
        "laravel-worker-{VERSION}-{}-linux-gnu/",
        std::env::consts::ARCH
    );
    let tar = text(&run(
        "tar",
        &["-tvzf", built.tarball.to_str().unwrap()],
        None,
    ));
    let inside: Vec<&str> = tar
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    assert!(inside.iter().all(|p| p.starts_with(&top)), "{tar}");
    assert_eq!(
        files_of_listing(&tar, top.trim_end_matches('/')),
        book_list("tar.gz"),
        "{tar}"
    );

    if common::skip::have(
        "rpm",
        "the .rpm's file list is not read (apt-get install rpm)",
    ) {
        let rpm = text(&run("rpm", &["-qlp", built.rpm.to_str().unwrap()], None));
        let listed: BTreeSet<String> = rpm.lines().map(String::from).collect();
        assert_eq!(listed, book_list("rpm"), "{rpm}");
    }
}

/// Runs the extracted binary's `--version` and `man`.
fn runs_version_and_man(binary: &Path) {
    let shown = binary.display().to_string();
    let version = text(&run(&shown, &["--version"], None));
    assert!(
        version.starts_with(&format!("laravel-worker {VERSION}")),
        "{shown}: {version}"
    );
    let man = text(&run(&shown, &["man"], None));
    assert!(man.contains(".TH laravel-worker 1"), "{shown}: {man}");
}

#[test]
fn the_binary_taken_out_of_each_package_runs() {
    let Some(built) = built() else { return };
    let root = tempfile::tempdir().unwrap();
    let deb_root = root.path().join("deb");
    run(
        "dpkg-deb",
        &[
            "-x",
            built.deb.to_str().unwrap(),
            deb_root.to_str().unwrap(),
        ],
        None,
    );
    runs_version_and_man(&deb_root.join("usr/bin/laravel-worker"));

    run(
        "tar",
        &[
            "-xzf",
            built.tarball.to_str().unwrap(),
            "-C",
            root.path().to_str().unwrap(),
        ],
        None,
    );
    let top = format!(
        "laravel-worker-{VERSION}-{}-linux-gnu",
        std::env::consts::ARCH
    );
    runs_version_and_man(&root.path().join(top).join("laravel-worker"));

    if common::skip::have(
        "rpm2cpio",
        "the .rpm's binary is not run (apt-get install rpm)",
    ) && common::skip::have(
        "cpio",
        "the .rpm's binary is not run (apt-get install cpio)",
    ) {
        let rpm_root = root.path().join("rpm");
        std::fs::create_dir(&rpm_root).unwrap();
        let script = format!("rpm2cpio '{}' | cpio -idm --quiet", built.rpm.display());
        run("sh", &["-c", &script], Some(&rpm_root));
        runs_version_and_man(&rpm_root.join("usr/bin/laravel-worker"));
    }
}

#[test]
fn the_config_is_kept_on_upgrade_and_readable_by_the_workers_user_only() {
    let Some(built) = built() else { return };
    let deb = built.deb.to_str().unwrap();
    let conffiles = text(&run("dpkg-deb", &["-I", deb, "conffiles"], None));
    assert!(
        conffiles
            .lines()
            .any(|l| l == "/etc/laravel-worker/laravel-worker.toml"),
        "{conffiles}"
    );
    let postinst = text(&run("dpkg-deb", &["-I", deb, "postinst"], None));
    assert!(
        postinst.contains(
            "--add root laravel-worker 0640 \\\n            /etc/laravel-worker/laravel-worker.toml"
        ),
        "{postinst}"
    );
    if !common::skip::have(
        "rpm",
        "the .rpm's config flags are not read (apt-get install rpm)",
    ) {
        return;
    }
    let format =
        "[%{FILENAMES} %{FILEFLAGS:fflags} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILEMODES:perms}\n]";
    let rpm = built.rpm.to_str().unwrap();
    let files = text(&run("rpm", &["-qp", "--qf", format, rpm], None));
    assert!(
        files
            .lines()
            .any(|l| l
                == "/etc/laravel-worker/laravel-worker.toml cn root laravel-worker -rw-r-----"),
        "{files}"
    );
}

/// Whether every line of `script` holding `action` follows (comments
/// aside) a line holding `guard`.
fn only_after(script: &str, action: &str, guard: &str) -> bool {
    let lines: Vec<&str> = script.lines().map(str::trim).collect();
    lines.iter().enumerate().all(|(at, line)| {
        !line.contains(action)
            || lines[..at]
                .iter()
                .rev()
                .find(|l| !l.starts_with('#'))
                .is_some_and(|l| l.contains(guard))
    })
}

#[test]
fn the_units_are_installed_but_neither_enabled_nor_started() {
    let Some(built) = built() else { return };
    let deb = built.deb.to_str().unwrap();
    let postinst = text(&run("dpkg-deb", &["-I", deb, "postinst"], None));
    // cargo-deb's scripts with enable = false and start = false: systemd
    // learns the units; an upgrade re-enables only a unit the admin had
    // enabled, and restarts only a running one.
    assert!(postinst.contains("daemon-reload"), "{postinst}");
    assert!(
        only_after(&postinst, "deb-systemd-helper enable", "was-enabled"),
        "{postinst}"
    );
    for never in [
        "deb-systemd-invoke start",
        "deb-systemd-invoke restart",
        "_dh_action",
        "systemctl enable",
        "systemctl start",
    ] {
        assert!(
            !postinst.contains(never),
            "{never} in the postinst:\n{postinst}"
        );
    }
    if !common::skip::have(
        "rpm",
        "the .rpm's scripts are not read (apt-get install rpm)",
    ) {
        return;
    }
    let scripts = text(&run(
        "rpm",
        &["-qp", "--scripts", built.rpm.to_str().unwrap()],
        None,
    ));
    assert!(scripts.contains("useradd --system"), "{scripts}");
    for never in [
        "systemctl enable",
        "systemctl start",
        "systemctl restart",
        "preset",
    ] {
        assert!(
            !scripts.contains(never),
            "{never} in the .rpm's scripts:\n{scripts}"
        );
    }
}

/// The value of `key=` in an INI-like file (systemd units, supervisord).
fn ini_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .map(str::trim)
}

/// The issue's trap: supervisord ran as www-data while the config the pages
/// install is readable by the laravel-worker group only. Every deploy file
/// and page runs as, and installs for, the user the packages make.
#[test]
fn the_deploy_files_and_pages_use_the_user_the_packages_make() {
    let supervisord = repo_file("config/supervisord.conf");
    assert_eq!(ini_value(&supervisord, "user"), Some("laravel-worker"));
    assert_eq!(ini_value(&supervisord, "umask"), Some("007"));
    for unit in ["laravel-worker.service", "laravel-worker@.service"] {
        let unit = repo_file(&format!("systemd/{unit}"));
        assert_eq!(ini_value(&unit, "User"), Some("laravel-worker"));
        assert_eq!(ini_value(&unit, "SupplementaryGroups"), Some("www-data"));
    }
    assert!(repo_file("packaging/deb/postinst").contains("--group --no-create-home"));
    assert!(repo_file("packaging/rpm/pre-install.sh").contains("groupadd --system laravel-worker"));
    // Every hand install of the config gives it to that group.
    for page in [
        "docs/src/getting-started.md",
        "docs/src/migrating/index.md",
        "docs/src/migrating/systemd.md",
        "docs/src/migrating/supervisord.md",
        "config/deploy.toml",
        "systemd/laravel-worker.service",
        "systemd/laravel-worker@.service",
    ] {
        for line in repo_file(page).lines() {
            if line.contains("install") && line.contains("-m 0640") {
                assert!(line.contains("-g laravel-worker"), "{page}: {line}");
            }
        }
    }
}

/// The units, man page and completions as the .deb installs them: the
/// units are the repository's (verified by `deploy.rs`'s systemd-analyze
/// test) but for the binary's path, the man page is the binary's.
#[test]
fn the_deb_installs_the_repositorys_units_and_the_binarys_man_page() {
    let Some(built) = built() else { return };
    let root = tempfile::tempdir().unwrap();
    let deb = built.deb.to_str().unwrap();
    run(
        "dpkg-deb",
        &["-x", deb, root.path().to_str().unwrap()],
        None,
    );
    let usr = root.path().join("usr");
    for unit in ["laravel-worker.service", "laravel-worker@.service"] {
        let installed = std::fs::read_to_string(usr.join("lib/systemd/system").join(unit)).unwrap();
        let expected = repo_file(&format!("systemd/{unit}"))
            .replace("/usr/local/bin/laravel-worker", "/usr/bin/laravel-worker");
        assert_eq!(installed, expected, "{unit}");
        let exec = ini_value(&installed, "ExecStart").unwrap();
        assert!(exec.starts_with("/usr/bin/laravel-worker "), "{exec}");
    }
    let page = usr.join("share/man/man1/laravel-worker.1.gz");
    let man = text(&run("gzip", &["-dc", page.to_str().unwrap()], None));
    let printed = text(&run(env!("CARGO_BIN_EXE_laravel-worker"), &["man"], None));
    assert_eq!(man, printed);
    for completion in [
        "bash-completion/completions/laravel-worker",
        "zsh/vendor-completions/_laravel-worker",
        "fish/vendor_completions.d/laravel-worker.fish",
    ] {
        let script = std::fs::read_to_string(usr.join("share").join(completion)).unwrap();
        assert!(script.contains("laravel-worker"), "{completion}: {script}");
    }
}

/// Installs `package` on a throwaway copy of this machine
/// (packaging/test-install: overlays in a private mount namespace) and
/// returns its "key: value" lines; `None`, with the skip noted, where the
/// overlays cannot be mounted.
fn install_on_a_copy(package: &Path) -> Option<Vec<String>> {
    if !common::skip::have("unshare", "the packages are not installed (util-linux)") {
        return None;
    }
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(repo().join("packaging/test-install"))
        .arg(scratch.path())
        .arg(package)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.code() == Some(97)
        || String::from_utf8_lossy(&out.stderr).contains("unshare failed")
    {
        common::skip::note(
            "overlay mounts",
            "the packages are not installed on a copy of the machine (needs root and overlayfs)",
        );
        return None;
    }
    assert!(
        out.status.success(),
        "packaging/test-install {}: {}\n{}{}",
        package.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text(&out).lines().map(String::from).collect())
}

/// What an install makes of the user, the config and the units, on both
/// formats: the user in www-data, the config root:laravel-worker 0640 and
/// readable by that user, the binary runs as it, no unit enabled; the .deb
/// keeps the ownership on upgrade and drops its override on purge.
#[test]
fn installing_a_package_makes_the_user_who_reads_the_config() {
    let Some(built) = built() else { return };
    let runs = format!("runs: laravel-worker {VERSION}");
    let common_lines = |lines: &[String]| {
        assert_eq!(lines[0], "groups: laravel-worker www-data", "{lines:#?}");
        assert_eq!(lines[1], "config: root:laravel-worker 640", "{lines:#?}");
        assert!(
            lines[2].starts_with("reads: # laravel-worker"),
            "{lines:#?}"
        );
        assert!(lines[3].starts_with(&runs), "{lines:#?}");
        assert_eq!(lines[4], "enabled: 0", "{lines:#?}");
        assert_eq!(lines.last().map(String::as_str), Some("removed: yes"));
    };
    let Some(deb) = install_on_a_copy(&built.deb) else {
        return;
    };
    common_lines(&deb);
    assert_eq!(deb[5], "upgraded: root:laravel-worker 640", "{deb:#?}");
    assert_eq!(deb[6], "override: none", "{deb:#?}");
    if common::skip::have("rpm", "the .rpm is not installed (apt-get install rpm)") {
        let Some(rpm) = install_on_a_copy(&built.rpm) else {
            return;
        };
        common_lines(&rpm);
    }
}
