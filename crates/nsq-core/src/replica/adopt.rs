//! Turning a taken-over backlog into this node's messages (docs/replication.md, "Takeover",
//! "Delivering"), without I/O: each unsettled item of the backlog becomes the messages to
//! put on its channels (original ID, timestamp and attempts; a deferred one with the time it
//! still has to wait) or on its topic, and its IDs go into the manifest.
//!
//! Due times are the origin's wall clock (Unix ns), so what is left to wait is `due - now`
//! on this node's wall clock: a skew between the hosts moves a deferred message by as much,
//! and one already due is delivered at once. NSQ has no counterpart (a message never changes
//! node there).

use std::collections::BTreeMap;

use nsq_protocol::message::MessageId;
use nsq_protocol::replication::MessageItem;

use crate::message::Message;

/// Where one message of the backlog goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Into channel `channel` of `topic` (deferred by `message.defer_ms`).
    Channel {
        topic: String,
        channel: String,
        message: Message,
    },
    /// Into `topic`, to be fanned out to its channels (not yet fanned out at the origin).
    Topic { topic: String, message: Message },
}

/// Milliseconds from `now` (Unix ns) until `due` (Unix ns; 0 = not deferred), as a
/// message's `defer_ms`: 0 when not deferred or already due.
pub fn defer_ms(due: i64, now: i64) -> u32 {
    if due <= now {
        return 0;
    }
    let ms = (due.saturating_sub(now) as u64).div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// The puts of one backlog item, in channel order, and their `(topic, channel, id)` recorded
/// in `manifest` (an empty channel for the topic).
pub fn puts(item: MessageItem, now: i64, manifest: &mut Manifest) -> Vec<Put> {
    let mut out = Vec::with_capacity(item.channels.len() + 1);
    let message = |attempts: u16, due: i64| Message {
        id: item.id,
        timestamp: item.timestamp,
        attempts,
        body: item.body.clone(),
        defer_ms: defer_ms(due, now),
    };
    for c in &item.channels {
        manifest.add(&item.topic, &c.name, item.id);
        out.push(Put::Channel {
            topic: item.topic.clone(),
            channel: c.name.clone(),
            message: message(c.attempts, c.due),
        });
    }
    if item.topic_pending {
        manifest.add(&item.topic, "", item.id);
        out.push(Put::Topic {
            topic: item.topic.clone(),
            message: message(0, item.topic_due),
        });
    }
    out
}

/// The manifest being gathered: per `(topic, channel)` the IDs taken over, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Manifest {
    by_queue: BTreeMap<(String, String), Vec<MessageId>>,
}

impl Manifest {
    pub fn add(&mut self, topic: &str, channel: &str, id: MessageId) {
        self.by_queue
            .entry((topic.to_string(), channel.to_string()))
            .or_default()
            .push(id);
    }

    /// The number of IDs.
    pub fn len(&self) -> usize {
        self.by_queue.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// `(topic, channel, ids)`, as [`super::manifest::write`] takes them.
    pub fn into_entries(self) -> impl Iterator<Item = (String, String, Vec<MessageId>)> {
        self.by_queue.into_iter().map(|((t, c), ids)| (t, c, ids))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nsq_protocol::replication::PendingChannel;

    use super::*;

    const NOW: i64 = 1_700_000_000_000_000_000;

    fn item(id: u8, channels: &[(&str, i64, u16)], topic_pending: bool) -> MessageItem {
        MessageItem {
            topic: "t".into(),
            id: MessageId([id; 16]),
            timestamp: NOW - 5_000_000_000,
            topic_pending,
            topic_due: if topic_pending { NOW + 1_500_000 } else { 0 },
            channels: channels
                .iter()
                .map(|&(name, due, attempts)| PendingChannel {
                    name: name.into(),
                    due,
                    attempts,
                })
                .collect(),
            body: Bytes::from_static(b"body"),
        }
    }

    #[test]
    fn defer_left_rounds_up_and_due_ones_go_now() {
        assert_eq!(defer_ms(0, NOW), 0, "not deferred");
        assert_eq!(defer_ms(NOW - 1, NOW), 0, "already due");
        assert_eq!(defer_ms(NOW, NOW), 0);
        assert_eq!(defer_ms(NOW + 1, NOW), 1, "never early");
        assert_eq!(defer_ms(NOW + 2_000_000, NOW), 2);
        assert_eq!(defer_ms(i64::MAX, 0), u32::MAX);
    }

    #[test]
    fn each_pending_channel_and_the_topic_get_the_original_message() {
        let mut m = Manifest::default();
        let p = puts(
            item(7, &[("c1", 0, 3), ("c2", NOW + 10_000_000, 1)], true),
            NOW,
            &mut m,
        );
        assert_eq!(p.len(), 3);
        let Put::Channel {
            channel, message, ..
        } = &p[0]
        else {
            panic!("{p:?}")
        };
        assert_eq!(channel, "c1");
        assert_eq!(message.id, MessageId([7; 16]));
        assert_eq!(message.timestamp, NOW - 5_000_000_000, "publish time kept");
        assert_eq!((message.attempts, message.defer_ms), (3, 0));
        let Put::Channel { message, .. } = &p[1] else {
            panic!()
        };
        assert_eq!((message.attempts, message.defer_ms), (1, 10));
        let Put::Topic { topic, message } = &p[2] else {
            panic!()
        };
        assert_eq!((topic.as_str(), message.attempts, message.defer_ms), ("t", 0, 2));
        assert_eq!(m.len(), 3);
        puts(item(8, &[("c1", 0, 1)], false), NOW, &mut m);
        let entries: Vec<_> = m.into_entries().collect();
        assert_eq!(
            entries,
            [
                ("t".into(), "".into(), vec![MessageId([7; 16])]),
                (
                    "t".into(),
                    "c1".into(),
                    vec![MessageId([7; 16]), MessageId([8; 16])]
                ),
                ("t".into(), "c2".into(), vec![MessageId([7; 16])]),
            ]
        );
    }
}
