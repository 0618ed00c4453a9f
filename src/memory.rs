//! The daemon's own memory use, for `--memory`.
//!
//! Laravel compares `memory_get_usage(true)` (PHP's heap) with `--memory`
//! MB. A Rust daemon has no PHP heap; its resident set size is the honest
//! equivalent. Handlers run in their own processes and do not count.

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// Reads this process's resident memory.
pub struct MemoryProbe {
    /// `None` when the platform gives no process table; the check is then off.
    system: Option<System>,
    pid: Pid,
}

impl MemoryProbe {
    /// A probe for the current process.
    pub fn new() -> Self {
        Self::of(std::process::id())
    }

    /// A probe for process `pid` (a handler process, say).
    pub fn of(pid: u32) -> Self {
        MemoryProbe {
            system: System::new()
                .inspect_err(|e| tracing::warn!("memory use cannot be read; --memory is off: {e}"))
                .ok(),
            pid: Pid::from_u32(pid),
        }
    }

    /// Resident set size in bytes (0 if it cannot be read).
    pub fn rss_bytes(&mut self) -> u64 {
        let Some(system) = &mut self.system else {
            return 0;
        };
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[self.pid]),
            false,
            ProcessRefreshKind::nothing().with_memory(),
        );
        system.process(self.pid).map_or(0, |p| p.memory())
    }
}

impl Default for MemoryProbe {
    fn default() -> Self {
        Self::new()
    }
}
