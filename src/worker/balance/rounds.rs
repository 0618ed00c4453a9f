//! The rounds of a balanced worker (`[worker] balance = "auto"`).
//!
//! Every `balance_cooldown` a round reads each queue's waiting jobs from
//! the queue (ready plus delayed already due; on Redis one script per
//! queue, no job over the wire, see [`RedisQueue::sizes`]), adds what the slots measured
//! (busy slots, mean runtime), lets the [`Balancer`] decide, and gives the
//! queues their new slots. The first round runs at once, so a backlog
//! waiting at start grows the slots from the first cooldown on.
//!
//! Listeners hear the slots through the `rebalanced` event: once at start
//! and after every round that moved a slot. A round that cannot reach
//! the queue moves nothing (logged through a [`RepeatLimiter`]).

use std::sync::Arc;

use super::super::Services;
use super::super::events::JobEvents;
use super::queue_slots::QueueSlots;
use super::share::{Balancer, Mode};
use crate::log_limit::{DEFAULT_INTERVAL, RepeatLimiter};
use crate::queue::{HeadAge, QueueHandle};

/// Log site of a round that could not read the queue sizes.
const ROUND_FAILED: &str = "cannot read the queue sizes to balance the slots";

/// Tells the listeners the slots as they are, then, for `auto`, runs a
/// round every cooldown until dropped (the loop aborts it when it stops).
pub async fn run(
    services: Arc<Services>,
    queues: Vec<Arc<QueueHandle>>,
    slots: Arc<QueueSlots>,
    mut balancer: Balancer,
) {
    services.events.rebalanced(&slots.shares());
    if balancer.policy().mode != Mode::Auto {
        return;
    }
    let mut errors = RepeatLimiter::new(DEFAULT_INTERVAL);
    let mut tick = tokio::time::interval(balancer.policy().cooldown);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let pending = match pending(&services, &queues).await {
            Ok(pending) => {
                errors.log_resolved(ROUND_FAILED);
                pending
            }
            Err(e) => {
                let at = services.queue.at();
                let error = format_args!("{e} (queue {at})");
                errors.log(tracing::Level::WARN, ROUND_FAILED, &error);
                continue;
            }
        };
        let before = balancer.slots().to_vec();
        let loads = slots.loads(&pending);
        tracing::debug!(?loads, ?before, "balance round");
        let after = balancer.decide(&loads).to_vec();
        if after != before {
            slots.set(&after);
            tracing::info!(
                slots = %describe(&slots.shares()),
                "slots rebalanced"
            );
            services.events.rebalanced(&slots.shares());
        }
    }
}

/// Per queue, the jobs waiting: ready plus delayed already due.
///
/// # Errors
/// The queue could not be reached.
pub async fn pending(
    services: &Services,
    queues: &[Arc<QueueHandle>],
) -> crate::queue::QueueResult<Vec<u64>> {
    let mut pending = Vec::with_capacity(queues.len());
    for keys in queues {
        let sizes = services.queue.sizes(keys, HeadAge::Skip).await?;
        pending.push(sizes.pending.saturating_add(sizes.delayed_due));
    }
    Ok(pending)
}

/// `high=3,low=1`: the slots per queue, for the log.
pub fn describe(shares: &[super::queue_slots::Share]) -> String {
    shares
        .iter()
        .map(|s| format!("{}={}", s.queue, s.slots))
        .collect::<Vec<_>>()
        .join(",")
}
