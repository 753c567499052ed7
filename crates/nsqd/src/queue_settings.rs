//! The wire forms of the per-topic and per-channel queue settings
//! ([`nsq_core::queue_settings`]): a change as the HTTP API's query parameters
//! (`max_attempts=5&ttl=30s&…`, an empty value clears the key), the effective settings as the
//! API's JSON, and the settings as `nsqd.dat` keeps them beside a topic or channel (extra JSON
//! fields, which NSQ v1.3's `LoadMetadata` ignores; none at all when nothing is set, so the
//! file stays byte for byte what NSQ writes).

use nsq_core::queue_settings::{Key, Overflow, QueueSettings, Scope, SettingsError, Value};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map};

/// Query parameters that name the queue, not a setting.
const NAMING: [&str; 2] = ["topic", "channel"];

/// The keys whose behaviour is built: the API takes and lists only these, and `nsqd.dat`
/// keeps only these (a key arrives here with its behaviour, never before it). All of them now.
pub const BUILT: [Key; 7] = Key::ALL;

/// The API's message for an unknown key: `INVALID_KEY_<KEY>` when the key is a plain word,
/// else `INVALID_KEY`.
fn unknown_key(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        format!("INVALID_KEY_{}", name.to_ascii_uppercase())
    } else {
        "INVALID_KEY".to_string()
    }
}

/// One key's value from its text.
fn parse_value(key: Key, text: &str) -> Option<Value> {
    let uint = || text.parse::<u64>().ok();
    match key {
        Key::MaxAttempts => text.parse::<u16>().ok().map(Value::MaxAttempts),
        Key::DeadLetterTopic => Some(Value::DeadLetterTopic(text.to_string())),
        Key::Ttl => nsq_go::duration::parse(text).ok().map(Value::Ttl),
        Key::MaxDepth => uint().map(Value::MaxDepth),
        Key::MaxBytes => uint().map(Value::MaxBytes),
        Key::Overflow => Overflow::parse(text).map(Value::Overflow),
        Key::MemQueueSize => uint().map(Value::MemQueueSize),
    }
}

/// The changes a request's query parameters ask for, in order (`None` clears the key), or
/// the API's error message. `topic` and `channel` are skipped; every other parameter must be
/// a [`BUILT`] key the scope takes, with a value the key takes.
pub fn parse_changes(
    scope: Scope,
    params: &[(String, String)],
) -> Result<Vec<(Key, Option<Value>)>, String> {
    parse_any(scope, params, &BUILT)
}

/// [`parse_changes`] over the keys in `keys`.
fn parse_any(
    scope: Scope,
    params: &[(String, String)],
    keys: &[Key],
) -> Result<Vec<(Key, Option<Value>)>, String> {
    let mut out = Vec::new();
    for (name, text) in params {
        if NAMING.contains(&name.as_str()) {
            continue;
        }
        let key = Key::from_name(name)
            .filter(|k| keys.contains(k))
            .ok_or_else(|| unknown_key(name))?;
        if !key.applies_to(scope) {
            return Err(key.invalid().to_string());
        }
        if text.is_empty() {
            out.push((key, None));
            continue;
        }
        let value = parse_value(key, text)
            .filter(Value::is_valid)
            .ok_or_else(|| key.invalid().to_string())?;
        out.push((key, Some(value)));
    }
    Ok(out)
}

/// `current` with the changes of `params` applied, or the API's error message.
pub fn apply(
    current: &QueueSettings,
    scope: Scope,
    topic: &str,
    params: &[(String, String)],
) -> Result<QueueSettings, String> {
    let changes = parse_changes(scope, params)?;
    current
        .changed(scope, topic, &changes)
        .map_err(|e: SettingsError| e.to_string())
}

/// A value as JSON: numbers, a topic name, a Go duration (`"30s"`), `"refuse"`.
fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::MaxAttempts(n) => json!(n),
        Value::DeadLetterTopic(t) => json!(t),
        Value::Ttl(d) => json!(nsq_go::duration::format(*d)),
        Value::MaxDepth(n) | Value::MaxBytes(n) | Value::MemQueueSize(n) => json!(n),
        Value::Overflow(o) => json!(o.as_str()),
    }
}

