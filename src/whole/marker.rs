//! The finish marker: a job's finish (the PHP bridge's finish mode, which
//! dispatches a chain's next job) is done at most once per job uuid, even
//! when the worker dies between the finish call and the job's delete and
//! the job is run again after `retry_after`. Laravel has no such marker:
//! under `queue:work` a crash there dispatches the next job twice.
//!
//! The marker is `SET {cache prefix}laravel_worker_finished:{uuid} 1 NX
//! EX ttl` in the unique locks' Redis (the cache store's lock
//! connection), claimed just before the finish call and deleted again when
//! the call fails (so that a retry finishes). A database cache store
//! keeps no marker (the job is finished as Laravel would).

use anyhow::Context;

use super::LockStore;

/// The marker's key, after the store's prefix.
const KEY: &str = "laravel_worker_finished:";

/// Extra seconds the marker outlives `retry_after`: a reclaimed job runs
/// again after `retry_after`, then takes as long as its handler does.
pub const MARGIN: u64 = 3600;

/// What claiming a job's finish found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This call is the job's first finish: do it.
    First,
    /// The job was finished before (a crash came between that finish and
    /// the delete): do not finish it again.
    Done,
    /// No marker can be kept (no Redis store): finish as Laravel would.
    Unmarked,
}

/// Claims the finish of the job `uuid` for `ttl` seconds.
///
/// # Errors
/// Redis refused or did not answer.
pub async fn claim(store: Option<&LockStore>, uuid: &str, ttl: u64) -> anyhow::Result<Claim> {
    let Some(LockStore::Redis { conn, prefix }) = store else {
        return Ok(Claim::Unmarked);
    };
    let key = format!("{prefix}{KEY}{uuid}");
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .arg("NX")
        .arg("EX")
        .arg(ttl.max(1))
        .query_async(&mut conn.clone())
        .await
        .with_context(|| format!("cannot set the finish marker {key:?}"))?;
    Ok(if set.is_some() {
        Claim::First
    } else {
        Claim::Done
    })
}

/// Takes the claim on the job `uuid`'s finish back (its finish call
/// failed: a retry must finish it).
///
/// # Errors
/// Redis refused or did not answer.
pub async fn unclaim(store: Option<&LockStore>, uuid: &str) -> anyhow::Result<()> {
    let Some(LockStore::Redis { conn, prefix }) = store else {
        return Ok(());
    };
    let key = format!("{prefix}{KEY}{uuid}");
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut conn.clone())
        .await
        .with_context(|| format!("cannot delete the finish marker {key:?}"))
}
