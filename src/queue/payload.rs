//! The fields of a Laravel job payload that the worker reads (protocol §5).
//!
//! The payload is parsed from the *original* string (the one LPOPed before
//! the attempt was counted), as Laravel's `RedisJob` does. Field types are
//! read leniently: Laravel versions and cjson re-encoding write numbers as
//! integers, floats or strings, and a missing field means "not set".
//!
//! Only the fields the worker needs are copied out; everything else,
//! `data.command` included, is skipped without building a tree and stays in
//! the payload bytes, which are shared, not copied. `data.command` is
//! decoded only when a handler asks for it ([`Payload::command_json`]).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::command::{self, CommandError};

/// The deepest nesting of arrays and objects a payload may have: 511, what
/// PHP's `json_decode()` accepts with its default depth of 512 (the depth
/// Laravel decodes payloads with). A deeper payload is one Laravel cannot
/// read either.
pub const MAX_JSON_DEPTH: usize = 511;

/// A parsed payload. Construction fails only when the text is not a JSON
/// object with a numeric `attempts`; every other field is optional.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The payload bytes, shared with the job (for `data.command`).
    raw: Bytes,
    /// Where the body of the `data.command` string lies in `raw` (between
    /// its quotes, still JSON-escaped).
    command: Option<Range<usize>>,
    /// Whether `data.batchId` is a non-empty string (12.51+ writes the
    /// batch's id there; `null` otherwise).
    batch_in_data: bool,
    /// Where the `illuminate:log:context` value lies in `raw` (11.x+).
    context: Option<Range<usize>>,
    /// Whether it has a field Horizon's connector writes (`tags`,
    /// `silenced`, `retry_of`, `pushedAt`).
    horizon_fields: bool,
    attempts: u64,
    uuid: Option<String>,
    id: Option<String>,
    display_name: Option<String>,
    job: Option<String>,
    max_tries: Option<u64>,
    max_exceptions: Option<u64>,
    timeout: Option<u64>,
    fail_on_timeout: bool,
    retry_until: Option<i64>,
    timeout_at: Option<i64>,
    backoff: Option<Vec<u64>>,
    delay: Option<Vec<u64>>,
}

/// Why a payload cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The bytes are not JSON, or not a JSON object.
    #[error("payload is not a JSON object: {0}")]
    NotAnObject(String),
    /// `attempts` is missing or not a number. `uuid` is the payload's own
    /// `uuid` when it has a string one, so the failed record keeps the id
    /// the operator knows the job by.
    #[error("payload has no numeric \"attempts\" field")]
    NoAttempts {
        /// The payload's `uuid`, if it is a JSON object with a string one.
        uuid: Option<String>,
    },
}

impl Payload {
    /// Parses `raw`, the original payload bytes, keeping a shared handle on
    /// them (no copy).
    ///
    /// `attempts` may be a number or a numeric string (`"0"`): Laravel's pop
    /// script adds 1 to it in Lua, which converts such a string, and PHP's
    /// `+ 1` does too.
    ///
    /// # Errors
    /// [`PayloadError`] when `raw` is not a JSON object with a numeric
    /// `attempts` (the payloads Laravel's pop script loses), or is nested
    /// deeper than [`MAX_JSON_DEPTH`].
    pub fn parse(raw: impl Into<Bytes>) -> Result<Self, PayloadError> {
        Self::parse_with(raw.into(), true)
    }

    /// Parses a payload as the database and SQS drivers store it: Laravel's
    /// `createPayload` without the `id` and `attempts` that only
    /// `RedisQueue` adds (the attempt count lives in the row's `attempts`
    /// column, or SQS's `ApproximateReceiveCount`). An `attempts` key, when
    /// a payload has one anyway (Vapor, Bref), is read as on Redis;
    /// [`Payload::attempts`] is 0 without one.
    ///
    /// # Errors
    /// [`PayloadError::NotAnObject`] when `raw` is not a JSON object, or is
    /// nested deeper than [`MAX_JSON_DEPTH`].
    pub fn parse_stored(raw: impl Into<Bytes>) -> Result<Self, PayloadError> {
        Self::parse_with(raw.into(), false)
    }

