//! Who runs a job and who keeps its books, decided once as the job starts
//! ([`super::task::run_job`]) and read by every later step (the run, the
//! finish, the settle, the failed hook) instead of asked of the payload
//! again.

use super::Services;
use crate::handler::Route;
use crate::queue::ReservedJob;
use crate::whole::Books;

/// One job's handler and bookkeeper.
#[derive(Debug, Clone, Copy)]
pub struct Assignment<'s> {
    /// The handler its displayName and queue matched; `None`: no handler
    /// takes it.
    pub route: Option<&'s Route>,
    /// Who keeps its books ([`crate::whole::Bookkeeping::books`]): for most
    /// jobs [`Books::Nothing`], decided with one search of the command's
    /// text ([`crate::whole::Signs`]).
    pub books: Books<'s>,
}

impl<'s> Assignment<'s> {
    /// `job`'s handler and bookkeeper under `services`' router and
    /// bookkeeping.
    pub fn of(job: &ReservedJob, services: &'s Services) -> Self {
        let route = services.router.route(job.display_name(), &job.queue.name);
        let books = services.bookkeeping.books(job, route, &services.router);
        Assignment { route, books }
    }
}
