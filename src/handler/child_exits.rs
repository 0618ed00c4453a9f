//! SIGCHLD, counted, so that an idle warm process is asked whether it has
//! ended (a `wait4` system call) only when some child of the worker has
//! ended since it was last asked, not once per job.
//!
//! A process that ends between the count and the call is still found: its
//! request cannot be delivered, and the call is given to a fresh process
//! (see the delivery tries of [`super::persistent`]); its answer pipe's end
//! is seen as well.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::signal::unix::{SignalKind, signal};

/// SIGCHLDs received so far.
static EXITS: AtomicU64 = AtomicU64::new(0);

/// Whether the listener runs (set once, on the first call).
static LISTENING: OnceLock<bool> = OnceLock::new();

/// SIGCHLDs received so far; `None` when they cannot be counted (no
/// runtime, or the handler could not be installed): then every check must
/// ask.
pub fn count() -> Option<u64> {
    let listening = *LISTENING.get_or_init(listen);
    listening.then(|| EXITS.load(Ordering::SeqCst))
}

/// Starts the task that counts SIGCHLDs; false when it cannot.
fn listen() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let Ok(mut exits) = signal(SignalKind::child()) else {
        return false;
    };
    tokio::spawn(async move {
        while exits.recv().await.is_some() {
            EXITS.fetch_add(1, Ordering::SeqCst);
        }
    });
    true
}

/// Whether a process last checked at `seen` must be checked again now:
/// a child has ended since, or exits are not counted.
pub fn since(seen: Option<u64>) -> (bool, Option<u64>) {
    let now = count();
    (now.is_none() || now != seen, now)
}
