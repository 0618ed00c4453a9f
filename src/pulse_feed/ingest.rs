//! Pulse's Redis ingest (laravel/pulse 1.x, `Ingests\RedisIngest`): each
//! entry `XADD`ed to the stream `{prefix}laravel:pulse:ingest` as
//! `data` = `serialize($entry)`, which the app's `php artisan pulse:work`
//! reads, stores and deletes.

use super::entry::Entry;
use crate::redis::RedisConn;

/// The stream's name under the connection's key prefix.
pub fn stream_key(prefix: &str) -> String {
    format!("{prefix}laravel:pulse:ingest")
}

/// Adds `entries` to the stream `key`, one pipeline for them all.
///
/// # Errors
/// Redis refused a command or could not be reached.
pub async fn add(conn: &mut RedisConn, key: &str, entries: &[Entry]) -> redis::RedisResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for entry in entries {
        pipe.cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("data")
            .arg(entry.serialize())
            .ignore();
    }
    pipe.query_async::<()>(conn).await
}
