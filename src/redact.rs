//! Secrets kept out of messages: the password of a URL (`redis://:pw@h`,
//! `mysql://u:pw@h/db`), secret query parameters (`unix:///s?pass=pw`), and
//! the value of a `.env` line. Every message that shows a URL or a `.env`
//! line goes through here, and so does the fatal error `main` prints.
//!
//! Redaction never parses strictly: the URLs that reach an error message are
//! often the ones that did not parse (a password with a `/` or a space, a
//! port that is not a number).

/// What stands in for a secret.
pub const MASK: &str = "***";

/// A secret value held from the config to the one call that needs it (an
/// AWS secret access key, a session token): its `Debug` and `Display`
/// write [`MASK`], so that no message, log line or `{:?}` of a settings
/// struct shows it; [`Secret::expose`] gives the value to that call.
/// Read from the config file as a plain string.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The value, for the call that sends it (never for a message).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_string())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

/// Query parameters whose value is a secret (compared without case).
const SECRET_PARAMS: &[&str] = &[
    "pass",
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "auth",
    "key",
    "apikey",
    "api_key",
    "access_token",
];

/// `url` with the password of its user part (everything before its last
/// `@`, after the first `:`; all of it when there is no `:`) and the values
/// of secret query parameters replaced by [`MASK`]. Text without `://` is
/// returned as it is.
pub fn url(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let (head, rest) = url.split_at(start);
    let mut out = String::from(head);
    let after_user = match rest.rfind('@') {
        Some(at) => {
            let user = &rest[..at];
            match user.split_once(':') {
                Some((name, _)) => out.push_str(&format!("{name}:{MASK}@")),
                None => out.push_str(&format!("{MASK}@")),
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    match after_user.split_once('?') {
        Some((place, query)) => {
            out.push_str(place);
            out.push('?');
            out.push_str(&redact_query(query));
        }
        None => out.push_str(after_user),
    }
    out
}

/// A query string (`a=1&pass=x#frag`) with secret parameters' values masked.
fn redact_query(query: &str) -> String {
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let mut parts = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((name, _))
                if SECRET_PARAMS
                    .iter()
                    .any(|secret| name.eq_ignore_ascii_case(secret)) =>
            {
                parts.push(format!("{name}={MASK}"));
            }
            _ => parts.push(pair.to_string()),
        }
    }
    let mut out = parts.join("&");
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `text` with every URL in it redacted as [`url`] does. A URL starts at
/// its scheme (letters, digits, `+-.` before `://`) and ends, when a quote
/// opened it (`"redis://…"`, `'…'`), at the closing quote (a `\"` does not
/// close it) or the end of the line; else at a space, a quote or `<>`.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let scheme_start = rest[..found]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        if scheme_start == found {
            // No scheme: not a URL; keep the `://` and look further.
            out.push_str(&rest[..found + 3]);
            rest = &rest[found + 3..];
            continue;
        }
        let quote = rest[..scheme_start]
            .chars()
            .next_back()
            .filter(|c| matches!(c, '"' | '\''));
        let end = url_end(&rest[scheme_start..], quote) + scheme_start;
        out.push_str(&rest[..scheme_start]);
        out.push_str(&url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Length of the URL at the start of `s` (see [`text`]).
fn url_end(s: &str, quote: Option<char>) -> usize {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        let ends = match quote {
            Some(q) => (c == q && !escaped) || c == '\n',
            None => c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>'),
        };
        if ends {
            return i;
        }
        escaped = c == '\\' && !escaped;
    }
    s.len()
}

/// A `.env` line shown without its value: `NAME=…` when it starts with a
/// variable name (`export ` allowed), else `…`.
pub fn env_line(line: &str) -> String {
    let first = line.lines().next().unwrap_or("").trim_start();
    let first = first.strip_prefix("export ").unwrap_or(first).trim_start();
    match first.split_once('=') {
        Some((name, _))
            if !name.trim().is_empty()
                && name
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.')) =>
        {
            format!("{}={MASK}", name.trim())
        }
        _ => MASK.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret shows as the mask in `{}` and `{:?}`; the call that sends
    /// it gets the value.
    #[test]
    fn a_secret_never_shows() {
        let secret = Secret::from("wJalrXUtnFEMI");
        assert_eq!(format!("{secret} {secret:?}"), "*** ***");
        assert_eq!(secret.expose(), "wJalrXUtnFEMI");
    }

    #[test]
    fn url_passwords_are_masked() {
        assert_eq!(
            url("redis://:s3cret@10.0.0.5:6379/0"),
            "redis://:***@10.0.0.5:6379/0"
        );
        assert_eq!(
            url("mysql://app:p@ss/w:rd@db:xx/app"),
            "mysql://app:***@db:xx/app"
        );
        assert_eq!(url("rediss://justapassword@host"), "rediss://***@host");
        assert_eq!(
            url("unix:///run/redis.sock?db=0&pass=s3cret#x"),
            "unix:///run/redis.sock?db=0&pass=***#x"
        );
        assert_eq!(url("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(url("not a url"), "not a url");
    }

    #[test]
    fn urls_in_text_are_masked() {
        assert_eq!(
            text(r#"invalid Redis URL "redis://:my \"pw\" x@host:junk/0": did not parse"#),
            r#"invalid Redis URL "redis://:***@host:junk/0": did not parse"#
        );
        // A TOML error quoting a line with an unterminated string.
        assert_eq!(
            text("2 | url = \"mysql://root:db pw@h:xx/db\n  |   ^"),
            "2 | url = \"mysql://root:***@h:xx/db\n  |   ^"
        );
        assert_eq!(
            text("a postgres://u:pw@h/db and redis://:x@r b"),
            "a postgres://u:***@h/db and redis://:***@r b"
        );
        assert_eq!(text("odd :// text"), "odd :// text");
        assert_eq!(text("no urls"), "no urls");
    }

    #[test]
    fn env_lines_keep_only_the_name() {
        assert_eq!(env_line("REDIS_PASSWORD=\"s3cret\n"), "REDIS_PASSWORD=***");
        assert_eq!(env_line("export DB_PASSWORD = x'y"), "DB_PASSWORD=***");
        assert_eq!(env_line("s3cret-on-its-own-line"), "***");
        assert_eq!(env_line("pass word=x"), "***");
    }
}
