//! `pause` and `resume`: `php artisan queue:pause` / `queue:resume`.

use crate::cli::PauseArgs;
use crate::config::Settings;

/// Writes or deletes the pause key of a queue.
///
/// # Errors
/// Cache errors.
pub async fn run(_settings: Settings, _args: PauseArgs, _pause: bool) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
