//! What a payload says about the bookkeeping Laravel does around its job
//! (`CallQueuedHandler`): the unique lock it holds and the batch it
//! belongs to. Read from the payload alone, without PHP.
//!
//! - The unique lock (Laravel 11.39+): `illuminate:log:context` →
//!   `hidden` → `laravel_unique_job_cache_store`, `laravel_unique_job_key`
//!   and (13.24+) `laravel_unique_job_lock_owner`, each a PHP-serialized
//!   string. Before 11.39 the payload does not carry it.
//! - The batch: `data.batchId` (12.51+), else the `batchId` property of
//!   the serialized command (`Batchable`, 8.x+). An encrypted command
//!   (not starting with `O:`) hides it.

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::memmem::Finder;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cache::php::unserialize_string;

/// The signs of bookkeeping a payload's JSON text may show, each a
/// pattern of [`SIGNS`], in its order.
const SIGN_PATTERNS: [&[u8]; 7] = [
    // `data.batchId` a string (12.51+), and the command's `batchId`
    // property a string, as they stand in the payload's JSON text.
    br#""batchId":""#,
    br#"s:7:\"batchId\";s:"#,
    b"laravel_unique_job_key",
    br#"s:8:\"uniqueId\";"#,
    // `"command":"O:` (a plain serialized command) is found where it
    // stands, `"command"` alone elsewhere (leftmost-longest).
    br#""command":"O:"#,
    br#""command""#,
    // A serialized `chained` array's start.
    br#"s:7:\"chained\";a:"#,
];

/// One automaton for every sign, built once: a payload is read once for
/// all of them (where seven searches read it seven times).
static SIGNS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(SIGN_PATTERNS)
        .ok()
});

/// A serialized `chained` array's start in a decoded command.
static CHAINED: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(br#"s:7:"chained";a:"#));

/// What one read of a payload's text shows of its bookkeeping, before any
/// parse ([`Signs::of`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signs {
    /// `data.batchId` or the command's `batchId` is a string.
    pub batch: bool,
    /// A unique lock's key (11.39+) or a command's `uniqueId` is named.
    pub unique: bool,
    /// `"command":"O:`: a plain serialized command.
    pub command_object: bool,
    /// `"command"` anywhere.
    pub command: bool,
    /// A `chained` array with a count above zero.
    pub chain: bool,
}

impl Signs {
    /// The signs of the payload `raw`, in one pass over its bytes.
    pub fn of(raw: &[u8]) -> Signs {
        let mut signs = Signs::default();
        let Some(automaton) = SIGNS.as_ref() else {
            // Never: the patterns are fixed. Every sign set makes every
            // check parse the payload, which is slow but right.
            return Signs {
                batch: true,
                unique: true,
                command_object: false,
                command: true,
                chain: false,
            };
        };
        for found in automaton.find_iter(raw) {
            match found.pattern().as_usize() {
                0 | 1 => signs.batch = true,
                2 | 3 => signs.unique = true,
                4 => {
                    signs.command_object = true;
                    signs.command = true;
                }
                5 => signs.command = true,
                _ => signs.chain |= count_above_zero(&raw[found.end()..]),
            }
        }
        signs
    }
}

/// The unique lock a job holds, as its payload's context names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueLock {
    /// The cache store's config name (`redis`, `database`): the job's
    /// `uniqueVia()`, else the app's default store.
    pub store: String,
    /// The lock's key before the store's prefix
    /// (`laravel_unique_job:App\Jobs\X:id`).
    pub key: String,
    /// The lock's owner token (13.24+): the release is then a
    /// compare-and-delete.
    pub owner: Option<String>,
}

/// The bookkeeping marks of one payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// The unique lock, when the payload carries one.
    pub unique: Option<UniqueLock>,
    /// The batch id, when the job belongs to a batch.
    pub batch_id: Option<String>,
    /// The job's class (`data.commandName`), when it has one.
    pub class: Option<String>,
    /// The command's `uniqueId` property (a string or an integer), for a
    /// payload whose context names no lock (before 11.39).
    pub unique_id: Option<String>,
}

#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "illuminate:log:context")]
    context: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(borrow, default, rename = "batchId")]
    batch_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    command: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "commandName")]
    command_name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Context<'a> {
    #[serde(borrow, default)]
    hidden: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Hidden<'a> {
    #[serde(borrow, default)]
    laravel_unique_job_cache_store: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    laravel_unique_job_key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    laravel_unique_job_lock_owner: Option<Cow<'a, str>>,
}

