//! Hints that the worker is probably looking in the wrong place: its queues
//! are empty but the same queues hold jobs under another Redis prefix, or
//! the restart key it watches is absent while one exists under another
//! name (see [`crate::queue::elsewhere`]). `work` logs them as warnings at
//! start; `monitor` prints them beside its table.
//!
//! A store that cannot be read gives no hint (logged at debug level):
//! hints never stop a command.

use crate::cache::CacheStore;
use crate::queue::Queue;

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
    match queue.elsewhere(&queue.keys(name)).await {
        Ok(found) => found.iter().map(|f| f.hint()).collect(),
        Err(e) => {
            tracing::debug!(queue = %name, "cannot look for the queue elsewhere: {e}");
            Vec::new()
        }
    }
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
