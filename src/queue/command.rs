//! `data.command` as plain JSON, for handlers that are not PHP.
//!
//! Laravel stores a queued object as PHP's `serialize()` text in
//! `data.command` (`O:16:"App\Jobs\SendMail":2:{s:4:"user";i:5;...}`). This
//! module reads that text into JSON without running PHP:
//!
//! | PHP                       | JSON                                           |
//! |---------------------------|------------------------------------------------|
//! | `N;`                      | `null`                                         |
//! | `b:1;` `i:5;` `d:1.5;`    | `true`, `5`, `1.5` (INF and NAN become `null`) |
//! | `s:3:"abc";`              | `"abc"` (bytes that are not UTF-8 are replaced) |
//! | `a:2:{i:0;…;i:1;…}`       | `[…, …]` when the keys are 0, 1, 2…; else `{…}` |
//! | `O:3:"Foo":1:{…}`         | `{"__class": "Foo", …properties}`              |
//! | `E:9:"Enum:Case";`        | `{"__enum": "Enum:Case"}`                      |
//! | `C:3:"Foo":5:{…}`         | `{"__class": "Foo", "__serialized": "…"}`      |
//! | `r:2;` `R:2;`             | `{"__ref": 2}`                                 |
//!
//! Private and protected property names lose PHP's `\0Class\0` and `\0*\0`
//! markers. An encrypted command (`ShouldBeEncrypted`, not starting with
//! `O:`) cannot be read without the app key and yields `None`.

use serde_json::{Map, Number, Value};

/// The decoded `data.command` of a payload's fields, when it has a
/// readable one.
pub fn decode(payload: &Map<String, Value>) -> Option<Value> {
    let command = payload.get("data")?.get("command")?.as_str()?;
    if !command.starts_with("O:") {
        return None;
    }
    unserialize(command.as_bytes()).ok()
}

/// Reads one serialized value and requires that nothing follows it.
///
/// # Errors
/// A description of the first malformed byte.
pub fn unserialize(text: &[u8]) -> Result<Value, String> {
    let mut reader = Reader { text, at: 0 };
    let value = reader.value()?;
    if reader.at != text.len() {
        return Err(format!("trailing bytes at {}", reader.at));
    }
    Ok(value)
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn value(&mut self) -> Result<Value, String> {
        let kind = self.byte()?;
        match kind {
            b'N' => {
                self.expect(b';')?;
                Ok(Value::Null)
            }
            b'b' => {
                self.expect(b':')?;
                let n = self.until(b';')?;
                Ok(Value::Bool(n != b"0"))
            }
            b'i' => {
                self.expect(b':')?;
                let n = self.number::<i64>(b';')?;
                Ok(Value::Number(n.into()))
            }
            b'd' => {
                self.expect(b':')?;
                let text = self.until(b';')?;
                let f: f64 = std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| self.error("a float"))?;
                Ok(Number::from_f64(f).map_or(Value::Null, Value::Number))
            }
            b's' => {
                let s = self.string()?;
                self.expect(b';')?;
                Ok(Value::String(s))
            }
            b'a' => {
                self.expect(b':')?;
                let count = self.number::<usize>(b':')?;
                self.expect(b'{')?;
                let mut entries = Vec::with_capacity(count.min(1024));
                for _ in 0..count {
                    let key = self.value()?;
                    let value = self.value()?;
                    entries.push((key, value));
                }
                self.expect(b'}')?;
                Ok(array(entries))
            }
            b'O' => {
                let class = self.string()?;
                self.expect(b':')?;
                let count = self.number::<usize>(b':')?;
                self.expect(b'{')?;
                let mut object = Map::new();
                object.insert("__class".into(), Value::String(class));
                for _ in 0..count {
                    let key = match self.value()? {
                        Value::String(s) => property_name(&s),
                        other => other.to_string(),
                    };
                    let value = self.value()?;
                    object.insert(key, value);
                }
                self.expect(b'}')?;
                Ok(Value::Object(object))
            }
            b'E' => {
                let case = self.string()?;
                self.expect(b';')?;
                Ok(single("__enum", Value::String(case)))
            }
            b'C' => {
                let class = self.string()?;
                self.expect(b':')?;
                let len = self.number::<usize>(b':')?;
                self.expect(b'{')?;
                let data = self.take(len)?;
                self.expect(b'}')?;
                let mut object = single("__class", Value::String(class));
                if let Value::Object(o) = &mut object {
                    o.insert(
                        "__serialized".into(),
                        Value::String(String::from_utf8_lossy(data).into_owned()),
                    );
                }
                Ok(object)
            }
            b'r' | b'R' => {
                self.expect(b':')?;
                let n = self.number::<i64>(b';')?;
                Ok(single("__ref", Value::Number(n.into())))
            }
            _ => Err(self.error("a type letter")),
        }
    }

    /// `:LEN:"bytes"` (the type letter already read).
    fn string(&mut self) -> Result<String, String> {
        self.expect(b':')?;
        let len = self.number::<usize>(b':')?;
        self.expect(b'"')?;
        let bytes = self.take(len)?;
        self.expect(b'"')?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn number<T: std::str::FromStr>(&mut self, end: u8) -> Result<T, String> {
        let text = self.until(end)?;
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.error("a number"))
    }

    /// The bytes up to `end`, which is consumed.
    fn until(&mut self, end: u8) -> Result<&'a [u8], String> {
        let text = self.text;
        let start = self.at;
        let len = text[start..]
            .iter()
            .position(|&b| b == end)
            .ok_or_else(|| self.error(&format!("'{}'", end as char)))?;
        self.at = start + len + 1;
        Ok(&text[start..start + len])
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let text = self.text;
        let end = self.at.checked_add(len).filter(|&e| e <= self.text.len());
        let end = end.ok_or_else(|| self.error(&format!("{len} more bytes")))?;
        let bytes = &text[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .text
            .get(self.at)
            .ok_or_else(|| self.error("more input"))?;
        self.at += 1;
        Ok(b)
    }

    fn expect(&mut self, want: u8) -> Result<(), String> {
        if self.byte()? == want {
            Ok(())
        } else {
            Err(format!(
                "expected '{}' at byte {}",
                want as char,
                self.at - 1
            ))
        }
    }

    fn error(&self, what: &str) -> String {
        format!("expected {what} at byte {}", self.at)
    }
}