/// The effective settings of a topic (`channel` None) or a channel as the API answers them:
/// every [`BUILT`] key the scope takes, `{"value": …, "source": "set" | "topic" | "default" |
/// "off"}` (`value` null when off).
pub fn effective_json(
    topic: &str,
    topic_own: &QueueSettings,
    channel: Option<&QueueSettings>,
    defaults: &QueueSettings,
) -> serde_json::Value {
    effective_json_of(topic, topic_own, channel, defaults, &BUILT)
}

fn effective_json_of(
    topic: &str,
    topic_own: &QueueSettings,
    channel: Option<&QueueSettings>,
    defaults: &QueueSettings,
    keys: &[Key],
) -> serde_json::Value {
    let mut m = Map::new();
    for (key, value, source) in
        nsq_core::queue_settings::effective_all(topic, topic_own, channel, defaults)
            .into_iter()
            .filter(|(k, _, _)| keys.contains(k))
    {
        m.insert(
            key.name().to_string(),
            json!({
                "value": value.as_ref().map_or(serde_json::Value::Null, value_json),
                "source": source.as_str(),
            }),
        );
    }
    serde_json::Value::Object(m)
}

/// The settings as `nsqd.dat` keeps them: only the keys that are set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    /// A Go duration (`"30s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_queue_size: Option<u64>,
}

impl SettingsMeta {
    /// `nsqd.dat`'s `skip_serializing_if`: a queue with no setting gets no field.
    pub fn is_empty(&self) -> bool {
        *self == SettingsMeta::default()
    }

    pub fn from_settings(s: &QueueSettings) -> SettingsMeta {
        SettingsMeta {
            max_attempts: s.max_attempts,
            dead_letter_topic: s.dead_letter_topic.clone(),
            ttl: s.ttl.map(nsq_go::duration::format),
            max_depth: s.max_depth,
            max_bytes: s.max_bytes,
            overflow: s.overflow.map(|o| o.as_str().to_string()),
            mem_queue_size: s.mem_queue_size,
        }
    }

    /// The settings of `scope` this holds; a value that does not parse, that the scope or key
    /// does not take (a file edited by hand) or of a key not [`BUILT`] is left out and named
    /// in the error list.
    pub fn to_settings(&self, scope: Scope) -> (QueueSettings, Vec<Key>) {
        self.to_settings_of(scope, &BUILT)
    }

