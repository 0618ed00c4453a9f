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
pub fn isolate(cmd: &mut Command) {
    cmd.process_group(0).kill_on_drop(true);
    // systemd's notify socket and watchdog belong to the worker, not to the
    // programs it runs.
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        cmd.env_remove(var);
    }
    // SAFETY: runs in the forked child before exec and only makes the prctl
    // system call, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

/// The process group of a spawned child (its pid, as it leads its group).
pub fn group_of(child: &Child) -> Option<Pid> {
    child.id().map(|id| Pid::from_raw(id as i32))
}

/// SIGTERM to the whole group; SIGKILL after `grace` if the leader has not
/// exited by then. Waits for the leader.
pub async fn terminate(child: &mut Child, group: Option<Pid>, grace: Duration) {
    let Some(group) = group else {
        let _ = child.kill().await;
        return;
    };
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
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