    fn parse_with(raw: Bytes, attempts_required: bool) -> Result<Self, PayloadError> {
        if let Some(at) = too_deep(&raw, MAX_JSON_DEPTH) {
            return Err(PayloadError::NotAnObject(format!(
                "nested deeper than {MAX_JSON_DEPTH} levels at byte {at}"
            )));
        }
        let fields: Fields<'_> =
            serde_json::from_slice(&raw).map_err(|e| PayloadError::NotAnObject(e.to_string()))?;
        let text = |s: Option<Scalar<'_>>| match s {
            Some(Scalar::Str(s)) => Some(s.into_owned()),
            _ => None,
        };
        let attempts = match fields.attempts.as_ref().and_then(Scalar::as_attempts) {
            Some(attempts) => attempts,
            None if !attempts_required => 0,
            None => {
                return Err(PayloadError::NoAttempts {
                    uuid: text(fields.uuid),
                });
            }
        };
        let base = raw.as_ptr() as usize;
        let range_of = |text: &str| {
            let start = text.as_ptr() as usize - base;
            start..start + text.len()
        };
        let data = fields.data.unwrap_or_default();
        let command = data
            .command
            .and_then(|c| c.get().strip_prefix('"')?.strip_suffix('"'))
            .map(range_of);
        let batch_in_data = matches!(&data.batch_id, Some(Scalar::Str(id)) if !id.is_empty());
        let context = fields.context.map(|c| range_of(c.get()));
        let uint = |s: Option<Scalar<'_>>| s.as_ref().and_then(Scalar::as_u64);
        let payload = Payload {
            attempts,
            uuid: text(fields.uuid),
            id: match fields.id {
                Some(Scalar::Str(s)) => Some(s.into_owned()),
                Some(Scalar::Int(n)) => Some(n.to_string()),
                Some(Scalar::Float(f)) => Some(f.to_string()),
                _ => None,
            },
            display_name: text(fields.display_name),
            job: text(fields.job),
            max_tries: uint(fields.max_tries),
            max_exceptions: uint(fields.max_exceptions),
            timeout: uint(fields.timeout),
            fail_on_timeout: match fields.fail_on_timeout {
                Some(Scalar::Bool(b)) => b,
                Some(v) => v.as_u64().is_some_and(|n| n != 0),
                None => false,
            },
            retry_until: fields.retry_until.as_ref().and_then(Scalar::as_i64),
            timeout_at: fields.timeout_at.as_ref().and_then(Scalar::as_i64),
            backoff: fields.backoff.and_then(Backoff::into_list),
            delay: fields.delay.and_then(Backoff::into_list),
            command,
            batch_in_data,
            context,
            horizon_fields: fields.horizon_fields,
            raw: Bytes::new(),
        };
        Ok(Payload { raw, ..payload })
    }

    /// `attempts` as stored: how many times the job was reserved before.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// `uuid` (Laravel 7+), if present.
    pub fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }

    /// `id` as a string (`Str::random(32)`, or the uuid under Horizon).
    pub fn id(&self) -> Option<String> {
        self.id.clone()
    }

    /// The name the job is routed and shown by: `displayName` when not empty,
    /// else `job` (Laravel's `JobName::resolve`), else `None`.
    pub fn display_name(&self) -> Option<&str> {
        self.display_name
            .as_deref()
            .filter(|s| !s.is_empty())
            .or_else(|| self.job.as_deref().filter(|s| !s.is_empty()))
    }

    /// `maxTries`: attempts allowed; `Some(0)` means unlimited.
    pub fn max_tries(&self) -> Option<u64> {
        self.max_tries
    }

    /// `maxExceptions`: uncaught exceptions allowed before the job fails.
    pub fn max_exceptions(&self) -> Option<u64> {
        self.max_exceptions
    }

    /// `timeout` in seconds; `Some(0)` means no limit.
    pub fn timeout(&self) -> Option<u64> {
        self.timeout
    }

    /// `failOnTimeout` (8.43+); false when absent.
    pub fn fail_on_timeout(&self) -> bool {
        self.fail_on_timeout
    }

    /// `retryUntil` as UNIX seconds, falling back to 5.x's `timeoutAt`.
    pub fn retry_until(&self) -> Option<i64> {
        self.retry_until.or(self.timeout_at)
    }

    /// The job's own retry delays: `backoff`, else `delay` (protocol §5.4:
    /// 6.x–7.x wrote the retry delay there, 12.11+ writes the dispatch delay
    /// there and Laravel still falls back to it). `None` when neither is set.
    ///
    /// A string `"10,30,60"` becomes `[10, 30, 60]`; each entry is cast the
    /// way PHP's `(int)` casts a string.
    pub fn backoff(&self) -> Option<Vec<u64>> {
        self.backoff.clone().or_else(|| self.delay.clone())
    }

    /// `data.command` read from PHP's `serialize()` text into JSON text,
    /// when the payload has one that is not encrypted (see
    /// [`super::command`]). Decoded on each call, from the payload bytes:
    /// call it only for a handler that passes the command on.
    ///
    /// A command that cannot be decoded (nested deeper than
    /// [`command::MAX_DEPTH`], or malformed) is logged as a warning and
    /// gives `None`: the handler still gets the whole payload.
    pub fn command_json(&self) -> Option<Box<RawValue>> {
        let text = self.command_text()?;
        match command::decode(text) {
            Ok(json) => Some(json),
            Err(e) => {
                self.warn_undecoded(&e);
                None
            }
        }
    }

    /// As [`Self::command_json`], written to `sink` in pieces (see
    /// [`command::decode_to`]) rather than held: what a handler of a job
    /// of megabytes is given. Returns whether a command was written; one
    /// that cannot be decoded is logged as by [`Self::command_json`] and
    /// writes nothing.
    ///
    /// # Errors
    /// `sink` failed; part of the JSON may have been written.
    pub fn write_command_json(&self, sink: &mut dyn std::io::Write) -> std::io::Result<bool> {
        let Some(text) = self.command_text() else {
            return Ok(false);
        };
        match command::decode_to(text, sink) {
            Ok(()) => Ok(true),
            Err(CommandError::Write(e)) => Err(std::io::Error::other(e)),
            Err(e) => {
                self.warn_undecoded(&e);
                Ok(false)
            }
        }
    }

    /// Whether [`Self::write_command_json`] would write a command: it has
    /// one, and it decodes (logged as by [`Self::command_json`] when it
    /// does not). Reads the command once, writing nothing.
    pub fn has_command_json(&self) -> bool {
        let Some(text) = self.command_text() else {
            return false;
        };
        let checked = command::check_decodes(text);
        if let Err(e) = &checked {
            self.warn_undecoded(e);
        }
        checked.is_ok()
    }

    fn warn_undecoded(&self, e: &CommandError) {
        if !matches!(e, CommandError::NotAnObject) {
            tracing::warn!(
                id = self.id.as_deref().unwrap_or_default(),
                "data.command is not passed to the handler as JSON: {e}"
            );
        }
    }

    /// The `data.command` string as it sits in the payload: the body of a
    /// JSON string, still escaped (read as it is; see [`command::Text`]).
    fn command_text(&self) -> Option<command::Text<'_>> {
        self.command_body().map(command::Text::JsonEscaped)
    }

    /// The body of the `data.command` string, between its quotes and still
    /// JSON-escaped (`O:12:\"App\\Jobs\\Foo\":0:{}`, or an encrypted
    /// command's text), located by the parse: `None` when `data` is not an
    /// object with a string `command` (a job pushed by name).
    pub fn command_body(&self) -> Option<&[u8]> {
        self.raw.get(self.command.clone()?)
    }

    /// Whether `data.batchId` is a non-empty string: the job's batch, as
    /// Laravel 12.51+ names it beside the command.
    pub fn batch_in_data(&self) -> bool {
        self.batch_in_data
    }

    /// The `illuminate:log:context` value as JSON text (Laravel 11+'s
    /// `Context`, which carries a unique job's lock since 11.39), located
    /// by the parse.
    pub fn context(&self) -> Option<&[u8]> {
        self.raw.get(self.context.clone()?)
    }

    /// Whether the payload has one of the fields Horizon's connector adds
    /// (`tags`, `silenced`, `retry_of`, `pushedAt`), seen by the parse: a
    /// payload without any needs no second read for Horizon's records.
    pub fn has_horizon_fields(&self) -> bool {
        self.horizon_fields
    }
}

