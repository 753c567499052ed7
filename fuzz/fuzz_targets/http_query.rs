//! Fuzz target: the Go `net/url` emulation behind the HTTP APIs (crates/nsq-go/src/url.rs)
//! over arbitrary text — the query parser every endpoint uses (Go's url.ParseQuery as
//! nsqd/http.go reads `reqParams`), path unescaping, httprouter's CleanPath and the redirect
//! helpers. Checks: no panic; a query that parses strictly parses the same leniently, and
//! `get` finds for every key the first value the `form_urlencoded` crate parses; path escaping round-trips through unescaping; path cleaning is
//! idempotent and yields a rooted path without empty, `.` or `..` elements; HTML escaping
//! leaves no markup character.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nsq_go::url::{
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
        // Differential: on input Go accepts (no `;`, valid escapes), the first value of every
        // key is what the WHATWG form-urlencoded parser (the `url` crate's) finds.
        let mut first = std::collections::HashMap::new();
        for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
            first.entry(k).or_insert(v);
        }
        for (k, v) in &first {
            assert_eq!(q.get(k), Some(v.as_ref()), "value of key {k:?}");
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
