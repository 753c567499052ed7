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
        self.live.per_segment.contains_key(&segment)
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
            || self.live.per_segment.contains_key(&segment)
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
                settings: t.settings.clone(),
                channels: t
                    .listed()
                    .into_iter()
                    .map(|c| ChannelItem {
                        name: c.name.to_string(),
                        paused: c.paused,
                        settings: c.settings.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every live message as a [`MessageItem`] without its body and timestamp (both are in
    /// the record), with the location of the record that holds the body (`len` 0: see
    /// [`Loc`]), ordered by location (so a reader reads each record once, in file order).
    /// Channels are by name.
    pub fn unsettled(&self) -> Vec<(Loc, MessageItem)> {
        let mut out: Vec<(Loc, MessageItem)> = Vec::with_capacity(self.messages() as usize);
        for (topic, t) in &self.topics {
            for (id, v) in t.msgs.iter() {
                let mut channels = Vec::new();
                v.channels(|slot, due, attempts| {
                    channels.push(PendingChannel {
                        name: t.name(slot).to_string(),
                        due,
                        attempts,
                    })
                });
                channels.sort_by(|a, b| a.name.cmp(&b.name));
                let (segment, offset) = v.place();
                let due = v.topic();
                out.push((
                    Loc {
                        segment,
                        offset,
                        len: 0,
                    },
                    MessageItem {
                        topic: topic.clone(),
                        id,
                        timestamp: 0,
                        topic_pending: due.is_some(),
                        topic_due: due.unwrap_or(0),
                        channels,
                        body: bytes::Bytes::new(),
                    },
                ));
            }
        }
        out.sort_by(|a, b| (a.0, &a.1.topic, a.1.id).cmp(&(b.0, &b.1.topic, b.1.id)));
        out
    }
}
