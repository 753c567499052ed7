//! Per-topic and per-channel queue settings: a dead-letter policy (`max_attempts`,
//! `dead_letter_topic`), a message TTL, bounds on a queue (`max_depth`, `max_bytes`, with
//! `overflow` saying what happens at the bound) and the memory queue's size.
//!
//! NSQ v1.3 has none of these: a message is redelivered until a client gives up on it
//! (nsqd/channel.go, `RequeueMessage`, counts attempts only to report them), it never
//! expires, a queue grows until the disk is full, and `--mem-queue-size` is one value for
//! the whole node (nsqd/options.go). Every key here is opt-in: with none set, nothing changes.
//!
//! This module is sans-I/O: the typed values, which keys a topic or a channel takes, the
//! checks on a value, and how a channel's effective value is found (its own, else its
//! topic's for the keys a topic passes down, else the node's default, else off). The wire
//! forms — the HTTP API's query strings and JSON, `nsqd.dat`'s fields — are nsqd's.

use std::fmt;
use std::time::Duration;

use nsq_protocol::names::is_valid_topic_name;

/// Where a setting is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Topic,
    Channel,
}

/// What a queue does when a publish would pass its `max_depth` or `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// The publish fails (back-pressure: `E_PUB_FAILED … is full`, HTTP 503 `FULL`).
    #[default]
    Refuse,
    /// The queue's oldest queued messages are dropped (counted) to make room.
    DropOldest,
}

impl Overflow {
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Refuse => "refuse",
            Overflow::DropOldest => "drop_oldest",
        }
    }

    pub fn parse(s: &str) -> Option<Overflow> {
        match s {
            "refuse" => Some(Overflow::Refuse),
            "drop_oldest" => Some(Overflow::DropOldest),
            _ => None,
        }
    }
}

/// A settings key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    MaxAttempts,
    DeadLetterTopic,
    Ttl,
    MaxDepth,
    MaxBytes,
    Overflow,
    MemQueueSize,
}

impl Key {
    /// Every key, in the order the API lists them.
    pub const ALL: [Key; 7] = [
        Key::MaxAttempts,
        Key::DeadLetterTopic,
        Key::Ttl,
        Key::MaxDepth,
        Key::MaxBytes,
        Key::Overflow,
        Key::MemQueueSize,
    ];

    /// The key's name on the wire (query strings, JSON, `nsqd.dat`).
    pub fn name(self) -> &'static str {
        match self {
            Key::MaxAttempts => "max_attempts",
            Key::DeadLetterTopic => "dead_letter_topic",
            Key::Ttl => "ttl",
            Key::MaxDepth => "max_depth",
            Key::MaxBytes => "max_bytes",
            Key::Overflow => "overflow",
            Key::MemQueueSize => "mem_queue_size",
        }
    }

    pub fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The API's error message for a bad value of this key (NSQ's API error style:
    /// `{"message":"INVALID_TTL"}`).
    pub fn invalid(self) -> &'static str {
        match self {
            Key::MaxAttempts => "INVALID_MAX_ATTEMPTS",
            Key::DeadLetterTopic => "INVALID_DEAD_LETTER_TOPIC",
            Key::Ttl => "INVALID_TTL",
            Key::MaxDepth => "INVALID_MAX_DEPTH",
            Key::MaxBytes => "INVALID_MAX_BYTES",
            Key::Overflow => "INVALID_OVERFLOW",
            Key::MemQueueSize => "INVALID_MEM_QUEUE_SIZE",
        }
    }

    /// Whether a topic or a channel takes this key. Attempts are counted per channel
    /// (a message is delivered on each channel separately), so the dead-letter policy is a
    /// channel's; the rest applies to either queue.
    pub fn applies_to(self, scope: Scope) -> bool {
        match self {
            Key::MaxAttempts | Key::DeadLetterTopic => scope == Scope::Channel,
            _ => true,
        }
    }

    /// Whether a channel without its own value takes its topic's. Only the TTL: a message's
    /// age does not depend on which queue holds it, while a bound or a memory queue's size
    /// is a property of one queue (a topic's `max_depth` bounds the topic's own queue).
    pub fn passed_down(self) -> bool {
        self == Key::Ttl
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One key's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    MaxAttempts(u16),
    DeadLetterTopic(String),
    Ttl(Duration),
    MaxDepth(u64),
    MaxBytes(u64),
    Overflow(Overflow),
    MemQueueSize(u64),
}

