//! Signals, as `queue:work` handles them (protocol §6.3).
//!
//! | signal                  | effect                                          |
//! |-------------------------|-------------------------------------------------|
//! | SIGTERM, SIGINT, SIGQUIT | stop fetching, finish the jobs in flight, exit 0 |
//! | SIGUSR2                 | pause: fetch nothing until SIGCONT              |
//! | SIGCONT                 | resume                                          |
//! | SIGTTIN, SIGTTOU        | one more, one fewer warm process in each persistent handler's pool ([`resizes`]) |
//!
//! A task turns the signals into a [`Control`] value that the loop watches.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// What the signals received so far ask of the worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// The signal that asked the worker to quit, if any.
    pub quit: Option<&'static str>,
    /// Paused by SIGUSR2 (and not yet resumed by SIGCONT).
    pub paused: bool,
}

/// Installs the handlers and returns the watch they update.
///
/// # Errors
/// A handler could not be installed.
pub fn listen() -> std::io::Result<watch::Receiver<Control>> {
    let (tx, rx) = watch::channel(Control::default());
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let mut cont = signal(SignalKind::from_raw(nix::libc::SIGCONT))?;
    tokio::spawn(async move {
        loop {
            let (name, change): (&'static str, fn(&mut Control, &'static str)) = tokio::select! {
                _ = term.recv() => ("SIGTERM", |c, n| c.quit = Some(n)),
                _ = int.recv() => ("SIGINT", |c, n| c.quit = Some(n)),
                _ = quit.recv() => ("SIGQUIT", |c, n| c.quit = Some(n)),
                _ = usr2.recv() => ("SIGUSR2", |c, _| c.paused = true),
                _ = cont.recv() => ("SIGCONT", |c, _| c.paused = false),
            };
            tracing::info!(signal = name, "signal received");
            tx.send_modify(|c| change(c, name));
        }
    });
    Ok(rx)
}

/// A change of size asked for by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// SIGTTIN: one more.
    Grow,
    /// SIGTTOU: one fewer.
    Shrink,
}

/// Takes SIGTTIN and SIGTTOU from the first moment of `work`, before the
/// settings are read and Redis is reached: their default action stops the
/// process (until SIGCONT), so one sent during a slow start froze the
/// worker. A signal caught here before [`resizes`] listens is dropped
/// (there is no pool yet to resize); the handler stays installed for the
/// life of the process, and programs started later get the default again.
///
/// # Errors
/// A handler could not be installed.
pub fn absorb_resizes() -> std::io::Result<()> {
    let _ttin = signal(SignalKind::from_raw(nix::libc::SIGTTIN))?;
    let _ttou = signal(SignalKind::from_raw(nix::libc::SIGTTOU))?;
    Ok(())
}

/// Installs the SIGTTIN and SIGTTOU handlers (as gunicorn and unicorn
/// take them: one worker more, one fewer) and calls `resize` for each
/// signal received.
///
/// # Errors
/// A handler could not be installed.
pub fn resizes(resize: impl Fn(Resize) + Send + 'static) -> std::io::Result<()> {
    let mut ttin = signal(SignalKind::from_raw(nix::libc::SIGTTIN))?;
    let mut ttou = signal(SignalKind::from_raw(nix::libc::SIGTTOU))?;
    tokio::spawn(async move {
        loop {
            let (name, change) = tokio::select! {
                Some(()) = ttin.recv() => ("SIGTTIN", Resize::Grow),
                Some(()) = ttou.recv() => ("SIGTTOU", Resize::Shrink),
                else => return,
            };
            tracing::info!(signal = name, "signal received");
            resize(change);
        }
    });
    Ok(())
}
