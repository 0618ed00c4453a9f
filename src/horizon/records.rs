//! The job steps Horizon records, read from the worker's events.
//!
//! Horizon's own listeners (`MarkJobAsReserved`, `MarkJobAsReleased`,
//! `MarkJobsAsMigrated`, `MarkJobAsComplete`, `UpdateJobMetrics`,
//! `MarkJobAsFailed`, `StoreTagsForFailedJob`) write as each step happens.
//! Here the listener is a [`Decoupled`](crate::worker::decoupled::Decoupled)
//! one: the loop only copies each event into a bounded channel, and
//! [`super::writer`] turns batches of them into [`Record`]s and writes
//! them on a thread and a connection of its own.
//!
//! A record is written only for what Redis did: a settle that Redis refused
//! (the reservation gone, left reserved, the lease lost) writes nothing,
//! a settle whose answer was lost writes the step it asked for, and a
//! failure kept in `:unrecorded` is still a failed job.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::worker::decoupled::{Event, JobFacts, Stamped};
use crate::worker::{Outcome, Settled, Verdict};

/// Events waiting for the writer before new ones are dropped.
pub const CAPACITY: usize = 10_000;

/// One step of one job, for Horizon.
#[derive(Debug, Clone)]
pub struct Record {
    /// Horizon's id of the job (`uuid`, else `id`).
    pub id: String,
    /// The job's name (`displayName`).
    pub name: String,
    /// The queue's name (`default`).
    pub queue: String,
    /// The job's payload as Redis holds it after the step (what Horizon
    /// stores as `payload`).
    pub payload: Bytes,
    /// When it happened: `microtime(true)`.
    pub at: f64,
    /// The payload may have a field of Horizon's (see
    /// [`JobFacts::horizon_fields`]): false only when its parse saw none.
    pub horizon_fields: bool,
    /// What happened.
    pub step: Step,
}

/// The job steps Horizon records.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Reserved and about to run (`JobReserved`).
    Reserved,
    /// Back on the queue, to run again (`JobReleased`).
    Released,
    /// Moved from `:delayed` or `:reserved` to the ready list
    /// (`JobsMigrated`).
    Migrated,
    /// Deleted after it ran (`JobDeleted`); `runtime_ms` from reservation,
    /// rounded to 0.01 ms as Horizon's `Stopwatch` gives it.
    Completed {
        /// Milliseconds.
        runtime_ms: f64,
        /// Its delete removed the reservation (not a lost answer) and
        /// was not that of a large job: a companion's record, if one is
        /// installed, went with it ([`super::companion`]).
        deleted: bool,
    },
    /// Failed (`JobFailed`), with the exception text `failed_jobs` gets.
    Failed {
        /// The recorded exception.
        exception: String,
    },
}

/// Adds the records `event` stands for to `out`: none for the events
/// Horizon does not record, for a settle Redis refused, or for a payload
/// without an id.
pub fn from_event(event: &Stamped, out: &mut Vec<Record>) {
    let at = microtime(event.at);
    match &event.event {
        Event::Reserved(job) => out.extend(record(job, job.reserved.clone(), at, Step::Reserved)),
        Event::Settled {
            job,
            verdict,
            settled,
            took,
        } => {
            if let Some(step) = settled_step(verdict, *settled, *took, job.large) {
                out.extend(record(job, job.reserved.clone(), at, step));
            }
        }
        Event::Migrated(migrated) => {
            for payload in &migrated.jobs {
                if let Ok(fields) = crate::queue::Payload::parse(payload.clone()) {
                    let job = JobFacts {
                        queue: std::sync::Arc::clone(&migrated.queue),
                        reserved: payload.clone(),
                        id: fields.uuid().map(str::to_string).or_else(|| fields.id()),
                        display_name: fields.display_name().map(str::to_string),
                        large: false,
                        horizon_fields: true,
                    };
                    out.extend(record(&job, payload.clone(), at, Step::Migrated));
                }
            }
        }
        _ => {}
    }
}

/// The step a settle stands for, when the queue did it: the job's
/// [`Outcome`], the one mapping of (verdict, settled) every listener
/// reports, in Horizon's steps.
///
/// A settle whose answer was lost (`Gone` after a failed try: Redis did
/// the step, the reply never came, and the next try found the reservation
/// gone) stands for the step the verdict asked for, as `Outcome::of`
/// concludes: that try removed the reservation. A job another worker
/// reclaimed meanwhile gets that worker's records after this one. Only a
/// delete this settle saw land (not a large member's, named by digest)
/// carried the companion's writes (`deleted`).
fn settled_step(verdict: &Verdict, settled: Settled, took: Duration, large: bool) -> Option<Step> {
    match Outcome::of(verdict, settled) {
        Outcome::Done => Some(Step::Completed {
            runtime_ms: (took.as_secs_f64() * 100_000.0).round() / 100.0,
            deleted: settled == Settled::Done && !large,
        }),
        Outcome::Released | Outcome::ReleasedAfterException | Outcome::HandedBack => {
            Some(Step::Released)
        }
        Outcome::Failed => match verdict {
            Verdict::Fail { exception, .. } => Some(Step::Failed {
                exception: exception.to_string(),
            }),
            _ => None,
        },
        Outcome::LeaseLost | Outcome::Reclaimed | Outcome::LeftReserved => None,
    }
}

fn record(job: &JobFacts, payload: Bytes, at: f64, step: Step) -> Option<Record> {
    Some(Record {
        id: job.id.clone()?,
        name: job.display_name.clone().unwrap_or_default(),
        queue: job.queue.name.clone(),
        payload,
        at,
        horizon_fields: job.horizon_fields,
        step,
    })
}

/// `microtime(true)` of `at`: seconds since the epoch, with microseconds.
pub fn microtime(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exception::JobException;

    fn settled(verdict: Verdict, settled: Settled) -> Vec<Record> {
        let job = JobFacts {
            queue: std::sync::Arc::new(crate::queue::QueueHandle::named("default")),
            reserved: Bytes::from_static(br#"{"uuid":"u1","displayName":"App\\Jobs\\A"}"#),
            id: Some("u1".into()),
            display_name: Some("App\\Jobs\\A".into()),
            large: false,
            horizon_fields: true,
        };
        let event = Stamped {
            at: SystemTime::now(),
            event: Event::Settled {
                job,
                verdict,
                settled,
                took: Duration::from_millis(3),
            },
        };
        let mut out = Vec::new();
        from_event(&event, &mut out);
        out
    }

    /// Issue 30 item 4: Redis did the step, the answer was lost, the next
    /// try found the reservation gone: the record still ends right.
    #[test]
    fn a_settle_whose_answer_was_lost_writes_the_step_it_asked_for() {
        let lost = Settled::Gone {
            after_failure: true,
        };
        let done = settled(Verdict::Delete, lost);
        assert!(matches!(done[0].step, Step::Completed { .. }), "{done:?}");
        let fail = Verdict::Fail {
            exception: JobException::new("RuntimeException", "boom"),
            failed_hook: false,
        };
        let failed = settled(fail, lost);
        assert!(
            matches!(&failed[0].step, Step::Failed { exception } if exception.contains("boom"))
        );
        let release = Verdict::Release {
            delay: 5,
            exception: None,
        };
        assert_eq!(settled(release, lost)[0].step, Step::Released);
        // Reclaimed by another worker, which writes its own records.
        let reclaimed = Settled::Gone {
            after_failure: false,
        };
        assert!(settled(Verdict::Delete, reclaimed).is_empty());
    }
}