/// The fields the worker reads, borrowed from the payload text where they
/// need no unescaping. Unknown fields are skipped without recursion; a
/// repeated field keeps its last value, as PHP's `json_decode` does.
#[derive(Default)]
struct Fields<'a> {
    attempts: Option<Scalar<'a>>,
    uuid: Option<Scalar<'a>>,
    id: Option<Scalar<'a>>,
    display_name: Option<Scalar<'a>>,
    job: Option<Scalar<'a>>,
    max_tries: Option<Scalar<'a>>,
    max_exceptions: Option<Scalar<'a>>,
    timeout: Option<Scalar<'a>>,
    fail_on_timeout: Option<Scalar<'a>>,
    retry_until: Option<Scalar<'a>>,
    timeout_at: Option<Scalar<'a>>,
    backoff: Option<Backoff<'a>>,
    delay: Option<Backoff<'a>>,
    data: Option<DataFields<'a>>,
    context: Option<&'a RawValue>,
    horizon_fields: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Fields::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        "attempts" => fields.attempts = Some(map.next_value()?),
                        "uuid" => fields.uuid = Some(map.next_value()?),
                        "id" => fields.id = Some(map.next_value()?),
                        "displayName" => fields.display_name = Some(map.next_value()?),
                        "job" => fields.job = Some(map.next_value()?),
                        "maxTries" => fields.max_tries = Some(map.next_value()?),
                        "maxExceptions" => fields.max_exceptions = Some(map.next_value()?),
                        "timeout" => fields.timeout = Some(map.next_value()?),
                        "failOnTimeout" => fields.fail_on_timeout = Some(map.next_value()?),
                        "retryUntil" => fields.retry_until = Some(map.next_value()?),
                        "timeoutAt" => fields.timeout_at = Some(map.next_value()?),
                        "backoff" => fields.backoff = Some(map.next_value()?),
                        "delay" => fields.delay = Some(map.next_value()?),
                        "data" => fields.data = Some(map.next_value()?),
                        "illuminate:log:context" => fields.context = Some(map.next_value()?),
                        "tags" | "silenced" | "retry_of" | "pushedAt" => {
                            fields.horizon_fields = true;
                            map.next_value::<IgnoredAny>()?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

/// The two fields of `data` the worker reads, located in the same walk
/// as the payload's own fields (the rest, the command's text included, is
/// skipped once): `command` as it stands in the text, and `batchId`. A
/// `data` that is not an object (PHP's empty array `[]`, say) has neither.
#[derive(Default)]
struct DataFields<'a> {
    command: Option<&'a RawValue>,
    batch_id: Option<Scalar<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for DataFields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DataVisitor;
        impl<'de> Visitor<'de> for DataVisitor {
            type Value = DataFields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DataFields<'de>, A::Error> {
                let mut data = DataFields::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        "command" => data.command = Some(map.next_value()?),
                        "batchId" => data.batch_id = Some(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(data)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<DataFields<'de>, A::Error> {
                ScalarVisitor.visit_seq(seq).map(|_| DataFields::default())
            }
            fn visit_unit<E>(self) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<DataFields<'de>, E> {
                Ok(DataFields::default())
            }
        }
        deserializer.deserialize_any(DataVisitor)
    }
}

