//! What every handler process gets: its own process group, a death signal
//! tied to the daemon, and a group kill with a grace period.

use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// Makes `cmd` start in a new process group (so the whole group can be
/// signalled) and receive SIGKILL if the daemon dies (`PR_SET_PDEATHSIG`),
/// so no job keeps running unowned while another worker reclaims it. It
/// does not inherit systemd's `NOTIFY_SOCKET` and watchdog variables.
///
/// The death signal only covers a parent that dies after it is armed. If
/// the daemon dies between the fork and the child's `prctl`, no signal
/// will ever come; so once it is armed the child checks that its parent is
/// still the daemon (whose pid is taken here, before the fork) and exits
/// instead of running the handler when it is not: it has been reparented
/// to init or a subreaper. Together the two leave no window.
///
/// The signal follows the thread that forked, not the process: handlers
/// must be spawned from a thread that lives as long as the daemon (the
/// daemon's current-thread runtime spawns them all from its main thread).
///
/// `env` decides what else of the daemon's environment the handler sees.
pub fn isolate(cmd: &mut Command, env: &Environment) {
    env.apply(cmd);
    isolate_under(cmd, nix::unistd::getpid());
}

/// What a handler process sees of the daemon's environment
/// (`[[handlers]] env` and `env_clear`), and the secrets kept from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Start from an empty environment instead of the daemon's.
    pub clear: bool,
    /// Variables set for the handler (after the removals below).
    pub set: Vec<(String, String)>,
    /// Variables of the daemon's environment the handler must not see: the
    /// ones named by any handler's `token_env` or `secret_env`.
    pub remove: Vec<String>,
}

impl Environment {
    /// Applies this environment to `cmd`: clears or removes, then sets.
    /// The daemon's own `LARAVEL_WORKER_*` variables are added later and
    /// win over `set`.
    pub fn apply(&self, cmd: &mut Command) {
        if self.clear {
            cmd.env_clear();
        } else {
            for var in &self.remove {
                cmd.env_remove(var);
            }
        }
        for (var, value) in &self.set {
            cmd.env(var, value);
        }
    }
}

/// [`isolate`], with `daemon` as the parent the child must find after
/// arming its death signal.
fn isolate_under(cmd: &mut Command, daemon: Pid) {
    cmd.process_group(0).kill_on_drop(true);
    // systemd's notify socket and watchdog belong to the worker, not to the
    // programs it runs.
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        cmd.env_remove(var);
    }
    // SAFETY: runs in the forked child before exec and only makes the
    // prctl and getppid system calls, which are async-signal-safe, and
    // builds an io::Error from an errno (no allocation).
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            parent_is(daemon)
        });
    }
}

/// `Ok` when this process's parent is `daemon`; else ESRCH, which makes
/// the forked child exit before exec (its parent died before the death
/// signal was armed).
fn parent_is(daemon: Pid) -> std::io::Result<()> {
    if nix::unistd::getppid() == daemon {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH))
    }
}

/// The process group of a spawned child (its pid, as it leads its group).
pub fn group_of(child: &Child) -> Option<Pid> {
    child.id().map(|id| Pid::from_raw(id as i32))
}

/// SIGTERM to the whole group; SIGKILL after `grace` if the leader has not
/// exited by then. Waits for the leader and returns the last signal sent
/// (SIGTERM when the leader exited within `grace`, else SIGKILL), for the
/// log line that says how a handler was stopped.
pub async fn terminate(child: &mut Child, group: Option<Pid>, grace: Duration) -> Signal {
    let Some(group) = group else {
        let _ = child.kill().await;
        return Signal::SIGKILL;
    };
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
        return Signal::SIGKILL;
    }
    Signal::SIGTERM
}

/// Logs that a handler was stopped because the job ran past its timeout
/// (Laravel's worker would have killed itself here; we stop only the
/// handler): the job, its id, the timeout in seconds, the handler's pid
/// and the signal that ended it.
pub fn log_timeout_kill(job: &str, id: &str, timeout_secs: u64, pid: Option<u32>, signal: Signal) {
    tracing::warn!(
        job,
        id,
        timeout = timeout_secs,
        pid,
        signal = signal.as_str(),
        "the job ran past its timeout of {timeout_secs} s: its handler was stopped with {}",
        signal.as_str()
    );
}

/// Kills a handler's whole process group when dropped, unless disarmed:
/// a call abandoned mid-way (the worker's drain deadline) leaves nothing
/// running behind it.
#[derive(Debug)]
pub struct GroupKill(Option<Pid>);

impl GroupKill {
    /// A guard for `group`.
    pub fn new(group: Option<Pid>) -> Self {
        GroupKill(group)
    }

    /// The call ended normally; the owner cleans up.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        kill_leftovers(self.0.take());
    }
}

/// SIGKILL to whatever is left of a group whose leader has exited
/// (processes it started in the background).
pub fn kill_leftovers(group: Option<Pid>) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child runs the handler only when its parent is the daemon it was
    /// spawned for. A child that finds another parent once its death signal
    /// is armed (the daemon died during the fork) exits before exec; here
    /// that parent is simulated by naming a pid that is not ours.
    #[tokio::test]
    async fn a_child_whose_daemon_is_gone_does_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let marker = |name: &str| dir.path().join(name);
        let spawn = |daemon: Pid, name: &str| {
            let mut cmd = Command::new("/bin/sh");
            cmd.arg("-c")
                .arg(format!("touch '{}'", marker(name).display()));
            isolate_under(&mut cmd, daemon);
            cmd.spawn()
        };

        let mut ours = spawn(nix::unistd::getpid(), "ran").expect("spawns under its daemon");
        assert!(ours.wait().await.unwrap().success());
        assert!(marker("ran").exists(), "the handler ran");

        // Pid 1 is never this test process's pid, nor its children's parent.
        let orphan = spawn(Pid::from_raw(1), "orphan");
        let err = orphan.expect_err("a child with another parent must not start");
        assert_eq!(err.raw_os_error(), Some(nix::libc::ESRCH), "{err}");
        assert!(!marker("orphan").exists(), "the handler did not run");
    }
}
