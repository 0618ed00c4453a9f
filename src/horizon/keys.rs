//! Horizon's key names: its prefix, and the names of its master and
//! supervisor.
//!
//! Horizon replaces the connection's own prefix with `horizon.prefix`
//! (`HORIZON_PREFIX`, else `Str::slug(APP_NAME, '_')` + `_horizon:`). On a
//! Redis Cluster (laravel/horizon#1760) the prefix is wrapped in braces so
//! that every Horizon key lands in one slot: `laravel_horizon:` becomes
//! `{laravel_horizon:}`, an empty prefix `{horizon:}`, and a prefix that
//! already holds a hash tag is kept.

/// The prefix Horizon uses when nothing is configured (`APP_NAME` unset).
pub const DEFAULT_PREFIX: &str = "laravel_horizon:";

/// The prefix every Horizon key starts with, as Horizon would compute it
/// from `configured` (`None`: [`DEFAULT_PREFIX`]) on a cluster or not.
pub fn prefix(configured: Option<&str>, cluster: bool) -> String {
    let prefix = configured.unwrap_or(DEFAULT_PREFIX);
    if !cluster || has_hash_tag(prefix) {
        return prefix.to_string();
    }
    if prefix.is_empty() {
        "{horizon:}".to_string()
    } else {
        format!("{{{prefix}}}")
    }
}

/// True when `key` holds a non-empty `{...}` hash tag.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// Horizon's key names under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (already braced for a cluster).
    pub fn new(prefix: String) -> Self {
        Keys { prefix }
    }

    /// `name` with the prefix: `laravel_horizon:recent_jobs`.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// `MasterSupervisor::basename()`: the host name's slug. `horizon:terminate`,
/// `horizon:pause` and `horizon:continue` signal only the masters whose
/// name starts with it.
pub fn basename() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    crate::slug::slug(&host)
}

/// A master's name, `MasterSupervisor::name()`: the basename, `-` and four
/// random letters or digits (`web-1-a7Xq`).
pub fn master_name() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = (0..4)
        .map(|_| CHARS[rand::random::<u32>() as usize % CHARS.len()] as char)
        .collect();
    format!("{}-{tail}", basename())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_braced_on_a_cluster_as_horizon_does() {
        assert_eq!(prefix(None, false), "laravel_horizon:");
        assert_eq!(prefix(Some("app_horizon:"), true), "{app_horizon:}");
        assert_eq!(prefix(Some(""), true), "{horizon:}");
        assert_eq!(prefix(Some("{app}_horizon:"), true), "{app}_horizon:");
        assert_eq!(prefix(Some("a{}b:"), true), "{a{}b:}");
    }

    #[test]
    fn master_names_start_with_the_basename() {
        let name = master_name();
        let base = basename();
        assert!(name.starts_with(&format!("{base}-")), "{name}");
        assert_eq!(name.len(), base.len() + 5);
    }
}