/// A payload value read leniently: arrays and objects are skipped.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

impl Scalar<'_> {
    fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::Int(n) => Some(*n),
            Scalar::Float(f) => Some(*f as i64),
            Scalar::Str(s) if !s.trim().is_empty() => Some(php_int(s)),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        self.as_i64().map(|n| n.max(0) as u64)
    }

    /// `attempts` as Laravel's pop script reads it: a number, or a string
    /// Lua converts to one (`tonumber`: blanks around a decimal or hex
    /// number). Anything else (null, `"abc"`, an array) has none.
    fn as_attempts(&self) -> Option<u64> {
        match self {
            Scalar::Int(n) => Some((*n).max(0) as u64),
            Scalar::Float(f) if f.is_finite() => Some(f.max(0.0) as u64),
            Scalar::Str(s) => lua_number(s).map(|f| f.max(0.0) as u64),
            _ => None,
        }
    }
}

/// Lua 5.1's `tonumber` of a string (the conversion `"0" + 1` makes in the
/// pop script): optional blanks, then a decimal or `0x` hex number, then
/// optional blanks. Infinite and NaN values are refused: cjson cannot
/// encode them, so the pop script treats such a payload as invalid.
fn lua_number(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'));
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
    let n = match hex {
        Some(h) => u64::from_str_radix(h, 16).ok()? as f64,
        None if t
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            t.parse().ok()?
        }
        None => return None,
    };
    n.is_finite().then_some(n)
}

