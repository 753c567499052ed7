//! Go's `time.Duration` as text: [`parse`] is `time.ParseDuration` (flags, config files,
//! query parameters) and [`format`](fn@format) is `Duration.String()` (usage defaults, `/stats` text,
//! request logs).

use std::time::Duration;

use crate::quote::go_quote;

/// Why [`parse`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Go's own error text (`time: invalid duration "x"`, `time: missing unit …`).
    #[error("{0}")]
    Invalid(String),
    /// Valid Go syntax, but negative: Go accepts it, a `std::time::Duration` cannot hold it.
    #[error("negative durations are not supported")]
    Negative,
}

/// Go's `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, units `ns us µs μs ms s m h`,
/// a bare `0` allowed; the same rounding of fractions and the same overflow limit (2^63-1 ns).
pub fn parse(orig: &str) -> Result<Duration, DurationError> {
    let ns = parse_nanos(orig)?;
    if ns < 0 {
        return Err(DurationError::Negative);
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// [`parse`] with the sign kept: Go's `time.Duration` as signed nanoseconds (`-1s` is
/// `-1_000_000_000`; the range is that of an `int64`, down to -2^63 ns).
pub fn parse_nanos(orig: &str) -> Result<i64, DurationError> {
    let q = go_quote(orig.as_bytes());
    let invalid = || DurationError::Invalid(format!("time: invalid duration {q}"));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part.
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &b[..int_len] {
            if v > LIMIT / 10 {
                return Err(invalid());
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        let pre = int_len > 0;
        // Fraction part.
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if s.starts_with('.') {
            s = &s[1..];
            let frac_len = s.bytes().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for c in s[..frac_len].bytes() {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = frac_len > 0;
            s = &s[frac_len..];
        }
        if !pre && !post {
            return Err(invalid());
        }
        // Unit.
        let unit_len = s
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(DurationError::Invalid(format!(
                "time: missing unit in duration {q}"
            )));
        }
        let u = &s[..unit_len];
        s = &s[unit_len..];
        let unit: u64 = match u {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::Invalid(format!(
                    "time: unknown unit {} in duration {q}",
                    go_quote(u.as_bytes())
                )))
            }
        };
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        total += v;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        // total <= 2^63, so the negation fits an i64.
        return Ok((-(i128::from(total))) as i64);
    }
    if total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(total as i64)
}

/// A Go `time.Duration` flag that keeps its sign, for the tools whose `main` validates a
/// duration after parsing (`--interval should be positive`): Go's `flag.Duration` accepts
/// `-1s`, so the check, not the parser, refuses it. Signed nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SignedDuration(pub i64);

impl SignedDuration {
    pub const ZERO: SignedDuration = SignedDuration(0);

    /// A non-negative duration (saturating at Go's range).
    pub fn from_std(d: Duration) -> SignedDuration {
        SignedDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    /// `d > 0`.
    pub fn is_positive(self) -> bool {
        self.0 > 0
    }

    /// The duration if positive, else zero.
    pub fn to_std(self) -> Duration {
        Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }
}

impl std::fmt::Display for SignedDuration {
    /// `Duration.String()`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_nanos(i128::from(self.0)))
    }
}

impl crate::flag::Value for SignedDuration {
    /// `flag.Duration`'s `Set`: any `time.ParseDuration` text, negative ones included; a bad
    /// one is `parse error` (Go's `errParse`).
    fn set(&mut self, text: &str) -> Result<(), crate::flag::ValueError> {
        self.0 = parse_nanos(text).map_err(|_| "parse error".to_string())?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        (self.0 != 0).then(|| self.to_string())
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::from(self.0)
    }

    fn type_name(&self) -> &'static str {
        "duration"
    }
}

/// Go's `time.Duration.String()` for a nanosecond count (`1h2m3.5s`, `1.5ms`, `0s`).
pub fn format_nanos(ns: i128) -> String {
    let neg = ns < 0;
    let mut u = ns.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        let (prec, unit) = match u {
            0 => return "0s".to_string(),
            1..=999 => (0, "ns"),
            1_000..=999_999 => (3, "µs"),
            _ => (6, "ms"),
        };
        let frac = frac_str(&mut u, prec);
        out.push_str(&format!("{u}{frac}{unit}"));
    } else {
        let frac = frac_str(&mut u, 9);
        let secs = u % 60;
        let mins = u / 60;
        if mins > 0 {
            let hours = mins / 60;
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            out.push_str(&format!("{}m", mins % 60));
        }
        out.push_str(&format!("{secs}{frac}s"));
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Go's `fmtFrac`: splits `prec` decimal digits off `*v` and renders them as `.ddd` without
/// trailing zeros (empty when they are all zero).
fn frac_str(v: &mut u128, prec: u32) -> String {
    let p = 10u128.pow(prec);
    let frac = *v % p;
    *v /= p;
    if frac == 0 {
        return String::new();
    }
    let s = format!("{frac:0width$}", width = prec as usize);
    format!(".{}", s.trim_end_matches('0'))
}

/// `Duration.String()` of a `std::time::Duration` (saturating at Go's range).
pub fn format(d: Duration) -> String {
    format_nanos(
        i128::try_from(d.as_nanos())
            .unwrap_or(i128::MAX)
            .min(i128::from(i64::MAX)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse("250ms"), Ok(ms(250)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse(".5s"), Ok(ms(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("-0"), Ok(Duration::ZERO));
        assert_eq!(parse("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("-1s"), Err(DurationError::Negative));
        assert_eq!(parse_nanos("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_nanos("-0"), Ok(0));
        assert_eq!(parse_nanos("+2ms"), Ok(2_000_000));
        assert_eq!(parse_nanos("-2562047h47m16.854775808s"), Ok(i64::MIN));
        assert!(parse_nanos("2562047h47m16.854775808s").is_err());
        assert_eq!(
            parse("10"),
            Err(DurationError::Invalid(
                "time: missing unit in duration \"10\"".into()
            ))
        );
        assert_eq!(
            parse("1x"),
            Err(DurationError::Invalid(
                "time: unknown unit \"x\" in duration \"1x\"".into()
            ))
        );
        assert!(parse("").is_err());
        assert!(parse(".s").is_err());
        assert!(parse("3000000h").is_err());
    }

    #[test]
    fn format_like_go() {
        assert_eq!(format_nanos(0), "0s");
        assert_eq!(format_nanos(58_575_750_838), "58.575750838s");
        assert_eq!(format_nanos(84_219_939_907), "1m24.219939907s");
        assert_eq!(format_nanos(7_384_500_000_000), "2h3m4.5s");
        assert_eq!(format_nanos(1_500), "1.5µs");
        assert_eq!(format_nanos(2_000_000), "2ms");
        assert_eq!(format_nanos(999), "999ns");
        assert_eq!(format_nanos(3_600_000_000_000), "1h0m0s");
        assert_eq!(format_nanos(-1_000_000_000), "-1s");
        assert_eq!(format(Duration::from_secs(600)), "10m0s");
        assert_eq!(format(Duration::from_millis(25)), "25ms");
    }
}