/// A PHP array: a JSON list when its keys are 0, 1, 2…, else an object.
fn array(entries: Vec<(Value, Value)>) -> Value {
    let is_list = entries
        .iter()
        .enumerate()
        .all(|(i, (k, _))| k.as_u64() == Some(i as u64));
    if is_list {
        return Value::Array(entries.into_iter().map(|(_, v)| v).collect());
    }
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| match k {
                Value::String(s) => (s, v),
                other => (other.to_string(), v),
            })
            .collect(),
    )
}

/// `\0Class\0name` (private) and `\0*\0name` (protected) become `name`.
fn property_name(raw: &str) -> String {
    match raw.strip_prefix('\0').and_then(|r| r.split_once('\0')) {
        Some((_, name)) => name.to_string(),
        None => raw.to_string(),
    }
}

fn single(key: &str, value: Value) -> Value {
    let mut o = Map::new();
    o.insert(key.into(), value);
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_laravel_job() {
        // Made by PHP 8.2: serialize(new App\Jobs\SendEmail) with a protected
        // model identifier, a private array, a null and a mixed array.
        let text = "O:18:\"App\\Jobs\\SendEmail\":4:{s:7:\"\0*\0user\";O:45:\"Illuminate\\Contracts\\Database\\ModelIdentifier\":2:{s:5:\"class\";s:8:\"App\\User\";s:2:\"id\";i:7;}s:24:\"\0App\\Jobs\\SendEmail\0tags\";a:2:{i:0;s:1:\"a\";i:1;s:3:\"bé\";}s:5:\"delay\";N;s:4:\"opts\";a:2:{s:1:\"x\";d:1.5;s:1:\"y\";b:1;}}";
        let v = unserialize(text.as_bytes()).unwrap();
        assert_eq!(
            v,
            json!({
                "__class": "App\\Jobs\\SendEmail",
                "user": {"__class": "Illuminate\\Contracts\\Database\\ModelIdentifier", "class": "App\\User", "id": 7},
                "tags": ["a", "bé"],
                "delay": null,
                "opts": {"x": 1.5, "y": true}
            })
        );
    }

    #[test]
    fn lengths_are_bytes_and_strings_may_hold_quotes_and_semicolons() {
        let v = unserialize("s:7:\"é\";\"x;\";".as_bytes()).unwrap();
        assert_eq!(v, json!("é\";\"x;"));
    }

    #[test]
    fn enums_refs_custom_and_sparse_arrays() {
        assert_eq!(
            unserialize(b"E:13:\"Status:Active\";").unwrap(),
            json!({"__enum": "Status:Active"})
        );
        assert_eq!(unserialize(b"r:2;").unwrap(), json!({"__ref": 2}));
        assert_eq!(
            unserialize(b"C:3:\"Foo\":3:{abc}").unwrap(),
            json!({"__class": "Foo", "__serialized": "abc"})
        );
        assert_eq!(
            unserialize(b"a:2:{i:1;s:1:\"a\";i:5;N;}").unwrap(),
            json!({"1": "a", "5": null})
        );
        assert_eq!(unserialize(b"d:INF;").unwrap(), Value::Null);
    }

    #[test]
    fn malformed_text_is_an_error_not_a_panic() {
        for bad in [
            &b"s:99:\"short\";"[..],
            b"O:3:\"Foo\":1:{",
            b"x",
            b"i:12",
            b"a:1:{i:0;}",
            b"N;N;",
            b"",
        ] {
            assert!(
                unserialize(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn only_plain_commands_are_decoded() {
        let fields = |v: Value| v.as_object().cloned().unwrap();
        let plain = fields(json!({"data": {"command": "O:3:\"Foo\":0:{}"}}));
        assert_eq!(decode(&plain), Some(json!({"__class": "Foo"})));
        let encrypted = fields(json!({"data": {"command": "eyJpdiI6IjEyMyJ9"}}));
        assert_eq!(decode(&encrypted), None);
        assert_eq!(decode(&fields(json!({"data": {"x": 1}}))), None);
    }
}
