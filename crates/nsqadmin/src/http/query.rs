//! Go `net/url` behaviour the API depends on: `url.ParseQuery` with its error text
//! (`invalid URL escape "%zz"`), request-path unescaping, path cleaning and escaping for
//! redirects. (Minimal versions of nsqd's `pub(crate)` `http::query` helpers.)

use nsq_protocol::quote::go_quote;

pub use nsqd::http::query::{clean_path, decode_path, escape_path, html_escape};

/// A parsed query string; lookups return the first value.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Go's `url.ParseQuery`; the error is Go's text.
    pub fn parse(raw: &str) -> Result<Query, String> {
        let mut pairs = Vec::new();
        let mut first_err = None;
        for pair in raw.split('&') {
            if pair.is_empty() {
                continue;
            }
            if pair.contains(';') {
                first_err.get_or_insert_with(|| "invalid semicolon separator in query".to_string());
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match (unescape_query(k), unescape_query(v)) {
                (Ok(k), Ok(v)) => pairs.push((k, v)),
                (Err(e), _) | (_, Err(e)) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(Query { pairs }),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
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

/// `%XX` decoding; `Err` carries the offending escape (up to 3 bytes).
fn unescape(s: &str, plus_is_space: bool) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).copied().and_then(hex_val);
                let lo = b.get(i + 2).copied().and_then(hex_val);
                match (hi, lo) {
                    (Some(h), Some(l)) => out.push(h << 4 | l),
                    _ => {
                        let end = (i + 3).min(b.len());
                        return Err(String::from_utf8_lossy(&b[i..end]).into_owned());
                    }
                }
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

fn unescape_query(s: &str) -> Result<String, String> {
    unescape(s, true)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|bad| format!("invalid URL escape {}", go_quote(bad.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let q = Query::parse("a=1&a=2&b&c=x+y%21").unwrap();
        assert_eq!(q.get("a"), Some("1"));
        assert_eq!(q.get("b"), Some(""));
        assert_eq!(q.get("c"), Some("x y!"));
        assert_eq!(
            Query::parse("x=%zz").unwrap_err(),
            "invalid URL escape \"%zz\""
        );
        assert_eq!(
            Query::parse("x=%2").unwrap_err(),
            "invalid URL escape \"%2\""
        );
        assert_eq!(clean_path("//a/./b/"), "/a/b/");
        assert_eq!(
            decode_path("/nodes/%5B%3A%3A1%5D%3A4151").unwrap(),
            "/nodes/[::1]:4151"
        );
    }
}
