//! Whole jobs: the bookkeeping Laravel's `CallQueuedHandler` does around a
//! job, done by the worker for jobs Laravel's own code did not run (a
//! process, persistent or HTTP handler in any language).
//!
//! What the payload says is enough for ([`marks`]):
//! - **the unique lock** (`ShouldBeUnique`, Laravel 11.39+, whose payload
//!   carries the lock's store, key and owner): released after the job
//!   ends unless it was released back, and on its final failure
//!   ([`unique`]). A `ShouldBeUniqueUntilProcessing` class, which the
//!   payload cannot tell apart, is named in `[bookkeeping]
//!   until_processing`: its lock is released just before the handler
//!   runs (as Laravel does, only on the first attempt unless the lock has
//!   an owner), never after, so a lock a new dispatch took meanwhile is
//!   kept;
//! - **the batch counters** in `job_batches` ([`batch`]), on success and
//!   on final failure;
//! - **a cancelled batch**: the handler is told
//!   ([`crate::handler::metadata::BATCH_CANCELLED`]) so that it can skip
//!   the work as `SkipIfBatchCancelled` would.
//!
//! All of it happens before the job's delete or failure reaches the queue
//! (Laravel's order), on every driver. A store the worker cannot write is
//! logged and the job is settled all the same: bookkeeping never holds a
//! job back. Chains and batch callbacks need PHP (not done here).
//!
//! Who did it: [`done_by_laravel`] is the one place that decides.

pub mod batch;
pub mod marker;
pub mod marks;
pub mod unique;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wildmatch::WildMatch;

use crate::exception::JobException;
use crate::handler::{Keeper, Route, Router};
use crate::queue::ReservedJob;

pub use batch::Batches;

/// The longest one bookkeeping write (a lock release, a batch update, a
/// batch read) may take before the job goes on without it: 10 s. A store
/// that hangs must not hold the job's settle past its reservation.
pub const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `write`, given up after [`WRITE_TIMEOUT`] (an error saying so).
async fn bounded<T>(
    write: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "no answer within {} s",
                WRITE_TIMEOUT.as_secs()
            ))
        })
}
pub use marks::{Marks, NeedsPhp, Signs, UniqueLock};
pub use unique::LockStore;

/// Whether Laravel's own code did (or, for a failure, will do in the
/// handler's failed mode) the bookkeeping of a job run by `route`: unique
/// lock, chain, batch record and callbacks. When true the worker writes
/// none of it, so a job is never booked twice (a second decrement would
/// corrupt its batch). The one place this is decided: Pulse's feed and the
/// settle step ask it.
pub fn done_by_laravel(route: Option<&Route>) -> bool {
    route.is_some_and(|r| r.keeper == Keeper::Laravel)
}

/// Who keeps the books of one job, as [`Bookkeeping::books`] decides.
#[derive(Debug, Clone, Copy)]
pub enum Books<'r> {
    /// Laravel's own code ran it (the PHP bridge): nothing to do here.
    Laravel,
    /// Nothing to keep: bookkeeping is off, or the payload names no lock
    /// nor batch and no class is configured (most jobs).
    Nothing,
    /// The worker, natively: the unique lock or the batch its payload
    /// names, or its configured class's lock
    /// ([`Bookkeeping::before_run`], [`Bookkeeping::before_settle`]).
    Worker,
    /// The PHP bridge's finish mode, on this route: all of the job's
    /// bookkeeping after its run (unique lock, chain, batch and its
    /// callbacks); the worker writes none of it.
    Finish(&'r Route),
    /// The job needs PHP but no bridge is configured.
    NoBridge(NeedsPhp),
}

/// How a job ended, for its bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It ran (or asked to be deleted): Laravel's success path.
    Success,
    /// It failed for good: Laravel's `failed()` path.
    Failure,
}

