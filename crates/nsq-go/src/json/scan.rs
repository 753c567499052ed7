//! Go's JSON syntax checking, byte by byte, with Go's error texts (encoding/json/scanner.go,
//! the `scanner` state machine and `quoteChar`), and the first-value reading of
//! `json.NewDecoder(r).Decode(&v)` (encoding/json/stream.go, `Decoder.readValue`): the body's
//! first JSON value is read and checked, whatever follows it is not looked at, a body of
//! nothing but white space is `EOF` and one that ends inside a value is `unexpected EOF`.

use std::fmt;

/// What a byte did (encoding/json/scanner.go, the `scan*` opcodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// An uninteresting byte (inside a literal).
    Continue,
    /// The first byte of a string, number, `true`, `false` or `null`.
    BeginLiteral,
    /// `{`.
    BeginObject,
    /// The `:` after an object key.
    ObjectKey,
    /// The `,` after an object member.
    ObjectValue,
    /// `}`.
    EndObject,
    /// `[`.
    BeginArray,
    /// The `,` after an array element.
    ArrayValue,
    /// `]`.
    EndArray,
    /// White space between tokens.
    SkipSpace,
    /// The top-level value ended *before* this byte.
    End,
    /// A syntax error (see `Scanner::error`).
    Error,
}

/// What a composite value being scanned expects (scanner.go, `parseObjectKey` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// An object key (before the colon).
    ObjectKey,
    /// An object member's value (after the colon).
    ObjectValue,
    /// An array element.
    ArrayValue,
}

/// The scanner's state: scanner.go's `state*` functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    BeginValueOrEmpty,
    BeginValue,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    EndTop,
    InString,
    InStringEsc,
    /// After `\u` and this many hex digits (0 to 3).
    InStringEscU(u8),
    Neg,
    One,
    Zero,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    /// Inside `true`, `false` or `null`, expecting `word[at]`.
    Literal {
        word: &'static str,
        at: usize,
    },
    Error,
}

/// Nesting deeper than this is an error (scanner.go, `maxNestingDepth`).
pub const MAX_NESTING_DEPTH: usize = 10000;

/// Go's JSON scanner (encoding/json/scanner.go, `scanner`): feed bytes with [`Scanner::step`].
#[derive(Debug, Clone)]
pub struct Scanner {
    state: State,
    parse: Vec<Parse>,
    err: Option<String>,
}

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

