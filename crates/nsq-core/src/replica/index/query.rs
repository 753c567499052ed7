//! What the index answers (see `index`'s module comment): which segments can go, the topics
//! whose metadata holds a segment, and the takeover's view of the topics and unsettled
//! messages.

use std::collections::HashSet;

use nsq_protocol::replication::{ChannelItem, MessageItem, PendingChannel, TopicItem};

use super::{Index, Loc};

impl Index {
    /// How many of `segments` (ascending; the last one is being written) can be deleted from
    /// the front: those before the first segment that holds the first record of a live
    /// message, the start of a topic's metadata (its creation or its last full STATE TOPIC),
    /// or the CATCHUP_BEGIN of a catch-up in progress; never the last. Every record about a
    /// message or a topic comes after those, and every segment starts with its base seq
    /// (BASE), so replaying what is left gives this index.
    pub fn trimmable(&self, segments: &[u64]) -> usize {
        let Some((_, older)) = segments.split_last() else {
            return 0;
        };
        older.iter().take_while(|s| !self.pins(**s)).count()
    }

    pub(super) fn pins(&self, segment: u64) -> bool {
        self.seg_live.contains_key(&segment)
            || self.catchup_seg == Some(segment)
            || self.meta_seg.values().any(|s| *s == segment)
    }

    /// The topics whose metadata alone keeps `segment` (no live message's first record, no
    /// catch-up): a full STATE TOPIC for each, appended now, lets the segment go. Empty when
    /// anything else keeps it or a catch-up is in progress (a STATE there would confirm
    /// stale metadata).
    pub fn pinned_only_by_metadata(&self, segment: u64) -> Vec<TopicItem> {
        if self.catchup.is_some()
            || self.catchup_seg == Some(segment)
            || self.seg_live.contains_key(&segment)
        {
            return Vec::new();
        }
        let names: HashSet<&String> = self
            .meta_seg
            .iter()
            .filter(|(_, s)| **s == segment)
            .map(|(t, _)| t)
            .collect();
        self.topics()
            .into_iter()
            .filter(|t| names.contains(&t.topic))
            .collect()
    }

    /// The topics with their pause flags and channels, by name.
    pub fn topics(&self) -> Vec<TopicItem> {
        self.topics
            .iter()
            .map(|(name, t)| TopicItem {
                topic: name.clone(),
                paused: t.paused,
                channels: t
                    .channels
                    .iter()
                    .map(|(c, meta)| ChannelItem {
                        name: c.to_string(),
                        paused: meta.paused,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every live message as a [`MessageItem`] without its body, with the location of the
    /// record that holds the body, ordered by location (so a reader reads each record once,
    /// in file order). Channels are by name.
    pub fn unsettled(&self) -> Vec<(Loc, MessageItem)> {
        let mut out: Vec<(Loc, MessageItem)> = self
            .topics
            .iter()
            .flat_map(|(topic, t)| {
                t.messages.iter().map(move |(id, e)| {
                    let mut channels: Vec<PendingChannel> = e
                        .channels
                        .iter()
                        .map(|p| PendingChannel {
                            name: p.name.to_string(),
                            due: p.due,
                            attempts: p.attempts,
                        })
                        .collect();
                    channels.sort_by(|a, b| a.name.cmp(&b.name));
                    (
                        e.loc,
                        MessageItem {
                            topic: topic.clone(),
                            id: *id,
                            timestamp: e.timestamp,
                            topic_pending: e.topic_pending.is_some(),
                            topic_due: e.topic_pending.map_or(0, |(due, _)| due),
                            channels,
                            body: bytes::Bytes::new(),
                        },
                    )
                })
            })
            .collect();
        out.sort_by(|a, b| (a.0, &a.1.topic, a.1.id).cmp(&(b.0, &b.1.topic, b.1.id)));
        out
    }
}