impl Value {
    pub fn key(&self) -> Key {
        match self {
            Value::MaxAttempts(_) => Key::MaxAttempts,
            Value::DeadLetterTopic(_) => Key::DeadLetterTopic,
            Value::Ttl(_) => Key::Ttl,
            Value::MaxDepth(_) => Key::MaxDepth,
            Value::MaxBytes(_) => Key::MaxBytes,
            Value::Overflow(_) => Key::Overflow,
            Value::MemQueueSize(_) => Key::MemQueueSize,
        }
    }

    /// Whether the value is one the key takes: attempts, TTL and bounds above zero (zero
    /// would refuse or expire everything; "off" is the absence of a value), a dead-letter
    /// topic with a valid name. A memory queue of 0 is valid (everything on disk, as
    /// `--mem-queue-size=0`).
    pub fn is_valid(&self) -> bool {
        match self {
            Value::MaxAttempts(n) => *n > 0,
            Value::DeadLetterTopic(t) => is_valid_topic_name(t),
            Value::Ttl(d) => !d.is_zero(),
            Value::MaxDepth(n) | Value::MaxBytes(n) => *n > 0,
            Value::Overflow(_) | Value::MemQueueSize(_) => true,
        }
    }
}

impl Value {
    /// The value as the link carries it ([`QueueSettings::to_pairs`]).
    fn link_text(&self) -> String {
        match self {
            Value::MaxAttempts(n) => n.to_string(),
            Value::DeadLetterTopic(t) => t.clone(),
            Value::Ttl(d) => d.as_nanos().to_string(),
            Value::MaxDepth(n) | Value::MaxBytes(n) | Value::MemQueueSize(n) => n.to_string(),
            Value::Overflow(o) => o.as_str().to_string(),
        }
    }

    /// The value of `key` from its link text; `None` when it does not parse (validity is
    /// checked by [`QueueSettings::changed`]).
    fn from_link_text(key: Key, text: &str) -> Option<Value> {
        Some(match key {
            Key::MaxAttempts => Value::MaxAttempts(text.parse().ok()?),
            Key::DeadLetterTopic => Value::DeadLetterTopic(text.to_string()),
            Key::Ttl => Value::Ttl(Duration::from_nanos(text.parse().ok()?)),
            Key::MaxDepth => Value::MaxDepth(text.parse().ok()?),
            Key::MaxBytes => Value::MaxBytes(text.parse().ok()?),
            Key::Overflow => Value::Overflow(Overflow::parse(text)?),
            Key::MemQueueSize => Value::MemQueueSize(text.parse().ok()?),
        })
    }
}

/// Why a change was refused; its message is the API's (`INVALID_TTL`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A value the key does not take, or a key the scope does not take.
    #[error("{}", .0.invalid())]
    Invalid(Key),
    /// A channel's dead-letter topic is its own topic: a dead letter would come back to the
    /// channel that gave up on it.
    #[error("INVALID_DEAD_LETTER_TOPIC")]
    DeadLetterLoop,
}

/// The settings of one topic or channel, or the node's defaults: each key set or not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSettings {
    pub max_attempts: Option<u16>,
    pub dead_letter_topic: Option<String>,
    pub ttl: Option<Duration>,
    pub max_depth: Option<u64>,
    pub max_bytes: Option<u64>,
    pub overflow: Option<Overflow>,
    pub mem_queue_size: Option<u64>,
}

