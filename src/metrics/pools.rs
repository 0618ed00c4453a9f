//! Gauges of the pools of warm processes (persistent handlers), read from
//! the pools at each scrape, labelled `handler` (its `match` pattern):
//!
//! | gauge | value |
//! |---|---|
//! | `laravel_worker_pool_processes` | processes alive (a retiring one until it has exited) |
//! | `laravel_worker_pool_busy` | calls in flight |
//! | `laravel_worker_pool_idle` | processes waiting for a call |
//! | `laravel_worker_pool_size` | the most processes now (`processes`, or a resize) |

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::handler::Pool;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    handler: String,
}

type PerPool = Family<PoolLabel, Gauge>;

/// The pools watched and their gauges.
#[derive(Default)]
pub struct PoolGauges {
    pools: Vec<(String, Arc<Pool>)>,
    processes: PerPool,
    busy: PerPool,
    idle: PerPool,
    size: PerPool,
}

impl PoolGauges {
    /// Registers the gauges (prefixed `laravel_worker_pool_`) for `pools`
    /// (each with its handler's `match` pattern) in `registry`.
    pub fn register(registry: &mut Registry, pools: Vec<(String, Arc<Pool>)>) -> Self {
        let gauges = PoolGauges {
            pools,
            ..PoolGauges::default()
        };
        let pool = registry.sub_registry_with_prefix("pool");
        for (name, help, family) in [
            (
                "processes",
                "Warm handler processes alive",
                &gauges.processes,
            ),
            (
                "busy",
                "Calls in flight in a pool of warm processes",
                &gauges.busy,
            ),
            (
                "idle",
                "Warm handler processes waiting for a call",
                &gauges.idle,
            ),
            ("size", "The most processes of a pool now", &gauges.size),
        ] {
            pool.register(name, help, family.clone());
        }
        gauges
    }

    /// Sets every gauge from its pool's counts now.
    pub fn refresh(&self) {
        for (handler, pool) in &self.pools {
            let stats = pool.stats();
            let label = PoolLabel {
                handler: handler.clone(),
            };
            for (family, value) in [
                (&self.processes, stats.alive),
                (&self.busy, stats.busy),
                (&self.idle, stats.idle),
                (&self.size, stats.size),
            ] {
                family
                    .get_or_create(&label)
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
            }
        }
    }
}