/// scanner.go, `isSpace`.
pub fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: `c` as a quoted character in an error text. The byte is taken as the
/// code point of the same value (Go's `string(c)`), so `0xe9` is `'é'`; `'` and `"` are
/// special cased; everything else is `strconv.Quote`'s escaping (`'\x01'`, `'\\'`,
/// `'\u0080'`).
pub fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => {
            let q = crate::quote::go_quote(char::from(c).to_string().as_bytes());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

impl Scanner {
    /// A scanner at the beginning of the input (`reset`).
    pub fn new() -> Self {
        Scanner {
            state: State::BeginValue,
            parse: Vec::new(),
            err: None,
        }
    }

    /// The stack of composite values being scanned, outermost first.
    pub fn parse_state(&self) -> &[Parse] {
        &self.parse
    }

    /// The syntax error's text, once [`Op::Error`] was returned (also set, without an error
    /// being returned, for a non-space byte after a complete top-level value).
    pub fn err(&self) -> Option<&str> {
        self.err.as_deref()
    }

    /// Scans one byte.
    pub fn step(&mut self, c: u8) -> Op {
        match self.state {
            State::BeginValueOrEmpty => {
                if is_space(c) {
                    Op::SkipSpace
                } else if c == b']' {
                    self.end_value(c)
                } else {
                    self.begin_value(c)
                }
            }
            State::BeginValue => self.begin_value(c),
            State::BeginStringOrEmpty => {
                if is_space(c) {
                    Op::SkipSpace
                } else if c == b'}' {
                    if let Some(top) = self.parse.last_mut() {
                        *top = Parse::ObjectValue;
                    }
                    self.end_value(c)
                } else {
                    self.begin_string(c)
                }
            }
            State::BeginString => self.begin_string(c),
            State::EndValue => self.end_value(c),
            State::EndTop => self.end_top(c),
            State::InString => match c {
                b'"' => {
                    self.state = State::EndValue;
                    Op::Continue
                }
                b'\\' => {
                    self.state = State::InStringEsc;
                    Op::Continue
                }
                _ if c < 0x20 => self.error(c, "in string literal"),
                _ => Op::Continue,
            },
            State::InStringEsc => match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                    self.state = State::InString;
                    Op::Continue
                }
                b'u' => {
                    self.state = State::InStringEscU(0);
                    Op::Continue
                }
                _ => self.error(c, "in string escape code"),
            },
            State::InStringEscU(n) => {
                if c.is_ascii_hexdigit() {
                    self.state = if n == 3 {
                        State::InString
                    } else {
                        State::InStringEscU(n + 1)
                    };
                    Op::Continue
                } else {
                    self.error(c, "in \\u hexadecimal character escape")
                }
            }
            State::Neg => match c {
                b'0' => {
                    self.state = State::Zero;
                    Op::Continue
                }
                b'1'..=b'9' => {
                    self.state = State::One;
                    Op::Continue
                }
                _ => self.error(c, "in numeric literal"),
            },
            State::One => {
                if c.is_ascii_digit() {
                    Op::Continue
                } else {
                    self.zero(c)
                }
            }
            State::Zero => self.zero(c),
            State::Dot => {
                if c.is_ascii_digit() {
                    self.state = State::Dot0;
                    Op::Continue
                } else {
                    self.error(c, "after decimal point in numeric literal")
                }
            }
            State::Dot0 => match c {
                b'0'..=b'9' => Op::Continue,
                b'e' | b'E' => {
                    self.state = State::E;
                    Op::Continue
                }
                _ => self.end_value(c),
            },
            State::E => {
                if c == b'+' || c == b'-' {
                    self.state = State::ESign;
                    Op::Continue
                } else {
                    self.e_sign(c)
                }
            }
            State::ESign => self.e_sign(c),
            State::E0 => {
                if c.is_ascii_digit() {
                    Op::Continue
                } else {
                    self.end_value(c)
                }
            }
            State::Literal { word, at } => {
                let want = word.as_bytes()[at];
                if c != want {
                    let context = format!("in literal {word} (expecting '{}')", want as char);
                    return self.error(c, &context);
                }
                self.state = if at + 1 == word.len() {
                    State::EndValue
                } else {
                    State::Literal { word, at: at + 1 }
                };
                Op::Continue
            }
            State::Error => Op::Error,
        }
    }

    /// `stateBeginValue`.
    fn begin_value(&mut self, c: u8) -> Op {
        let (state, op) = match c {
            _ if is_space(c) => return Op::SkipSpace,
            b'{' => {
                self.state = State::BeginStringOrEmpty;
                return self.push(c, Parse::ObjectKey, Op::BeginObject);
            }
            b'[' => {
                self.state = State::BeginValueOrEmpty;
                return self.push(c, Parse::ArrayValue, Op::BeginArray);
            }
            b'"' => (State::InString, Op::BeginLiteral),
            b'-' => (State::Neg, Op::BeginLiteral),
            b'0' => (State::Zero, Op::BeginLiteral),
            b't' => (
                State::Literal {
                    word: "true",
                    at: 1,
                },
                Op::BeginLiteral,
            ),
            b'f' => (
                State::Literal {
                    word: "false",
                    at: 1,
                },
                Op::BeginLiteral,
            ),
            b'n' => (
                State::Literal {
                    word: "null",
                    at: 1,
                },
                Op::BeginLiteral,
            ),
            b'1'..=b'9' => (State::One, Op::BeginLiteral),
            _ => return self.error(c, "looking for beginning of value"),
        };
        self.state = state;
        op
    }

    /// `stateBeginString`.
    fn begin_string(&mut self, c: u8) -> Op {
        if is_space(c) {
            Op::SkipSpace
        } else if c == b'"' {
            self.state = State::InString;
            Op::BeginLiteral
        } else {
            self.error(c, "looking for beginning of object key string")
        }
    }

    /// `stateEndValue`: after a complete value.
    fn end_value(&mut self, c: u8) -> Op {
        let Some(&top) = self.parse.last() else {
            // Completed top-level before the current byte.
            self.state = State::EndTop;
            return self.end_top(c);
        };
        if is_space(c) {
            self.state = State::EndValue;
            return Op::SkipSpace;
        }
        match (top, c) {
            (Parse::ObjectKey, b':') => {
                *self.parse.last_mut().expect("not empty") = Parse::ObjectValue;
                self.state = State::BeginValue;
                Op::ObjectKey
            }
            (Parse::ObjectKey, _) => self.error(c, "after object key"),
            (Parse::ObjectValue, b',') => {
                *self.parse.last_mut().expect("not empty") = Parse::ObjectKey;
                self.state = State::BeginString;
                Op::ObjectValue
            }
            (Parse::ObjectValue, b'}') => {
                self.pop();
                Op::EndObject
            }
            (Parse::ObjectValue, _) => self.error(c, "after object key:value pair"),
            (Parse::ArrayValue, b',') => {
                self.state = State::BeginValue;
                Op::ArrayValue
            }
            (Parse::ArrayValue, b']') => {
                self.pop();
                Op::EndArray
            }
            (Parse::ArrayValue, _) => self.error(c, "after array element"),
        }
    }

    /// `stateEndTop`: only white space may follow; anything else is noted, not returned.
    fn end_top(&mut self, c: u8) -> Op {
        if !is_space(c) {
            self.error(c, "after top-level value");
        }
        Op::End
    }

    /// `state0`: after the integer part of a number.
    fn zero(&mut self, c: u8) -> Op {
        match c {
            b'.' => {
                self.state = State::Dot;
                Op::Continue
            }
            b'e' | b'E' => {
                self.state = State::E;
                Op::Continue
            }
            _ => self.end_value(c),
        }
    }

    /// `stateESign`.
    fn e_sign(&mut self, c: u8) -> Op {
        if c.is_ascii_digit() {
            self.state = State::E0;
            Op::Continue
        } else {
            self.error(c, "in exponent of numeric literal")
        }
    }

    /// `pushParseState`.
    fn push(&mut self, c: u8, p: Parse, success: Op) -> Op {
        self.parse.push(p);
        if self.parse.len() <= MAX_NESTING_DEPTH {
            success
        } else {
            self.error(c, "exceeded max depth")
        }
    }

    /// `popParseState`.
    fn pop(&mut self) {
        self.parse.pop();
        self.state = if self.parse.is_empty() {
            State::EndTop
        } else {
            State::EndValue
        };
    }

    /// `scanner.error`: `invalid character <quoteChar(c)> <context>`.
    fn error(&mut self, c: u8, context: &str) -> Op {
        self.state = State::Error;
        self.err = Some(format!("invalid character {} {context}", quote_char(c)));
        Op::Error
    }
}

