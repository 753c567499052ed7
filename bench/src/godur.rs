//! Go `time.Duration` compatibility: parse flag values like `10s`, `1m30s`, `1.5s`, `250ms`,
//! and format durations the way Go's `Duration.String()` does (`3.000412345s`, `1m0.5s`, `12ms`).

use std::time::Duration;

/// Parses a Go duration string (`time.ParseDuration`), non-negative values only.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}");
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after) = rest.split_at(int_end);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let e = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(e)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("missing unit in duration {s:?}")),
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        let mut ns = int.checked_mul(unit_ns).ok_or_else(bad)?;
        if !frac_part.is_empty() {
            // Keep at most 18 fractional digits; beyond that nothing survives at ns precision.
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| bad())?;
            ns += frac * unit_ns / 10u128.pow(digits.len() as u32);
        }
        total = total.checked_add(ns).ok_or_else(bad)?;
        rest = after;
    }
    if total > i64::MAX as u128 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(total as u64))
}

/// `.<digits>` of `v % 10^prec` without trailing zeros (empty if zero), and `v / 10^prec`.
fn frac(v: u64, prec: u32) -> (String, u64) {
    let p = 10u64.pow(prec);
    let f = v % p;
    if f == 0 {
        return (String::new(), v / p);
    }
    let s = format!("{f:0width$}", width = prec as usize);
    (format!(".{}", s.trim_end_matches('0')), v / p)
}

/// Formats like Go's `Duration.String()`.
pub fn format(d: Duration) -> String {
    let u = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if u == 0 {
        return "0s".to_string();
    }
    if u < 1_000 {
        return format!("{u}ns");
    }
    if u < 1_000_000 {
        let (f, i) = frac(u, 3);
        return format!("{i}{f}\u{b5}s");
    }
    if u < 1_000_000_000 {
        let (f, i) = frac(u, 6);
        return format!("{i}{f}ms");
    }
    let (f, secs) = frac(u, 9);
    let (s, mins) = (secs % 60, secs / 60);
    if mins == 0 {
        return format!("{s}{f}s");
    }
    let (m, hours) = (mins % 60, mins / 60);
    if hours == 0 {
        return format!("{m}m{s}{f}s");
    }
    format!("{hours}h{m}m{s}{f}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse("10s"), Ok(ms(10_000)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse(".5s"), Ok(ms(500)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("1h2m3s4ms"), Ok(ms(3_723_004)));
        assert_eq!(parse("250ms"), Ok(ms(250)));
        assert_eq!(parse("7us"), Ok(Duration::from_micros(7)));
        assert_eq!(parse("7\u{b5}s"), Ok(Duration::from_micros(7)));
        assert_eq!(parse("3ns"), Ok(Duration::from_nanos(3)));
        assert_eq!(parse("+2s"), Ok(ms(2_000)));
        for bad in ["", "10", "s", "1x", "-1s", "1..2s", "."] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn formats_like_go() {
        let ns = Duration::from_nanos;
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(ns(999)), "999ns");
        assert_eq!(format(ns(1_500)), "1.5\u{b5}s");
        assert_eq!(format(ns(12_000_000)), "12ms");
        assert_eq!(format(ns(12_345_678)), "12.345678ms");
        assert_eq!(format(ns(3_000_412_345)), "3.000412345s");
        assert_eq!(format(ns(10_000_000_000)), "10s");
        assert_eq!(format(ns(60_500_000_000)), "1m0.5s");
        assert_eq!(format(ns(3_723_000_000_000)), "1h2m3s");
    }

    #[test]
    fn round_trip() {
        for s in ["10s", "1m0.5s", "12.345678ms", "1h2m3s", "999ns"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}
