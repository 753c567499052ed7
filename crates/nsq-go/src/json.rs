//! JSON exactly as Go's `encoding/json` (go1.21) writes it: compact, struct field order kept,
//! `<`, `>`, `&`, U+2028 and U+2029 escaped, `\b`/`\f` as `\u0008`/`\u000c`, and floats in
//! the shortest round-trip form without a trailing `.0` (`1`, `0.99`, `1e-7`, `1e+21`).
//!
//! Reading: [`scan`] checks syntax as Go's scanner does, with its error texts, and reads the
//! first value of a stream as `json.Decoder` does; [`fields`] decodes a request body into a
//! struct of string fields as NSQ's handlers do, in bounded memory.

pub mod fields;
pub mod scan;

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

/// A `serde_json` formatter producing Go's bytes.
struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        w.write_all(go_float(v).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, v: f32) -> io::Result<()> {
        w.write_all(go_float(f64::from(v)).as_bytes())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        e: CharEscape,
    ) -> io::Result<()> {
        let b = match e {
            CharEscape::Quote => return w.write_all(b"\\\""),
            CharEscape::ReverseSolidus => return w.write_all(b"\\\\"),
            CharEscape::Solidus => return w.write_all(b"/"),
            CharEscape::LineFeed => return w.write_all(b"\\n"),
            CharEscape::CarriageReturn => return w.write_all(b"\\r"),
            CharEscape::Tab => return w.write_all(b"\\t"),
            CharEscape::Backspace => 0x08,
            CharEscape::FormFeed => 0x0c,
            CharEscape::AsciiControl(b) => b,
        };
        const HEX: &[u8; 16] = b"0123456789abcdef";
        w.write_all(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[(b >> 4) as usize],
            HEX[(b & 0xf) as usize],
        ])
    }
}

/// Serializes `v` as Go would.
pub fn to_vec<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    // Our types (plain structs, strings, numbers, `serde_json::Value`) cannot fail to encode
    // into a `Vec`; a failure would leave a truncated document, which debug builds catch.
    let r = v.serialize(&mut ser);
    debug_assert!(r.is_ok(), "JSON encoding failed: {r:?}");
    out
}

/// The JSON type name of `v` in Go's `json.UnmarshalTypeError` text
/// (`cannot unmarshal <kind> into …`).
pub fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `encoding/json`'s float64 encoding: `strconv.AppendFloat(f, 'f' or 'e', -1, 64)` with the
/// exponent form for magnitudes < 1e-6 or >= 1e21, and `e-07` shortened to `e-7`.
pub fn go_float(v: f64) -> String {
    if !v.is_finite() {
        // Go refuses to encode these; never produced by us.
        return "0".to_string();
    }
    let abs = v.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{v:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.99), "0.99");
        assert_eq!(go_float(307376716.0), "307376716");
        assert_eq!(go_float(1e-7), "1e-7");
        assert_eq!(go_float(1.5e-10), "1.5e-10");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e20), "100000000000000000000");
        assert_eq!(go_float(0.0), "0");
    }

    #[test]
    fn strings() {
        let v = serde_json::json!({"a": "<x>&\u{2028}\u{8}\u{c}\n\t\"\\\u{1f}\u{7f}é"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "{\"a\":\"\\u003cx\\u003e\\u0026\\u2028\\u0008\\u000c\\n\\t\\\"\\\\\\u001f\u{7f}é\"}"
        );
        assert_eq!(to_vec(&serde_json::json!([1.0, 0.5, 3])), b"[1,0.5,3]");
    }
}
