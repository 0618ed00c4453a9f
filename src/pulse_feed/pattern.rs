//! PHP's `preg_match` patterns, as Pulse's recorders take them in
//! `config/pulse.php` (`ignore` lists, a `threshold` map's keys): a
//! delimiter, the expression, the delimiter again, then modifiers
//! (`#^App\\Jobs\\Import#i`).
//!
//! The expression is handed to the `regex` crate, which reads the PCRE
//! most such patterns use (classes, anchors, alternation, repetition).
//! What it cannot read (look-around, back-references, possessive
//! quantifiers) is refused with the reason, and the caller names the
//! pattern and leaves it out.

use regex::{Regex, RegexBuilder};

/// One compiled pattern; equal to another with the same source text.
#[derive(Debug, Clone)]
pub struct PhpPattern {
    /// The pattern as PHP is given it, delimiters and modifiers included.
    pub source: String,
    regex: Regex,
}

impl PartialEq for PhpPattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl PhpPattern {
    /// Reads `source` as `preg_match` does.
    ///
    /// # Errors
    /// No delimiter or no closing one, an unknown modifier, or an
    /// expression the `regex` crate cannot read (the text says why).
    pub fn parse(source: &str) -> Result<Self, String> {
        let text = source.trim_start();
        let Some(open) = text.chars().next() else {
            return Err("empty pattern".into());
        };
        if open.is_alphanumeric() || open == '\\' {
            return Err(format!(
                "{open:?} cannot be a delimiter (alphanumeric or backslash)"
            ));
        }
        let close = match open {
            '(' => ')',
            '[' => ']',
            '{' => '}',
            '<' => '>',
            other => other,
        };
        let end =
            closing(text, open, close).ok_or_else(|| format!("no ending delimiter {close:?}"))?;
        let expression = &text[open.len_utf8()..end];
        let modifiers = &text[end + close.len_utf8()..];
        let modifiers = modifiers.trim_end_matches('\n');
        if let Some(other) = modifiers.chars().find(|m| !"imsxUAuDSXJ".contains(*m)) {
            return Err(format!("unknown modifier {other:?}"));
        }
        let expression = unescape_delimiter(expression, open, close);
        // `A`: the match starts at the subject's start.
        let expression = if modifiers.contains('A') {
            format!(r"\A(?:{expression})")
        } else {
            expression
        };
        // `u` (UTF-8), `D` (`$` at the very end only), `S`, `X`, `J` change
        // nothing here: UTF-8 is the default, `$` without `m` matches at
        // the very end only.
        let regex = RegexBuilder::new(&expression)
            .case_insensitive(modifiers.contains('i'))
            .multi_line(modifiers.contains('m'))
            .dot_matches_new_line(modifiers.contains('s'))
            .ignore_whitespace(modifiers.contains('x'))
            .swap_greed(modifiers.contains('U'))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(PhpPattern {
            source: source.to_string(),
            regex,
        })
    }

    /// `preg_match($pattern, $subject) === 1`.
    pub fn matches(&self, subject: &str) -> bool {
        self.regex.is_match(subject)
    }
}

/// The byte index of the delimiter that ends the expression: the first
/// `close` not escaped by a backslash (and, for brackets, not nested).
fn closing(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == close && depth == 0 {
            return Some(i);
        } else if c == close {
            depth -= 1;
        } else if c == open && open != close {
            depth += 1;
        }
    }
    None
}

/// The expression with an escaped delimiter (`\#` in `#…#`, `\<` in
/// `<…>`) as that character, literally, as PCRE reads it (the regex
/// crate reads `\<` as a word boundary); other escapes are left for the
/// regex.
fn unescape_delimiter(expression: &str, open: char, close: char) -> String {
    let mut out = String::with_capacity(expression.len());
    let mut chars = expression.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(d) if d == open || d == close => out.push_str(&regex::escape(&d.to_string())),
            Some(d) => {
                out.push('\\');
                out.push(d);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, subject: &str) -> bool {
        PhpPattern::parse(pattern).unwrap().matches(subject)
    }

    #[test]
    fn delimiters_and_modifiers_as_preg_match_reads_them() {
        assert!(m(r"#^App\\Jobs\\Import#", r"App\Jobs\ImportUsers"));
        assert!(!m(r"#^App\\Jobs\\Import#", r"App\Jobs\Export"));
        assert!(m("/import/i", r"App\Jobs\ImportUsers"));
        assert!(!m("/import/", r"App\Jobs\ImportUsers"));
        assert!(m("{^a(b)c$}", "abc"));
        assert!(m("(^a(b)c$)", "abc"));
        assert!(m(r"#a\#b#", "a#b"));
        assert!(m("  ~^x~", "x"), "leading whitespace skipped");
        assert!(
            m("/b/A", "bc") && !m("/b/A", "ab"),
            "A anchors at the start"
        );
        assert!(m("/a.b/s", "a\nb") && !m("/a.b/", "a\nb"));
    }

    #[test]
    fn what_it_cannot_read_is_refused_with_the_reason() {
        for (pattern, why) in [
            ("", "empty"),
            ("abc", "delimiter"),
            (r"\abc\", "delimiter"),
            ("#abc", "ending delimiter"),
            ("#abc#q", "modifier"),
            ("/a(?=b)/", "look-around"),
        ] {
            let err = PhpPattern::parse(pattern).unwrap_err();
            assert!(
                err.to_lowercase().contains(why),
                "{pattern:?}: {err} (expected {why})"
            );
        }
    }
}
