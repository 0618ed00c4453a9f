//! Pulse's sampling (laravel/pulse 1.x, `Recorders\Concerns\Sampling`):
//! the queue counts keep a job by its uuid, the same way on every worker
//! and for every event of the job; slow jobs are drawn at random.

use md5::{Digest, Md5};

/// `shouldSampleDeterministically($uuid)`: `hexdec(md5($uuid)) / 16**32 <=
/// $rate`, the digest read as PHP's `hexdec` reads 32 hex digits (an
/// integer until it would overflow, a float from then on).
pub fn keeps_deterministically(seed: &str, rate: f64) -> bool {
    let digest = hex::encode(Md5::digest(seed.as_bytes()));
    hexdec(&digest) / 16f64.powi(32) <= rate
}

/// `shouldSample()`: Laravel's `Lottery::odds($rate)->choose()`, which
/// draws `random_int(0, PHP_INT_MAX) / PHP_INT_MAX <= $rate`: a rate of 1
/// or more always keeps, 0 (nearly) never.
pub fn keeps_at_random(rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    let drawn = rand::random::<u64>() >> 1;
    (drawn as f64) / (i64::MAX as f64) <= rate
}

/// PHP's `hexdec()` of lowercase hex digits: exact while it fits an
/// `int`, then a float that each further digit multiplies by 16.
fn hexdec(digits: &str) -> f64 {
    let mut int: i64 = 0;
    let mut float: Option<f64> = None;
    for c in digits.chars() {
        let Some(d) = c.to_digit(16) else { continue };
        let d = i64::from(d);
        match float.as_mut() {
            Some(f) => *f = *f * 16.0 + d as f64,
            None if int > (i64::MAX - d) / 16 => float = Some(int as f64 * 16.0 + d as f64),
            None => int = int * 16 + d,
        }
    }
    float.unwrap_or(int as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdec_is_exact_while_it_fits_and_a_float_after() {
        assert_eq!(hexdec("ff"), 255.0);
        assert_eq!(hexdec("7fffffffffffffff"), i64::MAX as f64);
        assert_eq!(hexdec("ffffffffffffffffffffffffffffffff"), 16f64.powi(32));
    }

    /// The shares PHP 8.2 computes (`printf("%.20f", hexdec(md5($s)) /
    /// pow(16, 32))`), to the last bit.
    #[test]
    fn the_share_is_the_one_php_computes() {
        for (seed, php) in [
            ("job-1", 0.672_205_280_128_719_7_f64),
            ("a", 0.049_826_963_281_652_016),
            (
                "9f1c3e6e-1b77-4d7e-a0a5-5e8a5d2f1c11",
                0.262_242_427_375_256_77,
            ),
        ] {
            let share = hexdec(&hex::encode(Md5::digest(seed.as_bytes()))) / 16f64.powi(32);
            assert_eq!(share.to_bits(), php.to_bits(), "{seed}: {share} vs {php}");
        }
    }

    #[test]
    fn rates_zero_and_one_are_none_and_all() {
        for uuid in ["a", "b", "9f1c3e6e-1b77-4d7e-a0a5-5e8a5d2f1c11"] {
            assert!(keeps_deterministically(uuid, 1.0));
            assert!(!keeps_deterministically(uuid, 0.0));
        }
        assert!(keeps_at_random(1.0));
    }

    /// The same uuid is kept or not on every call, and about the rate of
    /// many uuids is kept.
    #[test]
    fn the_choice_follows_the_uuid() {
        let kept = (0..1000)
            .filter(|i| keeps_deterministically(&format!("job-{i}"), 0.3))
            .count();
        assert!((200..400).contains(&kept), "{kept}");
        // Kept exactly up to its own share of the range.
        let digest = hex::encode(Md5::digest(b"job-1"));
        let share = hexdec(&digest) / 16f64.powi(32);
        assert!(keeps_deterministically("job-1", share));
        assert!(!keeps_deterministically("job-1", share - 1e-9));
    }
}