/// Where an effective value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Set on this topic or channel.
    Set,
    /// A channel's value from its topic ([`Key::passed_down`]).
    Topic,
    /// The node's default (a flag or the config file).
    Default,
    /// Not set anywhere.
    Off,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Set => "set",
            Source::Topic => "topic",
            Source::Default => "default",
            Source::Off => "off",
        }
    }
}

impl QueueSettings {
    /// No key set (what `nsqd.dat` then leaves out, so the file stays NSQ's).
    pub fn is_empty(&self) -> bool {
        *self == QueueSettings::default()
    }

    pub fn get(&self, key: Key) -> Option<Value> {
        match key {
            Key::MaxAttempts => self.max_attempts.map(Value::MaxAttempts),
            Key::DeadLetterTopic => self.dead_letter_topic.clone().map(Value::DeadLetterTopic),
            Key::Ttl => self.ttl.map(Value::Ttl),
            Key::MaxDepth => self.max_depth.map(Value::MaxDepth),
            Key::MaxBytes => self.max_bytes.map(Value::MaxBytes),
            Key::Overflow => self.overflow.map(Value::Overflow),
            Key::MemQueueSize => self.mem_queue_size.map(Value::MemQueueSize),
        }
    }

    fn clear(&mut self, key: Key) {
        match key {
            Key::MaxAttempts => self.max_attempts = None,
            Key::DeadLetterTopic => self.dead_letter_topic = None,
            Key::Ttl => self.ttl = None,
            Key::MaxDepth => self.max_depth = None,
            Key::MaxBytes => self.max_bytes = None,
            Key::Overflow => self.overflow = None,
            Key::MemQueueSize => self.mem_queue_size = None,
        }
    }

    fn put(&mut self, value: Value) {
        match value {
            Value::MaxAttempts(v) => self.max_attempts = Some(v),
            Value::DeadLetterTopic(v) => self.dead_letter_topic = Some(v),
            Value::Ttl(v) => self.ttl = Some(v),
            Value::MaxDepth(v) => self.max_depth = Some(v),
            Value::MaxBytes(v) => self.max_bytes = Some(v),
            Value::Overflow(v) => self.overflow = Some(v),
            Value::MemQueueSize(v) => self.mem_queue_size = Some(v),
        }
    }

    /// These settings with `changes` applied in order (`None` clears the key), all or
    /// nothing: the first change the scope or the value refuses is the error and nothing is
    /// changed. `topic` is the topic's name when `scope` is a channel (a dead-letter topic may
    /// not be it).
    pub fn changed(
        &self,
        scope: Scope,
        topic: &str,
        changes: &[(Key, Option<Value>)],
    ) -> Result<QueueSettings, SettingsError> {
        let mut next = self.clone();
        for (key, value) in changes {
            if !key.applies_to(scope) {
                return Err(SettingsError::Invalid(*key));
            }
            match value {
                None => next.clear(*key),
                Some(v) => {
                    if v.key() != *key || !v.is_valid() {
                        return Err(SettingsError::Invalid(*key));
                    }
                    if matches!(v, Value::DeadLetterTopic(t) if t == topic) {
                        return Err(SettingsError::DeadLetterLoop);
                    }
                    next.put(v.clone());
                }
            }
        }
        Ok(next)
    }

