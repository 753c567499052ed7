//! Go's `strconv` and `fmt` number rules where they are visible to users: `ParseBool`,
//! `ParseInt(s, 0, 64)` (flags), `ParseFloat`, and `%v` of a float64.

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `*strconv.NumError` as text: `strconv.<func>: parsing "<text>": <why>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("strconv.{func}: parsing {quoted}: {why}")]
pub struct NumError {
    /// `ParseBool`, `ParseInt`, `Atoi`, …
    pub func: &'static str,
    /// The input, Go-quoted.
    pub quoted: String,
    /// `invalid syntax` or `value out of range`.
    pub why: &'static str,
}

impl NumError {
    pub fn new(func: &'static str, text: &str, why: &'static str) -> NumError {
        NumError {
            func,
            quoted: crate::quote::go_quote(text.as_bytes()),
            why,
        }
    }

    pub fn syntax(func: &'static str, text: &str) -> NumError {
        NumError::new(func, text, "invalid syntax")
    }

    pub fn range(func: &'static str, text: &str) -> NumError {
        NumError::new(func, text, "value out of range")
    }
}

/// Go's `strconv.Atoi` (base 10, optional sign), with its error.
pub fn atoi(s: &str) -> Result<i64, NumError> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(NumError::syntax("Atoi", s));
    }
    s.parse::<i64>().map_err(|_| NumError::range("Atoi", s))
}

/// Why [`parse_int`] failed (Go's `strconv.ErrSyntax` / `ErrRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntError {
    Syntax,
    Range,
}

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, `0x`/`0o`/`0b` prefixes, a leading `0`
/// for octal, `_` separators allowed only with a prefix (base 0 rules).
pub fn parse_int(s: &str) -> Result<i64, IntError> {
    if s.is_empty() {
        return Err(IntError::Syntax);
    }
    let s0 = s;
    let (neg, mut rest) = match s.as_bytes()[0] {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if rest.is_empty() {
        return Err(IntError::Syntax);
    }
    let mut base = 10u32;
    let b = rest.as_bytes();
    if b[0] == b'0' {
        let lower = b.get(1).map(|c| c.to_ascii_lowercase());
        if b.len() >= 3 && lower == Some(b'b') {
            base = 2;
            rest = &rest[2..];
        } else if b.len() >= 3 && lower == Some(b'o') {
            base = 8;
            rest = &rest[2..];
        } else if b.len() >= 3 && lower == Some(b'x') {
            base = 16;
            rest = &rest[2..];
        } else {
            base = 8;
            rest = &rest[1..];
        }
    }
    let mut n: u64 = 0;
    let mut underscores = false;
    for c in rest.chars() {
        if c == '_' {
            underscores = true;
            continue;
        }
        let d = c
            .to_digit(36)
            .filter(|&d| d < base)
            .ok_or(IntError::Syntax)?;
        n = n
            .checked_mul(u64::from(base))
            .and_then(|n| n.checked_add(u64::from(d)))
            .ok_or(IntError::Range)?;
    }
    if underscores && !underscore_ok(s0) {
        return Err(IntError::Syntax);
    }
    const CUTOFF: u64 = 1 << 63;
    if neg {
        if n > CUTOFF {
            return Err(IntError::Range);
        }
        Ok((n as i64).wrapping_neg())
    } else {
        i64::try_from(n).map_err(|_| IntError::Range)
    }
}

/// Go's `strconv.underscoreOK`: `_` only between digits or after a base prefix.
fn underscore_ok(s: &str) -> bool {
    let mut s = s.as_bytes();
    if let Some(b'+' | b'-') = s.first() {
        s = &s[1..];
    }
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    while i < s.len() {
        let c = s[i];
        i += 1;
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
            continue;
        }
        if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
            continue;
        }
        if saw == b'_' {
            return false;
        }
        saw = b'!';
    }
    saw != b'_'
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms that matter here (decimal, exponent,
/// `inf`/`nan`); Rust's parser accepts the same decimal grammar.
pub fn parse_float(s: &str) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    s.parse::<f64>().ok()
}

/// Go's `fmt` `%v` of a float64 (`strconv.FormatFloat(v, 'g', -1, 64)`): shortest digits,
/// exponent form when the exponent is < -4 or >= 6 (`1e+06`, `1.5e-05`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{:e}", v.abs()); // e.g. "1.5e-5", "1e6"
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let nd = digits.len() as i32;
    let out = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else if exp + 1 >= nd {
        format!("{digits}{}", "0".repeat((exp + 1 - nd) as usize))
    } else {
        let p = (exp + 1) as usize;
        format!("{}.{}", &digits[..p], &digits[p..])
    };
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_ints() {
        assert_eq!(parse_int("10"), Ok(10));
        assert_eq!(parse_int("010"), Ok(8));
        assert_eq!(parse_int("0"), Ok(0));
        assert_eq!(parse_int("-0x10"), Ok(-16));
        assert_eq!(parse_int("0o17"), Ok(15));
        assert_eq!(parse_int("0B101"), Ok(5));
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert_eq!(parse_int("1__0"), Err(IntError::Syntax));
        assert_eq!(parse_int("_1"), Err(IntError::Syntax));
        assert_eq!(parse_int("1_"), Err(IntError::Syntax));
        assert_eq!(parse_int("0x_1_0"), Ok(16));
        assert_eq!(parse_int("0x"), Err(IntError::Syntax));
        assert_eq!(parse_int("08"), Err(IntError::Syntax));
        assert_eq!(parse_int("+"), Err(IntError::Syntax));
        assert_eq!(parse_int("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_int("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse_int("9223372036854775808"), Err(IntError::Range));
    }

    #[test]
    fn go_float_format() {
        assert_eq!(format_float(1.5), "1.5");
        assert_eq!(format_float(0.0), "0");
        assert_eq!(format_float(2.0), "2");
        assert_eq!(format_float(-0.5), "-0.5");
        assert_eq!(format_float(123456.0), "123456");
        assert_eq!(format_float(1e6), "1e+06");
        assert_eq!(format_float(1234567.0), "1.234567e+06");
        assert_eq!(format_float(0.0001), "0.0001");
        assert_eq!(format_float(0.00001), "1e-05");
        assert_eq!(format_float(0.000015), "1.5e-05");
    }

    #[test]
    fn go_atoi() {
        assert_eq!(atoi("+7"), Ok(7));
        assert_eq!(
            atoi("abc").unwrap_err().to_string(),
            "strconv.Atoi: parsing \"abc\": invalid syntax"
        );
        assert_eq!(
            atoi("").unwrap_err().to_string(),
            "strconv.Atoi: parsing \"\": invalid syntax"
        );
        assert!(atoi("99999999999999999999")
            .unwrap_err()
            .to_string()
            .ends_with("value out of range"));
    }
}
