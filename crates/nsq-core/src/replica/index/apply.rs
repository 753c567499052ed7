//! How each record changes the index (see `index`'s module comment): publishes, STATE items,
//! settlements, administration and the catch-up markers, with the catch-up's tombstones.

use nsq_protocol::replication::{Admin, AdminOp, Fanout, Fin, MessageItem, Pub, Req, TopicItem};
use nsq_protocol::MessageId;

use super::state::Gone;
use super::topic::TopicEntry;
use super::{Catchup, Index, Live, Loc, NewMessage, MESSAGE_OVERHEAD};

impl Live {
    /// Counts `n` new live messages of `body_bytes` in all, first stored in `segment`.
    fn add(&mut self, segment: u64, n: u64, body_bytes: u64) {
        if n == 0 {
            return;
        }
        self.messages += n;
        self.bytes += body_bytes + n * MESSAGE_OVERHEAD;
        *self.per_segment.entry(segment).or_insert(0) += n;
    }

    fn forget(&mut self, g: Gone) {
        self.messages -= 1;
        self.bytes -= u64::from(g.body_len) + MESSAGE_OVERHEAD;
        if let Some(n) = self.per_segment.get_mut(&g.segment) {
            *n -= 1;
            if *n == 0 {
                self.per_segment.remove(&g.segment);
            }
        }
    }
}

impl Index {
    fn is_settled(&self, topic: &str, channel: &str, id: &MessageId) -> bool {
        self.catchup.as_ref().is_some_and(|c| {
            c.deleted.contains(&(topic.to_owned(), String::new()))
                || c.deleted.contains(&(topic.to_owned(), channel.to_owned()))
                || c.settled
                    .contains(&(topic.to_owned(), channel.to_owned(), *id))
        })
    }

    fn topic_deleted_in_catchup(&self, topic: &str) -> bool {
        self.catchup
            .as_ref()
            .is_some_and(|c| c.deleted.contains(&(topic.to_owned(), String::new())))
    }

    fn topic_mut(&mut self, topic: &str) -> &mut TopicEntry {
        let catching_up = self.catchup.is_some();
        // The name is copied only when the topic is new.
        if !self.topics.contains_key(topic) {
            self.meta_seg.insert(topic.to_owned(), self.cur_seg);
            self.topics.insert(topic.to_owned(), TopicEntry::new());
        }
        let t = self.topics.get_mut(topic).expect("inserted above");
        t.confirmed |= catching_up;
        t
    }

    /// Adds or updates a message: `topic_pending` and per-channel `(name, due, attempts)`,
    /// minus what the catch-up saw settled. `attempts` `None` keeps a known value (PUB).
    fn upsert(
        &mut self,
        topic: &str,
        new: NewMessage,
        topic_pending: Option<i64>,
        channels: &[(&str, i64, Option<u16>)],
    ) {
        let topic_pending = topic_pending.filter(|_| !self.is_settled(topic, "", &new.id));
        let channels: Vec<_> = channels
            .iter()
            .filter(|(c, _, _)| !self.is_settled(topic, c, &new.id))
            .copied()
            .collect();
        let t = self.topic_mut(topic);
        let slots: Vec<(u32, i64, Option<u16>)> = channels
            .iter()
            .map(|(c, due, attempts)| (t.channel(c, true), *due, *attempts))
            .collect();
        if t.msgs.upsert(&new, |m| m.upsert(topic_pending, &slots)) {
            self.live.add(new.loc.segment, 1, u64::from(new.body_len));
        }
    }

    pub(super) fn apply_pub(&mut self, p: &Pub, loc: Loc) {
        if self.topic_deleted_in_catchup(&p.topic) {
            // Published after the deletion: the topic exists again.
            if let Some(c) = self.catchup.as_mut() {
                c.deleted.remove(&(p.topic.clone(), String::new()));
            }
        }
        let catching_up = self.catchup.is_some();
        let t = self.topic_mut(&p.topic);
        let topic_pending = p.channels.is_empty().then_some(p.defer_until);
        let new = |m: &nsq_protocol::replication::PubMessage| NewMessage {
            id: m.id,
            body_len: m.body.len() as u32,
            loc,
        };
        if catching_up {
            let channels: Vec<(&str, i64, Option<u16>)> = p
                .channels
                .iter()
                .map(|c| (c.as_str(), p.defer_until, None))
                .collect();
            for m in &p.messages {
                self.upsert(&p.topic, new(m), topic_pending, &channels);
            }
            return;
        }
        // Nothing settled ahead: the channels are looked up once for the whole record.
        let slots: Vec<(u32, i64, Option<u16>)> = p
            .channels
            .iter()
            .map(|c| (t.channel(c, true), p.defer_until, None))
            .collect();
        let (mut added, mut bytes) = (0, 0);
        for m in &p.messages {
            let new = new(m);
            if t.msgs.upsert(&new, |s| s.upsert(topic_pending, &slots)) {
                added += 1;
                bytes += u64::from(new.body_len);
            }
        }
        self.live.add(loc.segment, added, bytes);
    }

