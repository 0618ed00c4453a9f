//! The call a handler is given for a job ([`Invocation`]): its mode, and
//! the limits the payload, the handler and the flags set, as Laravel
//! ranks them. Made by the run ([`super::process`]), the finish
//! ([`super::finish`]) and the failed hook ([`super::settle`]).

use std::time::Duration;

use super::Services;
use crate::handler::{Invocation, Mode, Route};
use crate::queue::{Payload, ReservedJob};

/// The call of `route`'s handler for `job`: the payload's `timeout` wins
/// over the handler's, which wins over `--timeout` (0 = no limit), and the
/// payload's `maxTries` over `--tries`, as in Laravel.
pub fn invocation<'a>(
    job: &'a ReservedJob,
    route: &Route,
    services: &'a Services,
    mode: Mode<'a>,
) -> Invocation<'a> {
    let payload = job.payload.as_ref().ok();
    let options = &services.options;
    let timeout = payload
        .and_then(Payload::timeout)
        .or(route.timeout)
        .unwrap_or(options.timeout);
    Invocation {
        job,
        connection: &services.connection,
        max_tries: payload
            .and_then(Payload::max_tries)
            .unwrap_or(options.tries),
        timeout: (timeout > 0).then(|| Duration::from_secs(timeout)),
        mode,
        batch_cancelled: None,
    }
}
