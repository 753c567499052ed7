//! nsq_to_nsq's JSON mode (nsq's apps/nsq_to_nsq/nsq_to_nsq.go, `PublishHandler.HandleMessage`,
//! `shouldPassMessage` and `filterMessage`). Active when `--require-json-field` or any
//! `--whitelist-json-field` is given:
//!
//! * the body is decoded as Go's `json.Unmarshal` into a `map[string]interface{}` would: an
//!   object (or `null`, which Go accepts as an empty map); anything else is dropped (FIN) with
//!   `ERROR: Unable to decode json: <body>`;
//! * a missing required field drops the message, or, when a required value is also given,
//!   fails the handler (REQ with backoff) after `ERROR: missing field to check required value`;
//! * a required value matches a JSON string equal to it, or, when the flag text parses as a
//!   float, a JSON number equal to it; anything else drops the message;
//! * whitelisting re-encodes the object with only the listed fields that exist, as Go's
//!   `json.Marshal` of a map writes it: keys sorted, compact, Go's string escapes, numbers as
//!   float64 (integral top-level values as integers).

use bytes::Bytes;
use serde_json::{Map, Number, Value};

use crate::golog::log;

/// What to do with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Publish this body.
    Pass(Bytes),
    /// FIN without publishing (the handler returned nil).
    Drop,
    /// REQ with backoff (the handler returned an error).
    Backoff,
}

/// The JSON requirements and whitelist of one nsq_to_nsq run.
#[derive(Debug, Clone, Default)]
pub struct JsonFilter {
    require_field: String,
    require_value: String,
    /// `strconv.ParseFloat(require_value)` when it succeeds.
    require_number: Option<f64>,
    whitelist: Vec<String>,
}

impl JsonFilter {
    pub fn new(require_field: &str, require_value: &str, whitelist: &[String]) -> JsonFilter {
        JsonFilter {
            require_field: require_field.to_string(),
            require_value: require_value.to_string(),
            require_number: parse_go_float(require_value),
            whitelist: whitelist.to_vec(),
        }
    }

    /// Whether messages are decoded at all; otherwise every body passes unchanged.
    pub fn is_active(&self) -> bool {
        !self.require_field.is_empty() || !self.whitelist.is_empty()
    }

    /// The verdict for `body` (logging as the reference does).
    pub fn apply(&self, body: &Bytes) -> Verdict {
        if !self.is_active() {
            return Verdict::Pass(body.clone());
        }
        let Some(object) = decode_object(body) else {
            log(&format!(
                "ERROR: Unable to decode json: {}",
                String::from_utf8_lossy(body)
            ));
            return Verdict::Drop;
        };
        match self.should_pass(&object) {
            Pass::Yes => {}
            Pass::No => return Verdict::Drop,
            Pass::Backoff => {
                log("ERROR: missing field to check required value");
                return Verdict::Backoff;
            }
        }
        if self.whitelist.is_empty() {
            return Verdict::Pass(body.clone());
        }
        Verdict::Pass(Bytes::from(self.whitelisted(&object)))
    }

    fn should_pass(&self, object: &Map<String, Value>) -> Pass {
        if self.require_field.is_empty() {
            return Pass::Yes;
        }
        let Some(v) = object.get(&self.require_field) else {
            return if self.require_value.is_empty() {
                Pass::No
            } else {
                Pass::Backoff
            };
        };
        if self.require_value.is_empty() {
            return Pass::Yes;
        }
        let matches = match (v, self.require_number) {
            (Value::String(s), _) => *s == self.require_value,
            (Value::Number(n), Some(want)) => n.as_f64() == Some(want),
            _ => false,
        };
        if matches {
            Pass::Yes
        } else {
            Pass::No
        }
    }

    /// `filterMessage`: the listed fields that exist, in a new object.
    fn whitelisted(&self, object: &Map<String, Value>) -> Vec<u8> {
        let mut out = Map::new();
        for key in &self.whitelist {
            if let Some(v) = object.get(key) {
                out.insert(key.clone(), top_level(v));
            }
        }
        nsq_go::json::to_vec(&Value::Object(out))
    }
}

enum Pass {
    Yes,
    No,
    Backoff,
}

/// `json.Unmarshal(body, &map[string]interface{})`: an object, or `null` (a nil map). Numbers
/// become float64, as in Go. Invalid UTF-8 inside strings is replaced by U+FFFD, as Go's
/// decoder does, instead of failing.
fn decode_object(body: &[u8]) -> Option<Map<String, Value>> {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) if std::str::from_utf8(body).is_err() => {
            serde_json::from_str(&String::from_utf8_lossy(body)).ok()?
        }
        Err(_) => return None,
    };
    match v {
        Value::Object(m) => Some(as_go_values(m)),
        Value::Null => Some(Map::new()),
        _ => None,
    }
}

/// Every number as a float64, the only number type `interface{}` decoding produces.
fn as_go_values(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter().map(|(k, v)| (k, go_value(v))).collect()
}

fn go_value(v: Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.into_iter().map(go_value).collect()),
        Value::Object(m) => Value::Object(as_go_values(m)),
        other => other,
    }
}

/// filterMessage's "avoid printing int as float": a float64 with an integral value that fits
/// an int64 is written as that integer (so `-0` becomes `0`); nested values stay float64.
fn top_level(v: &Value) -> Value {
    if let Value::Number(n) = v {
        if let Some(f) = n.as_f64() {
            // i64::MIN..=i64::MAX as floats: [-2^63, 2^63).
            if f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
            {
                return Value::Number(Number::from(f as i64));
            }
        }
    }
    v.clone()
}

