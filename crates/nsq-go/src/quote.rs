//! Go's `%q` (`strconv.Quote`) for byte strings, used where the reference quotes a name in an
//! error description (`E_BAD_TOPIC PUB topic name "<t>" is not valid`).
//!
//! Rules: wrap in `"`; escape `"` and `\`; `\a \b \f \n \r \t \v`; other bytes below 0x20 and
//! 0x7F as `\xNN`; each byte of invalid UTF-8 as `\xNN`; code points that Go does not consider
//! printable as `\uNNNN` / `\UNNNNNNNN`; printable Unicode verbatim. Hex digits are lowercase.

use std::fmt::Write;

mod print_table;

/// Quotes `s` exactly like Go's `fmt.Sprintf("%q", s)`.
pub fn go_quote(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for chunk in s.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_escaped_char(&mut out, c);
        }
        for &b in chunk.invalid() {
            push_hex_byte(&mut out, b);
        }
    }
    out.push('"');
    out
}

fn push_hex_byte(out: &mut String, b: u8) {
    let _ = write!(out, "\\x{b:02x}");
}

fn push_escaped_char(out: &mut String, c: char) {
    match c {
        '"' | '\\' => {
            out.push('\\');
            out.push(c);
        }
        _ if is_go_print(c) => out.push(c),
        '\u{07}' => out.push_str("\\a"),
        '\u{08}' => out.push_str("\\b"),
        '\u{0c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{0b}' => out.push_str("\\v"),
        _ if (c as u32) < 0x20 || c as u32 == 0x7f => push_hex_byte(out, c as u8),
        _ if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        _ => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    }
}

/// Go's `unicode.IsPrint`: categories L, M, N, P, S plus the ASCII space.
pub(crate) fn is_go_print(c: char) -> bool {
    let cp = c as u32;
    if cp < 0x80 {
        return (0x20..0x7f).contains(&cp);
    }
    let ranges = print_table::PRINT_RANGES;
    // Index of the first range whose end is >= cp.
    let i = ranges.partition_point(|&(_, hi)| hi < cp);
    i < ranges.len() && ranges[i].0 <= cp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii() {
        assert_eq!(go_quote(b""), r#""""#);
        assert_eq!(go_quote(b"abc"), r#""abc""#);
        assert_eq!(go_quote(b"a b!"), r#""a b!""#);
        assert_eq!(go_quote(b"bad!name"), r#""bad!name""#);
        assert_eq!(go_quote(b"a\"b\\c"), r#""a\"b\\c""#);
    }

    #[test]
    fn control_escapes() {
        assert_eq!(go_quote(b"\x07\x08\x0c\n\r\t\x0b"), r#""\a\b\f\n\r\t\v""#);
        assert_eq!(go_quote(b"\x00\x01\x1f\x7f"), r#""\x00\x01\x1f\x7f""#);
    }

    #[test]
    fn invalid_utf8_is_hex_per_byte() {
        assert_eq!(go_quote(b"\xff"), r#""\xff""#);
        assert_eq!(go_quote(b"a\xe2\x82b"), r#""a\xe2\x82b""#);
        assert_eq!(go_quote(b"\xf0\x80\x80\x80"), r#""\xf0\x80\x80\x80""#);
        // An encoded surrogate is invalid UTF-8 in Go too.
        assert_eq!(go_quote(b"\xed\xa0\x80"), r#""\xed\xa0\x80""#);
    }

    #[test]
    fn unicode() {
        assert_eq!(go_quote("тест".as_bytes()), "\"тест\"");
        assert_eq!(go_quote("日本語€".as_bytes()), "\"日本語€\"");
        assert_eq!(go_quote("🚀".as_bytes()), "\"🚀\"");
        assert_eq!(go_quote("\u{fffd}".as_bytes()), "\"\u{fffd}\"");
        // Not printable in Go: C1 controls, NBSP, soft hyphen, zero-width space, BOM, private use.
        assert_eq!(go_quote("\u{85}".as_bytes()), r#""\u0085""#);
        assert_eq!(go_quote("\u{a0}".as_bytes()), r#""\u00a0""#);
        assert_eq!(go_quote("\u{ad}".as_bytes()), r#""\u00ad""#);
        assert_eq!(go_quote("\u{200b}".as_bytes()), r#""\u200b""#);
        assert_eq!(go_quote("\u{feff}".as_bytes()), r#""\ufeff""#);
        assert_eq!(go_quote("\u{e000}".as_bytes()), r#""\ue000""#);
        assert_eq!(go_quote("\u{2028}".as_bytes()), r#""\u2028""#);
        assert_eq!(go_quote("\u{3000}".as_bytes()), r#""\u3000""#);
        assert_eq!(go_quote("\u{e0001}".as_bytes()), r#""\U000e0001""#);
        assert_eq!(go_quote("\u{10ffff}".as_bytes()), r#""\U0010ffff""#);
        // Unassigned in Unicode 15.
        assert_eq!(go_quote("\u{378}".as_bytes()), r#""\u0378""#);
    }
}