    pub(super) fn apply_topic_item(&mut self, item: &TopicItem) {
        if self.topic_deleted_in_catchup(&item.topic) {
            return;
        }
        let catching_up = self.catchup.is_some();
        let deleted: Vec<bool> = item
            .channels
            .iter()
            .map(|c| {
                self.catchup
                    .as_ref()
                    .is_some_and(|cu| cu.deleted.contains(&(item.topic.clone(), c.name.clone())))
            })
            .collect();
        let t = self.topic_mut(&item.topic);
        t.paused = item.paused;
        t.settings.clone_from(&item.settings);
        let mut listed = 0;
        for (c, deleted) in item.channels.iter().zip(deleted) {
            if deleted {
                continue;
            }
            let slot = t.channel(&c.name, catching_up);
            let ch = t.chan_mut(slot);
            ch.paused = c.paused;
            ch.settings.clone_from(&c.settings);
            listed += 1;
        }
        // An item that describes the whole metadata is where replaying it can start.
        if listed == item.channels.len() && listed == t.listed().len() {
            self.meta_seg.insert(item.topic.clone(), self.cur_seg);
        }
    }

    pub(super) fn apply_message_item(&mut self, m: &MessageItem, loc: Loc) {
        if self.topic_deleted_in_catchup(&m.topic) {
            return;
        }
        let channels: Vec<(&str, i64, Option<u16>)> = m
            .channels
            .iter()
            .map(|c| (c.name.as_str(), c.due, Some(c.attempts)))
            .collect();
        let new = NewMessage {
            id: m.id,
            body_len: m.body.len() as u32,
            loc,
        };
        self.upsert(
            &m.topic,
            new,
            m.topic_pending.then_some(m.topic_due),
            &channels,
        );
    }

    pub(super) fn apply_fin(&mut self, fin: &Fin) {
        let catching_up = self.catchup.is_some();
        let mut unknown = Vec::new();
        match self.topics.get_mut(&fin.topic) {
            Some(t) => {
                let slot = t.slot(&fin.channel);
                for id in &fin.ids {
                    let done = slot.and_then(|s| t.msgs.update(id, |m| m.drop_channel(s)));
                    match done {
                        Some((true, Some(g))) => self.live.forget(g),
                        Some((true, None)) => {}
                        _ if catching_up => unknown.push(*id),
                        _ => {}
                    }
                }
            }
            None if catching_up => unknown.extend_from_slice(&fin.ids),
            None => {}
        }
        if let Some(c) = self.catchup.as_mut() {
            for id in unknown {
                c.settled
                    .insert((fin.topic.clone(), fin.channel.clone(), id));
            }
        }
    }

    pub(super) fn apply_req(&mut self, req: &Req) {
        let Some(t) = self.topics.get_mut(&req.topic) else {
            return;
        };
        let Some(slot) = t.slot(&req.channel) else {
            return;
        };
        for e in &req.entries {
            t.msgs.update(&e.id, |m| m.requeue(slot, e.due, e.attempts));
        }
    }

    pub(super) fn apply_fanout(&mut self, fo: &Fanout) {
        let catching_up = self.catchup.is_some();
        let mut unknown = Vec::new();
        match self.topics.get_mut(&fo.topic) {
            Some(t) => {
                let slots: Vec<u32> = fo
                    .channels
                    .iter()
                    .map(|c| t.channel(c, catching_up))
                    .collect();
                // Settled by this record: not unknown when listed again in it.
                let mut settled = Vec::new();
                for id in &fo.ids {
                    match t.msgs.update(id, |m| m.fan_out(&slots, fo.more)) {
                        Some((_, Some(g))) => {
                            self.live.forget(g);
                            if catching_up {
                                settled.push(*id);
                            }
                        }
                        Some((_, None)) => {}
                        None if catching_up && !settled.contains(id) => unknown.push(*id),
                        None => {}
                    }
                }
            }
            None => unknown.extend_from_slice(&fo.ids),
        }
        if !fo.more {
            if let Some(c) = self.catchup.as_mut() {
                for id in unknown {
                    c.settled.insert((fo.topic.clone(), String::new(), id));
                }
            }
        }
    }

