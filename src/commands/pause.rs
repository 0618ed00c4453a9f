//! `pause` and `resume`: `php artisan queue:pause` / `queue:resume`.

use super::stdout::say;
use crate::cli::PauseArgs;
use crate::config::Settings;

/// Splits `connection:queue` the way artisan does: no colon means the
/// configured connection; an empty queue part means `default`.
pub fn parse_target<'a>(target: &'a str, default_connection: &'a str) -> (&'a str, &'a str) {
    let (connection, queue) = match target.split_once(':') {
        Some((c, q)) => (c, q),
        None => (default_connection, target),
    };
    (connection, if queue.is_empty() { "default" } else { queue })
}

/// Writes (`pause`) or deletes (`resume`) the queue's pause key,
/// `illuminate:queue:paused:{connection}:{queue}` = `b:1;` for ever. Workers
/// (Laravel 12.40+ and this one) skip a paused queue.
///
/// # Errors
/// A connection other than the configured one (artisan refuses a
/// connection missing from `config/queue.php`; only one is configured
/// here), no cache store, or the cache cannot be written.
pub async fn run(settings: Settings, args: PauseArgs, pause: bool) -> anyhow::Result<u8> {
    let (connection, queue) = parse_target(&args.queue, &settings.connection);
    if connection != settings.connection {
        anyhow::bail!(
            "unknown queue connection {connection:?}: the configured connection is {:?} \
             ([queue] connection, or QUEUE_CONNECTION)",
            settings.connection
        );
    }
    let cache = crate::app::open_cache(&settings).await?;
    cache.set_paused(connection, queue, pause).await?;
    let done = if pause { "paused" } else { "resumed" };
    say!("   INFO  Job processing on queue [{connection}:{queue}] has been {done}.");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(parse_target("redis:emails", "x"), ("redis", "emails"));
        assert_eq!(parse_target("emails", "redis"), ("redis", "emails"));
        assert_eq!(parse_target("redis:", "x"), ("redis", "default"));
    }
}
