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

use memchr::memmem::Finder;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cache::php::unserialize_string;
use crate::queue::Payload;

/// A searcher for `$bytes`, built once rather than at each search.
macro_rules! needle {
    ($name:ident, $bytes:expr) => {
        static $name: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new($bytes));
    };
}

// A serialized property of seven letters (`chained`, `batchId`), as it
// stands in the command's JSON-escaped text: `s:7:\"`.
needle!(PROPERTY_7, br#"s:7:\""#);
needle!(UNIQUE_KEY, b"laravel_unique_job_key");

/// What a payload shows of the bookkeeping around its job, read from the
/// parts its parse located ([`Payload::command_body`],
/// [`Payload::batch_in_data`], [`Payload::context`]): one search of the
/// command for its seven-letter properties, one of the (short) context.
/// Every job a non-PHP handler runs is asked this once
/// (`crate::worker::assignment`), so a plain job pays only that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signs {
    /// The command is encrypted (`ShouldBeEncrypted`): it does not start
    /// with `O:`, so its properties cannot be read.
    encrypted: bool,
    /// A serialized `chained` array with a count above zero.
    chain: bool,
    /// A batch id: `data.batchId` (12.51+) or the command's `batchId`
    /// property a string.
    batch: bool,
    /// The context names a unique lock (`laravel_unique_job_key`, 11.39+).
    unique_key: bool,
}

impl Signs {
    /// The signs of `payload`.
    pub fn of(payload: &Payload) -> Signs {
        let mut signs = Signs {
            batch: payload.batch_in_data(),
            unique_key: payload
                .context()
                .is_some_and(|c| UNIQUE_KEY.find(c).is_some()),
            ..Signs::default()
        };
        // A job pushed by name has no command: only `data.batchId` tells.
        let Some(command) = payload.command_body() else {
            return signs;
        };
        if !command.starts_with(b"O:") {
            signs.encrypted = true;
            return signs;
        }
        let len = PROPERTY_7.needle().len();
        for at in PROPERTY_7.find_iter(command) {
            let rest = &command[at + len..];
            if let Some(count) = rest.strip_prefix(br#"chained\";a:"#.as_slice()) {
                signs.chain |= positive_count(count);
            } else if rest.starts_with(br#"batchId\";s:"#) {
                signs.batch = true;
            }
        }
        signs
    }

    /// What of the job's bookkeeping only PHP can do: a non-empty
    /// `chained` (a false sign costs one finish call, a missed one would
    /// drop a chain), an encrypted command, or a batch. `None` for a job
    /// pushed by name outside a batch, or a plain command.
    pub fn needs_php(self) -> Option<NeedsPhp> {
        if self.chain {
            Some(NeedsPhp::Chain)
        } else if self.encrypted {
            Some(NeedsPhp::Encrypted)
        } else if self.batch {
            Some(NeedsPhp::Batch)
        } else {
            None
        }
    }

    /// Whether the payload names a batch or a unique lock: the marks the
    /// worker can keep the books of itself ([`Marks::read_with`]).
    pub fn marked(self) -> bool {
        self.batch || self.unique_key
    }
}