impl Marks {
    /// The marks of the payload `raw`, skipping the parse of a payload
    /// with no sign of either (tests).
    #[cfg(test)]
    pub fn read(raw: &[u8]) -> Marks {
        Self::read_with(raw, false)
    }

    /// The marks of the payload `raw` (JSON). A payload that is not JSON,
    /// or whose parts have other shapes, has none (PHP's `unserialize`
    /// of a value that is not a string gives no lock either). With
    /// `always`, the payload is parsed even when it shows no sign of a
    /// batch or lock (for a configured unique class whose lock key needs
    /// only its class).
    pub fn read_with(raw: &[u8], always: bool) -> Marks {
        Self::read_signed(raw, Signs::of(raw), always)
    }

    /// [`Marks::read_with`] of a payload whose [`Signs`] were read.
    pub fn read_signed(raw: &[u8], signs: Signs, always: bool) -> Marks {
        // Most jobs carry neither (12.x payloads always have a
        // `"batchId":null`): skip the parse unless a batch id is a string
        // (in `data` or in the command) or a lock is named.
        if !signs.batch && !signs.unique && !always {
            return Marks::default();
        }
        let Ok(fields) = serde_json::from_slice::<Fields<'_>>(raw) else {
            return Marks::default();
        };
        let data = fields
            .data
            .and_then(|d| serde_json::from_str::<Data<'_>>(d.get()).ok());
        let unique = fields.context.and_then(|c| unique_lock(c.get()));
        let Some(data) = data else {
            return Marks {
                unique,
                ..Marks::default()
            };
        };
        let command = data.command.as_deref();
        Marks {
            unique,
            batch_id: data
                .batch_id
                .map(Cow::into_owned)
                .or_else(|| command.and_then(command_batch_id))
                .filter(|id| !id.is_empty()),
            class: data.command_name.map(Cow::into_owned),
            unique_id: command.and_then(command_unique_id),
        }
    }
}

/// The lock named by the context's `hidden` part, when it has a store and
/// a key.
fn unique_lock(context: &str) -> Option<UniqueLock> {
    let context: Context<'_> = serde_json::from_str(context).ok()?;
    // An empty `hidden` is PHP's empty array, `[]`: no lock.
    let hidden: Hidden<'_> = serde_json::from_str(context.hidden?.get()).ok()?;
    let text = |v: Option<Cow<'_, str>>| {
        v.as_deref()
            .and_then(unserialize_string)
            .map(str::to_string)
    };
    Some(UniqueLock {
        store: text(hidden.laravel_unique_job_cache_store)?,
        key: text(hidden.laravel_unique_job_key)?,
        owner: text(hidden.laravel_unique_job_lock_owner).filter(|o| !o.is_empty()),
    })
}

/// The `batchId` property of a serialized command (`s:7:"batchId";` then a
/// string; `N;` when the job is not in a batch). An encrypted command has
/// none that can be read.
fn command_batch_id(command: &str) -> Option<String> {
    if !command.starts_with("O:") {
        return None;
    }
    let at = command.find("s:7:\"batchId\";")? + "s:7:\"batchId\";".len();
    let rest = &command[at..];
    let (len, rest) = rest.strip_prefix("s:")?.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let id = rest.strip_prefix('"')?.get(..len)?;
    Some(id.to_string())
}

/// The `uniqueId` property of a serialized command: a string
/// (`s:8:"uniqueId";s:1:"k";`) or an integer (`i:5;`), as PHP's string
/// interpolation gives it in the lock's key.
fn command_unique_id(command: &str) -> Option<String> {
    if !command.starts_with("O:") {
        return None;
    }
    let at = command.find("s:8:\"uniqueId\";")? + "s:8:\"uniqueId\";".len();
    let rest = &command[at..];
    if let Some(int) = rest.strip_prefix("i:") {
        let digits = int.split(';').next()?;
        return digits.parse::<i64>().ok().map(|n| n.to_string());
    }
    let (len, rest) = rest.strip_prefix("s:")?.split_once(':')?;
    let len: usize = len.parse().ok()?;
    Some(rest.strip_prefix('"')?.get(..len)?.to_string())
}