/// Go's `strconv.ParseFloat(s, 64)` succeeding: an out-of-range finite text (`1e400`) is an
/// error there, not an infinity.
fn parse_go_float(s: &str) -> Option<f64> {
    let f = nsq_go::strconv::parse_float(s)?;
    if f.is_infinite() && !s.to_ascii_lowercase().contains("inf") {
        return None;
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(field: &str, value: &str, whitelist: &[&str]) -> JsonFilter {
        let w: Vec<String> = whitelist.iter().map(|s| s.to_string()).collect();
        JsonFilter::new(field, value, &w)
    }

    fn apply(f: &JsonFilter, body: &str) -> Verdict {
        f.apply(&Bytes::copy_from_slice(body.as_bytes()))
    }

    fn pass(body: &str) -> Verdict {
        Verdict::Pass(Bytes::copy_from_slice(body.as_bytes()))
    }

    #[test]
    fn inactive_passes_anything_unchanged() {
        let f = filter("", "x", &[]);
        assert!(!f.is_active());
        assert_eq!(apply(&f, "not json"), pass("not json"));
    }

    #[test]
    fn undecodable_or_non_object_is_dropped() {
        let f = filter("a", "", &[]);
        for body in [
            "not json",
            "[1]",
            "\"s\"",
            "1",
            "{\"a\":1",
            "{\"a\":1} x",
            "",
        ] {
            assert_eq!(apply(&f, body), Verdict::Drop, "{body}");
        }
        // `null` decodes into a nil map: the field is missing.
        assert_eq!(apply(&f, "null"), Verdict::Drop);
        assert_eq!(apply(&filter("", "", &["a"]), "null"), pass("{}"));
    }

    #[test]
    fn required_field() {
        let f = filter("a", "", &[]);
        assert_eq!(apply(&f, r#"{"a":null}"#), pass(r#"{"a":null}"#));
        assert_eq!(
            apply(&f, r#" {"b":1, "a" : [1]} "#),
            pass(r#" {"b":1, "a" : [1]} "#)
        );
        assert_eq!(apply(&f, r#"{"b":1}"#), Verdict::Drop);
        // A missing field with a required value fails the handler.
        assert_eq!(
            apply(&filter("a", "x", &[]), r#"{"b":1}"#),
            Verdict::Backoff
        );
    }

    #[test]
    fn required_value_string_and_number() {
        let s = filter("a", "x", &[]);
        assert_eq!(apply(&s, r#"{"a":"x"}"#), pass(r#"{"a":"x"}"#));
        assert_eq!(apply(&s, r#"{"a":"y"}"#), Verdict::Drop);
        assert_eq!(apply(&s, r#"{"a":1}"#), Verdict::Drop);
        assert_eq!(apply(&s, r#"{"a":true}"#), Verdict::Drop);
        let n = filter("a", "5", &[]);
        assert_eq!(apply(&n, r#"{"a":5}"#), pass(r#"{"a":5}"#));
        assert_eq!(apply(&n, r#"{"a":5.0}"#), pass(r#"{"a":5.0}"#));
        assert_eq!(apply(&n, r#"{"a":5e0}"#), pass(r#"{"a":5e0}"#));
        assert_eq!(apply(&n, r#"{"a":"5"}"#), pass(r#"{"a":"5"}"#));
        assert_eq!(apply(&n, r#"{"a":"5.0"}"#), Verdict::Drop);
        assert_eq!(apply(&n, r#"{"a":6}"#), Verdict::Drop);
        assert_eq!(apply(&n, r#"{"a":[5]}"#), Verdict::Drop);
        let t = filter("a", "true", &[]);
        assert_eq!(apply(&t, r#"{"a":true}"#), Verdict::Drop);
    }

    #[test]
    fn whitelist_sorted_compact_go_encoding() {
        let f = filter(
            "",
            "",
            &["z", "a", "n", "f", "missing", "s", "o", "big", "neg0"],
        );
        let body = r#"{ "a" : 1.0, "z": "<&>", "x": 1, "n": [1.0, 2.5, 1e21],
            "f": 2.5, "s": "é\u2028", "o": {"b": 2, "a": 1e-7}, "big": 1e20, "neg0": -0.0 }"#;
        assert_eq!(
            apply(&f, body),
            pass(
                r#"{"a":1,"big":100000000000000000000,"f":2.5,"n":[1,2.5,1e+21],"neg0":0,"o":{"a":1e-7,"b":2},"s":"é\u2028","z":"\u003c\u0026\u003e"}"#
            )
        );
        // With a requirement, the whitelist applies to the passing messages.
        let f = filter("k", "v", &["id"]);
        assert_eq!(apply(&f, r#"{"k":"v","id":7,"x":1}"#), pass(r#"{"id":7}"#));
        assert_eq!(apply(&f, r#"{"k":"w","id":7}"#), Verdict::Drop);
        // Duplicate keys: the last one wins, as in Go.
        assert_eq!(
            apply(&filter("", "", &["a"]), r#"{"a":1,"a":2}"#),
            pass(r#"{"a":2}"#)
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_not_rejected() {
        let f = filter("", "", &["a"]);
        let body = Bytes::from_static(b"{\"a\":\"x\xffy\"}");
        assert_eq!(f.apply(&body), pass("{\"a\":\"x\u{fffd}y\"}"));
    }

    #[test]
    fn go_parse_float() {
        assert_eq!(parse_go_float("5"), Some(5.0));
        assert_eq!(parse_go_float("1e400"), None);
        assert_eq!(parse_go_float("x"), None);
        assert_eq!(parse_go_float(""), None);
        assert!(parse_go_float("-Inf").is_some_and(|f| f.is_infinite()));
    }
}