/// Why `Decoder.Decode` failed, in Go's words (its `Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Nothing but white space before the end (`io.EOF`).
    Eof,
    /// The body ended inside the value (`io.ErrUnexpectedEOF`).
    UnexpectedEof,
    /// A `*json.SyntaxError`: `invalid character …`.
    Syntax(String),
    /// A `*json.UnmarshalTypeError`: `json: cannot unmarshal …`.
    Type(String),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Eof => f.write_str("EOF"),
            DecodeError::UnexpectedEof => f.write_str("unexpected EOF"),
            DecodeError::Syntax(s) | DecodeError::Type(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for DecodeError {}

/// What [`ValueReader::step`] made of a byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The value goes on: the byte is part of it (or white space before it).
    More(Op),
    /// The value ended with this byte (a closing `}` or `]` of the top level).
    Done(Op),
    /// The value ended before this byte (which is not read).
    DoneBefore,
    /// A syntax error at this byte.
    Failed,
}

/// `Decoder.readValue` (encoding/json/stream.go): the reading of the first value of a stream,
/// fed a byte at a time, then [`ValueReader::finish`].
#[derive(Debug, Clone, Default)]
pub struct ValueReader {
    scan: Scanner,
    /// A non-space byte was read (`nonSpace(dec.buf)`).
    non_space: bool,
    outcome: Option<Result<(), DecodeError>>,
}