/// A backoff field: a number, a comma list or an array of numbers.
enum Backoff<'a> {
    Value(Scalar<'a>),
    List(Vec<Scalar<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Backoff<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BackoffVisitor;
        impl<'de> Visitor<'de> for BackoffVisitor {
            type Value = Backoff<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a backoff")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Backoff<'de>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Scalar<'de>>()? {
                    // A list longer than any retry count is cut; the rest
                    // is skipped.
                    if items.len() < 1024 {
                        items.push(item);
                    }
                }
                Ok(Backoff::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Backoff<'de>, A::Error> {
                ScalarVisitor.visit_map(map).map(Backoff::Value)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Backoff<'de>, E> {
                Ok(Backoff::Value(Scalar::Null))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Backoff<'de>, E> {
                Ok(Backoff::Value(Scalar::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_i64(v).map(Backoff::Value)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_u64(v).map(Backoff::Value)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_f64(v).map(Backoff::Value)
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_borrowed_str(v).map(Backoff::Value)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_str(v).map(Backoff::Value)
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Backoff<'de>, E> {
                ScalarVisitor.visit_string(v).map(Backoff::Value)
            }
        }
        deserializer.deserialize_any(BackoffVisitor)
    }
}

impl Backoff<'_> {
    /// The delays; `None` for null ("not set").
    fn into_list(self) -> Option<Vec<u64>> {
        match self {
            Backoff::Value(Scalar::Null) => None,
            Backoff::Value(Scalar::Str(s)) => Some(parse_backoff(&s)),
            Backoff::Value(other) => other.as_u64().map(|n| vec![n]),
            Backoff::List(items) => Some(items.iter().map(|i| i.as_u64().unwrap_or(0)).collect()),
        }
    }
}

/// The byte offset where `json` opens its `limit + 1`-th nested array or
/// object, if it does. Strings are skipped; the text need not be valid.
fn too_deep(json: &[u8], limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &b) in json.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(at);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Splits a comma list of seconds the way `calculateBackoff` does
/// (`explode(',')`, then `(int)` on the chosen entry).
pub fn parse_backoff(list: &str) -> Vec<u64> {
    list.split(',').map(|s| php_int(s).max(0) as u64).collect()
}

