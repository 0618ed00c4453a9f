//! The daemon's own memory use, for `--memory`.
//!
//! Laravel compares `memory_get_usage(true)` (PHP's heap) with `--memory`
//! MB. A Rust daemon has no PHP heap; its resident set size is the honest
//! equivalent. Handlers run in their own processes and do not count.

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// A job whose payload (original + reserved copies) is at least this many
/// bytes is large: after it, memory is given back (the queue connection is
/// reopened and [`trim`] called; see `worker::task`).
pub const LARGE_JOB: usize = 1024 * 1024;

/// Allocations of at least this many bytes get pages of their own from the
/// system, returned to it when freed (glibc's `M_MMAP_THRESHOLD`).
pub const OWN_PAGES_AT: usize = 1024 * 1024;

/// Makes the allocator give every allocation of [`OWN_PAGES_AT`] bytes or
/// more pages of its own, returned to the system as soon as it is freed.
///
/// glibc starts with that threshold at 128 KiB but raises it, up to 32 MiB,
/// each time such a block is freed; after one large job, the buffers of the
/// next (the Redis reply, the payload copies) would come from the heap and
/// stay resident after it. A fixed threshold keeps the daemon's resident
/// size close to what it holds: the worker's own allocations are far below
/// 1 MiB except a large job's payload and its buffers. No-op off glibc.
pub fn give_back_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning value of glibc's allocator; it is
    // called once, at start, before the worker allocates for any job.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_PAGES_AT as libc::c_int);
    }
}

/// Returns the allocator's free memory to the system (`malloc_trim`,
/// glibc only; a no-op elsewhere).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap; it has no
    // preconditions and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

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
