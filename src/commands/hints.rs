//! Hints that the worker is probably looking in the wrong place: its queues
//! are empty but the same queues hold jobs under another Redis prefix, or
//! the restart key it watches is absent while one exists under another
//! name (see [`crate::queue::redis_queue::elsewhere`]). `work` logs them as warnings at
//! start; `monitor` prints them beside its table.
//!
//! A store that cannot be read gives no hint (logged at debug level):
//! hints never stop a command.

use std::time::Duration;

use crate::cache::CacheStore;
use crate::config::Settings;
use crate::queue::{HeadAge, Queue};

/// How long `work` waits at start to count the jobs of the app's own
/// connection: the hint never holds the start longer.
const APP_DEFAULT_WITHIN: Duration = Duration::from_secs(3);

/// Every hint for a worker on `queues`: [`queues_elsewhere`] then
/// [`restart_elsewhere`].
pub async fn wrong_place(queue: &Queue, cache: &CacheStore, queues: &[String]) -> Vec<String> {
    let mut hints = Vec::new();
    for name in queues {
        hints.extend(queues_elsewhere(queue, name).await);
    }
    hints.extend(restart_elsewhere(cache).await);
    hints
}

/// One line per other prefix under which queue `name` holds jobs while
/// the watched keys are empty, naming both keys and the setting to change.
pub async fn queues_elsewhere(queue: &Queue, name: &str) -> Vec<String> {
    match queue.elsewhere(&queue.handle(name)).await {
        Ok(found) => found.iter().map(|f| f.hint()).collect(),
        Err(e) => {
            tracing::debug!(queue = %name, "cannot look for the queue elsewhere: {e}");
            Vec::new()
        }
    }
}

/// When the worker serves another connection than the app's own
/// (`app_default`, say `database` under `work redis`) and the app's holds
/// jobs on `queues`, a line with both counts and the command that serves
/// the app's; `None` when the app's queues are empty or cannot be read
/// within [`APP_DEFAULT_WITHIN`] (logged at debug level).
pub async fn unserved_default(
    settings: &Settings,
    queue: &Queue,
    app_default: &Settings,
    queues: &[String],
) -> Option<String> {
    let counted = tokio::time::timeout(APP_DEFAULT_WITHIN, async {
        let theirs = crate::app::open_queue(app_default).await?;
        let waiting = jobs_on(&theirs, queues).await?;
        let ours = jobs_on(queue, queues).await.unwrap_or(0);
        anyhow::Ok((waiting, ours))
    })
    .await;
    let (waiting, ours) = match counted {
        Ok(Ok(counts)) => counts,
        Ok(Err(e)) => {
            tracing::debug!("cannot count the jobs of the app's own connection: {e:#}");
            return None;
        }
        Err(_) => {
            tracing::debug!("the app's own connection did not answer within 3 s");
            return None;
        }
    };
    let (app, this) = (&app_default.connection, &settings.connection);
    (waiting > 0).then(|| {
        format!(
            "the app's own queue connection {app:?} (QUEUE_CONNECTION) holds {waiting} jobs on \
             {} that this worker does not serve: it serves {this:?} ({ours} jobs there). To \
             serve the app's, run laravel-worker work without a connection, or work {app}",
            queues.join(",")
        )
    })
}

/// The jobs of `queues` on `queue`: pending, delayed and reserved.
async fn jobs_on(queue: &Queue, queues: &[String]) -> anyhow::Result<u64> {
    let mut total = 0;
    for name in queues {
        total += queue
            .sizes(&queue.handle(name), HeadAge::Skip)
            .await?
            .size();
    }
    Ok(total)
}

/// One line per restart key found under another name while the watched
/// one is absent.
pub async fn restart_elsewhere(cache: &CacheStore) -> Vec<String> {
    match cache.restart_elsewhere().await {
        Ok(found) => found.iter().map(|f| f.hint()).collect(),
        Err(e) => {
            tracing::debug!("cannot look for the restart key elsewhere: {e:#}");
            Vec::new()
        }
    }
}
