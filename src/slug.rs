//! Laravel's `Str::slug`, as the worker needs it for the prefixes an app
//! derives from its `APP_NAME` and for Horizon's supervisor names.

/// `Str::slug($name)`: lower case, runs of other characters become one `-`.
pub fn slug(name: &str) -> String {
    slug_with(name, '-')
}

/// `Str::slug($name, $separator)` as Laravel 8–13 computes it: the name
/// transliterated to ASCII (`Str::ascii`, language `en`: `ü` → `u`, `ß` →
/// `ss`, `Æ` → `ae`; characters with no Latin spelling are dropped), the
/// other separator (`_` for `-`, `-` for `_`) turned into `separator`, `@`
/// into `{separator}at{separator}`, lower case, every other character but
/// letters, digits and whitespace removed (so `shop.example.com` is
/// `shopexamplecom`), runs of separators and whitespace made one separator,
/// and the separator trimmed from both ends.
pub fn slug_with(name: &str, separator: char) -> String {
    let flip = if separator == '-' { '_' } else { '-' };
    let mut ascii = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else if let Some(t) = transliterate(c) {
            ascii.push_str(t);
        } else if c.is_whitespace() {
            ascii.push(' ');
        }
    }
    let mut cleaned = String::with_capacity(ascii.len());
    for c in ascii.chars() {
        match c {
            c if c == flip || c == separator => cleaned.push(separator),
            '@' => {
                cleaned.push(separator);
                cleaned.push_str("at");
                cleaned.push(separator);
            }
            c if c.is_ascii_alphanumeric() => cleaned.push(c.to_ascii_lowercase()),
            c if c.is_ascii_whitespace() || c == '\x0B' => cleaned.push(' '),
            _ => {}
        }
    }
    let mut out = String::with_capacity(cleaned.len());
    for c in cleaned.chars() {
        if c == separator || c == ' ' {
            if !out.ends_with(separator) {
                out.push(separator);
            }
        } else {
            out.push(c);
        }
    }
    out.trim_matches(separator).to_string()
}

/// The ASCII spelling `Str::ascii` (language `en`) gives the Latin letters
/// app names use; `None` for anything else (dropped).
fn transliterate(c: char) -> Option<&'static str> {
    Some(match c {
        'À'..='Å' | 'Ā' | 'Ă' | 'Ą' => "A",
        'à'..='å' | 'ā' | 'ă' | 'ą' | 'ª' => "a",
        'Æ' => "AE",
        'æ' => "ae",
        'Ç' | 'Ć' | 'Ĉ' | 'Ċ' | 'Č' => "C",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'Ð' | 'Ď' | 'Đ' => "D",
        'ð' | 'ď' | 'đ' => "d",
        'È'..='Ë' | 'Ē' | 'Ĕ' | 'Ė' | 'Ę' | 'Ě' => "E",
        'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => "e",
        'Ĝ' | 'Ğ' | 'Ġ' | 'Ģ' => "G",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'Ĥ' | 'Ħ' => "H",
        'ĥ' | 'ħ' => "h",
        'Ì'..='Ï' | 'Ĩ' | 'Ī' | 'Ĭ' | 'Į' | 'İ' => "I",
        'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' => "i",
        'Ĳ' => "IJ",
        'ĳ' => "ij",
        'Ĵ' => "J",
        'ĵ' => "j",
        'Ķ' => "K",
        'ķ' | 'ĸ' => "k",
        'Ĺ' | 'Ļ' | 'Ľ' | 'Ŀ' | 'Ł' => "L",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'Ñ' | 'Ń' | 'Ņ' | 'Ň' | 'Ŋ' => "N",
        'ñ' | 'ń' | 'ņ' | 'ň' | 'ŉ' | 'ŋ' => "n",
        'Ò'..='Ö' | 'Ø' | 'Ō' | 'Ŏ' | 'Ő' => "O",
        'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' | 'º' => "o",
        'Œ' => "OE",
        'œ' => "oe",
        'Ŕ' | 'Ŗ' | 'Ř' => "R",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'Ś' | 'Ŝ' | 'Ş' | 'Š' => "S",
        'ś' | 'ŝ' | 'ş' | 'š' | 'ſ' => "s",
        'ß' => "ss",
        'Ţ' | 'Ť' | 'Ŧ' => "T",
        'ţ' | 'ť' | 'ŧ' => "t",
        'Þ' => "TH",
        'þ' => "th",
        'Ù'..='Ü' | 'Ũ' | 'Ū' | 'Ŭ' | 'Ů' | 'Ű' | 'Ų' => "U",
        'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' | 'µ' => "u",
        'Ŵ' => "W",
        'ŵ' => "w",
        'Ý' | 'Ÿ' | 'Ŷ' => "Y",
        'ý' | 'ÿ' | 'ŷ' => "y",
        'Ź' | 'Ż' | 'Ž' => "Z",
        'ź' | 'ż' | 'ž' => "z",
        _ => return None,
    })
}
