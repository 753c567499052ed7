//! The local UTC offset for `/stats`' `start_time` line, found as Go's `time.Local` does on
//! Linux: `$TZ` (unset → `/etc/localtime`, empty → UTC, a name → the zoneinfo directories),
//! read from the TZif file's transition table. Times after the last transition use the
//! footer's offset when it has no DST rule, else the last transition's offset.

use std::path::{Path, PathBuf};

const ZONEINFO_DIRS: &[&str] = &[
    "/usr/share/zoneinfo/",
    "/usr/share/lib/zoneinfo/",
    "/usr/lib/locale/TZ/",
    "/etc/zoneinfo/",
];

/// Seconds east of UTC at Unix time `t` (0 when no zone information is found).
pub(crate) fn local_offset(t: i64) -> i64 {
    zone_file()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|d| offset_at(&d, t))
        .unwrap_or(0)
}

fn zone_file() -> Option<PathBuf> {
    match std::env::var("TZ") {
        Err(_) => Some(PathBuf::from("/etc/localtime")),
        Ok(tz) => {
            let tz = tz.strip_prefix(':').unwrap_or(&tz);
            if tz.is_empty() || tz == "UTC" {
                return None;
            }
            if tz.starts_with('/') {
                return Some(PathBuf::from(tz));
            }
            ZONEINFO_DIRS
                .iter()
                .map(|d| Path::new(d).join(tz))
                .find(|p| p.is_file())
        }
    }
}

/// The UTC offset at `t` according to TZif data (RFC 8536), versions 1–4.
fn offset_at(data: &[u8], t: i64) -> Option<i64> {
    let hdr = |d: &[u8]| -> Option<[usize; 6]> {
        if d.len() < 44 || &d[..4] != b"TZif" {
            return None;
        }
        let mut c = [0usize; 6];
        for (i, v) in c.iter_mut().enumerate() {
            let o = 20 + 4 * i;
            *v = u32::from_be_bytes(d[o..o + 4].try_into().ok()?) as usize;
        }
        Some(c)
    };
    // Counts: isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt; `tsize`-byte times.
    let block_len = |c: [usize; 6], tsize: usize| {
        c[3] * (tsize + 1) + c[4] * 6 + c[5] + c[2] * (tsize + 4) + c[1] + c[0]
    };
    let v1 = hdr(data)?;
    let (counts, body, tsize) = if data[4] >= b'2' {
        // Version 2+: skip the 32-bit block, use the 64-bit one.
        let rest = data.get(44 + block_len(v1, 4)..)?;
        (hdr(rest)?, rest.get(44..)?, 8)
    } else {
        (v1, data.get(44..)?, 4)
    };
    let [_, _, _, tc, ty, _] = counts;
    let footer_at = block_len(counts, tsize);
    let times: Vec<i64> = (0..tc)
        .map(|i| {
            let b = body.get(i * tsize..(i + 1) * tsize)?;
            Some(if tsize == 8 {
                i64::from_be_bytes(b.try_into().ok()?)
            } else {
                i64::from(i32::from_be_bytes(b.try_into().ok()?))
            })
        })
        .collect::<Option<_>>()?;
    let idx = body.get(tc * tsize..tc * tsize + tc)?;
    let types_at = tc * tsize + tc;
    let ttinfo = |i: usize| -> Option<(i64, bool)> {
        let b = body.get(types_at + 6 * i..types_at + 6 * i + 6)?;
        Some((
            i64::from(i32::from_be_bytes(b[..4].try_into().ok()?)),
            b[4] != 0,
        ))
    };
    if ty == 0 {
        return None;
    }
    match times.iter().rposition(|&x| x <= t) {
        None => (0..ty)
            .filter_map(ttinfo)
            .find(|(_, dst)| !dst)
            .or_else(|| ttinfo(0))
            .map(|(o, _)| o),
        Some(i) => {
            let last = ttinfo(idx[i] as usize)?.0;
            if i + 1 == times.len() && tsize == 8 {
                if let Some(o) = footer_fixed_offset(body.get(footer_at..).unwrap_or(&[])) {
                    return Some(o);
                }
            }
            Some(last)
        }
    }
}

/// The offset of a POSIX TZ footer without a DST part (`\nUTC0\n`, `\n<+03>-3\n`).
fn footer_fixed_offset(footer: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(footer).ok()?.trim_matches('\n');
    let rest = if let Some(r) = s.strip_prefix('<') {
        &r[r.find('>')? + 1..]
    } else {
        s.trim_start_matches(|c: char| c.is_ascii_alphabetic())
    };
    // A DST zone name (or rule) after the offset means the offset varies.
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '+' | '-' | ':')))
        .unwrap_or(rest.len());
    if end != rest.len() || rest.is_empty() {
        return None;
    }
    let (sign, num) = match rest.as_bytes()[0] {
        b'-' => (1, &rest[1..]),
        b'+' => (-1, &rest[1..]),
        _ => (-1, rest),
    };
    let mut parts = num.split(':').map(|p| p.parse::<i64>().ok());
    let h = parts.next()??;
    let m = parts.next().flatten().unwrap_or(0);
    let sec = parts.next().flatten().unwrap_or(0);
    // POSIX offsets are west-positive.
    Some(sign * (h * 3600 + m * 60 + sec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footers() {
        assert_eq!(footer_fixed_offset(b"\nUTC0\n"), Some(0));
        assert_eq!(footer_fixed_offset(b"\n<+03>-3\n"), Some(3 * 3600));
        assert_eq!(footer_fixed_offset(b"\nEST5\n"), Some(-5 * 3600));
        assert_eq!(footer_fixed_offset(b"\nCET-1CEST,M3.5.0,M10.5.0/3\n"), None);
    }

    #[test]
    fn system_zones_parse() {
        for (zone, t, want) in [
            ("Etc/UTC", 0, 0),
            ("Asia/Tokyo", 1_795_949_307, 9 * 3600),
            ("Etc/GMT+5", 0, -5 * 3600),
        ] {
            let Some(data) = ZONEINFO_DIRS
                .iter()
                .find_map(|d| std::fs::read(Path::new(d).join(zone)).ok())
            else {
                continue; // no tzdata installed
            };
            assert_eq!(offset_at(&data, t), Some(want), "{zone}");
        }
    }
}
