//! PHP's `json_decode($text, true)` / `json_encode($value)` round trip, as
//! `queue:retry` and `queue:failed --json` put payloads and rows through it.
//!
//! What the encoder writes, like PHP's `json_encode` with no flags:
//! - `/` as `\/`; `"` and `\` escaped; `\b \f \n \r \t` short; other control
//!   characters as `\u00XX` (lower-case hex);
//! - every non-ASCII character as `\uXXXX` (lower-case hex), characters above
//!   U+FFFF as a UTF-16 surrogate pair;
//! - object keys in the order they came in; a key seen twice keeps its first
//!   place and its last value (PHP array assignment);
//! - integers that fit in a PHP int (i64) as they are; other numbers as PHP
//!   floats with `serialize_precision = -1` (`1.5`, `1` for `1.0`,
//!   `1.0e+25`, `1.0e-5`).
//!
//! One deliberate difference: PHP decodes objects into arrays, so `{}` comes
//! back as `[]` and `{"0":"a"}` as `["a"]`. Here objects stay objects, which
//! PHP reads back the same way (`json_decode(..., true)`) and other languages
//! are not surprised by.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A decoded JSON value with object key order kept and numbers typed the
/// way PHP types them.
#[derive(Debug, Clone, PartialEq)]
pub enum PhpValue {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number that fits in a PHP int.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    String(String),
    /// A JSON array.
    List(Vec<PhpValue>),
    /// A JSON object, keys in their original order.
    Object(Vec<(String, PhpValue)>),
}

impl PhpValue {
    /// Parses JSON text.
    ///
    /// # Errors
    /// Text that is not one JSON value (PHP's `json_decode` returns null
    /// there), including lone UTF-16 surrogate escapes and numbers out of
    /// the float range.
    pub fn parse(text: &str) -> Result<PhpValue, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The value as PHP's `json_encode($value)` writes it.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self);
        out
    }

    /// A mutable reference to the value of `key` when this is an object
    /// holding it.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut PhpValue> {
        match self {
            PhpValue::Object(fields) => fields.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Why a failed job's payload cannot be pushed back.
#[derive(Debug, thiserror::Error)]
pub enum RetryPayloadError {
    /// Not JSON at all (artisan would push the string `null`).
    #[error("the payload is not valid JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// JSON, but not an object, so no worker could run it.
    #[error("the payload is not a JSON object")]
    NotAnObject,
}

/// The payload `queue:retry` pushes back for a failed job's `payload`:
/// `attempts` set to 0 when present and not null (PHP's `isset`), every
/// other field kept (`uuid`, `id`, `retryUntil`...), re-encoded with PHP's
/// plain `json_encode` (see the module docs).
///
/// Artisan also recomputes `retryUntil` from the unserialized PHP command;
/// that needs PHP, so the stored value is kept.
///
/// # Errors
/// A payload that is not a JSON object ([`RetryPayloadError`]).
pub fn retry_payload(payload: &str) -> Result<String, RetryPayloadError> {
    let mut value = PhpValue::parse(payload)?;
    if !matches!(value, PhpValue::Object(_)) {
        return Err(RetryPayloadError::NotAnObject);
    }
    if let Some(attempts) = value.get_mut("attempts")
        && *attempts != PhpValue::Null
    {
        *attempts = PhpValue::Int(0);
    }
    Ok(value.encode())
}

impl<'de> Deserialize<'de> for PhpValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PhpValueVisitor)
    }
}

struct PhpValueVisitor;

