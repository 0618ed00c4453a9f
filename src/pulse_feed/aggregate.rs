//! Pulse's buckets (laravel/pulse 1.x, `DatabaseStorage::preaggregate`):
//! each entry's aggregations folded per type, key, period and bucket
//! before one upsert per row, as `pulse:work` and the storage ingest do.

use std::collections::BTreeMap;

use super::entry::{Aggregation, Entry};

/// The periods Pulse keeps, in minutes: 1 hour, 6 hours, 24 hours, 7 days.
/// A period's bucket is as many seconds wide (60 buckets per graph).
pub const PERIODS: [i64; 4] = [60, 360, 1440, 10080];

/// One `pulse_aggregates` row to upsert.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// `floor(timestamp / period) * period`, UNIX seconds.
    pub bucket: i64,
    /// Minutes.
    pub period: i64,
    /// The entry's type.
    pub kind: &'static str,
    /// `count` or `max`.
    pub aggregate: Aggregation,
    /// The entry's key.
    pub key: String,
    /// The count of entries, or the largest value.
    pub value: i64,
}

/// The rows for `entries`, folded; an entry older than a period (it would
/// be trimmed at once) makes no row of that period. `now`: UNIX seconds.
pub fn rows(entries: &[Entry], now: i64) -> Vec<Row> {
    type Slot = (&'static str, Aggregation, i64, i64, String);
    let mut folded: BTreeMap<Slot, i64> = BTreeMap::new();
    for entry in entries {
        for &aggregate in &entry.aggregations {
            for period in PERIODS {
                if entry.timestamp < now - period * 60 {
                    continue;
                }
                let bucket = entry.timestamp.div_euclid(period) * period;
                let slot = (entry.kind, aggregate, period, bucket, entry.key.clone());
                let value = entry.value.unwrap_or(0);
                folded
                    .entry(slot)
                    .and_modify(|v| match aggregate {
                        Aggregation::Count => *v += 1,
                        Aggregation::Max => *v = (*v).max(value),
                    })
                    .or_insert(match aggregate {
                        Aggregation::Count => 1,
                        Aggregation::Max => value,
                    });
            }
        }
    }
    folded
        .into_iter()
        .map(|((kind, aggregate, period, bucket, key), value)| Row {
            bucket,
            period,
            kind,
            aggregate,
            key,
            value,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(ts: i64, kind: &'static str) -> Entry {
        Entry {
            timestamp: ts,
            kind,
            key: "redis:default".into(),
            value: None,
            aggregations: vec![Aggregation::Count],
            only_buckets: true,
        }
    }

    #[test]
    fn counts_fold_per_bucket_and_period() {
        let now = 1_700_000_000;
        let entries = [
            count(now, "processed"),
            count(now, "processed"),
            count(now - 120, "processed"),
        ];
        let rows = rows(&entries, now);
        let one_hour: Vec<_> = rows.iter().filter(|r| r.period == 60).collect();
        assert_eq!(one_hour.len(), 2, "{rows:?}");
        assert_eq!(one_hour.iter().map(|r| r.value).sum::<i64>(), 3);
        let week: Vec<_> = rows.iter().filter(|r| r.period == 10080).collect();
        assert_eq!(week.len(), 1);
        assert_eq!(week[0].value, 3);
        assert_eq!(week[0].bucket, now / 10080 * 10080);
    }

    #[test]
    fn max_keeps_the_largest_and_old_entries_skip_short_periods() {
        let now = 1_700_000_000;
        let slow = |ts, ms| Entry {
            timestamp: ts,
            kind: "slow_job",
            key: "App\\Jobs\\A".into(),
            value: Some(ms),
            aggregations: vec![Aggregation::Max, Aggregation::Count],
            only_buckets: false,
        };
        let rows = rows(&[slow(now, 1200), slow(now, 3400)], now);
        let max = rows
            .iter()
            .find(|r| r.period == 60 && r.aggregate == Aggregation::Max);
        assert_eq!(max.map(|r| r.value), Some(3400));
        let old = super::rows(&[slow(now - 2 * 3600, 1200)], now);
        assert!(old.iter().all(|r| r.period >= 360), "{old:?}");
    }
}