    fn to_settings_of(&self, scope: Scope, keys: &[Key]) -> (QueueSettings, Vec<Key>) {
        let mut params = Vec::new();
        let text = |k: Key, v: String| (k.name().to_string(), v);
        if let Some(v) = self.max_attempts {
            params.push(text(Key::MaxAttempts, v.to_string()));
        }
        if let Some(v) = &self.dead_letter_topic {
            params.push(text(Key::DeadLetterTopic, v.clone()));
        }
        if let Some(v) = &self.ttl {
            params.push(text(Key::Ttl, v.clone()));
        }
        if let Some(v) = self.max_depth {
            params.push(text(Key::MaxDepth, v.to_string()));
        }
        if let Some(v) = self.max_bytes {
            params.push(text(Key::MaxBytes, v.to_string()));
        }
        if let Some(v) = &self.overflow {
            params.push(text(Key::Overflow, v.clone()));
        }
        if let Some(v) = self.mem_queue_size {
            params.push(text(Key::MemQueueSize, v.to_string()));
        }
        let mut out = QueueSettings::default();
        let mut bad = Vec::new();
        for p in params {
            let key = Key::from_name(&p.0).expect("a key's own name");
            // An empty stored value would read as "clear": it is a bad value here.
            let parsed = if p.1.is_empty() {
                Err(String::new())
            } else {
                parse_any(scope, std::slice::from_ref(&p), keys)
            };
            match parsed.map(|c| out.changed(scope, "", &c)) {
                Ok(Ok(next)) => out = next,
                _ => bad.push(key),
            }
        }
        (out, bad)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every key, built or not (the gate is tested on its own).
    fn parse_all(
        scope: Scope,
        params: &[(String, String)],
    ) -> Result<Vec<(Key, Option<Value>)>, String> {
        parse_any(scope, params, &Key::ALL)
    }

    fn apply_all(
        current: &QueueSettings,
        scope: Scope,
        topic: &str,
        params: &[(String, String)],
    ) -> Result<QueueSettings, String> {
        let changes = parse_all(scope, params)?;
        current
            .changed(scope, topic, &changes)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_is_built_and_unknown_ones_are_named() {
        assert_eq!(
            parse_changes(
                Scope::Topic,
                &q(&[
                    ("max_bytes", "100"),
                    ("overflow", "drop_oldest"),
                    ("mem_queue_size", "0")
                ])
            )
            .unwrap(),
            [
                (Key::MaxBytes, Some(Value::MaxBytes(100))),
                (Key::Overflow, Some(Value::Overflow(Overflow::DropOldest))),
                (Key::MemQueueSize, Some(Value::MemQueueSize(0))),
            ]
        );
        assert_eq!(
            parse_changes(Scope::Channel, &q(&[("max_size", "100")])).unwrap_err(),
            "INVALID_KEY_MAX_SIZE"
        );
        let json = effective_json(
            "t",
            &QueueSettings::default(),
            None,
            &QueueSettings::default(),
        );
        assert_eq!(
            json.to_string(),
            r#"{"max_bytes":{"source":"off","value":null},"max_depth":{"source":"off","value":null},"mem_queue_size":{"source":"off","value":null},"overflow":{"source":"off","value":null},"ttl":{"source":"off","value":null}}"#
        );
        let meta: SettingsMeta =
            serde_json::from_str(r#"{"max_bytes":100,"max_depth":3,"mem_queue_size":0}"#).unwrap();
        let (s, bad) = meta.to_settings(Scope::Topic);
        assert_eq!(
            (s.max_depth, s.max_bytes, s.mem_queue_size, bad),
            (Some(3), Some(100), Some(0), vec![])
        );
    }

    #[test]
    fn changes_from_a_query() {
        let got = parse_all(
            Scope::Channel,
            &q(&[
                ("topic", "t"),
                ("channel", "c"),
                ("max_attempts", "5"),
                ("dead_letter_topic", "t_dead"),
                ("ttl", "1m30s"),
                ("max_depth", "1000"),
                ("max_bytes", "1048576"),
                ("overflow", "drop_oldest"),
                ("mem_queue_size", "0"),
                ("ttl", ""),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            [
                (Key::MaxAttempts, Some(Value::MaxAttempts(5))),
                (
                    Key::DeadLetterTopic,
                    Some(Value::DeadLetterTopic("t_dead".into()))
                ),
                (Key::Ttl, Some(Value::Ttl(Duration::from_secs(90)))),
                (Key::MaxDepth, Some(Value::MaxDepth(1000))),
                (Key::MaxBytes, Some(Value::MaxBytes(1 << 20))),
                (Key::Overflow, Some(Value::Overflow(Overflow::DropOldest))),
                (Key::MemQueueSize, Some(Value::MemQueueSize(0))),
                (Key::Ttl, None),
            ]
        );
    }

    #[test]
    fn bad_input_is_named() {
        let bad = [
            (Scope::Channel, "max_attempts", "0", "INVALID_MAX_ATTEMPTS"),
            (
                Scope::Channel,
                "max_attempts",
                "70000",
                "INVALID_MAX_ATTEMPTS",
            ),
            (Scope::Channel, "max_attempts", "-1", "INVALID_MAX_ATTEMPTS"),
            (Scope::Topic, "max_attempts", "5", "INVALID_MAX_ATTEMPTS"),
            (
                Scope::Topic,
                "dead_letter_topic",
                "d",
                "INVALID_DEAD_LETTER_TOPIC",
            ),
            (
                Scope::Channel,
                "dead_letter_topic",
                "a b",
                "INVALID_DEAD_LETTER_TOPIC",
            ),
            (Scope::Topic, "ttl", "30", "INVALID_TTL"),
            (Scope::Topic, "ttl", "-1s", "INVALID_TTL"),
            (Scope::Topic, "ttl", "0s", "INVALID_TTL"),
            (Scope::Topic, "max_depth", "0", "INVALID_MAX_DEPTH"),
            (Scope::Topic, "max_depth", "1e3", "INVALID_MAX_DEPTH"),
            (Scope::Topic, "max_bytes", "1MB", "INVALID_MAX_BYTES"),
            (Scope::Topic, "overflow", "drop", "INVALID_OVERFLOW"),
            (
                Scope::Topic,
                "mem_queue_size",
                "-5",
                "INVALID_MEM_QUEUE_SIZE",
            ),
            (Scope::Topic, "max-depth", "5", "INVALID_KEY"),
            (Scope::Topic, "depth", "5", "INVALID_KEY_DEPTH"),
        ];
        for (scope, k, v, want) in bad {
            assert_eq!(
                parse_all(scope, &q(&[(k, v)])).unwrap_err(),
                want,
                "{k}={v}"
            );
        }
        // A channel's dead letters may not go to its own topic.
        assert_eq!(
            apply_all(
                &QueueSettings::default(),
                Scope::Channel,
                "orders",
                &q(&[("dead_letter_topic", "orders")])
            )
            .unwrap_err(),
            "INVALID_DEAD_LETTER_TOPIC"
        );
    }

    #[test]
    fn effective_settings_as_json() {
        let topic = apply_all(
            &QueueSettings::default(),
            Scope::Topic,
            "t",
            &q(&[("ttl", "30s"), ("max_depth", "5")]),
        )
        .unwrap();
        let defaults = QueueSettings {
            max_attempts: Some(10),
            ..Default::default()
        };
        let channel = QueueSettings::default();
        let got = effective_json_of("t", &topic, Some(&channel), &defaults, &Key::ALL);
        assert_eq!(
            got,
            json!({
                "max_attempts": {"source": "default", "value": 10},
                "dead_letter_topic": {"source": "off", "value": null},
                "ttl": {"source": "topic", "value": "30s"},
                "max_depth": {"source": "off", "value": null},
                "max_bytes": {"source": "off", "value": null},
                "overflow": {"source": "off", "value": null},
                "mem_queue_size": {"source": "off", "value": null},
            })
        );
        let got = effective_json_of("t", &topic, None, &defaults, &Key::ALL);
        assert_eq!(got["max_depth"], json!({"value": 5, "source": "set"}));
        assert!(got.get("max_attempts").is_none());
    }

    #[test]
    fn nsqd_dat_fields_round_trip_and_vanish_when_empty() {
        let empty = SettingsMeta::from_settings(&QueueSettings::default());
        assert!(empty.is_empty());
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
        let s = apply_all(
            &QueueSettings::default(),
            Scope::Channel,
            "t",
            &q(&[
                ("max_attempts", "3"),
                ("dead_letter_topic", "dead"),
                ("ttl", "1h"),
                ("overflow", "refuse"),
                ("max_depth", "7"),
            ]),
        )
        .unwrap();
        let meta = SettingsMeta::from_settings(&s);
        let text = serde_json::to_string(&meta).unwrap();
        assert_eq!(
            text,
            r#"{"max_attempts":3,"dead_letter_topic":"dead","ttl":"1h0m0s","max_depth":7,"overflow":"refuse"}"#
        );
        let back: SettingsMeta = serde_json::from_str(&text).unwrap();
        assert_eq!(back.to_settings_of(Scope::Channel, &Key::ALL), (s, vec![]));
        // A hand-edited file: bad values are left out and named; the rest is kept.
        let edited: SettingsMeta =
            serde_json::from_str(r#"{"max_attempts":0,"ttl":"soon","max_depth":9,"overflow":""}"#)
                .unwrap();
        let (got, bad) = edited.to_settings_of(Scope::Channel, &Key::ALL);
        assert_eq!(got.max_depth, Some(9));
        assert_eq!(got.max_attempts, None);
        assert_eq!(bad, [Key::MaxAttempts, Key::Ttl, Key::Overflow]);
        // A topic does not take a channel's keys.
        let (got, bad) = back.to_settings_of(Scope::Topic, &Key::ALL);
        assert_eq!(bad, [Key::MaxAttempts, Key::DeadLetterTopic]);
        assert_eq!(got.ttl, Some(Duration::from_secs(3600)));
    }
}
