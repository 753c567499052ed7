//! Go `net/url` behaviour the reference's HTTP API depends on: `url.ParseQuery` (first value
//! wins, `;` and bad escapes are errors), request-path unescaping, path cleaning and escaping
//! for redirects, HTML escaping of redirect bodies, and the two integer/bool readings of query
//! values that nsqd's API uses.

use crate::quote::go_quote;

/// Why [`Query::parse`] failed; `Display` is Go's error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A `;` in a pair (Go 1.17+ no longer treats it as a separator).
    #[error("invalid semicolon separator in query")]
    Semicolon,
    /// A `%` not followed by two hex digits; holds the bad escape (up to 3 bytes).
    #[error("invalid URL escape {}", go_quote(.0.as_bytes()))]
    Escape(String),
}

/// A parsed query string: pairs in order; lookups return the first value (`url.Values.Get`
/// and `reqParams["k"][0]` both do).
#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Go's `url.ParseQuery`: `&`-separated pairs, a `;` anywhere in a pair or an invalid
    /// `%` escape is an error (the first one is reported), empty pairs are skipped (`&&`), a
    /// key without `=` has the value `""`, `+` decodes to a space.
    pub fn parse(raw: &str) -> Result<Query, QueryError> {
        let (q, failed) = Self::parse_inner(raw);
        match failed {
            Some(e) => Err(e),
            None => Ok(q),
        }
    }

    /// What `url.ParseQuery` returns alongside an error (the pairs that did parse), as
    /// `req.FormValue` uses it.
    pub fn parse_lenient(raw: &str) -> Query {
        Self::parse_inner(raw).0
    }

    fn parse_inner(raw: &str) -> (Query, Option<QueryError>) {
        let mut pairs = Vec::new();
        let mut failed = None;
        for pair in raw.split('&') {
            if pair.contains(';') {
                failed.get_or_insert(QueryError::Semicolon);
                continue;
            }
            if pair.is_empty() {
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match (unescape_checked(k, true), unescape_checked(v, true)) {
                (Ok(k), Ok(v)) => pairs.push((lossy(k), lossy(v))),
                (Err(e), _) | (_, Err(e)) => {
                    failed.get_or_insert(e);
                }
            }
        }
        (Query { pairs }, failed)
    }

    /// Every pair in the order given (repeated keys included).
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The first value of `key`, if the key is present at all.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn lossy(b: Vec<u8>) -> String {
    match String::from_utf8(b) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Go's `url.unescape`: `%XX` decoding (both digits required); `plus_is_space` for query
/// components. `None` on an invalid escape.
pub fn unescape(s: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    unescape_checked(s, plus_is_space).ok()
}

/// [`unescape`] that returns the offending escape (up to 3 bytes) on failure, as Go's
/// `EscapeError` holds it.
fn unescape_checked(s: &str, plus_is_space: bool) -> Result<Vec<u8>, QueryError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).copied().and_then(hex_val);
                let lo = b.get(i + 2).copied().and_then(hex_val);
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    let end = (i + 3).min(b.len());
                    let bad = String::from_utf8_lossy(&b[i..end]).into_owned();
                    return Err(QueryError::Escape(bad));
                };
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Go's `url.QueryEscape`: unreserved bytes stay, space becomes `+`, the rest `%XX`.
pub fn query_escape(s: &str) -> String {
    query_escape_bytes(s.as_bytes())
}

/// [`query_escape`] of any bytes, as Go's `QueryEscape(string(body))` of a message body.
pub fn query_escape_bytes(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(c as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{c:02X}")),
        }
    }
    out
}

/// The request path as Go's `URL.Path` holds it (unescaped); `None` when the escapes are
/// invalid (Go's server rejects the request with `400 Bad Request`).
pub fn decode_path(raw: &str) -> Option<String> {
    unescape(raw, false).map(lossy)
}

