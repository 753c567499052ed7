//! `json.NewDecoder(body).Decode(&body)` into an anonymous struct of string fields, the way
//! NSQ's HTTP handlers read a JSON request body (nsqadmin/http.go,
//! `createTopicChannelHandler`: `var body struct { Topic string `json:"topic"`; … }`), fed the
//! body as it arrives so that a body of any size is read in bounded memory and only as far as
//! its first value goes (encoding/json/stream.go, `Decoder.Decode`; decode.go, `object`,
//! `literalStore`, `unquote`):
//!
//! * the first value must be syntactically valid ([`super::scan`]); a syntax error wins over
//!   a type error that comes before it, since Go scans the whole value before decoding it;
//! * `null` leaves every field empty; an object sets the fields its keys name (the exact name,
//!   else a case-insensitive match, decode.go `foldName`), a later key winning; other keys
//!   are skipped;
//! * a field given anything but a string or `null` is a type error (`json: cannot unmarshal
//!   number into Go struct field .topic of type string`), as is a first value that is neither
//!   an object nor `null` (`… into Go value of type struct { … }`); the first such error is
//!   reported;
//! * strings are unescaped as Go does: `\uXXXX` surrogate pairs joined, a lone surrogate and
//!   every byte of invalid UTF-8 becoming U+FFFD.

use super::scan::{DecodeError, Op, Parse, Read, ValueReader};

/// A decoded string field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// Its value (`""` if the body did not set it or set it to `null`).
    Str(String),
    /// A string longer than the decoder's limit: not kept (Go keeps it; every caller here
    /// refuses such a value, as Go's callers do, so the answer is the same).
    TooLong,
}

impl Field {
    /// The value, `None` if it was too long.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s) => Some(s),
            Field::TooLong => None,
        }
    }
}

/// A string literal being collected (the raw bytes, quotes included).
#[derive(Debug)]
struct Capture {
    /// `None` for an object key, else the field it sets.
    field: Option<usize>,
    raw: Vec<u8>,
    /// Bytes past `limit` were dropped.
    over: bool,
    limit: usize,
}

/// The decoder (see the module comment): [`StringFields::feed`] the body, then
/// [`StringFields::finish`].
#[derive(Debug)]
pub struct StringFields<'a> {
    go_type: &'a str,
    names: &'a [&'a str],
    max_len: usize,
    reader: ValueReader,
    values: Vec<Field>,
    /// The field the current top-level key names, once its `:` is read.
    key_field: Option<usize>,
    capture: Option<Capture>,
    type_err: Option<String>,
}

/// Go's `foldName` (decode.go) for comparing a key with an ASCII field name: ASCII letters
/// upper-cased, and the two non-ASCII runes whose case folding reaches ASCII letters (U+212A
/// KELVIN SIGN to `K`, U+017F LATIN SMALL LETTER LONG S to `S`); any other non-ASCII rune
/// folds to a non-ASCII rune and so never matches an ASCII name.
fn fold_matches(key: &str, name: &str) -> bool {
    let mut k = key.chars().map(|c| match c {
        '\u{212a}' => 'K',
        '\u{17f}' => 'S',
        _ => c.to_ascii_uppercase(),
    });
    let mut n = name.chars().map(|c| c.to_ascii_uppercase());
    loop {
        match (k.next(), n.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// Go's `unquote` (decode.go, `unquoteBytes`) of a string literal the scanner accepted.
pub fn unquote(raw: &[u8]) -> String {
    let s = raw
        .strip_prefix(b"\"")
        .and_then(|s| s.strip_suffix(b"\""))
        .unwrap_or(raw);
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let Some(esc) = s[i..].iter().position(|&c| c == b'\\') else {
            push_lossy(&mut out, &s[i..]);
            break;
        };
        push_lossy(&mut out, &s[i..i + esc]);
        i += esc + 1;
        let Some(&e) = s.get(i) else { break };
        i += 1;
        match e {
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let Some(r) = hex4(&s[i..]) else { break };
                i += 4;
                if (0xd800..0xe000).contains(&r) {
                    // A valid pair is consumed whole; anything else gives U+FFFD and the next
                    // escape is read on its own.
                    let low = s[i..].strip_prefix(b"\\u").and_then(hex4);
                    if let Some(low) = low.filter(|l| r < 0xdc00 && (0xdc00..0xe000).contains(l)) {
                        let c = 0x10000 + ((r - 0xd800) << 10) + (low - 0xdc00);
                        out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
                        i += 6;
                    } else {
                        out.push('\u{fffd}');
                    }
                } else {
                    out.push(char::from_u32(r).unwrap_or('\u{fffd}'));
                }
            }
            // `"`, `\`, `/` (and `'`, which the scanner never lets through).
            _ => out.push(char::from(e)),
        }
    }
    out
}

/// Appends `b` as UTF-8, each byte that is not part of a valid sequence as U+FFFD (Go's
/// `utf8.DecodeRune` answers `RuneError` with width 1 for each).
fn push_lossy(out: &mut String, b: &[u8]) {
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push('\u{fffd}');
        }
    }
}

