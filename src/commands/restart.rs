//! `restart`: `php artisan queue:restart`.

use crate::cache::CacheStore;
use crate::config::Settings;
use crate::queue::redis_queue::now;

/// Writes the current time to `illuminate:queue:restart` in the cache
/// store; every worker (PHP or ours) stops after its current job.
///
/// # Errors
/// No cache store, or the cache cannot be written.
pub async fn run(settings: Settings) -> anyhow::Result<u8> {
    let cache = crate::app::open_cache(&settings).await?;
    if matches!(cache, CacheStore::None) {
        anyhow::bail!("no cache store is configured; workers cannot be told to restart");
    }
    cache.write_restart(now()).await?;
    println!("   INFO  Broadcasting queue restart signal.");
    Ok(0)
}
