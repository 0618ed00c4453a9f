//! Choosing a handler by displayName.

use std::sync::Arc;

use wildmatch::WildMatch;

use super::Handler;

/// One `[[handlers]]` entry.
#[derive(Debug)]
pub struct Route {
    pattern: WildMatch,
    /// The handler to call.
    pub handler: Arc<Handler>,
    /// The handler's default time limit in seconds, used when the payload
    /// has no `timeout` (the payload's own value wins, as in Laravel).
    pub timeout: Option<u64>,
}

impl Route {
    /// A route for displayNames matching `pattern` (`*` matches any run of
    /// characters, backslashes included).
    pub fn new(pattern: &str, handler: Arc<Handler>, timeout: Option<u64>) -> Self {
        Route {
            pattern: WildMatch::new(pattern),
            handler,
            timeout,
        }
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

    /// The first route whose pattern matches `display_name`.
    pub fn route(&self, display_name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.pattern.matches(display_name))
    }
}