impl ValueReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// The scanner (for its parse state).
    pub fn scanner(&self) -> &Scanner {
        &self.scan
    }

    /// Whether the value is complete or failed: feed no more.
    pub fn is_done(&self) -> bool {
        self.outcome.is_some()
    }

    /// Reads one byte of the stream.
    pub fn step(&mut self, c: u8) -> Read {
        debug_assert!(self.outcome.is_none(), "fed after the value ended");
        let op = self.scan.step(c);
        match op {
            Op::End => {
                self.outcome = Some(Ok(()));
                return Read::DoneBefore;
            }
            Op::Error => {
                let msg = self.scan.err().unwrap_or_default().to_string();
                self.outcome = Some(Err(DecodeError::Syntax(msg)));
                return Read::Failed;
            }
            _ => {}
        }
        self.non_space |= !is_space(c);
        if matches!(op, Op::EndObject | Op::EndArray) && self.scan.end_value(b' ') == Op::End {
            // scanEnd is delayed one byte; Go invents a space rather than wait for it.
            self.outcome = Some(Ok(()));
            return Read::Done(op);
        }
        Read::More(op)
    }

    /// The end of the stream (or the value's end, already seen): the value's outcome.
    pub fn finish(&mut self) -> Result<(), DecodeError> {
        if let Some(outcome) = &self.outcome {
            return outcome.clone();
        }
        let r = if self.scan.step(b' ') == Op::End {
            Ok(())
        } else if self.non_space {
            Err(DecodeError::UnexpectedEof)
        } else {
            Err(DecodeError::Eof)
        };
        self.outcome = Some(r.clone());
        r
    }
}

