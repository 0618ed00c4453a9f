//! `Worker::daemonShouldRun`: whether the loop may take jobs now. Asked
//! before each poll, and again after an idle wait, so that a pause that
//! came during the wait keeps the fetch from taking the job that ended it.

use tokio::sync::watch;

use crate::signals::Control;

/// `control` says no SIGUSR2 pause, and `down_file` (the maintenance file,
/// `None` with `--force`) does not exist.
pub fn should_run(control: &watch::Receiver<Control>, down_file: Option<&std::path::Path>) -> bool {
    if control.borrow().paused {
        return false;
    }
    match down_file {
        Some(file) if file.exists() => {
            tracing::debug!("the application is down for maintenance");
            false
        }
        _ => true,
    }
}