/// The worker's bookkeeping: where unique locks and batches are, and the
/// `ShouldBeUniqueUntilProcessing` classes.
#[derive(Clone, Default)]
pub struct Bookkeeping {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    until_processing: Vec<WildMatch>,
    unique: Vec<WildMatch>,
    laravel: crate::exception::LaravelVersion,
    /// The app's name of the lock store, and the store (`None`: a store
    /// the worker cannot release locks in, `kind` says which).
    lock_name: String,
    lock: Option<LockStore>,
    lock_kind: String,
    batches: Option<Batches>,
    /// Whether a lock in a store the worker cannot use was named (once).
    warned_store: AtomicBool,
    /// Whether an encrypted job without a bridge was named (once).
    warned_encrypted: AtomicBool,
    /// A batch's job met without a bridge was named (once).
    warned_batch: AtomicBool,
    /// The `match` of the handler that finishes jobs needing PHP.
    finish_with: Option<String>,
}

/// The parts [`Bookkeeping::new`] is built from.
pub struct Parts {
    /// `ShouldBeUniqueUntilProcessing` class patterns (`*` wildcards).
    pub until_processing: Vec<String>,
    /// `ShouldBeUnique` class patterns whose `uniqueId` is a property, for
    /// payloads that do not carry their lock (before 11.39).
    pub unique: Vec<String>,
    /// The app's Laravel version: the lock key's shape before 11.39.
    pub laravel: crate::exception::LaravelVersion,
    /// The app's name of the cache store locks are released in.
    pub lock_name: String,
    /// That store, when the worker can release locks there.
    pub lock: Option<LockStore>,
    /// The store's kind (`redis`, `database`, `file`, `none`), for
    /// messages.
    pub lock_kind: String,
    /// The batches table, when known.
    pub batches: Option<Batches>,
    /// The `match` of the handler that finishes jobs needing PHP
    /// (`[bookkeeping] finish_with`); `None`: the first bridge.
    pub finish_with: Option<String>,
}

impl Bookkeeping {
    /// No bookkeeping (`[bookkeeping] enabled = false`).
    pub fn off() -> Self {
        Bookkeeping { inner: None }
    }

    /// Bookkeeping with `parts`.
    pub fn new(parts: Parts) -> Self {
        Bookkeeping {
            inner: Some(Arc::new(Inner {
                until_processing: parts
                    .until_processing
                    .iter()
                    .map(|p| WildMatch::new(p))
                    .collect(),
                unique: parts.unique.iter().map(|p| WildMatch::new(p)).collect(),
                laravel: parts.laravel,
                lock_name: parts.lock_name,
                lock: parts.lock,
                lock_kind: parts.lock_kind,
                batches: parts.batches,
                warned_store: AtomicBool::new(false),
                warned_encrypted: AtomicBool::new(false),
                warned_batch: AtomicBool::new(false),
                finish_with: parts.finish_with,
            })),
        }
    }

    /// Names at start, as warnings, the stores it cannot use: the lock
    /// store unsupported or unreachable, the batches table unknown or
    /// unreadable.
    pub async fn check(&self) {
        let Some(inner) = &self.inner else { return };
        match &inner.lock {
            Some(lock) => match lock.check().await {
                Ok(()) => {}
                Err(e) if missing_table(&e) => tracing::info!(
                    store = inner.lock_name,
                    "no locks table in the cache store ({}): unique locks are not released \
                         there (fine if the app has no ShouldBeUnique job)",
                    lock.describe()
                ),
                Err(e) => tracing::warn!(
                    store = inner.lock_name,
                    "unique locks cannot be released in the cache store {:?} ({}): {}",
                    inner.lock_name,
                    lock.describe(),
                    crate::error_chain::error_chain(e.as_ref())
                ),
            },
            // A Redis or database store that could not be opened was
            // named as it was opened.
            None if matches!(inner.lock_kind.as_str(), "redis" | "database") => {}
            // Named as a warning when a job's lock is met there.
            None => tracing::info!(
                store = inner.lock_name,
                kind = inner.lock_kind,
                "unique locks are released natively only in a Redis or database cache store; \
                 the locks of jobs not run by the PHP bridge stay until uniqueFor passes"
            ),
        }
        match &inner.batches {
            Some(batches) => {
                match batches.check().await {
                    Ok(()) => {}
                    // Most apps have no batches: not a fault.
                    Err(e) if missing_table(&e) => tracing::info!(
                        table = batches.table(),
                        "no batches table: the batches of jobs not run by the PHP bridge are \
                         not recorded (php artisan queue:batches-table creates it)"
                    ),
                    Err(e) => tracing::warn!(
                        table = batches.table(),
                        "batch counters cannot be recorded: {}",
                        crate::error_chain::error_chain(e.as_ref())
                    ),
                }
            }
            None => tracing::info!(
                "no database for job_batches ([bookkeeping] batches_url, [failed] url): \
                 the batches of jobs not run by the PHP bridge are not recorded"
            ),
        }
    }

