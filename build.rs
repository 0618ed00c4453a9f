//! Build identity: the git commit the binary was built from, as
//! `LARAVEL_WORKER_GIT_HASH` (`git rev-parse --short HEAD`), or "unknown"
//! outside a git checkout (a source tarball, `cargo install` from a crate).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let hash = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LARAVEL_WORKER_GIT_HASH={hash}");
    // Rebuild when HEAD moves (a commit, a checkout); the paths are the
    // worktree's own when built in a git worktree.
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
