//! The heartbeat file: proof of life for health checks that cannot talk to
//! systemd (Docker's `HEALTHCHECK`, Kubernetes' exec probes, cron scripts).
//!
//! With `[worker] heartbeat_file` (or `--heartbeat-file`) set, the worker
//! loop rewrites the file every [`PERIOD`] while it moves, at the same
//! points as the systemd watchdog (so a long `--sleep`, a BLPOP or a long
//! job do not let it age). `laravel-worker health --max-age=SECONDS` exits
//! 0 while the file is younger than that, 1 otherwise. The file's
//! modification time is what counts; its content is one JSON line for
//! people and scripts: `{"pid":…,"in_flight":…,"processed":…,"state":…}`.
//! The worker removes it when it exits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the loop rewrites the file: 5 seconds.
pub const PERIOD: Duration = Duration::from_secs(5);

/// Random temporary names tried before giving up (each taken one means
/// something else is there).
const TMP_TRIES: usize = 16;

/// Opens `path` for writing only if it does not exist yet, never through a
/// symbolic link (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644 before the
/// umask).
fn create_exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
}

/// `health`'s default `--max-age`: 60 seconds, above [`PERIOD`] plus the
/// longest a single Redis command may hold the loop (30 s).
pub const DEFAULT_MAX_AGE: u64 = 60;

/// The heartbeat file the worker writes.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    path: PathBuf,
}

impl Heartbeat {
    /// A heartbeat at `path` (nothing is written yet).
    pub fn new(path: PathBuf) -> Self {
        Heartbeat { path }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a new temporary file beside the real one, under a random
    /// name (`.{name}.{random}.tmp`), with `O_CREAT | O_EXCL | O_NOFOLLOW`:
    /// whatever already sits at that name (a file, a planted symbolic link)
    /// is never opened, let alone truncated; the next random name is tried.
    fn create_tmp(&self) -> std::io::Result<(PathBuf, std::fs::File)> {
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut last = None;
        for _ in 0..TMP_TRIES {
            let tmp = dir.join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
            match create_exclusive(&tmp) {
                Ok(file) => return Ok((tmp, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into()))
    }

    /// Checks that the file can be written, without writing it (so `health`
    /// does not say healthy before the loop runs): creates and removes a
    /// temporary file beside it.
    ///
    /// # Errors
    /// The directory is missing or not writable.
    pub fn check_writable(&self) -> std::io::Result<()> {
        let (tmp, _) = self.create_tmp()?;
        std::fs::remove_file(&tmp)
    }

    /// Replaces the file with `content` (plus a newline) atomically: written
    /// to a new temporary file beside it (see [`Heartbeat::create_tmp`]),
    /// then renamed over it, so `health` never reads half a file and a
    /// symbolic link at the path is replaced, not followed.
    ///
    /// # Errors
    /// The directory is missing or not writable.
    pub fn write(&self, content: &str) -> std::io::Result<()> {
        let (tmp, mut file) = self.create_tmp()?;
        let result = writeln!(file, "{content}").and_then(|()| std::fs::rename(&tmp, &self.path));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Removes the file (at exit). A file already gone is fine.
    pub fn remove(&self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), "cannot remove the heartbeat file: {e}");
        }
    }
}

/// Why `health` says unhealthy.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    /// No heartbeat file: the worker is not running, has not started its
    /// loop yet, or writes elsewhere.
    #[error("no heartbeat file at {0}: the worker is not running (or has not started its loop)")]
    Missing(PathBuf),
    /// The file exists but its age cannot be read.
    #[error("cannot read the heartbeat file {path}: {error}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// The worker has not rewritten the file for too long.
    #[error(
        "the heartbeat file {path} is {age} s old (more than {max_age} s): the worker loop is stuck or gone"
    )]
    Stale {
        /// The file.
        path: PathBuf,
        /// Whole seconds since it was written.
        age: u64,
        /// The limit, in seconds.
        max_age: u64,
    },
}

/// Checks the heartbeat at `path`: its age when it is at most `max_age`
/// seconds old (a modification time in the future counts as age zero).
///
/// # Errors
/// [`Unhealthy`]: missing, unreadable or too old.
pub fn check(path: &Path, max_age: u64) -> Result<Duration, Unhealthy> {
    let modified =
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|error| match error.kind() {
                std::io::ErrorKind::NotFound => Unhealthy::Missing(path.to_path_buf()),
                _ => Unhealthy::Unreadable {
                    path: path.to_path_buf(),
                    error,
                },
            })?;
    let age = SystemTime::now()
        .duration_since(modified)
        .unwrap_or(Duration::ZERO);
    if age > Duration::from_secs(max_age) {
        return Err(Unhealthy::Stale {
            path: path.to_path_buf(),
            age: age.as_secs(),
            max_age,
        });
    }
    Ok(age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_stale_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heartbeat");
        let beat = Heartbeat::new(path.clone());
        assert!(matches!(check(&path, 60), Err(Unhealthy::Missing(_))));

        beat.write("{\"pid\":1}").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"pid\":1}\n");
        assert!(check(&path, 60).unwrap() < Duration::from_secs(5));
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let two_minutes_ago = SystemTime::now() - Duration::from_secs(120);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(two_minutes_ago)
            .unwrap();
        match check(&path, 60) {
            Err(Unhealthy::Stale { age, max_age, .. }) => {
                assert!((120..130).contains(&age), "{age}");
                assert_eq!(max_age, 60);
            }
            other => panic!("{other:?}"),
        }
        assert!(check(&path, 300).is_ok());

        beat.remove();
        assert!(!path.exists());
        beat.remove();
    }

    #[test]
    fn a_planted_symlink_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = create_exclusive(&link).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        // A link to nowhere is not followed either (no file is created).
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("created?"), &dangling).unwrap();
        assert!(create_exclusive(&dangling).is_err());
        assert!(!dir.path().join("created?").exists());

        // The heartbeat path itself a link: replaced, the target untouched.
        let beat = Heartbeat::new(link.clone());
        beat.write("{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "{}\n");
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let beat = Heartbeat::new(dir.path().join("no/such/dir/heartbeat"));
        assert!(beat.write("x").is_err());
        assert!(beat.check_writable().is_err());
        let beat = Heartbeat::new(dir.path().join("heartbeat"));
        beat.check_writable().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
