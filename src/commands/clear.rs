//! `clear`: `php artisan queue:clear`.

use super::stdout::say;
use crate::cli::ClearArgs;
use crate::config::Settings;

/// Deletes every job of the given queues and prints how many there were.
///
/// # Errors
/// Redis errors.
pub async fn run(settings: Settings, args: ClearArgs) -> anyhow::Result<u8> {
    let queue = crate::app::open_queue(&settings).await?;
    let names = args.queue.unwrap_or_else(|| settings.default_queue.clone());
    let mut total = 0;
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let cleared = queue.clear(&queue.handle(name)).await?;
        say!("   INFO  Cleared {cleared} jobs from the [{name}] queue.");
        total += cleared;
    }
    tracing::debug!(total, "cleared");
    Ok(0)
}