/// Whether `count`, the text after a serialized array's `a:`, starts with
/// a number above zero.
fn positive_count(count: &[u8]) -> bool {
    let digits = count.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && count[..digits].iter().any(|&b| b != b'0')
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
        let signs = Payload::parse_stored(raw.to_vec())
            .map(|p| Signs::of(&p))
            .unwrap_or_default();
        Self::read_with(raw, signs, false)
    }

    /// The marks of the payload `raw` (JSON), whose [`Signs`] are `signs`.
    /// A payload that is not JSON, or whose parts have other shapes, has
    /// none (PHP's `unserialize` of a value that is not a string gives no
    /// lock either). Most jobs carry neither a batch nor a lock and are
    /// not parsed again; with `always` they are (for a configured unique
    /// class, whose lock key needs only its class and `uniqueId`).
    pub fn read_with(raw: &[u8], signs: Signs, always: bool) -> Marks {
        if !signs.marked() && !always {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// What the payload `raw` needs PHP for; `None` for one that cannot
    /// be parsed.
    fn needs_php(raw: &[u8]) -> Option<NeedsPhp> {
        let payload = Payload::parse_stored(raw.to_vec()).ok()?;
        Signs::of(&payload).needs_php()
    }

    #[test]
    fn which_jobs_need_php() {
        let chain = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:2:{i:0;s:3:\"abc\";i:1;s:3:\"def\";}}"}}"#;
        assert_eq!(needs_php(chain), Some(NeedsPhp::Chain));
        let last = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:0:{}}"}}"#;
        assert_eq!(needs_php(last), None, "the chain's last job");
        let ten = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"chained\";a:10:{}}"}}"#;
        assert_eq!(needs_php(ten), Some(NeedsPhp::Chain));
        let encrypted = br#"{"data":{"commandName":"X","command":"eyJpdiI6Ij"}}"#;
        assert_eq!(needs_php(encrypted), Some(NeedsPhp::Encrypted));
        let spaced = br#"{"data": {"command": "O:1:\"X\":0:{}"}}"#;
        assert_eq!(needs_php(spaced), None);
        let by_name = br#"{"job":"App\\Jobs\\X@handle","data":{"a":1}}"#;
        assert_eq!(needs_php(by_name), None);
        assert_eq!(needs_php(b"not json \"command\":"), None);
        let batched = br#"{"data":{"command":"O:1:\"X\":1:{s:7:\"batchId\";s:3:\"b-1\";}"}}"#;
        assert_eq!(needs_php(batched), Some(NeedsPhp::Batch));
        let by_data = br#"{"data":{"batchId":"b-1","command":"O:1:\"X\":0:{}"}}"#;
        assert_eq!(needs_php(by_data), Some(NeedsPhp::Batch));
        let unbatched =
            br#"{"data":{"batchId":null,"command":"O:1:\"X\":1:{s:7:\"batchId\";N;}"}}"#;
        assert_eq!(needs_php(unbatched), None);
        let empty_id = br#"{"data":{"batchId":"","command":"O:1:\"X\":0:{}"}}"#;
        assert_eq!(needs_php(empty_id), None);
        let by_name_in_batch = br#"{"job":"X@handle","data":{"batchId":"b-1"}}"#;
        assert_eq!(needs_php(by_name_in_batch), Some(NeedsPhp::Batch));
        // A seven-letter value (the queue's name) before the chain.
        let queue_first = br#"{"data":{"command":"O:1:\"X\":2:{s:5:\"queue\";s:7:\"default\";s:7:\"chained\";a:1:{i:0;s:1:\"a\";}}"}}"#;
        assert_eq!(needs_php(queue_first), Some(NeedsPhp::Chain));
        // The last key wins, as PHP's json_decode keeps it.
        let repeated = br#"{"data":{"command":"eyJpdiI6","command":"O:1:\"X\":0:{}"}}"#;
        assert_eq!(needs_php(repeated), None);
        // The lock's key in the context, not elsewhere.
        let plain = Payload::parse_stored(
            br#"{"data":{"command":"O:1:\"X\":0:{}","laravel_unique_job_key":1}}"#.to_vec(),
        )
        .unwrap();
        assert!(!Signs::of(&plain).marked());
    }

    #[test]
    fn the_unique_id_property() {
        // Read where a unique class is configured (`always`): the property
        // alone is no sign.
        let text = br#"{"data":{"commandName":"App\\Jobs\\P","command":"O:10:\"App\\Jobs\\P\":1:{s:8:\"uniqueId\";s:2:\"k1\";}"}}"#;
        assert_eq!(
            Marks::read_with(text, Signs::default(), true)
                .unique_id
                .as_deref(),
            Some("k1")
        );
        let int = br#"{"data":{"command":"O:1:\"P\":1:{s:8:\"uniqueId\";i:42;}"}}"#;
        assert_eq!(
            Marks::read_with(int, Signs::default(), true)
                .unique_id
                .as_deref(),
            Some("42")
        );
    }
}