    /// Whether the worker writes bookkeeping of its own for `job`, whose
    /// books are `books` ([`Bookkeeping::books`]): for [`Books::Worker`];
    /// for [`Books::NoBridge`] (an encrypted command runs without PHP's
    /// finish) when a lock or a batch shows in its payload or a class is
    /// configured. Asked before the futures of
    /// [`Bookkeeping::before_run`] and [`Bookkeeping::before_settle`] are
    /// made: a job with none makes none.
    pub fn has_work(&self, job: &ReservedJob, books: Books<'_>) -> bool {
        match (books, &self.inner) {
            (Books::Worker, _) => true,
            (Books::NoBridge(_), Some(inner)) => {
                marks_of(job, inner.has_classes()) != Marks::default()
            }
            _ => false,
        }
    }

    /// Before `job` runs on `route`: releases the lock of a
    /// `ShouldBeUniqueUntilProcessing` class (first attempt, or an owner
    /// given: as 13.24+), and says whether its batch was cancelled
    /// (`None`: not in a batch, or not known). Nothing for a job Laravel
    /// runs.
    pub async fn before_run(&self, job: &ReservedJob, route: &Route) -> Option<bool> {
        let inner = self.inner.as_ref()?;
        if done_by_laravel(Some(route)) {
            return None;
        }
        let marks = marks_of(job, inner.has_classes());
        if let Some(lock) = &inner.lock_of(&marks)
            && inner.until_processing(job, &marks)
            && (job.attempt() <= 1 || lock.owner.is_some())
        {
            inner.release(job, lock).await;
        }
        let id = marks.batch_id.as_deref()?;
        let batches = inner.batches.as_ref()?;
        match bounded(batches.cancelled(id)).await {
            Ok(cancelled) => Some(cancelled),
            Err(e) => {
                tracing::warn!(
                    job = job.display_name(),
                    batch = id,
                    "cannot read whether the batch was cancelled: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                None
            }
        }
    }

    /// Who keeps `job`'s books, run by `route` (`None`: no handler took
    /// it): the one place this is decided. Laravel, when the bridge ran
    /// it ([`done_by_laravel`]); the bridge's finish mode (`router`'s
    /// [`Router::finisher`]) when its payload says it needs PHP
    /// ([`Signs::needs_php`]: a chain, an encrypted command, a batch's job);
    /// otherwise the worker, when the payload names a lock or a batch or
    /// a class is configured ([`Marks::read_with`]), else nothing. Off
    /// (`enabled = false`): nothing. Decided once per job
    /// (`crate::worker::assignment`): a plain job pays one search of its
    /// command's text here ([`Signs::of`]) and none later.
    pub fn books<'r>(
        &self,
        job: &ReservedJob,
        route: Option<&Route>,
        router: &'r Router,
    ) -> Books<'r> {
        let Some(inner) = &self.inner else {
            return Books::Nothing;
        };
        if done_by_laravel(route) {
            return Books::Laravel;
        }
        let signs = signs_of(job);
        if let Some(needs) = signs.needs_php() {
            return match router.finisher(inner.finish_with.as_deref()) {
                Some(finisher) => Books::Finish(finisher),
                None => Books::NoBridge(needs),
            };
        }
        if Marks::read_with(&job.raw, signs, inner.has_classes()) == Marks::default() {
            Books::Nothing
        } else {
            Books::Worker
        }
    }

    /// What becomes of `job`, which needs PHP for `needs` where no bridge
    /// is configured ([`Books::NoBridge`]): a chain is refused before its
    /// handler runs, failed with an exception saying what to configure
    /// (its next jobs would be dropped silently otherwise); an encrypted
    /// command (which may or may not carry a chain) runs, named once as a
    /// warning. `Some`: the failure to record.
    pub fn refusal(&self, job: &ReservedJob, needs: NeedsPhp) -> Option<JobException> {
        match needs {
            NeedsPhp::Chain => Some(JobException::new(
                crate::exception::NO_BRIDGE,
                format!(
                    "{} is part of a chain (Bus::chain): its next job is dispatched by \
                     Laravel's own code, and no PHP bridge is configured to do it. Add a \
                     [[handlers]] entry for laravel-worker-bridge.php (any match; it finishes \
                     the chains other handlers run), or name one in [bookkeeping] finish_with.",
                    job.display_name()
                ),
            )),
            NeedsPhp::Batch => {
                let inner = self.inner.as_ref()?;
                if !inner.warned_batch.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        job = job.display_name(),
                        "a job of a batch (Bus::batch) runs on a handler that is not the PHP \
                         bridge, and no bridge is configured: the worker moves the batch's \
                         counters, but its then, catch, finally and progress callbacks are PHP \
                         and do not run; add a [[handlers]] entry for laravel-worker-bridge.php \
                         to finish such jobs (logged once)"
                    );
                }
                None
            }
            NeedsPhp::Encrypted => {
                let inner = self.inner.as_ref()?;
                if !inner.warned_encrypted.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        job = job.display_name(),
                        "an encrypted job (ShouldBeEncrypted) runs on a handler that is not the \
                         PHP bridge, and no bridge is configured: if it is part of a chain, its \
                         next job is not dispatched; add a [[handlers]] entry for \
                         laravel-worker-bridge.php to finish such jobs (logged once)"
                    );
                }
                None
            }
        }
    }

    /// Claims the finish of the job `uuid` ([`marker`]), its marker kept
    /// `retry_after` + [`marker::MARGIN`] seconds. A marker that cannot
    /// be written is logged and the job finished (as Laravel would).
    pub async fn claim_finish(&self, uuid: &str, retry_after: u64) -> marker::Claim {
        let store = self.inner.as_ref().and_then(|i| i.lock.as_ref());
        let ttl = retry_after.saturating_add(marker::MARGIN);
        bounded(marker::claim(store, uuid, ttl))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(
                    uuid,
                    "cannot keep the finish marker (a crash before the delete would dispatch \
                     the chain's next job again): {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                marker::Claim::Unmarked
            })
    }

    /// Marks the claim of [`Bookkeeping::claim_finish`] done (the bridge
    /// finished the job); logged when it cannot: a crash before the delete
    /// then finishes the job again.
    pub async fn finished(&self, uuid: &str, retry_after: u64) {
        let store = self.inner.as_ref().and_then(|i| i.lock.as_ref());
        let ttl = retry_after.saturating_add(marker::MARGIN);
        if let Err(e) = bounded(marker::finished(store, uuid, ttl)).await {
            tracing::warn!(
                uuid,
                "cannot mark the finish done (a crash before the delete would finish the job \
                 again): {}",
                crate::error_chain::error_chain(e.as_ref())
            );
        }
    }

    /// Takes back the claim of [`Bookkeeping::claim_finish`] (the finish
    /// failed); logged when it cannot.
    pub async fn unclaim_finish(&self, uuid: &str) {
        let store = self.inner.as_ref().and_then(|i| i.lock.as_ref());
        if let Err(e) = bounded(marker::unclaim(store, uuid)).await {
            tracing::warn!(
                uuid,
                "cannot delete the finish marker (a retry of the job will not finish it): {}",
                crate::error_chain::error_chain(e.as_ref())
            );
        }
    }

    /// Before `job`'s delete or failure is written to the queue: its
    /// bookkeeping for `ending`, unless Laravel does it ([`done_by_laravel`]).
    /// Never fails: a write that fails is logged and the job is settled
    /// all the same.
    pub async fn before_settle(&self, job: &ReservedJob, route: Option<&Route>, ending: Ending) {
        let Some(inner) = &self.inner else { return };
        if done_by_laravel(route) {
            return;
        }
        let marks = marks_of(job, inner.has_classes());
        if let Some(lock) = &inner.lock_of(&marks)
            && !inner.until_processing(job, &marks)
        {
            inner.release(job, lock).await;
        }
        if let (Some(id), Some(uuid)) = (marks.batch_id.as_deref(), job.uuid()) {
            inner.record(job, id, uuid, ending).await;
        }
    }
}

