//! Skips that show: a test that needs an optional tool which is absent
//! returns early, prints why (stderr, seen with `--nocapture`), and
//! appends one line to `target/test-skips.log` (tab-separated: tool, test,
//! reason). `.ci/run` empties that file before `cargo test` and prints a
//! summary of it afterwards (`.ci/skip-summary`), one line per missing
//! tool, so a run says how many tests were skipped and why without flags.

use std::io::Write;
use std::path::PathBuf;

/// The skip log shared by every test binary of one run.
pub fn log_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("test-skips.log")
}

/// Records that the current test is (partly) skipped because `tool` is
/// missing, with `why` saying what is not checked.
pub fn note(tool: &str, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    eprintln!("SKIP {test}: {tool} is not available: {why}");
    let line = format!(
        "{}\t{}\t{}\n",
        tool.replace(['\t', '\n'], " "),
        test.replace(['\t', '\n'], " "),
        why.replace(['\t', '\n'], " ")
    );
    let path = log_path();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // One short O_APPEND write per line: lines of tests running at once
    // do not mix.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Whether `program` is on the `PATH`.
pub fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// Where `program` is on the `PATH`, if it is.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// True when `program` is on the `PATH`; else records the skip (see
/// [`note`]) and returns false.
pub fn have(program: &str, why: &str) -> bool {
    if on_path(program) {
        return true;
    }
    note(program, why);
    false
}