/// The syntax check of `json.NewDecoder(bytes.NewReader(body)).Decode(&v)`: the length of
/// the first JSON value of `body` (with the white space before it), or Go's error for it.
/// Bytes after a complete first value are not looked at.
pub fn first_value(body: &[u8]) -> Result<usize, DecodeError> {
    let mut r = ValueReader::new();
    for (i, &c) in body.iter().enumerate() {
        match r.step(c) {
            Read::More(_) => {}
            Read::Done(_) => return Ok(i + 1),
            Read::DoneBefore => return Ok(i),
            Read::Failed => return Err(r.finish().expect_err("failed")),
        }
    }
    r.finish().map(|()| body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> String {
        first_value(body.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn quoting_of_characters() {
        assert_eq!(quote_char(b'b'), "'b'");
        assert_eq!(quote_char(b'\''), r"'\''");
        assert_eq!(quote_char(b'"'), "'\"'");
        assert_eq!(quote_char(b'\\'), r"'\\'");
        assert_eq!(quote_char(0x01), r"'\x01'");
        assert_eq!(quote_char(b'\n'), r"'\n'");
        assert_eq!(quote_char(0x7f), r"'\x7f'");
        assert_eq!(quote_char(0xe9), "'é'");
        assert_eq!(quote_char(0x80), r"'\u0080'");
        assert_eq!(quote_char(0xa0), r"'\u00a0'");
    }

    #[test]
    fn complete_first_values() {
        assert_eq!(first_value(b"{}"), Ok(2));
        let b = b" \n{\"a\":[1,2.5e-3,true,null,\"x\\u00e9\",{},[]],\"b\":false}";
        assert_eq!(first_value(b), Ok(b.len()));
        // Whatever follows the first value is not read.
        assert_eq!(first_value(b"{\"topic\":\"a\"} trailing {bad"), Ok(13));
        assert_eq!(first_value(b"[1]]"), Ok(3));
        assert_eq!(first_value(b"nullx"), Ok(4));
        assert_eq!(first_value(b"12 34"), Ok(2));
        // `0` is a whole number: the `1` is after the value (Unmarshal would complain).
        assert_eq!(first_value(b"01"), Ok(1));
        // A number at the very end is complete.
        assert_eq!(first_value(b"-0.5E+7"), Ok(7));
        assert_eq!(first_value(b"\"\xff\xfe\""), Ok(4));
    }

    #[test]
    fn eof_and_unexpected_eof() {
        assert_eq!(err(""), "EOF");
        assert_eq!(err(" \t\r\n"), "EOF");
        assert_eq!(err("{\"topic\":\"a\""), "unexpected EOF");
        assert_eq!(err("\"abc"), "unexpected EOF");
        assert_eq!(err("{\"topic\":"), "unexpected EOF");
        assert_eq!(err("tru"), "unexpected EOF");
        assert_eq!(err("-"), "unexpected EOF");
        assert_eq!(err("1."), "unexpected EOF");
        assert_eq!(err("[1,"), "unexpected EOF");
    }

    #[test]
    fn syntax_errors_in_gos_words() {
        assert_eq!(
            err("{bad}"),
            "invalid character 'b' looking for beginning of object key string"
        );
        assert_eq!(
            err("{\"a\":1,}"),
            "invalid character '}' looking for beginning of object key string"
        );
        assert_eq!(
            err("{\"topic\" 1}"),
            "invalid character '1' after object key"
        );
        assert_eq!(
            err("{\"topic\":1 \"channel\":2}"),
            "invalid character '\"' after object key:value pair"
        );
        assert_eq!(err("[1 2]"), "invalid character '2' after array element");
        assert_eq!(
            err("[1,]"),
            "invalid character ']' looking for beginning of value"
        );
        assert_eq!(
            err("{\"topic\":}"),
            "invalid character '}' looking for beginning of value"
        );
        assert_eq!(
            err("'x'"),
            r"invalid character '\'' looking for beginning of value"
        );
        assert_eq!(
            err("{\"topic\":\"a\x01\"}"),
            r"invalid character '\x01' in string literal"
        );
        assert_eq!(err("\"a\tb\""), r"invalid character '\t' in string literal");
        assert_eq!(
            err("\"\\x\""),
            "invalid character 'x' in string escape code"
        );
        assert_eq!(
            err("\"\\u12g4\""),
            "invalid character 'g' in \\u hexadecimal character escape"
        );
        assert_eq!(err("-x"), "invalid character 'x' in numeric literal");
        assert_eq!(err("[-]"), "invalid character ']' in numeric literal");
        assert_eq!(
            err("1.e5"),
            "invalid character 'e' after decimal point in numeric literal"
        );
        assert_eq!(
            err("1e+x"),
            "invalid character 'x' in exponent of numeric literal"
        );
        assert_eq!(
            err("trUe"),
            "invalid character 'U' in literal true (expecting 'u')"
        );
        assert_eq!(
            err("tx"),
            "invalid character 'x' in literal true (expecting 'r')"
        );
        assert_eq!(
            err("fals}"),
            "invalid character '}' in literal false (expecting 'e')"
        );
        assert_eq!(
            err("notjson"),
            "invalid character 'o' in literal null (expecting 'u')"
        );
        assert_eq!(
            err("{é}"),
            "invalid character 'Ã' looking for beginning of object key string"
        );
        assert_eq!(
            err("\x00"),
            r"invalid character '\x00' looking for beginning of value"
        );
    }

    #[test]
    fn nesting_is_limited_as_in_go() {
        let ok = "[".repeat(MAX_NESTING_DEPTH) + &"]".repeat(MAX_NESTING_DEPTH);
        assert_eq!(first_value(ok.as_bytes()), Ok(ok.len()));
        let deep = "[".repeat(MAX_NESTING_DEPTH + 1);
        assert_eq!(err(&deep), "invalid character '[' exceeded max depth");
    }
}