/// Go's `url.PathEscape`-style escaping of a path for `URL.String()` (`shouldEscape` in
/// `encodePath` mode): unreserved characters and `$&+,/:;=@` stay, the rest becomes `%XX`.
pub fn escape_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for &c in p.as_bytes() {
        let keep = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// httprouter's `CleanPath`: `path.Clean` that keeps a trailing slash and always starts with
/// `/` (a final `.` or `..` element also leaves a trailing slash).
pub fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return "/".to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    let mut trailing = p.ends_with('/');
    let elems: Vec<&str> = p.split('/').collect();
    let last = elems.len() - 1;
    for (i, e) in elems.iter().enumerate() {
        match *e {
            "" => {}
            "." => trailing |= i == last,
            ".." => {
                parts.pop();
                trailing |= i == last;
            }
            e => parts.push(e),
        }
    }
    let mut out = String::with_capacity(p.len() + 1);
    for e in &parts {
        out.push('/');
        out.push_str(e);
    }
    if out.is_empty() {
        return "/".to_string();
    }
    if trailing {
        out.push('/');
    }
    out
}

/// Go's `path.Clean` of a rooted path: `.` and empty elements dropped, `..` removes the one
/// before it (never above the root), `/` for nothing left.
pub fn clean_rooted(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for e in p.split('/') {
        match e {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            e => parts.push(e),
        }
    }
    if parts.is_empty() {
        return "/".to_string();
    }
    parts.iter().flat_map(|e| ["/", e]).collect()
}

/// Go's `path.Clean` as `http.Redirect` applies it to the target, keeping a trailing slash.
pub fn redirect_clean(p: &str) -> String {
    let mut out = clean_rooted(p);
    if p.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

/// Go's `html.EscapeString` subset used by `http.Redirect` (`htmlReplacer`).
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `/stats`' `boolParams`: only `true`/`1`/`false`/`0`; anything else means "default".
pub fn stats_bool(s: Option<&str>) -> bool {
    !matches!(s, Some("false" | "0"))
}

/// Go's `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits only.
pub fn parse_i64_base10(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_query_like_go() {
        let q = Query::parse("topic=h1&topic=h2&x&y=a+b%21").unwrap();
        assert_eq!(q.get("topic"), Some("h1"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(q.get("y"), Some("a b!"));
        assert_eq!(q.get("z"), None);
        assert!(Query::parse("topic=h1;x=1").is_err());
        assert!(Query::parse("topic=%zz").is_err());
        assert!(Query::parse("topic=%2").is_err());
        assert!(Query::parse("").unwrap().get("").is_none());
        assert_eq!(Query::parse("=x&&").unwrap().get(""), Some("x"));
        assert_eq!(
            Query::parse("x=%zz").unwrap_err().to_string(),
            "invalid URL escape \"%zz\""
        );
        assert_eq!(
            Query::parse("x=%2").unwrap_err().to_string(),
            "invalid URL escape \"%2\""
        );
        assert_eq!(
            Query::parse("a=1;b").unwrap_err().to_string(),
            "invalid semicolon separator in query"
        );
        assert_eq!(
            decode_path("/nodes/%5B%3A%3A1%5D%3A4151").unwrap(),
            "/nodes/[::1]:4151"
        );
    }

    #[test]
    fn clean_paths() {
        assert_eq!(clean_path("//ping"), "/ping");
        assert_eq!(clean_path("/a/../ping/"), "/ping/");
        assert_eq!(clean_path("/ping/."), "/ping/");
        assert_eq!(clean_path(""), "/");
        assert_eq!(clean_path("/.."), "/");
        assert_eq!(redirect_clean("/ping/"), "/ping/");
        assert_eq!(redirect_clean("//x/./y"), "/x/y");
    }

    #[test]
    fn ints_and_bools() {
        assert_eq!(parse_i64_base10("+5"), Some(5));
        assert_eq!(parse_i64_base10("-1"), Some(-1));
        assert_eq!(parse_i64_base10("1_0"), None);
        assert_eq!(parse_i64_base10("0x10"), None);
        assert_eq!(parse_i64_base10(""), None);
        assert_eq!(parse_i64_base10("99999999999999999999"), None);
        assert!(stats_bool(Some("yes")));
        assert!(!stats_bool(Some("0")));
    }

    #[test]
    fn escapes() {
        assert_eq!(query_escape("t#ephemeral a/b"), "t%23ephemeral+a%2Fb");
        assert_eq!(escape_path("/config/a b"), "/config/a%20b");
        assert_eq!(html_escape("/p?a=1&b=2"), "/p?a=1&amp;b=2");
    }
}