impl<'de> Visitor<'de> for PhpValueVisitor {
    type Value = PhpValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<PhpValue, E> {
        Ok(PhpValue::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<PhpValue, E> {
        Ok(PhpValue::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<PhpValue, E> {
        Ok(PhpValue::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<PhpValue, E> {
        Ok(PhpValue::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<PhpValue, E> {
        // Past PHP_INT_MAX, json_decode makes a float.
        Ok(i64::try_from(v).map_or(PhpValue::Float(v as f64), PhpValue::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<PhpValue, E> {
        Ok(PhpValue::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<PhpValue, E> {
        Ok(PhpValue::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<PhpValue, E> {
        Ok(PhpValue::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PhpValue, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(PhpValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PhpValue, A::Error> {
        let mut fields: Vec<(String, PhpValue)> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        while let Some((key, value)) = map.next_entry::<String, PhpValue>()? {
            match at.get(&key) {
                Some(&i) => fields[i].1 = value,
                None => {
                    at.insert(key.clone(), fields.len());
                    fields.push((key, value));
                }
            }
        }
        Ok(PhpValue::Object(fields))
    }
}

fn write_value(out: &mut String, value: &PhpValue) {
    match value {
        PhpValue::Null => out.push_str("null"),
        PhpValue::Bool(true) => out.push_str("true"),
        PhpValue::Bool(false) => out.push_str("false"),
        PhpValue::Int(n) => out.push_str(&n.to_string()),
        PhpValue::Float(f) => out.push_str(&php_float(*f)),
        PhpValue::String(s) => write_string(out, s),
        PhpValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        PhpValue::Object(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Lower-case hex digits, as PHP's encoder uses.
const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_u16_escape(out: &mut String, unit: u16) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_u16_escape(out, *unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as PHP writes it with `serialize_precision = -1`: the shortest
/// digits that read back to the same value, in plain notation when the
/// decimal point falls within `-3..=17` places, else `d.ddde±x`.
fn php_float(f: f64) -> String {
    if !f.is_finite() {
        // json_encode fails on INF/NAN and writes 0 in partial output;
        // JSON text never decodes to them.
        return "0".into();
    }
    // `{:e}` gives the shortest round-trip digits: `-1.2345e-7`, `1e20`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if digits.bytes().all(|d| d == b'0') {
        return format!("{sign}0");
    }
    // Position of the decimal point relative to the first digit, as C's
    // dtoa reports it: 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    let len = digits.len() as i32;
    if !(-3..=17).contains(&decpt) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        let e = decpt - 1;
        let esign = if e < 0 { '-' } else { '+' };
        format!("{sign}{first}.{rest}e{esign}{}", e.abs())
    } else if decpt <= 0 {
        format!(
            "{sign}0.{}{digits}",
            "0".repeat(decpt.unsigned_abs() as usize)
        )
    } else if decpt >= len {
        format!("{sign}{digits}{}", "0".repeat((decpt - len) as usize))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        PhpValue::parse(text).unwrap().encode()
    }

    #[test]
    fn strings_are_escaped_like_php() {
        assert_eq!(
            round_trip(r#"["a/b","Zoë","😀","\u0000\u001f\u007f","\"\\","\b\f\n\r\t"]"#),
            // DEL (0x7f) is not a control character to PHP: written as is.
            "[\"a\\/b\",\"Zo\\u00eb\",\"\\ud83d\\ude00\",\"\\u0000\\u001f\u{7f}\",\"\\\"\\\\\",\"\\b\\f\\n\\r\\t\"]"
        );
    }

    #[test]
    fn key_order_is_kept_and_duplicates_keep_their_first_place() {
        assert_eq!(
            round_trip(r#"{"z":1,"a":{"y":[],"b":{}},"m":null,"z":2}"#),
            r#"{"z":2,"a":{"y":[],"b":{}},"m":null}"#
        );
    }

    #[test]
    fn numbers_are_written_like_php() {
        assert_eq!(
            round_trip(
                "[0,-5,9223372036854775807,9223372036854775808,1.0,1.5,-2.25,100.0,1e20,1e17,1.5e-7,0.0001,0.00001,123456789012345678901234,0.1,1e16,-0.0]"
            ),
            "[0,-5,9223372036854775807,9.223372036854776e+18,1,1.5,-2.25,100,1.0e+20,1.0e+17,1.5e-7,0.0001,1.0e-5,1.2345678901234569e+23,0.1,10000000000000000,-0]"
        );
    }

    #[test]
    fn retry_payload_resets_attempts_only() {
        let payload = r#"{"uuid":"u","job":"App\\Jobs\\A@handle","retryUntil":1700000000,"data":{"url":"https:\/\/x.test","s":"é"},"id":"i","attempts":4}"#;
        assert_eq!(
            retry_payload(payload).unwrap(),
            r#"{"uuid":"u","job":"App\\Jobs\\A@handle","retryUntil":1700000000,"data":{"url":"https:\/\/x.test","s":"\u00e9"},"id":"i","attempts":0}"#
        );
        // No attempts key, or a null one: left alone (PHP's isset).
        assert_eq!(retry_payload(r#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
        assert_eq!(
            retry_payload(r#"{"attempts":null}"#).unwrap(),
            r#"{"attempts":null}"#
        );
        assert!(matches!(
            retry_payload("nope"),
            Err(RetryPayloadError::NotJson(_))
        ));
        assert!(matches!(
            retry_payload("[1]"),
            Err(RetryPayloadError::NotAnObject)
        ));
        assert!(matches!(
            retry_payload(r#""\ud800""#),
            Err(RetryPayloadError::NotJson(_))
        ));
    }
}