/// PHP's `(int)` cast of a string: leading white space, an optional sign, then
/// as many digits as follow; anything else gives 0.
pub fn php_int(s: &str) -> i64 {
    let t = s.trim_start();
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1, &t[1..]),
        Some(b'+') => (1, &t[1..]),
        _ => (1, t),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().map(|n| sign * n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_the_batch_and_the_context_are_located_by_the_parse() {
        let raw = br#"{"data":{"batchId":"b-1","command":"O:1:\"X\":0:{}"},"illuminate:log:context":{"hidden":[]},"attempts":1}"#;
        let payload = Payload::parse(raw.to_vec()).unwrap();
        assert_eq!(
            payload.command_body(),
            Some(br#"O:1:\"X\":0:{}"#.as_slice())
        );
        assert!(payload.batch_in_data());
        assert_eq!(payload.context(), Some(br#"{"hidden":[]}"#.as_slice()));
        assert!(!payload.has_horizon_fields());
        for field in ["tags", "silenced", "retry_of", "pushedAt"] {
            let raw = format!(r#"{{"{field}":null,"attempts":0}}"#);
            assert!(Payload::parse(raw).unwrap().has_horizon_fields(), "{field}");
        }
        for other in [
            r#"{"data":[]}"#,
            r#"{"data":{"command":1,"batchId":null}}"#,
            "{}",
        ] {
            let payload = Payload::parse_stored(other.as_bytes().to_vec()).unwrap();
            assert_eq!(payload.command_body(), None, "{other}");
            assert!(!payload.batch_in_data(), "{other}");
            assert_eq!(payload.context(), None, "{other}");
        }
    }

    const LARAVEL8: &str = r#"{"uuid":"7c9c3e2a-1b1e-4f0e-9a55-2b6f6f0b1a11","displayName":"App\\Jobs\\Foo","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{"commandName":"App\\Jobs\\Foo","command":"O:12:\"App\\Jobs\\Foo\":0:{}"},"id":"abcdefghijabcdefghijabcdefghij12","attempts":0}"#;

    /// Issue 30 item 2: Laravel's pop script re-encodes the reserved copy
    /// with cjson, which writes each empty PHP array (`[]`) as `{}`; every
    /// field read from such a copy (a reclaimed job's, which the migrate
    /// hands back) still parses.
    #[test]
    fn reads_a_reserved_copy_with_cjsons_empty_objects() {
        let copy = br#"{"backoff":{},"uuid":"u-1","displayName":"App\\Jobs\\Foo","maxTries":{},"timeout":{},"data":{},"tags":{},"id":"u-1","attempts":1,"delay":{}}"#;
        let p = Payload::parse(&copy[..]).unwrap();
        assert_eq!(p.attempts(), 1);
        assert_eq!(p.display_name(), Some("App\\Jobs\\Foo"));
        assert_eq!(p.uuid(), Some("u-1"));
        assert_eq!(
            (p.max_tries(), p.timeout(), p.backoff()),
            (None, None, None)
        );
    }

    #[test]
    fn reads_a_laravel_8_payload() {
        let p = Payload::parse(LARAVEL8.as_bytes()).unwrap();
        assert_eq!(p.attempts(), 0);
        assert_eq!(p.display_name(), Some("App\\Jobs\\Foo"));
        assert_eq!(p.uuid(), Some("7c9c3e2a-1b1e-4f0e-9a55-2b6f6f0b1a11"));
        assert_eq!(p.id().as_deref(), Some("abcdefghijabcdefghijabcdefghij12"));
        assert_eq!(p.max_tries(), None);
        assert_eq!(p.backoff(), None);
        assert!(!p.fail_on_timeout());
        assert_eq!(
            p.command_json().unwrap().get(),
            r#"{"__class":"App\\Jobs\\Foo"}"#
        );
    }

    #[test]
    fn rejects_what_laravel_would_lose() {
        assert!(matches!(
            Payload::parse(&b"not json"[..]),
            Err(PayloadError::NotAnObject(_))
        ));
        assert!(matches!(
            Payload::parse(&b"[1,2]"[..]),
            Err(PayloadError::NotAnObject(_))
        ));
        assert_eq!(
            Payload::parse(&br#"{"job":"x"}"#[..]).unwrap_err(),
            PayloadError::NoAttempts { uuid: None }
        );
        assert_eq!(
            Payload::parse(&br#"{"uuid":"u-1","attempts":null}"#[..]).unwrap_err(),
            PayloadError::NoAttempts {
                uuid: Some("u-1".into())
            }
        );
        for bad in [r#""abc""#, "null", "[0]", r#""1 2""#, r#""""#] {
            let text = format!(r#"{{"attempts":{bad}}}"#);
            assert_eq!(
                Payload::parse(text.into_bytes()).unwrap_err(),
                PayloadError::NoAttempts { uuid: None },
                "{bad}"
            );
        }
    }

    #[test]
    fn numeric_string_attempts_count_as_lua_counts_them() {
        for (text, n) in [
            (r#""0""#, 0),
            (r#"" 2 ""#, 2),
            (r#""0x10""#, 16),
            ("3.0", 3),
        ] {
            let p = Payload::parse(format!(r#"{{"attempts":{text}}}"#).into_bytes()).unwrap();
            assert_eq!(p.attempts(), n, "{text}");
        }
    }

    #[test]
    fn nesting_is_read_up_to_php_json_decode_depth() {
        let nested = |n: usize| {
            format!(
                r#"{{"attempts":0,"data":{{"x":{}{}}}}}"#,
                "[".repeat(n - 2),
                "]".repeat(n - 2)
            )
        };
        assert!(Payload::parse(nested(MAX_JSON_DEPTH).into_bytes()).is_ok());
        assert!(matches!(
            Payload::parse(nested(MAX_JSON_DEPTH + 1).into_bytes()),
            Err(PayloadError::NotAnObject(_))
        ));
        assert!(matches!(
            Payload::parse(nested(200_000).into_bytes()),
            Err(PayloadError::NotAnObject(_))
        ));
        let strings = r#"{"attempts":0,"s":"[[[[{{\"[[","t":"\\"}"#;
        assert!(Payload::parse(strings.as_bytes()).is_ok());
    }

    #[test]
    fn repeated_fields_keep_the_last_value() {
        let p = Payload::parse(
            &br#"{"attempts":5,"displayName":"A","attempts":1,"displayName":"B"}"#[..],
        )
        .unwrap();
        assert_eq!((p.attempts(), p.display_name()), (1, Some("B")));
    }

    #[test]
    fn backoff_forms() {
        let p = Payload::parse(&br#"{"attempts":0,"backoff":"1,5,30"}"#[..]).unwrap();
        assert_eq!(p.backoff(), Some(vec![1, 5, 30]));
        let p = Payload::parse(&br#"{"attempts":0,"backoff":null,"delay":300}"#[..]).unwrap();
        assert_eq!(p.backoff(), Some(vec![300]));
        let p = Payload::parse(&br#"{"attempts":0,"backoff":7}"#[..]).unwrap();
        assert_eq!(p.backoff(), Some(vec![7]));
        let p = Payload::parse(&br#"{"attempts":0,"backoff":[1,[2],"3"]}"#[..]).unwrap();
        assert_eq!(p.backoff(), Some(vec![1, 0, 3]));
    }

    #[test]
    fn php_int_casts_like_php() {
        assert_eq!(php_int(" 12abc"), 12);
        assert_eq!(php_int("abc"), 0);
        assert_eq!(php_int("-3"), -3);
        assert_eq!(php_int(""), 0);
    }

    #[test]
    fn display_name_falls_back_to_job() {
        let p =
            Payload::parse(&br#"{"attempts":0,"displayName":"","job":"App\\Jobs\\Foo@bar"}"#[..])
                .unwrap();
        assert_eq!(p.display_name(), Some("App\\Jobs\\Foo@bar"));
    }

    #[test]
    fn odd_names_and_ids_are_kept_whole() {
        let long = "x".repeat(200 * 1024);
        let text = format!(r#"{{"attempts":0,"displayName":"A\u0000B\n","id":"{long}"}}"#);
        let p = Payload::parse(text.into_bytes()).unwrap();
        assert_eq!(p.display_name(), Some("A\0B\n"));
        assert_eq!(p.id().map(|s| s.len()), Some(200 * 1024));
    }

    #[test]
    fn a_stored_payload_needs_no_attempts() {
        let body = br#"{"uuid":"u-1","displayName":"App\\Jobs\\Foo","data":{}}"#;
        assert!(Payload::parse(&body[..]).is_err());
        let p = Payload::parse_stored(&body[..]).unwrap();
        assert_eq!((p.attempts(), p.id(), p.uuid()), (0, None, Some("u-1")));
        let with = Payload::parse_stored(&br#"{"attempts":3}"#[..]).unwrap();
        assert_eq!(with.attempts(), 3);
        assert!(Payload::parse_stored(&b"[1]"[..]).is_err());
    }
}