/// Why a job's bookkeeping needs the app's own PHP code, read from its
/// payload alone: what the worker cannot do natively (see
/// [`needs_php`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeedsPhp {
    /// A non-empty `chained` (`Bus::chain`): the next job is dispatched by
    /// `dispatchNextJobInChain()`, the chain's `catch` callbacks are
    /// closures.
    Chain,
    /// An encrypted command (`ShouldBeEncrypted`): whether it has a chain
    /// (or a batch) cannot be known without `APP_KEY`.
    Encrypted,
    /// A job of a batch (`Bus::batch`): the batch's `progress`, `then`,
    /// `catch` and `finally` callbacks are closures (and 12.48+ fires its
    /// events), so the bridge records the batch where one is configured;
    /// without one the worker moves the counters itself.
    Batch,
}

/// What of `raw`'s bookkeeping only PHP can do: a non-empty `chained`
/// (`s:7:"chained";a:N:{` with N > 0, anywhere in the command: a false
/// sign costs one finish call, a missed one would drop a chain), or an
/// encrypted command (`data.command` not starting with `O:`). `None` for
/// a job pushed by name (no `data.command`) or a payload that is not
/// JSON. Plain jobs are not parsed: `"command":"O:` without a chain mark
/// answers at once. `signs`: `raw`'s [`Signs`], read once per job.
pub fn needs_php(raw: &[u8], signs: Signs) -> Option<NeedsPhp> {
    if signs.chain {
        return Some(NeedsPhp::Chain);
    }
    if signs.command_object || !signs.command {
        return signs.batch.then_some(NeedsPhp::Batch);
    }
    let fields = serde_json::from_slice::<Fields<'_>>(raw).ok()?;
    let data = serde_json::from_str::<Data<'_>>(fields.data?.get()).ok()?;
    let command = data.command?;
    if !command.starts_with("O:") {
        Some(NeedsPhp::Encrypted)
    } else if CHAINED
        .find_iter(command.as_bytes())
        .any(|at| count_above_zero(&command.as_bytes()[at + CHAINED.needle().len()..]))
    {
        Some(NeedsPhp::Chain)
    } else {
        signs.batch.then_some(NeedsPhp::Batch)
    }
}