    /// These settings as the replication link carries them (`nsq_protocol::replication::
    /// Settings`): `(key name, value)` in [`Key::ALL`]'s order, a TTL in nanoseconds, the
    /// rest as the API writes them. Empty when none is set.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        Key::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|v| (k.name().to_string(), v.link_text())))
            .collect()
    }

    /// Settings of `scope` from the link's pairs ([`QueueSettings::to_pairs`]), `topic` being
    /// the topic's name for a channel. A pair with an unknown key, a value that does not parse
    /// or that the scope does not take (a newer peer's key, a damaged record) is left out and
    /// its key named in the second list, so the caller can log it.
    pub fn from_pairs(
        scope: Scope,
        topic: &str,
        pairs: &[(String, String)],
    ) -> (QueueSettings, Vec<String>) {
        let mut out = QueueSettings::default();
        let mut bad = Vec::new();
        for (name, text) in pairs {
            let next = Key::from_name(name)
                .and_then(|k| Value::from_link_text(k, text).map(|v| (k, v)))
                .and_then(|(k, v)| out.changed(scope, topic, &[(k, Some(v))]).ok());
            match next {
                Some(next) => out = next,
                None => bad.push(name.clone()),
            }
        }
        (out, bad)
    }

    /// Checks node-wide defaults (flags, the config file): every value valid. A default
    /// dead-letter topic is allowed; its own topic's channels do not dead-letter into it
    /// ([`effective`]).
    pub fn check_defaults(&self) -> Result<(), SettingsError> {
        for key in Key::ALL {
            if let Some(v) = self.get(key) {
                if !v.is_valid() {
                    return Err(SettingsError::Invalid(key));
                }
            }
        }
        Ok(())
    }
}

/// The effective value of `key` for a topic (`topic_own` its settings, `channel` None) or a
/// channel (`channel` its settings, `topic_own` its topic's), with the node's `defaults`.
///
/// A channel of the topic that a default dead-letter topic names does not dead-letter (its
/// dead letters would come back to it): that key is then off for it.
pub fn effective(
    key: Key,
    topic_name: &str,
    topic_own: &QueueSettings,
    channel: Option<&QueueSettings>,
    defaults: &QueueSettings,
) -> (Option<Value>, Source) {
    let scope = if channel.is_some() {
        Scope::Channel
    } else {
        Scope::Topic
    };
    if !key.applies_to(scope) {
        return (None, Source::Off);
    }
    let own = channel.unwrap_or(topic_own);
    if let Some(v) = own.get(key) {
        return (Some(v), Source::Set);
    }
    if channel.is_some() && key.passed_down() {
        if let Some(v) = topic_own.get(key) {
            return (Some(v), Source::Topic);
        }
    }
    match defaults.get(key) {
        Some(Value::DeadLetterTopic(t)) if t == topic_name => (None, Source::Off),
        Some(v) => (Some(v), Source::Default),
        None => (None, Source::Off),
    }
}

