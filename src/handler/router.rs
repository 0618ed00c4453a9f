//! Choosing a handler by displayName (and, optionally, queue).

use std::sync::Arc;
use std::time::Duration;

use wildmatch::WildMatch;

use super::Handler;
use super::breaker::{Breaker, BreakerSettings};
use super::pool::Pool;
use crate::log_limit::DEFAULT_INTERVAL;

/// Who runs Laravel's bookkeeping (unique lock, batch record) for the
/// jobs of a handler; `crate::whole::done_by_laravel` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keeper {
    /// Laravel's own code (`CallQueuedHandler`, through the PHP bridge):
    /// the worker writes nothing.
    Laravel,
    /// The worker, natively (any other handler).
    #[default]
    Worker,
}

/// One `[[handlers]]` entry.
#[derive(Debug)]
pub struct Route {
    pattern: WildMatch,
    /// The handler to call.
    pub handler: Arc<Handler>,
    /// The handler's default time limit in seconds, used when the payload
    /// has no `timeout` (the payload's own value wins, as in Laravel).
    pub timeout: Option<u64>,
    /// When set, the route only takes jobs from these queues.
    queues: Option<Vec<String>>,
    /// Stops handing jobs to the handler while it keeps failing on its own.
    pub breaker: Breaker,
    /// Who does Laravel's bookkeeping for its jobs (see
    /// `crate::whole::done_by_laravel`).
    pub keeper: Keeper,
}

impl Route {
    /// A route for displayNames matching `pattern` (`*` matches any run of
    /// characters, backslashes included).
    pub fn new(pattern: &str, handler: Arc<Handler>, timeout: Option<u64>) -> Self {
        Route {
            pattern: WildMatch::new(pattern),
            handler,
            timeout,
            queues: None,
            breaker: Breaker::new(pattern, BreakerSettings::default(), DEFAULT_INTERVAL),
            keeper: Keeper::Worker,
        }
    }

    /// This route with its bookkeeping done by `keeper`.
    pub fn with_keeper(mut self, keeper: Keeper) -> Self {
        self.keeper = keeper;
        self
    }

    /// This route with its breaker set to `settings`, repeated faults
    /// logged once per `log_interval`.
    pub fn with_breaker(mut self, settings: BreakerSettings, log_interval: Duration) -> Self {
        let name = self.breaker.handler().to_string();
        self.breaker = Breaker::new(&name, settings, log_interval);
        self
    }

    /// This route restricted to jobs from `queues` (names as given to
    /// `--queue`, `default` not `queues:default`).
    pub fn with_queues(mut self, queues: Vec<String>) -> Self {
        self.queues = Some(queues);
        self
    }

    /// The `match` pattern, as configured.
    pub fn pattern(&self) -> &str {
        self.breaker.handler()
    }

    /// True when this route takes a job named `display_name` from `queue`.
    pub fn matches(&self, display_name: &str, queue: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue))
            && self.pattern.matches(display_name)
    }
}

/// What to do with a job no route matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// Fail it with a clear reason (the default).
    Fail,
    /// Hand it back, uncounted, available again after `delay` seconds, for
    /// workers that can run it.
    Release {
        /// Seconds.
        delay: u64,
    },
}

/// The routes in config order; the first match wins.
#[derive(Debug)]
pub struct Router {
    routes: Vec<Route>,
    /// Policy for names no route matches.
    pub unmatched: Unmatched,
}

impl Router {
    /// A router over `routes` (first match wins).
    pub fn new(routes: Vec<Route>, unmatched: Unmatched) -> Self {
        Router { routes, unmatched }
    }

    /// The first route whose pattern matches `display_name` and whose
    /// queue restriction, if any, names `queue`.
    pub fn route(&self, display_name: &str, queue: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.matches(display_name, queue))
    }

    /// The PHP bridge that finishes the jobs other handlers ran (see
    /// `crate::whole`): the route whose `match` is `name` (`[bookkeeping]
    /// finish_with`), else the first route whose books Laravel keeps.
    /// `None`: no bridge is configured.
    pub fn finisher(&self, name: Option<&str>) -> Option<&Route> {
        match name {
            Some(name) => self.routes.iter().find(|r| r.pattern() == name),
            None => self.routes.iter().find(|r| r.keeper == Keeper::Laravel),
        }
    }

    /// How many jobs may be reserved now, whichever handler each turns out
    /// to need: the least [`Handler::room`] of any persistent pool (free
    /// processes plus the `reserve_ahead` window; unbounded without one).
    pub fn room(&self) -> usize {
        self.routes
            .iter()
            .map(|r| r.handler.room())
            .min()
            .unwrap_or(usize::MAX)
    }

    /// The pools of warm processes, each with its handler's `match`
    /// pattern, in config order: what the worker watches and resizes.
    pub fn pools(&self) -> Vec<(String, Arc<Pool>)> {
        self.routes
            .iter()
            .filter_map(|r| {
                r.handler
                    .pool()
                    .map(|pool| (r.breaker.handler().to_string(), Arc::clone(pool)))
            })
            .collect()
    }

    /// Resolves once [`Self::room`] is above 0: every persistent pool has
    /// a free process or a place in its `reserve_ahead` window.
    pub async fn until_room(&self) {
        while self.room() == 0 {
            for route in &self.routes {
                route.handler.until_room().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{HttpHandler, HttpOptions};

    fn handler() -> Arc<Handler> {
        Arc::new(Handler::Http(
            HttpHandler::new(HttpOptions {
                url: reqwest::Url::parse("http://127.0.0.1:9/").unwrap(),
                connect_timeout: Duration::from_secs(1),
                token: None,
                secret: None,
            })
            .unwrap(),
        ))
    }

    #[test]
    fn the_finisher_is_named_or_the_first_bridge() {
        let router = Router::new(
            vec![
                Route::new("App\\Jobs\\Py*", handler(), None),
                Route::new("App\\Php\\*", handler(), None).with_keeper(Keeper::Laravel),
                Route::new("*", handler(), None).with_keeper(Keeper::Laravel),
            ],
            Unmatched::Fail,
        );
        let finisher = |name| router.finisher(name).map(Route::pattern);
        assert_eq!(finisher(None), Some("App\\Php\\*"));
        assert_eq!(finisher(Some("*")), Some("*"));
        assert_eq!(finisher(Some("nope")), None);
        let none = Router::new(vec![Route::new("*", handler(), None)], Unmatched::Fail);
        assert!(none.finisher(None).is_none(), "no bridge configured");
    }

    #[test]
    fn queue_restriction_skips_to_the_next_route() {
        let router = Router::new(
            vec![
                Route::new("App\\Jobs\\*", handler(), Some(1))
                    .with_queues(vec!["high".into(), "mail".into()]),
                Route::new("*", handler(), Some(2)),
            ],
            Unmatched::Fail,
        );
        let timeout = |name, queue| router.route(name, queue).and_then(|r| r.timeout);
        assert_eq!(timeout("App\\Jobs\\A", "high"), Some(1));
        assert_eq!(timeout("App\\Jobs\\A", "mail"), Some(1));
        assert_eq!(timeout("App\\Jobs\\A", "default"), Some(2));
        assert_eq!(timeout("Other", "high"), Some(2));
        let only = Router::new(
            vec![Route::new("*", handler(), None).with_queues(vec!["high".into()])],
            Unmatched::Fail,
        );
        assert!(only.route("X", "default").is_none());
        assert!(only.route("X", "high").is_some());
    }
}
