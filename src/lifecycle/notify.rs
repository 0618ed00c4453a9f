//! systemd's service notifications (`sd_notify(3)`), for `Type=notify`
//! units.
//!
//! systemd passes the path of its notification socket in `NOTIFY_SOCKET`
//! and, with `WatchdogSec=`, the watchdog period in `WATCHDOG_USEC`. The
//! worker sends:
//!
//! | message      | when                                                        |
//! |--------------|-------------------------------------------------------------|
//! | `READY=1`    | Redis is reachable and the loop starts                      |
//! | `WATCHDOG=1` | every half `WATCHDOG_USEC`, from the loop, while it moves    |
//! | `STATUS=…`   | jobs in flight and jobs processed, when they change          |
//! | `STOPPING=1` | the loop stops taking jobs and drains                       |
//!
//! Without `NOTIFY_SOCKET` nothing is sent. The datagrams themselves are
//! written by the `sd-notify` crate: the protocol is small, but the crate is
//! the one the Rust ecosystem shares for it, it follows systemd's rules for
//! the variables (`WATCHDOG_PID` naming another process disables the
//! watchdog), and it keeps socket code out of this project. Abstract
//! sockets (`NOTIFY_SOCKET=@…`) are not supported by it; systemd itself
//! uses a path (`/run/systemd/notify`).
//!
//! Handlers inherit `NOTIFY_SOCKET`; with `NotifyAccess=main` (our units)
//! systemd ignores anything they send.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;

/// Sends service notifications to systemd, or nothing when not under a
/// `Type=notify` unit.
#[derive(Debug)]
pub struct Notifier {
    /// `NOTIFY_SOCKET` was set at start.
    enabled: bool,
    /// Half of `WATCHDOG_USEC`, when a watchdog is on for this process.
    watchdog_every: Option<Duration>,
    /// A send has failed already (the first failure is a warning, the rest
    /// are debug lines).
    failed: AtomicBool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from the
    /// environment. A watchdog without a socket, or of 0 µs, is off.
    pub fn from_env() -> Self {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let watchdog_every = sd_notify::watchdog_enabled()
            .filter(|period| enabled && !period.is_zero())
            .map(|period| period / 2);
        Notifier {
            enabled,
            watchdog_every,
            failed: AtomicBool::new(false),
        }
    }

    /// A notifier that never sends.
    pub fn disabled() -> Self {
        Notifier {
            enabled: false,
            watchdog_every: None,
            failed: AtomicBool::new(false),
        }
    }

    /// Whether notifications are sent at all.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// How often `WATCHDOG=1` must be sent: half of `WATCHDOG_USEC`, or
    /// `None` when systemd runs no watchdog for this process.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog_every
    }

    /// `READY=1` with the first `STATUS=`.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `WATCHDOG=1` (only when a watchdog is on).
    pub fn watchdog(&self) {
        if self.watchdog_every.is_some() {
            self.send(&[NotifyState::Watchdog]);
        }
    }

    /// `STATUS=` with `status` (one line, shown by `systemctl status`).
    pub fn status(&self, status: &str) {
        self.send(&[NotifyState::Status(status)]);
    }

    /// `STOPPING=1` with a last `STATUS=`.
    pub fn stopping(&self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(states) {
            if self.failed.swap(true, Ordering::Relaxed) {
                tracing::debug!("cannot notify systemd: {e}");
            } else {
                tracing::warn!("cannot notify systemd through NOTIFY_SOCKET: {e}");
            }
        }
    }
}
