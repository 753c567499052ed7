//! Fuzz target: nsqd's Go `net/url` emulation (crates/nsqd/src/http/query.rs) over arbitrary
//! text — the query parser behind every HTTP endpoint (Go's url.ParseQuery as
//! nsqd/http.go reads `reqParams`), path unescaping, httprouter's CleanPath and the redirect
//! helpers. Checks: no panic; a query that parses strictly parses the same leniently and every
//! parsed key is found by `get`; path escaping round-trips through unescaping; path cleaning is
//! idempotent and yields a rooted path without empty, `.` or `..` elements; HTML escaping
//! leaves no markup character.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nsqd::http::query::{
    clean_path, decode_path, escape_path, html_escape, parse_i64_base10, redirect_clean, unescape,
    Query,
};

fn check_clean(clean: &str, again: &str) {
    assert_eq!(clean, again, "cleaning is not idempotent");
    assert!(clean.starts_with('/'), "not rooted: {clean:?}");
    let inner = clean.trim_end_matches('/');
    for elem in inner.split('/').skip(1) {
        assert!(
            !elem.is_empty() && elem != "." && elem != "..",
            "element {elem:?} left in {clean:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let raw = raw.as_ref();

    if let Ok(q) = Query::parse(raw) {
        let lenient = Query::parse_lenient(raw);
        assert_eq!(format!("{q:?}"), format!("{lenient:?}"));
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            let key = unescape(key, true).expect("parsed, so the escapes are valid");
            let key = String::from_utf8_lossy(&key);
            assert!(q.get(&key).is_some(), "key {key:?} not found");
        }
    }

    let _ = decode_path(raw);
    let escaped = escape_path(raw);
    assert_eq!(
        unescape(&escaped, false).as_deref(),
        Some(raw.as_bytes()),
        "escape_path does not round-trip"
    );

    let clean = clean_path(raw);
    check_clean(&clean, &clean_path(&clean));
    let redirect = redirect_clean(raw);
    check_clean(&redirect, &redirect_clean(&redirect));

    let html = html_escape(raw);
    assert!(!html.contains(['<', '>', '"', '\'']));

    if let Some(n) = parse_i64_base10(raw) {
        assert_eq!(raw.trim_start_matches('+').parse::<i64>().ok(), Some(n));
    }
});
