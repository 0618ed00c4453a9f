//! The fields of a Laravel job payload that the worker reads (protocol §5).
//!
//! The payload is parsed from the *original* string (the one LPOPed before
//! the attempt was counted), as Laravel's `RedisJob` does. Field types are
//! read leniently: Laravel versions and cjson re-encoding write numbers as
//! integers, floats or strings, and a missing field means "not set".

use serde_json::Value;

/// A parsed payload. Construction fails only when the text is not a JSON
/// object with a numeric `attempts`; every other field is optional.
#[derive(Debug, Clone)]
pub struct Payload {
    value: serde_json::Map<String, Value>,
    attempts: u64,
}

/// Why a payload cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The bytes are not JSON, or not a JSON object.
    #[error("payload is not a JSON object: {0}")]
    NotAnObject(String),
    /// `attempts` is missing or not a number.
    #[error("payload has no numeric \"attempts\" field")]
    NoAttempts,
}

impl Payload {
    /// Parses `raw`, the original payload bytes.
    ///
    /// # Errors
    /// [`PayloadError`] when `raw` is not a JSON object with a numeric
    /// `attempts`: the payloads Laravel's pop script loses.
    pub fn parse(raw: &[u8]) -> Result<Self, PayloadError> {
        let value: Value =
            serde_json::from_slice(raw).map_err(|e| PayloadError::NotAnObject(e.to_string()))?;
        let Value::Object(value) = value else {
            return Err(PayloadError::NotAnObject(
                "top level is not an object".into(),
            ));
        };
        let attempts = value
            .get("attempts")
            .and_then(as_u64)
            .ok_or(PayloadError::NoAttempts)?;
        Ok(Payload { value, attempts })
    }

    /// `attempts` as stored: how many times the job was reserved before.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// `uuid` (Laravel 7+), if present.
    pub fn uuid(&self) -> Option<&str> {
        self.str_field("uuid")
    }

    /// `id` as a string (`Str::random(32)`, or the uuid under Horizon).
    pub fn id(&self) -> Option<String> {
        match self.value.get("id")? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The name the job is routed and shown by: `displayName` when not empty,
    /// else `job` (Laravel's `JobName::resolve`), else `None`.
    pub fn display_name(&self) -> Option<&str> {
        self.str_field("displayName")
            .filter(|s| !s.is_empty())
            .or_else(|| self.str_field("job").filter(|s| !s.is_empty()))
    }

    /// `maxTries`: attempts allowed; `Some(0)` means unlimited.
    pub fn max_tries(&self) -> Option<u64> {
        self.value.get("maxTries").and_then(as_u64)
    }

    /// `maxExceptions`: uncaught exceptions allowed before the job fails.
    pub fn max_exceptions(&self) -> Option<u64> {
        self.value.get("maxExceptions").and_then(as_u64)
    }

    /// `timeout` in seconds; `Some(0)` means no limit.
    pub fn timeout(&self) -> Option<u64> {
        self.value.get("timeout").and_then(as_u64)
    }

    /// `failOnTimeout` (8.43+); false when absent.
    pub fn fail_on_timeout(&self) -> bool {
        match self.value.get("failOnTimeout") {
            Some(Value::Bool(b)) => *b,
            Some(v) => as_u64(v).is_some_and(|n| n != 0),
            None => false,
        }
    }

    /// `retryUntil` as UNIX seconds, falling back to 5.x's `timeoutAt`.
    pub fn retry_until(&self) -> Option<i64> {
        ["retryUntil", "timeoutAt"]
            .iter()
            .find_map(|k| self.value.get(*k).and_then(as_i64))
    }

    /// The job's own retry delays: `backoff`, else `delay` (protocol §5.4:
    /// 6.x–7.x wrote the retry delay there, 12.11+ writes the dispatch delay
    /// there and Laravel still falls back to it). `None` when neither is set.
    ///
    /// A string `"10,30,60"` becomes `[10, 30, 60]`; each entry is cast the
    /// way PHP's `(int)` casts a string.
    pub fn backoff(&self) -> Option<Vec<u64>> {
        ["backoff", "delay"]
            .iter()
            .find_map(|k| self.value.get(*k).and_then(backoff_list))
    }

    /// `data.command` read from PHP's `serialize()` text into JSON, when the
    /// payload has one that is not encrypted (see [`super::command`]).
    pub fn command_json(&self) -> Option<Value> {
        super::command::decode(&self.value)
    }

    fn str_field(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }
}

/// Reads a backoff list from a payload value; `null` means "not set".
fn backoff_list(v: &Value) -> Option<Vec<u64>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(parse_backoff(s)),
        Value::Array(items) => Some(items.iter().map(|i| as_u64(i).unwrap_or(0)).collect()),
        other => as_u64(other).map(|n| vec![n]),
    }
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

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) if !s.trim().is_empty() => Some(php_int(s)),
        _ => None,
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    as_i64(v).map(|n| n.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LARAVEL8: &str = r#"{"uuid":"7c9c3e2a-1b1e-4f0e-9a55-2b6f6f0b1a11","displayName":"App\\Jobs\\Foo","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{"commandName":"App\\Jobs\\Foo","command":"O:12:\"App\\Jobs\\Foo\":0:{}"},"id":"abcdefghijabcdefghijabcdefghij12","attempts":0}"#;

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
    }

    #[test]
    fn rejects_what_laravel_would_lose() {
        assert!(matches!(
            Payload::parse(b"not json"),
            Err(PayloadError::NotAnObject(_))
        ));
        assert!(matches!(
            Payload::parse(b"[1,2]"),
            Err(PayloadError::NotAnObject(_))
        ));
        assert_eq!(
            Payload::parse(br#"{"job":"x"}"#).unwrap_err(),
            PayloadError::NoAttempts
        );
    }

    #[test]
    fn backoff_forms() {
        let p = Payload::parse(br#"{"attempts":0,"backoff":"1,5,30"}"#).unwrap();
        assert_eq!(p.backoff(), Some(vec![1, 5, 30]));
        let p = Payload::parse(br#"{"attempts":0,"backoff":null,"delay":300}"#).unwrap();
        assert_eq!(p.backoff(), Some(vec![300]));
        let p = Payload::parse(br#"{"attempts":0,"backoff":7}"#).unwrap();
        assert_eq!(p.backoff(), Some(vec![7]));
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
        let p = Payload::parse(br#"{"attempts":0,"displayName":"","job":"App\\Jobs\\Foo@bar"}"#)
            .unwrap();
        assert_eq!(p.display_name(), Some("App\\Jobs\\Foo@bar"));
    }
}
