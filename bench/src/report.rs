//! Result reporting: the Go tools' `log.Printf` summary line and a machine-readable `RESULT`
//! line, plus the `--deadline` time parsing (Go layout `2006-01-02 15:04:05`, read as UTC just
//! like Go's `time.Parse` does for a layout without a zone).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nsq_go::duration as godur;

/// Outcome of one benchmark run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Messages published (writer) or received (reader).
    pub msgs: u64,
    /// The measured interval.
    pub elapsed: Duration,
    /// Message body size, for the MiB/s figure.
    pub size: usize,
}

impl Summary {
    pub fn msgs_per_sec(&self) -> f64 {
        self.msgs as f64 / self.elapsed.as_secs_f64()
    }

    pub fn mib_per_sec(&self) -> f64 {
        (self.msgs as f64 * self.size as f64) / self.elapsed.as_secs_f64() / 1024.0 / 1024.0
    }

    /// Go computes `float64(duration/time.Microsecond)/float64(count)`: whole microseconds.
    pub fn us_per_op(&self) -> f64 {
        (self.elapsed.as_micros() as f64) / self.msgs as f64
    }

    /// `duration: <d> - <x>mb/s - <y>ops/s - <z>us/op`, the Go tools' summary text.
    pub fn go_line(&self) -> String {
        format!(
            "duration: {} - {}mb/s - {}ops/s - {}us/op",
            godur::format(self.elapsed),
            go_f3(self.mib_per_sec()),
            go_f3(self.msgs_per_sec()),
            go_f3(self.us_per_op()),
        )
    }

    /// `RESULT <role> msgs=<n> secs=<s> msgs_per_sec=<r> mib_per_sec=<m>`.
    pub fn result_line(&self, role: &str) -> String {
        let rate = |v: f64| if v.is_finite() { v } else { 0.0 };
        format!(
            "RESULT {role} msgs={} secs={:.6} msgs_per_sec={:.1} mib_per_sec={:.3}",
            self.msgs,
            self.elapsed.as_secs_f64(),
            rate(self.msgs_per_sec()),
            rate(self.mib_per_sec()),
        )
    }
}

/// Go's `%.03f`, including its spelling of infinities and NaN.
pub fn go_f3(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v:.3}")
    }
}

/// A Go `log` line: `[prefix] YYYY/MM/DD HH:MM:SS message` (UTC).
pub fn log_line(prefix: &str, msg: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{prefix}{} {msg}", format_utc(secs))
}

/// `YYYY/MM/DD HH:MM:SS` for seconds since the Unix epoch.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Parses `YYYY-MM-DD HH:MM:SS` as a UTC time.
pub fn parse_deadline(s: &str) -> Result<SystemTime, String> {
    let bad = || format!("parsing time {s:?} as \"2006-01-02 15:04:05\": bad format");
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<u32, String> {
        let t = &s[r];
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59
    {
        return Err(bad());
    }
    let days = days_from_civil(y as i64, mo, d);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + se) as i64;
    let secs = u64::try_from(secs).map_err(|_| bad())?;
    Ok(UNIX_EPOCH + Duration::from_secs(secs))
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = ((m + 9) % 12) as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_lines() {
        let s = Summary {
            msgs: 1_000_000,
            elapsed: Duration::from_secs(2),
            size: 200,
        };
        assert_eq!(
            s.go_line(),
            "duration: 2s - 95.367mb/s - 500000.000ops/s - 2.000us/op"
        );
        assert_eq!(
            s.result_line("writer"),
            "RESULT writer msgs=1000000 secs=2.000000 msgs_per_sec=500000.0 mib_per_sec=95.367"
        );
    }

    #[test]
    fn summary_with_no_messages() {
        let s = Summary {
            msgs: 0,
            elapsed: Duration::from_millis(1500),
            size: 200,
        };
        assert_eq!(
            s.go_line(),
            "duration: 1.5s - 0.000mb/s - 0.000ops/s - +Infus/op"
        );
        assert!(s
            .result_line("reader")
            .ends_with("msgs_per_sec=0.0 mib_per_sec=0.000"));
    }

    #[test]
    fn utc_formatting_and_deadline_parsing() {
        assert_eq!(format_utc(0), "1970/01/01 00:00:00");
        assert_eq!(format_utc(951_782_400), "2000/02/29 00:00:00");
        assert_eq!(format_utc(1_700_000_000), "2023/11/14 22:13:20");
        let t = parse_deadline("2023-11-14 22:13:20").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        assert_eq!(
            parse_deadline("2000-02-29 00:00:00").unwrap(),
            UNIX_EPOCH + Duration::from_secs(951_782_400)
        );
        for bad in [
            "2023-11-14T22:13:20",
            "2023-13-01 00:00:00",
            "2023-02-29 00:00:00",
            "x",
        ] {
            assert!(parse_deadline(bad).is_err(), "{bad}");
        }
    }
}