/// The [`Signs`] of `job`'s payload; none for a payload that cannot be
/// parsed (it is failed, not run).
fn signs_of(job: &ReservedJob) -> Signs {
    job.payload.as_ref().map(Signs::of).unwrap_or_default()
}

/// The [`Marks`] of `job`'s payload, read whole with `always`.
fn marks_of(job: &ReservedJob, always: bool) -> Marks {
    Marks::read_with(&job.raw, signs_of(job), always)
}

/// Whether `e` says a table does not exist (SQLite's `no such table`,
/// PostgreSQL's `42P01`, MySQL's and MariaDB's `42S02`).
fn missing_table(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .and_then(sqlx::Error::as_database_error)
            .is_some_and(|db| {
                matches!(db.code().as_deref(), Some("42P01" | "42S02"))
                    || db.message().starts_with("no such table")
            })
    })
}

impl Inner {
    /// The lock `job` holds: the one its payload names (11.39+), else, for
    /// a configured unique class (`unique` or `until_processing`), the
    /// key Laravel builds from the class and its `uniqueId` property
    /// (empty without one), `laravel_unique_job:{class}{id}` before 11.0
    /// and `laravel_unique_job:{class}:{id}` since, in the default store.
    fn lock_of(&self, marks: &Marks) -> Option<UniqueLock> {
        if let Some(lock) = &marks.unique {
            return Some(lock.clone());
        }
        let class = marks.class.as_deref()?;
        let configured = self
            .unique
            .iter()
            .chain(&self.until_processing)
            .any(|p| p.matches(class));
        if !configured {
            return None;
        }
        let separator = if self.laravel.major >= 11 { ":" } else { "" };
        Some(UniqueLock {
            store: self.lock_name.clone(),
            key: format!(
                "laravel_unique_job:{class}{separator}{}",
                marks.unique_id.as_deref().unwrap_or_default()
            ),
            owner: None,
        })
    }

