//! Finding things in nsqd's `/stats?format=json` document.

use serde_json::Value;

/// Finds a topic object in a `/stats` JSON document.
pub fn find_topic<'a>(stats: &'a Value, topic: &str) -> Option<&'a Value> {
    stats["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)
}

/// Finds a channel object in a `/stats` JSON document.
pub fn find_channel<'a>(stats: &'a Value, topic: &str, channel: &str) -> Option<&'a Value> {
    find_topic(stats, topic)?["channels"]
        .as_array()?
        .iter()
        .find(|c| c["channel_name"] == channel)
}

/// An integer field of a stats object (panics if missing).
pub fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {key:?} in {v}"))
}

/// [`find_topic`] that must succeed.
#[track_caller]
pub fn topic<'a>(stats: &'a Value, name: &str) -> &'a Value {
    find_topic(stats, name).unwrap_or_else(|| panic!("no topic {name:?} in {stats}"))
}

/// [`find_channel`] that must succeed.
#[track_caller]
pub fn channel<'a>(stats: &'a Value, topic: &str, channel: &str) -> &'a Value {
    find_channel(stats, topic, channel)
        .unwrap_or_else(|| panic!("no channel {topic:?}/{channel:?} in {stats}"))
}
