//! Laravel's file cache store (`storage/framework/cache/data`).
//!
//! A key lives in `{dir}/aa/bb/{sha1(key)}`, where `aa` and `bb` are the
//! first two pairs of hex digits of that sha1; the store prefix is not
//! used. The content is a 10-digit UNIX expiry (`9999999999` for ever)
//! followed by the PHP-serialized value, e.g. `9999999999i:1790000000;`.
//! Writes go through a temporary file and a rename, so a reader (PHP or
//! us) never sees half a value.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sha1::{Digest, Sha1};

use super::php;
use crate::queue::now;

/// The expiry Laravel writes for `forever`.
const FOREVER: i64 = 9_999_999_999;

/// The file cache store of an app on this machine.
#[derive(Clone, Debug)]
pub struct FileCache {
    dir: PathBuf,
}

impl FileCache {
    /// A store rooted at `dir` (the app's `storage/framework/cache/data`).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileCache { dir: dir.into() }
    }

    /// The file of cache key `key`.
    pub fn path(&self, key: &str) -> PathBuf {
        let hash: String = Sha1::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(&hash[0..2]).join(&hash[2..4]).join(hash)
    }

    /// The serialized values of `keys` (`None` when missing or expired).
    ///
    /// # Errors
    /// A file that exists but cannot be read.
    pub async fn many(&self, keys: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(self.read(key).await?.map(|(_, value)| value));
        }
        Ok(values)
    }

    /// `forever`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub async fn forever(&self, key: &str, value: &php::Value) -> anyhow::Result<()> {
        self.write(key, FOREVER, &php::serialize(value)).await
    }

    /// `forget`: removes the file.
    ///
    /// # Errors
    /// The file exists but cannot be removed.
    pub async fn forget(&self, key: &str) -> anyhow::Result<()> {
        match tokio::fs::remove_file(self.path(key)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot delete cache key {key}"))
            }
            _ => Ok(()),
        }
    }

    /// `put(key, 0, ttl)` when missing, then `increment`, keeping the expiry
    /// (as Laravel's file store does). Returns the new count.
    ///
    /// # Errors
    /// The file cannot be read or written.
    pub async fn count(&self, key: &str, ttl_seconds: u64) -> anyhow::Result<i64> {
        let (expires, current) = match self.read(key).await? {
            Some((expires, value)) => (expires, php::as_int(&value).unwrap_or(0)),
            None => (now() + ttl_seconds as i64, 0),
        };
        let count = current + 1;
        self.write(key, expires, &php::serialize(&php::Value::Int(count)))
            .await?;
        Ok(count)
    }

    /// (expiry, serialized value) of a live key.
    async fn read(&self, key: &str) -> anyhow::Result<Option<(i64, String)>> {
        let path = self.path(key);
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        if text.len() < 10 || !text.is_char_boundary(10) {
            return Ok(None);
        }
        let (expiry, value) = text.split_at(10);
        let expires: i64 = expiry.parse().unwrap_or(0);
        if expires <= now() {
            return Ok(None);
        }
        Ok(Some((expires, value.to_string())))
    }

    async fn write(&self, key: &str, expires: i64, serialized: &str) -> anyhow::Result<()> {
        let path = self.path(key);
        let parent = path.parent().unwrap_or(Path::new("."));
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("cannot create {}", parent.display()))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        tokio::fs::write(&tmp, format!("{expires:010}{serialized}"))
            .await
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        tokio::fs::rename(&tmp, &path)
            .await
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_laravel() {
        let c = FileCache::new("/app/storage/framework/cache/data");
        // sha1("illuminate:queue:restart")
        let p = c.path("illuminate:queue:restart");
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(name.len(), 40);
        assert!(p.starts_with(format!(
            "/app/storage/framework/cache/data/{}/{}",
            &name[0..2],
            &name[2..4]
        )));
    }

    #[tokio::test]
    async fn round_trip_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let c = FileCache::new(dir.path());
        c.forever("k", &php::Value::Bool(true)).await.unwrap();
        let text = std::fs::read_to_string(c.path("k")).unwrap();
        assert_eq!(text, "9999999999b:1;");
        assert_eq!(
            c.many(&["k".into(), "missing".into()]).await.unwrap(),
            vec![Some("b:1;".into()), None]
        );
        assert_eq!(c.count("n", 60).await.unwrap(), 1);
        assert_eq!(c.count("n", 60).await.unwrap(), 2);
        std::fs::write(c.path("n"), "0000000001i:5;").unwrap();
        assert_eq!(c.many(&["n".into()]).await.unwrap(), vec![None], "expired");
        c.forget("k").await.unwrap();
        c.forget("k").await.unwrap();
        assert_eq!(c.many(&["k".into()]).await.unwrap(), vec![None]);
    }
}
