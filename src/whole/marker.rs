//! The finish marker: a job's finish (the PHP bridge's finish mode, which
//! dispatches a chain's next job) is done at most once per job uuid, even
//! when the worker dies between the finish call and the job's delete and
//! the job is run again after `retry_after`. Laravel has no such marker:
//! under `queue:work` a crash there dispatches the next job twice.
//!
//! The marker is `{cache prefix}laravel_worker_finished:{uuid}` in the
//! unique locks' Redis (the cache store's lock connection), kept
//! `retry_after` + [`MARGIN`] seconds, in two steps:
//!
//! 1. `started`, set with `NX` just before the finish call;
//! 2. `done`, by the bridge itself as soon as its finish is done (a lock
//!    of the app's cache store, which is this key), and by the worker once
//!    the bridge answered.
//!
//! A finish that failed deletes it again (the job's retry finishes). A
//! run that finds `done` skips the finish: the crash came after it. One
//! that finds `started` finishes again: the worker died during the finish,
//! before the bridge was done (or between its push and its mark, a few
//! milliseconds in which finishing again dispatches the next job twice, as
//! `queue:work` does); skipping could lose the chain's next job, and a
//! chain is never dropped. A database cache store keeps no marker (the
//! job is finished as Laravel would).

use anyhow::Context;

use super::LockStore;

/// The marker's key, after the store's prefix.
const KEY: &str = "laravel_worker_finished:";

/// Extra seconds the marker outlives `retry_after`: a reclaimed job runs
/// again after `retry_after`, then takes as long as its handler does.
pub const MARGIN: u64 = 3600;

/// The marker's value while the finish runs.
const STARTED: &str = "started";
/// The marker's value once the bridge finished the job.
const DONE: &str = "done";

/// What claiming a job's finish found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This call is the job's first finish: do it.
    First,
    /// A finish of this job started and never answered (the worker died
    /// during it): do it again, it may dispatch the next job twice.
    Interrupted,
    /// The job was finished before (a crash came between that finish and
    /// the delete): do not finish it again.
    Done,
    /// No marker can be kept (no Redis store): finish as Laravel would.
    Unmarked,
}

impl Claim {
    /// Whether the finish is to be called.
    pub fn to_finish(self) -> bool {
        self != Claim::Done
    }

    /// Whether this call holds a marker to mark done or take back.
    pub fn marked(self) -> bool {
        matches!(self, Claim::First | Claim::Interrupted)
    }
}

/// The marker's key for the job `uuid` and the store's connection, or
/// `None` where no marker is kept.
fn marker(store: Option<&LockStore>, uuid: &str) -> Option<(crate::redis::RedisConn, String)> {
    match store {
        Some(LockStore::Redis { conn, prefix }) => {
            Some((conn.clone(), format!("{prefix}{KEY}{uuid}")))
        }
        _ => None,
    }
}

/// Claims the finish of the job `uuid` for `ttl` seconds.
///
/// # Errors
/// Redis refused or did not answer.
pub async fn claim(store: Option<&LockStore>, uuid: &str, ttl: u64) -> anyhow::Result<Claim> {
    let Some((mut conn, key)) = marker(store, uuid) else {
        return Ok(Claim::Unmarked);
    };
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(STARTED)
        .arg("NX")
        .arg("EX")
        .arg(ttl.max(1))
        .query_async(&mut conn)
        .await
        .with_context(|| format!("cannot set the finish marker {key:?}"))?;
    if set.is_some() {
        return Ok(Claim::First);
    }
    let found: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .with_context(|| format!("cannot read the finish marker {key:?}"))?;
    Ok(match found.as_deref() {
        Some(STARTED) => Claim::Interrupted,
        // Gone between the two calls (expired): no finish is known.
        None => Claim::First,
        // `done`, or `1` as the first version of the marker wrote it.
        Some(_) => Claim::Done,
    })
}

/// Marks the job `uuid`'s finish done, for `ttl` seconds.
///
/// # Errors
/// Redis refused or did not answer.
pub async fn finished(store: Option<&LockStore>, uuid: &str, ttl: u64) -> anyhow::Result<()> {
    let Some((mut conn, key)) = marker(store, uuid) else {
        return Ok(());
    };
    redis::cmd("SET")
        .arg(&key)
        .arg(DONE)
        .arg("EX")
        .arg(ttl.max(1))
        .query_async::<()>(&mut conn)
        .await
        .with_context(|| format!("cannot set the finish marker {key:?}"))
}

/// Takes the claim on the job `uuid`'s finish back (its finish call
/// failed: a retry must finish it).
///
/// # Errors
/// Redis refused or did not answer.
pub async fn unclaim(store: Option<&LockStore>, uuid: &str) -> anyhow::Result<()> {
    let Some((mut conn, key)) = marker(store, uuid) else {
        return Ok(());
    };
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut conn)
        .await
        .with_context(|| format!("cannot delete the finish marker {key:?}"))
}
