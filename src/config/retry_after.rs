//! `retry_after` for every driver, resolved in one place: how long a
//! reserved job stays the worker's before another may take it (seconds),
//! from `[queue] retry_after` (the connection's `retry_after`, or the
//! driver's variable: `REDIS_QUEUE_RETRY_AFTER`, `DB_QUEUE_RETRY_AFTER`,
//! `BEANSTALKD_QUEUE_RETRY_AFTER`), with each driver's default, its
//! reading of `null` and its bounds. The drivers' specs and
//! [`super::Settings::retry_after`] take the value from here, and each
//! driver answers it at run time (`queue::driver::Driver::retry_after`).
//! One function a driver.
//!
//! | driver | unset | `null` | refused |
//! |---|---|---|---|
//! | Redis | 90 | never reclaimed | over [`super::MAX_SECONDS`] |
//! | database | 90 | 60 (`DatabaseConnector`'s `?? 60`) | 0 |
//! | SQS (the visibility timeout) | 30 (AWS's) | refused | outside 2..=43,200 |
//! | beanstalkd (the `ttr`) | 90 | 60 (pheanstalk's default `ttr`) | 0 |

use anyhow::bail;

use super::file::{Nullable, QueueLayer};
use crate::queue::database::NULL_RETRY_AFTER;
use crate::queue::sqs::spec::MAX_VISIBILITY;

/// The `ttr` pheanstalk gives a job put without one
/// (`Pheanstalk::DEFAULT_TTR`): beanstalkd's `retry_after = null`.
pub const BEANSTALKD_NULL_TTR: u64 = 60;

/// Redis's: seconds, or `None` (never reclaimed) for `null`.
///
/// # Errors
/// Over [`super::MAX_SECONDS`].
pub fn redis(queue: &QueueLayer) -> anyhow::Result<Option<u64>> {
    let seconds = queue.retry_after.map_or(Some(90), Nullable::seconds);
    super::check_reservation(seconds, None)?;
    Ok(seconds)
}

/// The database queue's: a reserved row is free again after it.
///
/// # Errors
/// 0, or over [`super::MAX_SECONDS`].
pub fn database(queue: &QueueLayer) -> anyhow::Result<u64> {
    at_least_one(
        queue.retry_after,
        NULL_RETRY_AFTER,
        "[queue] retry_after = 0 on the database queue (DB_QUEUE_RETRY_AFTER; `null` there \
         is 0 to the skeleton's (int) cast): every reserved row would be free for another \
         worker at once, so a job would run twice; set it above the longest job (default 90)",
    )
}

/// SQS's: the visibility timeout each receive asks for.
///
/// # Errors
/// `null`, or outside 2 to 43,200 s.
pub fn sqs(queue: &QueueLayer) -> anyhow::Result<u64> {
    visibility(queue.retry_after)
}

/// beanstalkd's: the `ttr` of every job the worker puts.
///
/// # Errors
/// 0, or over [`super::MAX_SECONDS`].
pub fn beanstalkd(queue: &QueueLayer) -> anyhow::Result<u64> {
    at_least_one(
        queue.retry_after,
        BEANSTALKD_NULL_TTR,
        "[queue] retry_after = 0 on the beanstalkd queue (BEANSTALKD_QUEUE_RETRY_AFTER; \
         `null` there is 0 to the skeleton's (int) cast): it is the ttr of every job \
         pushed, and beanstalkd would give a job to another worker after 1 s; set it \
         above the longest job (default 90)",
    )
}

/// A `retry_after` of 90 when unset and `null_is` when null, refused
/// with `zero` when 0.
fn at_least_one(given: Option<Nullable>, null_is: u64, zero: &str) -> anyhow::Result<u64> {
    let seconds = match given {
        None => 90,
        Some(Nullable::Null) => null_is,
        Some(Nullable::Seconds(s)) => s,
    };
    if seconds == 0 {
        bail!("{zero}");
    }
    super::check_reservation(Some(seconds), None)?;
    Ok(seconds)
}

/// SQS's visibility timeout: 30 when unset, 2 to 43,200 s.
fn visibility(given: Option<Nullable>) -> anyhow::Result<u64> {
    let seconds = match given {
        None => 30,
        Some(Nullable::Seconds(s)) => s,
        Some(Nullable::Null) => bail!(
            "[queue] retry_after = null on the SQS queue: it is the visibility timeout each \
             receive asks for; give it in seconds (2 to 43200, default 30)"
        ),
    };
    if !(2..=MAX_VISIBILITY).contains(&seconds) {
        bail!(
            "[queue] retry_after = {seconds} on the SQS queue: the visibility timeout must \
             be 2 to 43200 s (the worker extends it every (n-1)/2 s while a job runs)"
        );
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Rule = fn(&QueueLayer) -> anyhow::Result<Option<u64>>;

    /// Each driver's default, `null` and refusals, as the module's table
    /// gives them.
    #[test]
    fn each_driver_reads_retry_after_its_own_way() {
        let of = |rule: Rule, given: Option<Nullable>| {
            rule(&QueueLayer {
                retry_after: given,
                ..QueueLayer::default()
            })
        };
        let rules: [(&str, Rule, u64, Option<Option<u64>>); 4] = [
            ("redis", redis, 90, Some(None)),
            ("database", |q| database(q).map(Some), 90, Some(Some(60))),
            ("sqs", |q| sqs(q).map(Some), 30, None),
            (
                "beanstalkd",
                |q| beanstalkd(q).map(Some),
                90,
                Some(Some(60)),
            ),
        ];
        let zero = Some(Nullable::Seconds(0));
        for (name, rule, unset, when_null) in rules {
            assert_eq!(of(rule, None).unwrap(), Some(unset), "{name}");
            assert_eq!(of(rule, Some(Nullable::Null)).ok(), when_null, "{name}");
            let zero = of(rule, zero);
            if name == "redis" {
                assert_eq!(zero.unwrap(), Some(0));
            } else {
                let e = zero.unwrap_err().to_string();
                assert!(e.contains("retry_after = 0"), "{name}: {e}");
            }
            assert!(
                of(rule, Some(Nullable::Seconds(u64::MAX))).is_err(),
                "{name}"
            );
        }
        assert!(of(rules[2].1, Some(Nullable::Seconds(43_201))).is_err());
    }
}
