//! Which jobs Pulse already hears of: a job the PHP bridge ran fired
//! Laravel's own queue events in PHP, where the app's Pulse recorded them,
//! so the feed must not record it twice.

use wildmatch::WildMatch;

use crate::queue::ReservedJob;
use crate::worker::Verdict;

/// The handlers in match order: what each takes, and whether Laravel's
/// own code keeps its jobs' books (the bridge's; see
/// [`crate::whole::done_by_laravel`]).
#[derive(Debug, Default)]
pub struct BridgeRoutes {
    routes: Vec<(WildMatch, Option<Vec<String>>, bool)>,
}

impl BridgeRoutes {
    /// From the `[[handlers]]`, in order: each one's `match` pattern, its
    /// `queues`, and whether Laravel keeps its jobs' books (its resolved
    /// `bookkeeping`, `"laravel"` by default for a command running
    /// `laravel-worker-bridge.php`): the same answer the settle's
    /// bookkeeping acts on.
    pub fn new<'a>(
        handlers: impl IntoIterator<Item = (&'a str, Option<Vec<String>>, bool)>,
    ) -> Self {
        let routes = handlers
            .into_iter()
            .map(|(pattern, queues, laravel)| (WildMatch::new(pattern), queues, laravel))
            .collect();
        BridgeRoutes { routes }
    }

    /// Whether some handler is not the bridge (with none, every job's
    /// events are Laravel's own).
    pub fn has_other_handlers(&self) -> bool {
        self.routes.iter().any(|(_, _, bridge)| !bridge)
    }
}

/// Whether Laravel ran this job's bookkeeping, and so fired the events
/// Pulse records: decided from the handler route the job took (the first
/// `[[handlers]]` entry matching its `displayName` and queue, as the
/// router picks it), the bridge's being Laravel's. The one place that
/// decides it; the settled event's `verdict` is passed for a predicate
/// that reads the handler's reply.
pub fn laravel_ran_bookkeeping(
    routes: &BridgeRoutes,
    job: &ReservedJob,
    _verdict: &Verdict,
) -> bool {
    let name = job.display_name();
    let queue = job.queue.name.as_str();
    routes
        .routes
        .iter()
        .find(|(pattern, queues, _)| {
            queues
                .as_ref()
                .is_none_or(|qs| qs.iter().any(|q| q == queue))
                && pattern.matches(name)
        })
        .is_some_and(|(_, _, bridge)| *bridge)
}