/// Whether `rest` starts with a count above zero (the `N` of a serialized
/// array's `a:N:{`).
fn count_above_zero(rest: &[u8]) -> bool {
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && rest[..digits].iter().any(|&b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_finds_every_sign() {
        let plain = br#"{"data":{"command":"O:5:\"App\\A\":0:{}","batchId":null}}"#;
        let signs = Signs::of(plain);
        assert!(signs.command && signs.command_object);
        assert!(!signs.batch && !signs.unique && !signs.chain);
        let spaced = br#"{"data":{"command": "O:5:x"}}"#;
        let signs = Signs::of(spaced);
        assert!(signs.command && !signs.command_object, "{signs:?}");
        let all = br#"{"data":{"batchId":"b","command":"O:1:\"A\":1:{s:7:\"chained\";a:1:{}}"},"x":"laravel_unique_job_key"}"#;
        let signs = Signs::of(all);
        assert!(signs.batch && signs.unique && signs.chain && signs.command_object);
        let empty_chain = br#"{"data":{"command":"O:1:\"A\":1:{s:7:\"chained\";a:0:{}}"}}"#;
        assert!(!Signs::of(empty_chain).chain);
        assert_eq!(Signs::of(b"not json"), Signs::default());
    }

    #[test]
    fn reads_the_unique_lock_of_a_12_payload() {
        let raw = br#"{"uuid":"u","data":{"commandName":"App\\Jobs\\UniqueJob","command":"O:1:\"X\":0:{}","batchId":null},"illuminate:log:context":{"data":[],"hidden":{"laravel_unique_job_cache_store":"s:8:\"database\";","laravel_unique_job_key":"s:39:\"laravel_unique_job:App\\Jobs\\UniqueJob:k\";"}},"attempts":0}"#;
        let marks = Marks::read(raw);
        assert_eq!(
            marks.unique,
            Some(UniqueLock {
                store: "database".into(),
                key: "laravel_unique_job:App\\Jobs\\UniqueJob:k".into(),
                owner: None,
            })
        );
        assert_eq!(marks.batch_id, None);
        assert_eq!(marks.class.as_deref(), Some("App\\Jobs\\UniqueJob"));
    }

    #[test]
    fn an_owner_and_an_empty_hidden() {
        let raw = br#"{"data":{},"illuminate:log:context":{"data":[],"hidden":{"laravel_unique_job_cache_store":"s:5:\"redis\";","laravel_unique_job_key":"s:5:\"key:1\";","laravel_unique_job_lock_owner":"s:4:\"abcd\";"}}}"#;
        let lock = Marks::read(raw).unique.unwrap();
        assert_eq!(lock.owner.as_deref(), Some("abcd"));
        assert_eq!(lock.store, "redis");
        let none = br#"{"data":{"batchId":null},"illuminate:log:context":{"data":[],"hidden":[]}}"#;
        assert_eq!(Marks::read(none), Marks::default());
        assert_eq!(Marks::read(b"not json batchId"), Marks::default());
    }

    #[test]
    fn the_batch_id_from_data_or_from_the_command() {
        let data =
            br#"{"data":{"batchId":"9f1","command":"O:1:\"X\":1:{s:7:\"batchId\";s:3:\"old\";}"}}"#;
        assert_eq!(Marks::read(data).batch_id.as_deref(), Some("9f1"));
        let command = br#"{"data":{"command":"O:1:\"X\":2:{s:7:\"batchId\";s:36:\"9a5e8f4c-1a2b-4c3d-8e9f-0a1b2c3d4e5f\";s:1:\"k\";N;}"}}"#;
        assert_eq!(
            Marks::read(command).batch_id.as_deref(),
            Some("9a5e8f4c-1a2b-4c3d-8e9f-0a1b2c3d4e5f")
        );
        let outside = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"batchId\";N;}"}}"#;
        assert_eq!(Marks::read(outside).batch_id, None);
        let encrypted = br#"{"data":{"command":"eyJpdiI6 batchId"}}"#;
        assert_eq!(Marks::read(encrypted).batch_id, None);
    }

    #[test]
    fn which_jobs_need_php() {
        let chain = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:2:{i:0;s:3:\"abc\";i:1;s:3:\"def\";}}"}}"#;
        assert_eq!(needs_php(chain, Signs::of(chain)), Some(NeedsPhp::Chain));
        let last = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:0:{}}"}}"#;
        assert_eq!(
            needs_php(last, Signs::of(last)),
            None,
            "the chain's last job"
        );
        let ten = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:10:{}}"}}"#;
        assert_eq!(needs_php(ten, Signs::of(ten)), Some(NeedsPhp::Chain));
        let encrypted = br#"{"data":{"commandName":"X","command":"eyJpdiI6Ij"}}"#;
        assert_eq!(
            needs_php(encrypted, Signs::of(encrypted)),
            Some(NeedsPhp::Encrypted)
        );
        let spaced = br#"{"data": {"command": "O:1:\"X\":0:{}"}}"#;
        assert_eq!(needs_php(spaced, Signs::of(spaced)), None);
        let by_name = br#"{"job":"App\\Jobs\\X@handle","data":{"a":1}}"#;
        assert_eq!(needs_php(by_name, Signs::of(by_name)), None);
        assert_eq!(
            needs_php(
                b"not json \"command\":",
                Signs::of(b"not json \"command\":")
            ),
            None
        );
        let batched = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"batchId\";s:3:\"b-1\";}"}}"#;
        assert_eq!(
            needs_php(batched, Signs::of(batched)),
            Some(NeedsPhp::Batch)
        );
        let by_data = br#"{"data":{"batchId":"b-1","command":"O:1:\"X\":0:{}"}}"#;
        assert_eq!(
            needs_php(by_data, Signs::of(by_data)),
            Some(NeedsPhp::Batch)
        );
        let unbatched =
            br#"{"data":{"batchId":null,"command":"O:1:\"X\":1:{s:7:\"batchId\";N;}"}}"#;
        assert_eq!(needs_php(unbatched, Signs::of(unbatched)), None);
    }

    #[test]
    fn the_unique_id_property() {
        let text = br#"{"data":{"commandName":"App\\Jobs\\P","command":"O:10:\"App\\Jobs\\P\":1:{s:8:\"uniqueId\";s:2:\"k1\";}"}}"#;
        assert_eq!(Marks::read(text).unique_id.as_deref(), Some("k1"));
        let int = br#"{"data":{"command":"O:1:\"P\":1:{s:8:\"uniqueId\";i:42;}"}}"#;
        assert_eq!(Marks::read(int).unique_id.as_deref(), Some("42"));
    }
}
