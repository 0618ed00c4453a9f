//! What the worker does when a handler trips (see
//! [`breaker`](crate::handler::breaker)): the breaker's changes become job
//! events (metrics, `/readyz`), and with `[worker] on_handler_tripped =
//! "exit"` the worker stops taking jobs, drains and exits with
//! [`StopReason::HandlerTripped`](super::StopReason::HandlerTripped)'s code.

use std::sync::atomic::{AtomicBool, Ordering};

use super::events::{JobEvents, Listeners};
use crate::handler::breaker::Change;

/// `[worker] on_handler_tripped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnHandlerTripped {
    /// Keep running: the tripped handler's jobs are handed back and it is
    /// tried again later; other handlers carry on (the default).
    #[default]
    Release,
    /// Drain and exit, so that the supervisor shows the failure.
    Exit,
}

/// The policy and whether it has asked the worker to stop.
#[derive(Debug, Default)]
pub struct TripPolicy {
    on_tripped: OnHandlerTripped,
    stop: AtomicBool,
}

impl TripPolicy {
    /// A policy doing `on_tripped`.
    pub fn new(on_tripped: OnHandlerTripped) -> Self {
        TripPolicy {
            on_tripped,
            stop: AtomicBool::new(false),
        }
    }

    /// Tells the listeners about `change` and, on a trip with
    /// [`OnHandlerTripped::Exit`], asks the worker to stop.
    pub fn announce(&self, change: &Change, events: &Listeners) {
        match change {
            Change::Tripped(trip) => {
                events.handler_tripped(trip);
                if self.on_tripped == OnHandlerTripped::Exit
                    && !self.stop.swap(true, Ordering::SeqCst)
                {
                    tracing::error!(
                        handler = trip.handler,
                        "the worker stops because a handler tripped \
                         ([worker] on_handler_tripped = \"exit\")"
                    );
                }
            }
            Change::Closed { handler } => events.handler_closed(handler),
        }
    }

    /// Whether a trip has asked the worker to stop.
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}
