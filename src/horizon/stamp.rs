//! Numbers as Horizon's records hold them, written digit by digit.
//!
//! Horizon stores times as PHP's `microtime(true)` text (four decimals for
//! a time of this century: `1764694800.1234`), list scores as the same
//! time negated (newest first), and runtimes in milliseconds rounded to two
//! decimals (`round(..., 2)`). Each job's records need several of these;
//! Rust's float formatting (`format!("{at:.4}")`) cost about 900
//! instructions and an allocation each, a fifth of what the records cost
//! the worker. Here they are written from the scaled integer instead, into
//! a buffer on the stack.

/// A time (UNIX seconds) with four decimals, and its score in Horizon's
/// lists (the same text after a `-`).
#[derive(Clone, Copy)]
pub struct Stamp {
    /// `-` then the time's digits; `len` bytes used.
    text: [u8; 24],
    len: usize,
}

impl Stamp {
    /// `at` (UNIX seconds) as four-decimal text, rounded half up at the
    /// fifth decimal. A time outside `0 ..= 9e11` s (none a clock gives
    /// here: [`super::records::microtime`] writes a time before 1970 as 0)
    /// is clamped to it.
    pub fn of(at: f64) -> Stamp {
        let ticks = scaled(at, 10_000.0);
        let mut stamp = Stamp {
            text: [0; 24],
            len: 0,
        };
        stamp.push(b'-');
        stamp.push_u64(ticks / 10_000);
        stamp.push(b'.');
        stamp.push_padded(ticks % 10_000, 4);
        stamp
    }

    /// A time in whole seconds (an expiry): `1764698400`.
    pub fn whole(seconds: u64) -> Stamp {
        let mut stamp = Stamp {
            text: [0; 24],
            len: 0,
        };
        stamp.push(b'-');
        stamp.push_u64(seconds);
        stamp
    }

    /// The time: `1764694800.1234`.
    pub fn time(&self) -> &str {
        &self.as_str()[1..]
    }

    /// Its score in a list kept newest first: `-1764694800.1234`.
    pub fn score(&self) -> &str {
        self.as_str()
    }

    fn as_str(&self) -> &str {
        // Only ASCII digits, `-` and `.` are ever pushed.
        std::str::from_utf8(&self.text[..self.len]).unwrap_or_default()
    }

    fn push(&mut self, byte: u8) {
        self.text[self.len] = byte;
        self.len += 1;
    }

    fn push_u64(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &digit in &digits[at..] {
            self.push(digit);
        }
    }

    fn push_padded(&mut self, n: u64, width: u32) {
        let mut unit = 10u64.pow(width - 1);
        while unit > 0 {
            self.push(b'0' + ((n / unit) % 10) as u8);
            unit /= 10;
        }
    }
}

/// A runtime in milliseconds as Horizon's metrics take it: two decimals
/// (`12.35`), rounded half up; negative or not a number: `0.00`.
/// `tonumber` reads it back as the same double as the runtime rounded to
/// hundredths.
pub fn two_places(ms: f64) -> String {
    let hundredths = scaled(ms, 100.0);
    let mut stamp = Stamp {
        text: [0; 24],
        len: 0,
    };
    stamp.push_u64(hundredths / 100);
    stamp.push(b'.');
    stamp.push_padded(hundredths % 100, 2);
    stamp.as_str().to_string()
}

/// `value × scale`, rounded, clamped to `0 ..= 9e15` (NaN: 0): what fits
/// the buffer, and every double up to it is an exact integer.
fn scaled(value: f64, scale: f64) -> u64 {
    let scaled = (value * scale).round();
    if scaled.is_nan() {
        return 0;
    }
    scaled.clamp(0.0, 9.0e15) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_decimals_as_float_formatting_writes_them() {
        for at in [
            1_764_694_800.123_4,
            1_700_000_000.0,
            1_700_000_000.000_1,
            0.5,
            1_764_694_800.999_96,
        ] {
            let stamp = Stamp::of(at);
            assert_eq!(stamp.time(), format!("{at:.4}"), "{at}");
            assert_eq!(stamp.score(), format!("-{at:.4}"), "{at}");
        }
        assert_eq!(Stamp::of(-3.0).time(), "0.0000");
        assert_eq!(Stamp::of(f64::NAN).time(), "0.0000");
        assert_eq!(Stamp::of(1e300).time(), "900000000000.0000");
        assert_eq!(Stamp::whole(1_764_698_400).time(), "1764698400");
        assert_eq!(Stamp::whole(u64::MAX).time(), u64::MAX.to_string());
    }

    #[test]
    fn runtimes_in_hundredths() {
        assert_eq!(two_places(0.0), "0.00");
        assert_eq!(two_places(12.345_6), "12.35");
        assert_eq!(two_places(1.0), "1.00");
        assert_eq!(two_places(0.05), "0.05");
        assert_eq!(two_places(-1.0), "0.00");
        for ms in [0.05, 12.34, 1_000.01, 7.3] {
            assert_eq!(two_places(ms).parse::<f64>().ok(), Some(ms));
        }
    }
}
