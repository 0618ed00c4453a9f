//! Redis key names of one queue.
//!
//! For a queue named `N`, Laravel keeps four keys (protocol §2.1), all behind
//! the Redis connection prefix (`REDIS_PREFIX`, for example `laravel_database_`):
//!
//! | key                 | type | holds                                        |
//! |---------------------|------|----------------------------------------------|
//! | `queues:N`          | LIST | ready payloads, RPUSH at the tail, LPOP head |
//! | `queues:N:delayed`  | ZSET | payloads scored by available-at (seconds)    |
//! | `queues:N:reserved` | ZSET | reserved copies scored by reservation expiry |
//! | `queues:N:notify`   | LIST | one `1` per job made ready (BLPOP wake-up)   |
//!
//! and this worker one more, of its own: `queues:N:unrecorded`, a ZSET of the
//! failures it could not record while the failed-job store was down (see
//! `worker::unrecorded`), scored by when they failed.
//!
//! phpredis prefixes keys itself; the Rust client does not, so the prefix is
//! written into every key here.

/// The four keys of one queue, prefix included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// The queue name as the worker was given it (`default`, not `queues:default`).
    pub name: String,
    /// `{prefix}queues:{name}`: the ready list.
    pub ready: String,
    /// `{ready}:delayed`.
    pub delayed: String,
    /// `{ready}:reserved`.
    pub reserved: String,
    /// `{ready}:notify`.
    pub notify: String,
    /// `{ready}:unrecorded`: failures waiting for the failed-job store
    /// (ours; Laravel has no such key).
    pub unrecorded: String,
}

impl QueueKeys {
    /// Builds the keys of queue `name` under the connection `prefix`.
    ///
    /// With `cluster` set, a name without a Redis Cluster hash tag is wrapped in
    /// one (`default` becomes `queues:{default}`), as Laravel 13.5+ does on
    /// cluster connections, so the scripts never touch two slots. A name that
    /// already carries a tag (`{x}` with a non-empty `x`) is left alone, which is
    /// how older apps named their queues by hand.
    pub fn new(prefix: &str, name: &str, cluster: bool) -> Self {
        let tagged = if cluster && !has_hash_tag(name) {
            format!("{{{name}}}")
        } else {
            name.to_string()
        };
        let ready = format!("{prefix}queues:{tagged}");
        QueueKeys {
            name: name.to_string(),
            delayed: format!("{ready}:delayed"),
            reserved: format!("{ready}:reserved"),
            notify: format!("{ready}:notify"),
            unrecorded: format!("{ready}:unrecorded"),
            ready,
        }
    }
}

/// True when `name` holds a Redis Cluster hash tag: `{` followed later by `}`
/// with at least one character between them.
fn has_hash_tag(name: &str) -> bool {
    match name.find('{') {
        Some(open) => name[open + 1..].find('}').is_some_and(|len| len > 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_keys_carry_the_prefix() {
        let k = QueueKeys::new("laravel_database_", "emails", false);
        assert_eq!(k.ready, "laravel_database_queues:emails");
        assert_eq!(k.delayed, "laravel_database_queues:emails:delayed");
        assert_eq!(k.reserved, "laravel_database_queues:emails:reserved");
        assert_eq!(k.notify, "laravel_database_queues:emails:notify");
        assert_eq!(k.unrecorded, "laravel_database_queues:emails:unrecorded");
        assert_eq!(k.name, "emails");
    }

    #[test]
    fn cluster_wraps_untagged_names_only() {
        assert_eq!(
            QueueKeys::new("", "default", true).ready,
            "queues:{default}"
        );
        assert_eq!(QueueKeys::new("", "{x}", true).ready, "queues:{x}");
        assert_eq!(QueueKeys::new("", "a{}b", true).ready, "queues:{a{}b}");
        assert_eq!(QueueKeys::new("", "default", false).ready, "queues:default");
    }
}
