//! Laravel Pulse's `Entry` (laravel/pulse 1.x, `src/Entry.php`): one
//! reading a recorder hands to the ingest, and its PHP `serialize()` form,
//! which Pulse's Redis ingest stores and `pulse:work` unserializes.

use std::fmt::Write;

/// An aggregation Pulse keeps for an entry's buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Aggregation {
    /// How many entries (`count()`): each adds 1.
    Count,
    /// The largest value (`max()`).
    Max,
}

impl Aggregation {
    /// The name Pulse writes (`aggregate` column, `aggregations` list).
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Count => "count",
            Aggregation::Max => "max",
        }
    }
}

/// One Pulse entry, as a recorder makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// UNIX seconds (`timestamp`).
    pub timestamp: i64,
    /// `processing`, `processed`, `released`, `failed` or `slow_job`.
    pub kind: &'static str,
    /// `"{connection}:{queue}"` for the queue counts, the job's name for a
    /// slow job.
    pub key: String,
    /// Milliseconds for a slow job; `None` for the counts.
    pub value: Option<i64>,
    /// The aggregations its buckets keep, in the recorder's order.
    pub aggregations: Vec<Aggregation>,
    /// Only the buckets (`onlyBuckets()`): no `pulse_entries` row.
    pub only_buckets: bool,
}

/// The class name `serialize()` writes.
const CLASS: &str = "Laravel\\Pulse\\Entry";

impl Entry {
    /// PHP's `serialize($entry)`: the protected `aggregations` and
    /// `onlyBuckets` (named `\0*\0…`) then the public `timestamp`, `type`,
    /// `key` and `value`, in the class's declaration order.
    pub fn serialize(&self) -> String {
        let mut out = format!("O:{}:\"{CLASS}\":6:{{", CLASS.len());
        string(&mut out, "\0*\0aggregations");
        let _ = write!(out, "a:{}:{{", self.aggregations.len());
        for (i, aggregation) in self.aggregations.iter().enumerate() {
            let _ = write!(out, "i:{i};");
            string(&mut out, aggregation.as_str());
        }
        out.push('}');
        string(&mut out, "\0*\0onlyBuckets");
        let _ = write!(out, "b:{};", u8::from(self.only_buckets));
        string(&mut out, "timestamp");
        let _ = write!(out, "i:{};", self.timestamp);
        string(&mut out, "type");
        string(&mut out, self.kind);
        string(&mut out, "key");
        string(&mut out, &self.key);
        string(&mut out, "value");
        match self.value {
            Some(v) => {
                let _ = write!(out, "i:{v};");
            }
            None => out.push_str("N;"),
        }
        out.push('}');
        out
    }
}

/// A PHP serialized string: its length in bytes, then the bytes as they
/// are (PHP does not escape them).
fn string(out: &mut String, s: &str) {
    let _ = write!(out, "s:{}:\"{s}\";", s.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_count_serializes_as_php_does() {
        let entry = Entry {
            timestamp: 1_700_000_000,
            kind: "processed",
            key: "redis:default".into(),
            value: None,
            aggregations: vec![Aggregation::Count],
            only_buckets: true,
        };
        assert_eq!(
            entry.serialize(),
            "O:19:\"Laravel\\Pulse\\Entry\":6:{s:15:\"\0*\0aggregations\";a:1:{i:0;s:5:\"count\";}\
             s:14:\"\0*\0onlyBuckets\";b:1;s:9:\"timestamp\";i:1700000000;s:4:\"type\";\
             s:9:\"processed\";s:3:\"key\";s:13:\"redis:default\";s:5:\"value\";N;}"
        );
    }

    #[test]
    fn lengths_are_bytes_not_characters() {
        let entry = Entry {
            timestamp: 1,
            kind: "slow_job",
            key: "App\\Jobs\\Café".into(),
            value: Some(1500),
            aggregations: vec![Aggregation::Max, Aggregation::Count],
            only_buckets: false,
        };
        let text = entry.serialize();
        assert!(text.contains("s:14:\"App\\Jobs\\Café\";"), "{text}");
        assert!(
            text.contains("a:2:{i:0;s:3:\"max\";i:1;s:5:\"count\";}"),
            "{text}"
        );
        assert!(text.contains("b:0;") && text.contains("s:5:\"value\";i:1500;"));
    }
}