    pub(super) fn apply_admin(&mut self, a: &Admin) {
        let catching_up = self.catchup.is_some();
        let on_topic = a.channel.is_empty();
        match a.op {
            AdminOp::Create => {
                if let Some(c) = self.catchup.as_mut() {
                    c.deleted.remove(&(a.topic.clone(), a.channel.clone()));
                    if !on_topic {
                        c.deleted.remove(&(a.topic.clone(), String::new()));
                    }
                }
                let t = self.topic_mut(&a.topic);
                if !on_topic {
                    t.channel(&a.channel, catching_up);
                }
            }
            AdminOp::Pause | AdminOp::Unpause => {
                let paused = a.op == AdminOp::Pause;
                let t = self.topic_mut(&a.topic);
                if on_topic {
                    t.paused = paused;
                } else {
                    let slot = t.channel(&a.channel, catching_up);
                    t.chan_mut(slot).paused = paused;
                }
            }
            // Only a topic or listed channel this index knows: a change made after a
            // catch-up's STATE TOPIC was read follows it on the wire, one made before is in
            // it; and a change that raced a deletion does not bring the queue back.
            AdminOp::Settings => {
                let Some(t) = self.topics.get_mut(&a.topic) else {
                    return;
                };
                if on_topic {
                    t.settings.clone_from(&a.settings);
                } else if let Some(slot) = t.slot(&a.channel) {
                    let c = t.chan_mut(slot);
                    if c.listed {
                        c.settings.clone_from(&a.settings);
                    }
                }
            }
            AdminOp::Delete if on_topic => {
                if let Some(t) = self.topics.remove(&a.topic) {
                    for (_, v) in t.msgs.iter() {
                        self.live.forget(Gone {
                            segment: v.place().0,
                            body_len: v.body_len(),
                        });
                    }
                }
                self.meta_seg.remove(&a.topic);
                if let Some(c) = self.catchup.as_mut() {
                    c.deleted.insert((a.topic.clone(), String::new()));
                }
            }
            AdminOp::Delete | AdminOp::Empty => {
                let delete = a.op == AdminOp::Delete;
                let live = &mut self.live;
                if let Some(t) = self.topics.get_mut(&a.topic) {
                    if on_topic {
                        t.msgs.for_each(
                            |m| {
                                m.drop_topic();
                            },
                            |g| live.forget(g),
                        );
                    } else if let Some(slot) = t.slot(&a.channel) {
                        t.msgs.for_each(
                            |m| {
                                m.drop_channel(slot);
                            },
                            |g| live.forget(g),
                        );
                        if delete {
                            // No message is pending on it any more.
                            t.free(slot);
                        }
                    }
                }
                if delete {
                    if let Some(c) = self.catchup.as_mut() {
                        c.deleted.insert((a.topic.clone(), a.channel.clone()));
                    }
                }
            }
        }
    }

    pub(super) fn begin_catchup(&mut self) {
        for t in self.topics.values_mut() {
            t.confirmed = false;
            for c in t.chans_mut() {
                c.confirmed = false;
            }
            t.msgs.for_each(
                |m| m.unconfirm(),
                |_| debug_assert!(false, "unconfirming settles nothing"),
            );
        }
        self.catchup = Some(Catchup::default());
        self.catchup_seg = Some(self.cur_seg);
    }

    /// Drops everything the catch-up did not confirm or create.
    pub(super) fn end_catchup(&mut self) {
        self.catchup = None;
        self.catchup_seg = None;
        let live = &mut self.live;
        self.topics.retain(|_, t| {
            for c in t.chans_mut() {
                c.listed &= c.confirmed;
            }
            t.msgs
                .for_each(|m| m.drop_unconfirmed(), |g| live.forget(g));
            t.free_unused();
            // A topic kept only for its messages that all died goes with them.
            t.confirmed || !t.msgs.is_empty()
        });
        let topics = &self.topics;
        self.meta_seg.retain(|k, _| topics.contains_key(k));
    }
}
