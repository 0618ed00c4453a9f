//! [`Outcome`]: what became of a job, the one word every listener reports.
//!
//! A job's [`Verdict`] says what the worker *decided*; [`Settled`] says what
//! the queue *did* with that decision. The log line, the JSON line and the
//! `outcome` label of `laravel_worker_jobs_total` all describe the pair,
//! and they must agree: a job whose delete never landed (the queue refused
//! it until the lease ran out, or the reservation had been reclaimed by
//! another worker) is still reserved or belongs to someone else, and will
//! run again. It is reported as such, never as done.
//!
//! This is the only place that maps the pair to words.

use super::settle::Settled;
use super::verdict::Verdict;

/// What became of a job, as output and metrics report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Deleted: the handler finished, or asked for `delete`
    /// (Laravel's `JobProcessed`).
    Done,
    /// Released because the handler asked for it.
    Released,
    /// Released after an exception, a timeout, or the drain deadline.
    ReleasedAfterException,
    /// Handed back uncounted (no handler here, or its handler is tripped).
    HandedBack,
    /// Recorded as failed (Laravel's `JobFailed`).
    Failed,
    /// The reservation was lost while the handler ran; the handler was
    /// stopped and nothing was written.
    LeaseLost,
    /// The decision was not carried out because the reservation was already
    /// gone at the settle: another worker reclaimed the job (after
    /// `retry_after`) and settles it.
    Reclaimed,
    /// The decision never reached the queue before the lease ran out (the
    /// queue refused or did not answer): the job stays reserved and is
    /// reclaimed after `retry_after`.
    LeftReserved,
}

impl Outcome {
    /// The outcome of a job the worker decided `verdict` for and whose
    /// settle ended as `settled`.
    ///
    /// A settle that found the reservation gone right after a failed try
    /// ([`Settled::Gone`] with `after_failure`) most likely landed and only
    /// lost its answer: it counts as the verdict.
    pub fn of(verdict: &Verdict, settled: Settled) -> Outcome {
        match settled {
            Settled::LeftReserved => return Outcome::LeftReserved,
            Settled::Gone {
                after_failure: false,
            } => return Outcome::Reclaimed,
            Settled::LeaseLost => return Outcome::LeaseLost,
            Settled::Done
            | Settled::Released { .. }
            | Settled::Failed { .. }
            | Settled::Gone {
                after_failure: true,
            } => {}
        }
        match verdict {
            Verdict::Delete => Outcome::Done,
            Verdict::Release {
                exception: None, ..
            } => Outcome::Released,
            Verdict::Release { .. } => Outcome::ReleasedAfterException,
            Verdict::HandBack { .. } => Outcome::HandedBack,
            Verdict::Fail { .. } => Outcome::Failed,
            Verdict::LeaseLost => Outcome::LeaseLost,
        }
    }

    /// The `outcome` label of `laravel_worker_jobs_total`.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Released => "released",
            Outcome::ReleasedAfterException => "released_after_exception",
            Outcome::HandedBack => "handed_back",
            Outcome::Failed => "failed",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Reclaimed => "reclaimed",
            Outcome::LeftReserved => "left_reserved",
        }
    }

    /// The JSON line's `status`: Laravel 11+'s `queue:work --json` words
    /// (`success`, `released_after_exception`, `failed`) where Laravel has
    /// one, ours otherwise.
    pub fn status(self) -> &'static str {
        match self {
            Outcome::Done | Outcome::Released | Outcome::HandedBack => "success",
            Outcome::ReleasedAfterException => "released_after_exception",
            Outcome::Failed => "failed",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Reclaimed | Outcome::LeftReserved => "unsettled",
        }
    }

    /// The JSON line's `result`: what the queue did with the job
    /// (Laravel reports `deleted` for a failed job too: it is deleted).
    pub fn result(self) -> &'static str {
        match self {
            Outcome::Done | Outcome::Failed => "deleted",
            Outcome::Released | Outcome::ReleasedAfterException | Outcome::HandedBack => "released",
            Outcome::LeaseLost => "",
            Outcome::Reclaimed => "reclaimed",
            Outcome::LeftReserved => "left_reserved",
        }
    }

    /// The word ending artisan's line: `DONE` for a success, `FAIL` for
    /// the rest, as `queue:work` prints them; `UNSETTLED` for a job whose
    /// settle did not happen (not a Laravel word: Laravel never knows).
    pub fn word(self) -> &'static str {
        match self.status() {
            "success" => "DONE",
            "unsettled" => "UNSETTLED",
            _ => "FAIL",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exception::JobException;

    fn release(exception: bool) -> Verdict {
        Verdict::Release {
            delay: 0,
            exception: exception.then(|| JobException::new("E", "m".to_string())),
        }
    }

    #[test]
    fn a_settle_that_landed_reports_the_verdict() {
        let fail = Verdict::Fail {
            exception: JobException::new("E", "m".to_string()),
            failed_hook: false,
        };
        let cases = [
            (Verdict::Delete, Settled::Done, Outcome::Done, "DONE"),
            (
                release(false),
                Settled::Released { delay: 0 },
                Outcome::Released,
                "DONE",
            ),
            (
                release(true),
                Settled::Released { delay: 0 },
                Outcome::ReleasedAfterException,
                "FAIL",
            ),
            (
                fail,
                Settled::Failed { recorded: true },
                Outcome::Failed,
                "FAIL",
            ),
            (
                Verdict::HandBack {
                    delay: 0,
                    tripped: false,
                },
                Settled::Released { delay: 0 },
                Outcome::HandedBack,
                "DONE",
            ),
            (
                Verdict::LeaseLost,
                Settled::LeaseLost,
                Outcome::LeaseLost,
                "FAIL",
            ),
        ];
        for (verdict, settled, outcome, word) in cases {
            assert_eq!(Outcome::of(&verdict, settled), outcome, "{verdict:?}");
            assert_eq!(outcome.word(), word, "{outcome:?}");
        }
    }

    #[test]
    fn a_settle_that_did_not_happen_is_never_done() {
        for verdict in [Verdict::Delete, release(false), release(true)] {
            let gone = Settled::Gone {
                after_failure: false,
            };
            assert_eq!(Outcome::of(&verdict, gone), Outcome::Reclaimed);
            assert_eq!(
                Outcome::of(&verdict, Settled::LeftReserved),
                Outcome::LeftReserved
            );
        }
        for outcome in [Outcome::Reclaimed, Outcome::LeftReserved] {
            assert_eq!(outcome.word(), "UNSETTLED");
            assert_eq!(outcome.status(), "unsettled");
            assert_ne!(outcome.label(), "done");
        }
    }

    #[test]
    fn a_lost_answer_after_a_failed_try_counts_as_the_verdict() {
        let gone = Settled::Gone {
            after_failure: true,
        };
        assert_eq!(Outcome::of(&Verdict::Delete, gone), Outcome::Done);
    }
}