/// Every key `scope` takes with its effective value and source, in [`Key::ALL`]'s order.
pub fn effective_all(
    topic_name: &str,
    topic_own: &QueueSettings,
    channel: Option<&QueueSettings>,
    defaults: &QueueSettings,
) -> Vec<(Key, Option<Value>, Source)> {
    let scope = if channel.is_some() {
        Scope::Channel
    } else {
        Scope::Topic
    };
    Key::ALL
        .into_iter()
        .filter(|k| k.applies_to(scope))
        .map(|k| {
            let (v, s) = effective(k, topic_name, topic_own, channel, defaults);
            (k, v, s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        for k in Key::ALL {
            assert_eq!(Key::from_name(k.name()), Some(k));
            assert!(k.invalid().starts_with("INVALID_"));
            assert_eq!(k.invalid(), format!("INVALID_{}", k.name().to_uppercase()));
        }
        assert_eq!(Key::from_name("MAX_ATTEMPTS"), None);
        assert_eq!(Key::from_name("topic"), None);
        assert_eq!(Overflow::parse("drop_oldest"), Some(Overflow::DropOldest));
        assert_eq!(
            Overflow::parse("refuse").map(Overflow::as_str),
            Some("refuse")
        );
        assert_eq!(Overflow::parse("drop"), None);
    }

    #[test]
    fn a_topic_takes_no_dead_letter_policy() {
        let s = QueueSettings::default();
        for key in [Key::MaxAttempts, Key::DeadLetterTopic] {
            let v = if key == Key::MaxAttempts {
                Value::MaxAttempts(3)
            } else {
                Value::DeadLetterTopic("dead".into())
            };
            assert_eq!(
                s.changed(Scope::Topic, "t", &[(key, Some(v.clone()))]),
                Err(SettingsError::Invalid(key))
            );
            assert!(s.changed(Scope::Channel, "t", &[(key, Some(v))]).is_ok());
        }
    }

    #[test]
    fn bad_values_are_refused_and_change_nothing() {
        let s = QueueSettings {
            ttl: Some(secs(5)),
            ..Default::default()
        };
        let bad = [
            Value::MaxAttempts(0),
            Value::DeadLetterTopic("bad name!".into()),
            Value::DeadLetterTopic(String::new()),
            Value::Ttl(Duration::ZERO),
            Value::MaxDepth(0),
            Value::MaxBytes(0),
        ];
        for v in bad {
            let key = v.key();
            // A valid change before the bad one is not kept either.
            let r = s.changed(
                Scope::Channel,
                "t",
                &[(Key::MaxDepth, Some(Value::MaxDepth(10))), (key, Some(v))],
            );
            assert_eq!(r, Err(SettingsError::Invalid(key)));
            assert_eq!(r.unwrap_or_else(|_| s.clone()), s);
        }
        // A value of another key's type is refused as the key named.
        assert_eq!(
            s.changed(Scope::Topic, "t", &[(Key::Ttl, Some(Value::MaxDepth(1)))]),
            Err(SettingsError::Invalid(Key::Ttl))
        );
        assert_eq!(
            s.changed(
                Scope::Channel,
                "t",
                &[(
                    Key::DeadLetterTopic,
                    Some(Value::DeadLetterTopic("t".into()))
                )]
            ),
            Err(SettingsError::DeadLetterLoop)
        );
        assert_eq!(
            SettingsError::DeadLetterLoop.to_string(),
            "INVALID_DEAD_LETTER_TOPIC"
        );
        assert_eq!(SettingsError::Invalid(Key::Ttl).to_string(), "INVALID_TTL");
    }

    #[test]
    fn set_and_clear() {
        let s = QueueSettings::default();
        assert!(s.is_empty());
        let s = s
            .changed(
                Scope::Channel,
                "t",
                &[
                    (Key::MaxAttempts, Some(Value::MaxAttempts(5))),
                    (
                        Key::DeadLetterTopic,
                        Some(Value::DeadLetterTopic("t_dead#ephemeral".into())),
                    ),
                    (Key::Ttl, Some(Value::Ttl(secs(30)))),
                    (Key::MemQueueSize, Some(Value::MemQueueSize(0))),
                ],
            )
            .unwrap();
        assert_eq!(s.max_attempts, Some(5));
        assert_eq!(s.mem_queue_size, Some(0));
        assert!(!s.is_empty());
        let s = s
            .changed(
                Scope::Channel,
                "t",
                &[
                    (Key::MaxAttempts, None),
                    (Key::DeadLetterTopic, None),
                    (Key::Ttl, None),
                    (Key::MemQueueSize, None),
                ],
            )
            .unwrap();
        assert!(s.is_empty());
    }

    #[test]
    fn a_channel_inherits_only_the_ttl_from_its_topic() {
        let topic = QueueSettings {
            ttl: Some(secs(60)),
            max_depth: Some(100),
            mem_queue_size: Some(10),
            ..Default::default()
        };
        let channel = QueueSettings::default();
        let defaults = QueueSettings {
            max_depth: Some(1000),
            ..Default::default()
        };
        let got = |k| effective(k, "t", &topic, Some(&channel), &defaults);
        assert_eq!(got(Key::Ttl), (Some(Value::Ttl(secs(60))), Source::Topic));
        assert_eq!(
            got(Key::MaxDepth),
            (Some(Value::MaxDepth(1000)), Source::Default)
        );
        assert_eq!(got(Key::MemQueueSize), (None, Source::Off));
        // The topic's own values are its own.
        assert_eq!(
            effective(Key::MaxDepth, "t", &topic, None, &defaults),
            (Some(Value::MaxDepth(100)), Source::Set)
        );
        // A channel's own value wins over its topic's.
        let channel = QueueSettings {
            ttl: Some(secs(1)),
            ..Default::default()
        };
        assert_eq!(
            effective(Key::Ttl, "t", &topic, Some(&channel), &defaults),
            (Some(Value::Ttl(secs(1))), Source::Set)
        );
    }

    #[test]
    fn a_default_dead_letter_topic_is_off_for_its_own_channels() {
        let defaults = QueueSettings {
            max_attempts: Some(3),
            dead_letter_topic: Some("dead".into()),
            ..Default::default()
        };
        assert!(defaults.check_defaults().is_ok());
        let none = QueueSettings::default();
        assert_eq!(
            effective(
                Key::DeadLetterTopic,
                "orders",
                &none,
                Some(&none),
                &defaults
            ),
            (Some(Value::DeadLetterTopic("dead".into())), Source::Default)
        );
        assert_eq!(
            effective(Key::DeadLetterTopic, "dead", &none, Some(&none), &defaults),
            (None, Source::Off)
        );
        // A topic lists no dead-letter keys at all.
        let keys: Vec<Key> = effective_all("t", &none, None, &defaults)
            .into_iter()
            .map(|(k, _, _)| k)
            .collect();
        assert_eq!(
            keys,
            [
                Key::Ttl,
                Key::MaxDepth,
                Key::MaxBytes,
                Key::Overflow,
                Key::MemQueueSize
            ]
        );
        assert_eq!(effective_all("t", &none, Some(&none), &defaults).len(), 7);
        let bad = QueueSettings {
            ttl: Some(Duration::ZERO),
            ..Default::default()
        };
        assert_eq!(bad.check_defaults(), Err(SettingsError::Invalid(Key::Ttl)));
    }

    #[test]
    fn link_pairs_round_trip_and_leave_out_what_does_not_hold() {
        let s = QueueSettings {
            max_attempts: Some(3),
            dead_letter_topic: Some("dlq".into()),
            ttl: Some(Duration::from_millis(1500)),
            max_depth: Some(10),
            overflow: Some(Overflow::DropOldest),
            ..Default::default()
        };
        let pairs = s.to_pairs();
        let text: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        assert_eq!(
            text,
            [
                ("max_attempts", "3"),
                ("dead_letter_topic", "dlq"),
                ("ttl", "1500000000"),
                ("max_depth", "10"),
                ("overflow", "drop_oldest"),
            ]
        );
        assert_eq!(
            QueueSettings::from_pairs(Scope::Channel, "t", &pairs),
            (s, vec![])
        );
        assert!(QueueSettings::default().to_pairs().is_empty());

        let p = |k: &str, v: &str| (k.to_string(), v.to_string());
        let (got, bad) = QueueSettings::from_pairs(
            Scope::Topic,
            "t",
            &[
                p("ttl", "60000000000"),
                p("max_attempts", "3"),  // not a topic's
                p("max_depth", "0"),     // not valid
                p("max_depth", "x"),     // does not parse
                p("future_key", "1"),    // unknown
                p("overflow", "refuse"), // fine
            ],
        );
        assert_eq!(
            got,
            QueueSettings {
                ttl: Some(secs(60)),
                overflow: Some(Overflow::Refuse),
                ..Default::default()
            }
        );
        assert_eq!(
            bad,
            ["max_attempts", "max_depth", "max_depth", "future_key"]
        );
        // A channel whose dead-letter topic is its own topic.
        let (got, bad) =
            QueueSettings::from_pairs(Scope::Channel, "t", &[p("dead_letter_topic", "t")]);
        assert!(got.is_empty());
        assert_eq!(bad, ["dead_letter_topic"]);
    }
}
