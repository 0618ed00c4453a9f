//! The few PHP value encodings the cache stores use.
//!
//! Laravel's Redis store writes numbers as plain digits and everything else
//! with PHP's `serialize()`; its file store serializes everything.

/// A value the worker writes to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// An integer (the restart time, a counter).
    Int(i64),
    /// A boolean (`true` marks a paused queue).
    Bool(bool),
}

/// PHP's `serialize()`: `i:5;`, `b:1;`.
pub fn serialize(value: &Value) -> String {
    match value {
        Value::Int(n) => format!("i:{n};"),
        Value::Bool(b) => format!("b:{};", u8::from(*b)),
    }
}

/// The Redis store's encoding: numbers as plain digits, the rest serialized.
pub fn redis_encode(value: &Value) -> String {
    match value {
        Value::Int(n) => n.to_string(),
        Value::Bool(_) => serialize(value),
    }
}

/// An integer from either encoding (`5`, `i:5;`, `s:1:"5";`).
pub fn as_int(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    if let Ok(n) = raw.parse() {
        return Some(n);
    }
    if let Some(digits) = raw.strip_prefix("i:").and_then(|r| r.strip_suffix(';')) {
        return digits.parse().ok();
    }
    let inner = raw
        .strip_prefix("s:")?
        .split_once(":\"")?
        .1
        .strip_suffix("\";")?;
    inner.parse().ok()
}

/// The string a PHP-serialized string holds (`s:LEN:"…";`, `LEN` its
/// length in bytes), as `unserialize` gives it back: what Laravel's cache
/// stores keep for a string value (`Repository::put($key, $string)`).
/// `None` for any other value (`N;`, `b:0;`, an array, an object), or a
/// length that does not match.
pub fn unserialize_string(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix("s:")?;
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let inner = rest.strip_prefix('"')?.get(..len)?;
    (rest.get(len + 1..)? == "\";").then_some(inner)
}

/// PHP truthiness of a stored value, as `(bool) $cache->get($key)`:
/// false for `b:0;`, `i:0;`, `0`, empty strings, `N;`; true otherwise.
pub fn truthy(raw: &str) -> bool {
    !matches!(
        raw.trim(),
        "" | "0" | "b:0;" | "i:0;" | "N;" | "s:0:\"\";" | "s:1:\"0\";" | "d:0;"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(serialize(&Value::Bool(true)), "b:1;");
        assert_eq!(serialize(&Value::Int(42)), "i:42;");
        assert_eq!(redis_encode(&Value::Int(1795260685)), "1795260685");
        assert_eq!(redis_encode(&Value::Bool(true)), "b:1;");
        assert_eq!(as_int("i:3;"), Some(3));
        assert_eq!(as_int("3"), Some(3));
        assert_eq!(as_int("s:1:\"7\";"), Some(7));
        assert!(truthy("b:1;") && truthy("1") && !truthy("b:0;") && !truthy("0"));
        assert_eq!(unserialize_string("s:2:\"{}\";"), Some("{}"));
        assert_eq!(
            unserialize_string("s:13:\"{\"a\":\"\u{e9}t\u{e9}\"}\";"),
            Some("{\"a\":\"\u{e9}t\u{e9}\"}"),
            "the length counts bytes"
        );
        assert_eq!(unserialize_string("s:3:\"ab\";"), None, "length mismatch");
        assert_eq!(unserialize_string("N;"), None);
        assert_eq!(unserialize_string("b:0;"), None);
        assert_eq!(unserialize_string("a:1:{i:0;s:1:\"x\";}"), None);
    }
}
