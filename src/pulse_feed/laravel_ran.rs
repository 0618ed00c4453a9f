//! Which jobs Pulse already hears of: a job the PHP bridge ran fired
//! Laravel's own queue events in PHP, where the app's Pulse recorded them,
//! so the feed must not record it twice.

use wildmatch::WildMatch;

use crate::queue::ReservedJob;
use crate::worker::Verdict;

/// The file every bridge command runs.
const BRIDGE: &str = "laravel-worker-bridge.php";

/// The handlers in match order: what each takes, and whether it is the
/// bridge.
#[derive(Debug, Default)]
pub struct BridgeRoutes {
    routes: Vec<(WildMatch, Option<Vec<String>>, bool)>,
}

impl BridgeRoutes {
    /// From the `[[handlers]]`, in order: each one's `match` pattern, its
    /// `queues`, and its command (`None` for an HTTP handler). A command
    /// one of whose arguments is a `laravel-worker-bridge.php` is the
    /// bridge.
    pub fn new<'a>(
        handlers: impl IntoIterator<Item = (&'a str, Option<Vec<String>>, Option<&'a [String]>)>,
    ) -> Self {
        let routes = handlers
            .into_iter()
            .map(|(pattern, queues, command)| {
                let bridge = command
                    .is_some_and(|c| c.iter().any(|arg| arg.rsplit('/').next() == Some(BRIDGE)));
                (WildMatch::new(pattern), queues, bridge)
            })
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
