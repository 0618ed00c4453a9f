//! `monitor`: `php artisan queue:monitor`.

use crate::cli::MonitorArgs;
use crate::config::Settings;

/// Prints each queue's size (placeholder until the full monitor lands).
///
/// # Errors
/// Redis errors.
pub async fn run(_settings: Settings, _args: MonitorArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