/// decode.go, `getu4`: four hex digits.
fn hex4(s: &[u8]) -> Option<u32> {
    let h = s.get(..4)?;
    let h = std::str::from_utf8(h).ok()?;
    u32::from_str_radix(h, 16).ok()
}

/// The JSON kind of a value starting with `c` in Go's type errors (decode.go).
fn kind(op: Op, c: u8) -> &'static str {
    match (op, c) {
        (Op::BeginObject, _) => "object",
        (Op::BeginArray, _) => "array",
        (_, b'"') => "string",
        (_, b't' | b'f') => "bool",
        (_, b'n') => "null",
        _ => "number",
    }
}

impl<'a> StringFields<'a> {
    /// A decoder into a struct of Go type `go_type` (as `reflect.Type.String()` writes it,
    /// for the type error of a non-object) with string fields of the JSON names `names`
    /// (ASCII), keeping strings of up to `max_len` bytes.
    pub fn new(go_type: &'a str, names: &'a [&'a str], max_len: usize) -> Self {
        StringFields {
            go_type,
            names,
            max_len,
            reader: ValueReader::new(),
            values: vec![Field::Str(String::new()); names.len()],
            key_field: None,
            capture: None,
            type_err: None,
        }
    }

    /// Whether the first value is complete (or failed): the rest of the body is not needed.
    pub fn is_done(&self) -> bool {
        self.reader.is_done()
    }

    /// Reads `chunk`, up to the end of the first value; returns how many bytes it read.
    pub fn feed(&mut self, chunk: &[u8]) -> usize {
        for (i, &c) in chunk.iter().enumerate() {
            if self.reader.is_done() {
                return i;
            }
            let op = match self.reader.step(c) {
                Read::More(op) | Read::Done(op) => op,
                Read::DoneBefore => return i,
                Read::Failed => return i + 1,
            };
            self.on(op, c);
        }
        chunk.len()
    }

    /// The end of the body: the fields, or Go's error.
    pub fn finish(mut self) -> Result<Vec<Field>, DecodeError> {
        self.reader.finish()?;
        // A literal can end the body only at the top level, where nothing is captured.
        match self.type_err {
            Some(e) => Err(DecodeError::Type(e)),
            None => Ok(self.values),
        }
    }

    /// One byte `c` that the scanner read as `op`.
    fn on(&mut self, op: Op, c: u8) {
        if op == Op::Continue {
            if let Some(cap) = &mut self.capture {
                if cap.raw.len() < cap.limit {
                    cap.raw.push(c);
                } else {
                    cap.over = true;
                }
            }
            return;
        }
        if let Some(cap) = self.capture.take() {
            self.captured(cap);
        }
        let parse = self.reader.scanner().parse_state();
        let (depth, outer) = (parse.len(), parse.first().copied());
        match (op, depth, outer) {
            // The first value.
            (Op::BeginObject, 1, _) => {}
            (Op::BeginArray, 1, _) | (Op::BeginLiteral, 0, _) => {
                let k = kind(op, c);
                if k != "null" {
                    self.type_error(format!(
                        "json: cannot unmarshal {k} into Go value of type {}",
                        self.go_type
                    ));
                }
            }
            // A key of the first value.
            (Op::BeginLiteral, 1, Some(Parse::ObjectKey)) => {
                let longest = self.names.iter().map(|n| n.len()).max().unwrap_or(0);
                // `\uXXXX` is the longest spelling of a character of a name.
                self.start(None, c, 6 * longest + 2);
            }
            // A member's value: the first byte of a literal, or a nested object or array.
            (Op::BeginLiteral, 1, Some(Parse::ObjectValue))
            | (Op::BeginObject | Op::BeginArray, 2, Some(Parse::ObjectValue)) => {
                if let Some(f) = self.key_field {
                    match kind(op, c) {
                        // Each character of the value takes at most 6 bytes to write.
                        "string" => self.start(Some(f), c, 6 * self.max_len + 2),
                        "null" => {}
                        k => self.type_error(format!(
                            "json: cannot unmarshal {k} into Go struct field .{} of type string",
                            self.names[f]
                        )),
                    }
                }
            }
            _ => {}
        }
    }

    fn start(&mut self, field: Option<usize>, c: u8, limit: usize) {
        self.capture = Some(Capture {
            field,
            raw: vec![c],
            over: false,
            limit,
        });
    }

    /// A key or a field's string is complete.
    fn captured(&mut self, cap: Capture) {
        match cap.field {
            None => {
                self.key_field = None;
                if cap.over {
                    return;
                }
                let key = unquote(&cap.raw);
                self.key_field = self
                    .names
                    .iter()
                    .position(|n| *n == key)
                    .or_else(|| self.names.iter().position(|n| fold_matches(&key, n)));
            }
            Some(f) => {
                let v = (!cap.over)
                    .then(|| unquote(&cap.raw))
                    .filter(|v| v.len() <= self.max_len);
                self.values[f] = v.map_or(Field::TooLong, Field::Str);
            }
        }
    }

    /// Keeps the first type error (decode.go, `saveError`).
    fn type_error(&mut self, e: String) {
        self.type_err.get_or_insert(e);
    }
}

/// Decodes all of `body` with [`StringFields`].
pub fn decode_string_fields(
    body: &[u8],
    go_type: &str,
    names: &[&str],
    max_len: usize,
) -> Result<Vec<Field>, DecodeError> {
    let mut d = StringFields::new(go_type, names, max_len);
    d.feed(body);
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: &str =
        r#"struct { Topic string "json:\"topic\""; Channel string "json:\"channel\"" }"#;
    const NAMES: &[&str] = &["topic", "channel"];

    fn decode(body: &[u8]) -> Result<Vec<Field>, String> {
        decode_string_fields(body, TYPE, NAMES, 64).map_err(|e| e.to_string())
    }

    fn strs(v: &[&str]) -> Result<Vec<Field>, String> {
        Ok(v.iter().map(|s| Field::Str(s.to_string())).collect())
    }

    #[test]
    fn fields_are_set_by_their_keys() {
        assert_eq!(decode(br#"{"topic":"t","channel":"c"}"#), strs(&["t", "c"]));
        assert_eq!(
            decode(br#" {"channel" : "c" , "x":[1,{"topic":"no"}]}"#),
            strs(&["", "c"])
        );
        assert_eq!(decode(b"null"), strs(&["", ""]));
        assert_eq!(decode(br#"{"topic":null}"#), strs(&["", ""]));
        assert_eq!(decode(br#"{"topic":"a","topic":"b"}"#), strs(&["b", ""]));
        // Case-insensitive, the last key winning; the exact name is no better.
        assert_eq!(decode(br#"{"topic":"a","TOPIC":"b"}"#), strs(&["b", ""]));
        assert_eq!(decode(br#"{"Channel":"x"}"#), strs(&["", "x"]));
        assert_eq!(decode(br#"{"\u0074opic":"e"}"#), strs(&["e", ""]));
        assert_eq!(decode("{\"topİc\":\"i\"}".as_bytes()), strs(&["", ""]));
        // Trailing data is not read.
        assert_eq!(decode(br#"{"topic":"a"} {"topic":"b""#), strs(&["a", ""]));
    }

    #[test]
    fn keys_fold_as_in_go() {
        assert!(fold_matches("TopIC", "topic"));
        assert!(fold_matches("\u{212a}ey", "key"));
        assert!(fold_matches("\u{17f}et", "set"));
        assert!(!fold_matches("topİc", "topic"));
        assert!(!fold_matches("topı", "topi"));
        assert!(!fold_matches("topics", "topic"));
    }

    #[test]
    fn strings_are_unescaped_as_go_does() {
        assert_eq!(unquote(br#""a\"\\\/\b\f\n\r\t""#), "a\"\\/\u{8}\u{c}\n\r\t");
        assert_eq!(unquote(br#""\u00e9\ud83d\ude00""#), "é😀");
        assert_eq!(unquote(br#""\ud83dx""#), "\u{fffd}x");
        assert_eq!(unquote(br#""\ud83d\u0041""#), "\u{fffd}A");
        assert_eq!(unquote(br#""\ude00\ud83d\ude00""#), "\u{fffd}😀");
        assert_eq!(unquote(b"\"a\xe2\x82b\xff\""), "a\u{fffd}\u{fffd}b\u{fffd}");
        assert_eq!(unquote(b"\"\xed\xa0\x80\""), "\u{fffd}\u{fffd}\u{fffd}");
    }

    #[test]
    fn type_errors() {
        assert_eq!(
            decode(br#"{"topic":1}"#).unwrap_err(),
            "json: cannot unmarshal number into Go struct field .topic of type string"
        );
        assert_eq!(
            decode(br#"{"channel":{"a":1},"topic":true}"#).unwrap_err(),
            "json: cannot unmarshal object into Go struct field .channel of type string"
        );
        assert_eq!(
            decode(br#"{"TOPIC":[]}"#).unwrap_err(),
            "json: cannot unmarshal array into Go struct field .topic of type string"
        );
        assert_eq!(
            decode(br#"{"topic":false}"#).unwrap_err(),
            "json: cannot unmarshal bool into Go struct field .topic of type string"
        );
        assert_eq!(
            decode(b"[1]").unwrap_err(),
            format!("json: cannot unmarshal array into Go value of type {TYPE}")
        );
        assert_eq!(
            decode(b"\"x\"").unwrap_err(),
            format!("json: cannot unmarshal string into Go value of type {TYPE}")
        );
        assert_eq!(
            decode(b"12").unwrap_err(),
            format!("json: cannot unmarshal number into Go value of type {TYPE}")
        );
        // The whole value is scanned first: a later syntax error wins.
        assert_eq!(
            decode(br#"{"topic":1,}"#).unwrap_err(),
            "invalid character '}' looking for beginning of object key string"
        );
    }

    #[test]
    fn syntax_errors_and_eof() {
        assert_eq!(decode(b"").unwrap_err(), "EOF");
        assert_eq!(decode(br#"{"topic":"a""#).unwrap_err(), "unexpected EOF");
        assert_eq!(
            decode(b"{bad}").unwrap_err(),
            "invalid character 'b' looking for beginning of object key string"
        );
        assert_eq!(
            decode(b"{\"topic\":\"\x01\"}").unwrap_err(),
            r"invalid character '\x01' in string literal"
        );
    }

    #[test]
    fn long_strings_are_not_kept_and_the_body_is_read_in_pieces() {
        let mut body = br#"{"topic":""#.to_vec();
        body.extend_from_slice(&vec![b'a'; 3 << 20]);
        body.extend_from_slice(br#"","channel":"c"} rest"#);
        let mut d = StringFields::new(TYPE, NAMES, 64);
        let mut read = 0;
        for chunk in body.chunks(1000) {
            read += d.feed(chunk);
            if d.is_done() {
                break;
            }
        }
        assert_eq!(read, body.len() - 5);
        assert_eq!(d.finish(), Ok(vec![Field::TooLong, Field::Str("c".into())]));
        let at_limit = format!(r#"{{"topic":"{}"}}"#, "\\u0041".repeat(64));
        assert_eq!(
            decode(at_limit.as_bytes()).unwrap()[0].as_str(),
            Some("A".repeat(64).as_str())
        );
        let over = format!(r#"{{"topic":"{}"}}"#, "é".repeat(33));
        assert_eq!(decode(over.as_bytes()).unwrap()[0], Field::TooLong);
    }
}
