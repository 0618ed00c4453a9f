//! Is the worker looking in the wrong place?
//!
//! The commonest silent failure of a new deployment is a worker that polls
//! keys nobody writes: a Redis prefix derived from another `APP_NAME`, a
//! `REDIS_PREFIX` the app does not use, a restart key under another cache
//! prefix or colon rule. Nothing errors; the worker simply idles. At start
//! (and in `monitor`) a bounded `SCAN` looks for the same queue, or the
//! restart key, under any other prefix, so the log can say where the jobs
//! are and which setting to change.
//!
//! The scan is bounded ([`SCAN_CALLS`] calls of [`SCAN_COUNT`] keys), so on
//! a Redis of millions of keys it may miss a match; it never blocks Redis
//! for long (each call is one `SCAN` step). On a Redis Cluster, where a scan
//! would have to visit every master, nothing is looked for.

use redis::AsyncCommands;

use super::RedisQueue;
use super::keys::QueueKeys;
use crate::redis::RedisConn;

/// Keys examined per `SCAN` call (its `COUNT` hint).
pub const SCAN_COUNT: usize = 1000;

/// Most `SCAN` calls one look makes: at most about
/// `SCAN_CALLS * SCAN_COUNT` keys are examined.
pub const SCAN_CALLS: usize = 100;

/// Most matches one look reports.
const MAX_FOUND: usize = 3;

/// Jobs of the watched queue found under another prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueElsewhere {
    /// The ready-list key the worker watches (empty).
    pub watched: String,
    /// The ready-list key of the same queue under the other prefix.
    pub found: String,
    /// The other prefix (`REDIS_PREFIX` as the app seems to have it).
    pub prefix: String,
    /// Ready + delayed + reserved jobs there.
    pub jobs: u64,
}

impl QueueElsewhere {
    /// The warning an operator reads: both key names and what to change.
    pub fn hint(&self) -> String {
        format!(
            "queue keys look empty at {watched:?}, but {found:?} holds {jobs} job(s): the app \
             probably uses the Redis prefix {prefix:?}. Set it with REDIS_PREFIX (or \
             `[redis] prefix` in the config), or point --app/--env-file at the app so the \
             worker reads it from there (Laravel's default prefix comes from APP_NAME)",
            watched = self.watched,
            found = self.found,
            jobs = self.jobs,
            prefix = self.prefix,
        )
    }
}

/// A restart key under another name than the one watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartElsewhere {
    /// The restart key the worker watches (absent).
    pub watched: String,
    /// A restart key that exists.
    pub found: String,
}

impl RestartElsewhere {
    /// The warning an operator reads: both key names and what to change.
    pub fn hint(&self) -> String {
        format!(
            "the restart signal is watched at {watched:?}, which does not exist, but {found:?} \
             does: `php artisan queue:restart` probably writes there, and this worker would \
             not see it. Check the cache prefix (CACHE_PREFIX, or `[cache] prefix`; Laravel \
             ≤ 10 adds a ':' after it, 11+ does not), the Redis prefix, and REDIS_CACHE_DB, \
             or point --app/--env-file at the app",
            watched = self.watched,
            found = self.found,
        )
    }
}

impl RedisQueue {
    /// When `queue` holds no job under the worker's prefix, looks for keys
    /// of the same queue name under other prefixes (with or without a
    /// cluster hash tag around the name) and counts their jobs.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn elsewhere(&self, queue: &QueueKeys) -> redis::RedisResult<Vec<QueueElsewhere>> {
        let mut conn = self.conn();
        if conn.is_cluster() || self.count(queue).await? > 0 {
            return Ok(Vec::new());
        }
        let mut layouts: Vec<(String, bool)> = Vec::new();
        scan(&mut conn, "*queues:*", |key| {
            if let Some(layout) = queue_layout(key, &queue.name)
                && !layouts.contains(&layout)
            {
                layouts.push(layout);
            }
            layouts.len() >= MAX_FOUND
        })
        .await?;
        let mut found = Vec::new();
        for (prefix, tagged) in layouts {
            let other = QueueKeys::new(&prefix, &queue.name, tagged);
            if other.ready == queue.ready {
                continue;
            }
            let jobs = self.count(&other).await?;
            if jobs > 0 {
                found.push(QueueElsewhere {
                    watched: queue.ready.clone(),
                    found: other.ready,
                    prefix,
                    jobs,
                });
            }
        }
        Ok(found)
    }
}

/// When `watched` (a full restart key) does not exist on `conn`, looks
/// for other keys ending in `suffix` (`illuminate:queue:restart`).
///
/// # Errors
/// Any Redis error.
pub async fn restart_elsewhere(
    conn: &RedisConn,
    watched: &str,
    suffix: &str,
) -> redis::RedisResult<Vec<RestartElsewhere>> {
    let mut conn = conn.clone();
    if conn.is_cluster() || conn.exists::<_, bool>(watched).await? {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    scan(&mut conn, &format!("*{}", glob_escape(suffix)), |key| {
        if key != watched && !found.iter().any(|f: &RestartElsewhere| f.found == key) {
            found.push(RestartElsewhere {
                watched: watched.to_string(),
                found: key.to_string(),
            });
        }
        found.len() >= MAX_FOUND
    })
    .await?;
    Ok(found)
}

/// A bounded `SCAN … MATCH pattern`, calling `seen` on each key until it
/// returns true (enough found) or the budget is spent.
async fn scan(
    conn: &mut RedisConn,
    pattern: &str,
    mut seen: impl FnMut(&str) -> bool,
) -> redis::RedisResult<()> {
    let mut cursor: u64 = 0;
    for _ in 0..SCAN_CALLS {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await?;
        for key in &keys {
            if seen(&String::from_utf8_lossy(key)) {
                return Ok(());
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
    Ok(())
}

/// The prefix of `key`, and whether the name is in a hash tag, when `key`
/// is one of queue `name`'s keys that hold jobs: the ready list,
/// `:delayed` or `:reserved` (`:notify` holds only wake-up tokens). The
/// layouts are [`QueueKeys::new`]'s, so the keys found are rebuilt by it.
fn queue_layout(key: &str, name: &str) -> Option<(String, bool)> {
    [false, true].into_iter().find_map(|tagged| {
        let keys = QueueKeys::new("", name, tagged);
        [&keys.ready, &keys.delayed, &keys.reserved]
            .into_iter()
            .find_map(|tail| key.strip_suffix(tail.as_str()))
            .map(|prefix| (prefix.to_string(), tagged))
    })
}

/// `s` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_layouts_are_read_off_every_job_key() {
        let layout = |key| queue_layout(key, "default");
        assert_eq!(
            layout("shop_database_queues:default"),
            Some(("shop_database_".into(), false))
        );
        assert_eq!(
            layout("x-queues:default:reserved"),
            Some(("x-".into(), false))
        );
        assert_eq!(
            layout("queues:default:delayed"),
            Some((String::new(), false))
        );
        assert_eq!(layout("p_queues:default:notify"), None);
        assert_eq!(layout("p_queues:other"), None);
        assert_eq!(layout("p_queues:xdefault"), None);
        let (prefix, tagged) = layout("p_queues:{default}").unwrap();
        assert_eq!(
            QueueKeys::new(&prefix, "default", tagged).ready,
            "p_queues:{default}"
        );
        let (prefix, tagged) = layout("p_queues:default").unwrap();
        assert_eq!(
            QueueKeys::new(&prefix, "default", tagged).ready,
            "p_queues:default"
        );
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