    /// Whether unique classes are configured (their payloads are read
    /// whole).
    fn has_classes(&self) -> bool {
        !self.unique.is_empty() || !self.until_processing.is_empty()
    }

    /// Whether `job`'s class is a configured `ShouldBeUniqueUntilProcessing`.
    fn until_processing(&self, job: &ReservedJob, marks: &Marks) -> bool {
        let class = marks.class.as_deref().unwrap_or(job.display_name());
        self.until_processing.iter().any(|p| p.matches(class))
    }

    async fn release(&self, job: &ReservedJob, lock: &UniqueLock) {
        let store = match &self.lock {
            Some(store) if lock.store == self.lock_name => store,
            _ => {
                if !self.warned_store.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        job = job.display_name(),
                        store = lock.store,
                        key = lock.key,
                        "the unique lock is in the cache store {:?}, where the worker cannot \
                         release it (it releases locks in {:?}, a {} store): it stays until \
                         uniqueFor passes; run this job through the PHP bridge, or set \
                         [bookkeeping] lock_store (logged once)",
                        lock.store,
                        self.lock_name,
                        self.lock_kind
                    );
                }
                return;
            }
        };
        match bounded(store.release(&lock.key, lock.owner.as_deref())).await {
            Ok(deleted) => tracing::debug!(
                job = job.display_name(),
                key = lock.key,
                deleted,
                "unique lock released"
            ),
            Err(e) => tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                key = lock.key,
                "cannot release the unique lock; it stays until uniqueFor passes: {}",
                crate::error_chain::error_chain(e.as_ref())
            ),
        }
    }

    async fn record(&self, job: &ReservedJob, id: &str, uuid: &str, ending: Ending) {
        let Some(batches) = &self.batches else { return };
        let written = match ending {
            Ending::Success => bounded(batches.record_success(id, uuid)).await,
            Ending::Failure => bounded(batches.record_failure(id, uuid)).await,
        };
        match written {
            Ok(counts) => tracing::debug!(
                job = job.display_name(),
                batch = id,
                ?ending,
                ?counts,
                "batch recorded"
            ),
            Err(e) => tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                batch = id,
                ?ending,
                "cannot record the job in its batch (the job is settled all the same): {}",
                crate::error_chain::error_chain(e.as_ref())
            ),
        }
    }
}
