//! Directories the daemon cannot write, as systemd's `ProtectSystem=` and
//! `ReadWritePaths=` make them: as root, a mount namespace of the daemon's
//! own (`unshare`) with read-only bind mounts, made writable later from
//! outside (`nsenter`); otherwise file modes.

use std::path::Path;

use super::Daemon;

/// Whether the tests run as root (file modes do not stop root: read-only
/// then takes a mount namespace).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether `program ARGS` runs and succeeds.
fn works(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A way to give the daemon directories it cannot write: as root, a mount
/// namespace of its own (`unshare`) where they are read-only bind mounts,
/// made writable later from outside (`nsenter`); otherwise file modes.
pub enum Sandbox {
    /// A mount namespace with read-only bind mounts (root).
    Namespace,
    /// File modes (not root).
    Modes,
}

impl Sandbox {
    /// The way available here, or `None` after saying why on stderr.
    pub fn available() -> Option<Sandbox> {
        if !running_as_root() {
            return Some(Sandbox::Modes);
        }
        if works("unshare", &["--mount", "--propagation", "private", "true"])
            && works("nsenter", &["--version"])
        {
            Some(Sandbox::Namespace)
        } else {
            super::skip::note(
                "mount namespace",
                "running as root, and no mount namespace can be made here \
                 (unshare --mount and nsenter, with CAP_SYS_ADMIN), so nothing can be read-only",
            );
            None
        }
    }

    /// Starts `work ARGS` with `read_only` read-only and the directories of
    /// `writable` (inside them) writable again, as systemd's
    /// `ProtectSystem=` + `ReadWritePaths=` do.
    pub fn work(
        &self,
        config: &Path,
        args: &[&str],
        read_only: &[&Path],
        writable: &[&Path],
    ) -> Daemon {
        let mut all = vec!["--config", config.to_str().unwrap(), "work"];
        all.extend_from_slice(args);
        match self {
            Sandbox::Modes => {
                for dir in read_only {
                    set_tree_writable(dir, false);
                }
                for dir in writable {
                    set_tree_writable(dir, true);
                }
                Daemon::start(&all, &[])
            }
            Sandbox::Namespace => {
                let mut script = String::new();
                for dir in read_only {
                    let d = shell_quote(dir);
                    script.push_str(&format!(
                        "mount --bind {d} {d} && mount -o remount,bind,ro {d} && "
                    ));
                }
                for dir in writable {
                    let d = shell_quote(dir);
                    script.push_str(&format!(
                        "mount --bind {d} {d} && mount -o remount,bind,rw {d} && "
                    ));
                }
                script.push_str("exec \"$@\"");
                Daemon::start_wrapped(
                    &[
                        "unshare",
                        "--mount",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        &script,
                        "sh",
                    ],
                    &all,
                    &[],
                )
            }
        }
    }

    /// Makes `dir` (read-only for `daemon`) writable again, without
    /// restarting it.
    pub fn make_writable(&self, daemon: &Daemon, dir: &Path) {
        match self {
            Sandbox::Modes => set_tree_writable(dir, true),
            Sandbox::Namespace => {
                let pid = daemon.pid().to_string();
                let status = std::process::Command::new("nsenter")
                    .args([
                        "--target",
                        &pid,
                        "--mount",
                        "mount",
                        "-o",
                        "remount,bind,rw",
                    ])
                    .arg(dir)
                    .status()
                    .unwrap();
                assert!(status.success(), "nsenter mount: {status}");
            }
        }
    }
}

impl Sandbox {
    /// Undoes what [`Sandbox::work`] did to `dir` once the daemon is gone
    /// (so that its temporary directory can be removed): file modes are
    /// set back; a namespace went away with the daemon.
    pub fn restore(&self, dir: &Path) {
        if let Sandbox::Modes = self {
            set_tree_writable(dir, true);
        }
    }
}

/// `'path'` for sh.
fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Modes 0755/0644 (writable) or 0555/0444 on `dir` and the files in it.
fn set_tree_writable(dir: &Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    let (d, f) = if writable {
        (0o755, 0o644)
    } else {
        (0o555, 0o444)
    };
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f)).unwrap();
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(d)).unwrap();
}
