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
    }
}
