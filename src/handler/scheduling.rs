//! The Linux CPU scheduling policy a command handler's processes run under
//! (`[[handlers]] scheduling`).
//!
//! A queue worker's handlers are batch work: what counts is how many jobs
//! they get through, not how soon one of them gets the CPU back. Linux's
//! default policy (`SCHED_OTHER`) lets a process that was sleeping take
//! the CPU at once from the one running when it is woken. Every request the
//! worker writes wakes a handler, so on a busy machine each one would throw
//! the worker off its CPU in the middle of its loop: a context switch per
//! job, and the next requests and settles written later. Under
//! `SCHED_BATCH` a woken handler waits instead until the running task
//! sleeps or its time slice ends; it keeps the same share of CPU as any
//! process of its nice value.

use tokio::process::Command;

/// The scheduling policy of a command handler's processes, set in the
/// child between fork and exec. Their own children inherit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduling {
    /// `SCHED_BATCH` (the default, `"batch"`): the CPU share of its nice
    /// value, but it does not preempt the running task when woken.
    #[default]
    Batch,
    /// `SCHED_OTHER` (`"other"`): Linux's default for every process.
    Other,
    /// `SCHED_IDLE` (`"idle"`): runs only when no other process wants the
    /// CPU; for jobs that must never slow anything else on the machine.
    Idle,
}

impl Scheduling {
    /// The names the config accepts, as systemd's `CPUSchedulingPolicy=`
    /// spells them.
    pub const NAMES: [&'static str; 3] = ["batch", "other", "idle"];

    /// The policy named `name` (one of [`Self::NAMES`]); `None` for any
    /// other name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "batch" => Some(Scheduling::Batch),
            "other" => Some(Scheduling::Other),
            "idle" => Some(Scheduling::Idle),
            _ => None,
        }
    }

    /// The `sched_setscheduler` policy number.
    fn policy(self) -> nix::libc::c_int {
        match self {
            Scheduling::Batch => nix::libc::SCHED_BATCH,
            Scheduling::Other => nix::libc::SCHED_OTHER,
            Scheduling::Idle => nix::libc::SCHED_IDLE,
        }
    }

    /// Makes `cmd`'s process run under this policy. From `SCHED_OTHER` or
    /// `SCHED_BATCH` (a worker started normally) any process may switch to
    /// these three. Linux may refuse the call: a worker itself started
    /// under `SCHED_IDLE` without room in its `RLIMIT_NICE`, or a seccomp
    /// filter. Then the handler runs under the policy it inherited rather
    /// than not at all.
    pub fn apply(self, cmd: &mut Command) {
        let policy = self.policy();
        // SAFETY: runs in the forked child before exec and only makes the
        // sched_setscheduler system call, which is async-signal-safe, on a
        // parameter block on the stack (no allocation).
        unsafe {
            cmd.pre_exec(move || {
                let param = nix::libc::sched_param { sched_priority: 0 };
                let _ = nix::libc::sched_setscheduler(0, policy, &param);
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_and_others_are_refused() {
        for name in Scheduling::NAMES {
            assert!(Scheduling::from_name(name).is_some(), "{name}");
        }
        assert_eq!(Scheduling::from_name("fifo"), None);
        assert_eq!(Scheduling::from_name("Batch"), None);
        assert_eq!(Scheduling::default(), Scheduling::Batch);
    }
}
