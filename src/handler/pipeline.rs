//! Pipelined calls (`pipeline = true`): a busy warm process is sent its
//! next request before it answers the one in flight.
//!
//! Without it, a process that answers sits idle until the worker has read
//! the answer and written the next request: a sleep and a wake-up per job
//! on each side of the pipe. With it, the next request is already in the
//! process's stdin when it answers, and it reads it at once.
//!
//! - **One request behind.** While a process's call is in flight, its
//!   [`Lead`] offers one place behind it. A call that finds no free
//!   process takes such a place ([`Behind`]), writes its request, and
//!   waits. When the answer of the call ahead is in, the process is handed
//!   to it with that call's permit (`T`, a
//!   [`Handoff`](super::warm::Handoff)). Its time limit starts then, when
//!   the process can begin it.
//! - **Reserved, not started.** A call behind counts among the calls
//!   waiting for a process, in the `reserve_ahead` window: a SIGKILL of
//!   the worker costs it one attempt, as any job reserved ahead.
//! - **The call ahead fails** (time limit, death, protocol error): its
//!   process is ended first, and then the call behind is told. If its
//!   request is still unread in the pipe, the process never saw it: it
//!   goes to another process and costs no attempt. If the process had
//!   read it (a handler that reads ahead), it is an exception for its job.
//! - **No place is offered** by a process due for recycling after its call
//!   (`max_jobs`, `max_memory`), or above the pool's size after a shrink.
//!
//! It is meant for handlers that read one request, answer it, then read
//! the next (a loop over stdin's lines, as the PHP bridge). A handler that
//! reads requests while it works on one, and starts each at once, would
//! run two calls at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::input::{Input, Sent};
use super::request_line::Request;

/// The places behind the busy processes of one pool; `T` is what the call
/// ahead hands to the call behind.
#[derive(Debug)]
pub struct Pipeline<T> {
    places: Mutex<Vec<Place<T>>>,
    next_lead: AtomicU64,
}

/// One busy process's place behind its call in flight.
#[derive(Debug)]
struct Place<T> {
    lead: u64,
    pid: u32,
    input: Arc<Input>,
    /// The call behind, once one took the place.
    behind: Option<oneshot::Sender<T>>,
}

/// A busy process's offer of a place behind its call; taken back when the
/// call ends ([`Lead::close`]) or the lead is dropped.
#[derive(Debug)]
pub struct Lead<T> {
    pipeline: Arc<Pipeline<T>>,
    /// Its place's number; `None` once closed.
    id: Option<u64>,
}

/// A call's place behind a busy process.
#[derive(Debug)]
pub struct Behind<T> {
    /// The process's pid (for messages).
    pub pid: u32,
    input: Arc<Input>,
    handoff: oneshot::Receiver<T>,
}

/// Why a call behind was not handed its process: the call ahead failed
/// and its process was ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AheadEnded {
    /// The request behind was still unread: the job never reached it.
    Unread,
    /// The process had read (some of) the request behind.
    Read,
}

impl<T> Default for Pipeline<T> {
    fn default() -> Self {
        Pipeline {
            places: Mutex::new(Vec::new()),
            next_lead: AtomicU64::new(0),
        }
    }
}

impl<T> Pipeline<T> {
    fn places(&self) -> MutexGuard<'_, Vec<Place<T>>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Offers a place behind the call in flight on the process `pid`,
    /// whose stdin is `input`.
    pub fn open(self: &Arc<Self>, pid: u32, input: &Arc<Input>) -> Lead<T> {
        let id = self.next_lead.fetch_add(1, Ordering::Relaxed);
        self.places().push(Place {
            lead: id,
            pid,
            input: Arc::clone(input),
            behind: None,
        });
        Lead {
            pipeline: Arc::clone(self),
            id: Some(id),
        }
    }

    /// Takes a free place behind a busy process, the one offered first.
    pub fn take_place(&self) -> Option<Behind<T>> {
        let mut places = self.places();
        let place = places.iter_mut().find(|p| p.behind.is_none())?;
        let (sender, handoff) = oneshot::channel();
        place.behind = Some(sender);
        Some(Behind {
            pid: place.pid,
            input: Arc::clone(&place.input),
            handoff,
        })
    }

    /// Removes lead `id`'s place; returns its call behind, if any.
    fn remove(&self, id: u64) -> Option<oneshot::Sender<T>> {
        let mut places = self.places();
        let at = places.iter().position(|p| p.lead == id)?;
        // `remove`, not `swap_remove`: places stay in the order offered.
        places.remove(at).behind
    }
}

impl<T> Lead<T> {
    /// Takes the place back; returns the call behind, if one took it.
    pub fn close(mut self) -> Option<oneshot::Sender<T>> {
        self.id.take().and_then(|id| self.pipeline.remove(id))
    }
}

impl<T> Drop for Lead<T> {
    fn drop(&mut self) {
        // The call behind, if any, is told the call ahead is gone.
        if let Some(id) = self.id.take() {
            drop(self.pipeline.remove(id));
        }
    }
}

impl<T> Behind<T> {
    /// Writes the request behind the call in flight.
    ///
    /// # Errors
    /// The pipe cannot be written (the process ended).
    pub async fn send(&self, request: &Request<'_>) -> std::io::Result<Sent> {
        self.input.send(request).await
    }

    /// Waits for the call ahead to end, and takes what it hands over.
    ///
    /// # Errors
    /// The call ahead failed and its process was ended: whether the
    /// request `sent` was still unread then ([`AheadEnded`]).
    pub async fn handed(self, sent: Sent) -> Result<T, AheadEnded> {
        let Behind { input, handoff, .. } = self;
        match handoff.await {
            Ok(handed) => Ok(handed),
            Err(_) if input.was_read(sent) => Err(AheadEnded::Read),
            Err(_) => Err(AheadEnded::Unread),
        }
    }
}
