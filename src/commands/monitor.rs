//! `monitor`: `php artisan queue:monitor`.

use super::stdout::say;
use serde::Serialize;

use super::pause::parse_target;
use crate::cli::MonitorArgs;
use crate::config::Settings;
use crate::queue::HeadAge;
use crate::queue::QueueSizes;

/// Exit status of `monitor` when a queue holds `--max` jobs or more, so a
/// cron job or a health check can act on it (artisan's `queue:monitor`
/// fires `QueueBusy` and exits 0; there is no event here to listen to).
pub const OVER_MAX: u8 = 3;

#[derive(Serialize)]
struct Report<'a> {
    connection: &'a str,
    queue: &'a str,
    size: u64,
    #[serde(flatten)]
    sizes: QueueSizes,
    status: &'static str,
    /// Where this queue's jobs probably are, when its keys are empty but
    /// the same queue holds jobs under another prefix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hints: Vec<String>,
}

/// Prints each queue's size (ready + delayed + reserved), its parts and
/// the age of its oldest ready job; `ALERT` at or above `--max`, as
/// `QueueBusy` would fire. Returns [`OVER_MAX`] when any queue is at or
/// above `--max`, else 0.
///
/// # Errors
/// A connection other than the configured one (artisan reads the one named,
/// from `config/queue.php`; only one is configured here), or the queue's
/// errors.
pub async fn run(settings: Settings, args: MonitorArgs) -> anyhow::Result<u8> {
    let (connection, list) = match args.queues.split_once(':') {
        Some((c, l)) => (c, l),
        None => (settings.connection.as_str(), args.queues.as_str()),
    };
    if connection != settings.connection {
        anyhow::bail!(
            "queue connection {connection:?} is not the configured one ({:?}: [queue] \
             connection, or the app's QUEUE_CONNECTION), whose queue monitor reads; before, \
             its counts were shown under the name {connection:?}. Run: laravel-worker monitor \
             {}:{list}",
            settings.connection,
            settings.connection
        );
    }
    let queue = crate::app::open_queue(&settings).await?;
    let cache = crate::app::open_cache(&settings).await.unwrap_or_else(|e| {
        tracing::debug!("no restart-key hint: {e:#}");
        crate::cache::CacheStore::None
    });
    let mut reports = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (_, name) = parse_target(name, connection);
        let sizes = queue.sizes(&queue.handle(name), HeadAge::Read).await?;
        let hints = super::hints::queues_elsewhere(&queue, name).await;
        reports.push(Report {
            hints,
            connection,
            queue: name,
            size: sizes.size(),
            sizes,
            status: if sizes.size() >= args.max {
                "ALERT"
            } else {
                "OK"
            },
        });
    }
    let status = if reports.iter().any(|r| r.status == "ALERT") {
        OVER_MAX
    } else {
        0
    };
    let restart_hints = super::hints::restart_elsewhere(&cache).await;
    if args.json {
        say!("{}", serde_json::to_string(&reports)?);
        for hint in &restart_hints {
            tracing::warn!("{hint}");
        }
        return Ok(status);
    }
    say!("  Queue name .......... Size / Pending / Delayed / Reserved / Status");
    for r in &reports {
        let name = format!("{}:{}", r.connection, r.queue);
        let numbers = format!(
            "[{}] {} / {} / {} {}",
            r.size, r.sizes.pending, r.sizes.delayed, r.sizes.reserved, r.status
        );
        let dots = ".".repeat(70usize.saturating_sub(name.len() + numbers.len()).max(3));
        say!("  {name} {dots} {numbers}");
        for hint in &r.hints {
            say!("    Hint: {hint}");
        }
    }
    for hint in &restart_hints {
        say!("  Hint: {hint}");
    }
    Ok(status)
}
