//! `restart`: `php artisan queue:restart`.

use super::stdout::say;
use crate::cache::CacheStore;
use crate::config::Settings;
use crate::queue::now;

/// Writes the current time to `illuminate:queue:restart` in the cache
/// store; every worker (PHP or ours) stops after its current job.
///
/// Workers notice a restart when the value changes, and it is whole
/// seconds: two restarts within one second would write the same value and
/// the second would go unseen (as with artisan's). When the stored marker
/// is already this second or later, the next second is written instead.
///
/// # Errors
/// No cache store, or the cache cannot be written.
pub async fn run(settings: Settings) -> anyhow::Result<u8> {
    let cache = crate::app::open_cache(&settings).await?;
    if matches!(cache, CacheStore::None) {
        anyhow::bail!("no cache store is configured; workers cannot be told to restart");
    }
    let stored = cache
        .restart_marker()
        .await
        .ok()
        .flatten()
        .and_then(|marker| marker_seconds(&marker));
    let at = match stored {
        Some(stored) if stored >= now() => stored + 1,
        _ => now(),
    };
    cache.write_restart(at).await?;
    say!("   INFO  Broadcasting queue restart signal.");
    Ok(0)
}

/// The UNIX seconds of a stored restart marker: plain digits (Laravel's
/// Redis and database stores keep numbers as they are) or PHP's `i:N;`.
fn marker_seconds(marker: &str) -> Option<i64> {
    let digits = marker
        .trim()
        .strip_prefix("i:")
        .and_then(|m| m.strip_suffix(';'))
        .unwrap_or(marker.trim());
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::marker_seconds;

    #[test]
    fn markers_are_read_in_both_forms() {
        assert_eq!(marker_seconds("1900000000"), Some(1_900_000_000));
        assert_eq!(marker_seconds("i:1900000000;"), Some(1_900_000_000));
        assert_eq!(marker_seconds("soon"), None);
    }
}
