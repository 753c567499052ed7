//! The index as it was before issue 29 made its per-message state compact (a HashMap of
//! full entries per topic, channel names per message): kept as the reference the compact
//! index is compared with (`diff.rs`). Only the rules; no checks, no hasher.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use nsq_protocol::replication::{
    Admin, AdminOp, ChannelItem, Fanout, Fin, Frame, Item, MessageItem, PendingChannel, Pub, Req,
    Settings, TopicItem,
};
use nsq_protocol::MessageId;

use super::super::Loc;
use crate::replica::record::Record;

const MESSAGE_OVERHEAD: u64 = 64;

#[derive(Debug, Clone)]
struct ChanPending {
    name: Arc<str>,
    due: i64,
    attempts: u16,
    confirmed: bool,
}

#[derive(Debug, Clone)]
struct MsgEntry {
    loc: Loc,
    timestamp: i64,
    body_len: u32,
    topic_pending: Option<(i64, bool)>,
    channels: Vec<ChanPending>,
}

impl MsgEntry {
    fn is_dead(&self) -> bool {
        self.topic_pending.is_none() && self.channels.is_empty()
    }
}

#[derive(Debug, Clone)]
struct ChannelMeta {
    paused: bool,
    settings: Settings,
    confirmed: bool,
}

#[derive(Debug, Clone, Default)]
struct TopicEntry {
    paused: bool,
    settings: Settings,
    confirmed: bool,
    channels: BTreeMap<Arc<str>, ChannelMeta>,
    messages: HashMap<MessageId, MsgEntry>,
}

impl TopicEntry {
    fn channel(&mut self, name: &str, catching_up: bool) -> Arc<str> {
        if let Some((k, meta)) = self.channels.iter_mut().find(|(k, _)| &***k == name) {
            meta.confirmed |= catching_up;
            return k.clone();
        }
        let k: Arc<str> = Arc::from(name);
        self.channels.insert(
            k.clone(),
            ChannelMeta {
                paused: false,
                settings: Settings::new(),
                confirmed: true,
            },
        );
        k
    }
}

#[derive(Debug, Clone, Copy)]
struct NewMessage {
    id: MessageId,
    timestamp: i64,
    body_len: u32,
    loc: Loc,
}

#[derive(Debug, Default, Clone)]
struct Catchup {
    settled: HashSet<(String, String, MessageId)>,
    deleted: HashSet<(String, String)>,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Oracle {
    topics: BTreeMap<String, TopicEntry>,
    seg_live: BTreeMap<u64, u64>,
    meta_seg: HashMap<String, u64>,
    catchup_seg: Option<u64>,
    cur_seg: u64,
    last_seq: u64,
    catchup: Option<Catchup>,
    messages: u64,
    live_bytes: u64,
}

impl Oracle {
    pub(super) fn new() -> Self {
        Oracle::default()
    }

    pub(super) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub(super) fn catching_up(&self) -> bool {
        self.catchup.is_some()
    }

    pub(super) fn messages(&self) -> u64 {
        self.messages
    }

    pub(super) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    pub(super) fn apply(&mut self, record: &Record, loc: Loc) {
        self.cur_seg = loc.segment;
        match record {
            Record::Reset { last_seq } => {
                *self = Oracle {
                    last_seq: *last_seq,
                    cur_seg: loc.segment,
                    ..Oracle::default()
                };
            }
            Record::Base { last_seq } => self.last_seq = *last_seq,
            Record::Frame(f) => match f {
                Frame::Pub(p) => {
                    self.last_seq = p.seq;
                    self.apply_pub(p, loc);
                }
                Frame::State(Item::Topic(t)) => self.apply_topic_item(t),
                Frame::State(Item::Message(m)) => self.apply_message_item(m, loc),
                Frame::Fin(fin) => {
                    self.last_seq = fin.seq;
                    self.apply_fin(fin);
                }
                Frame::Req(req) => {
                    self.last_seq = req.seq;
                    self.apply_req(req);
                }
                Frame::Fanout(fo) => {
                    self.last_seq = fo.seq;
                    self.apply_fanout(fo);
                }
                Frame::Admin(a) => {
                    self.last_seq = a.seq;
                    self.apply_admin(a);
                }
                Frame::CatchupBegin { seq } => {
                    self.last_seq = *seq;
                    self.begin_catchup();
                }
                Frame::CatchupEnd { .. } => self.end_catchup(),
                _ => {}
            },
        }
    }
}

impl Oracle {
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
        // The name is copied only when the topic is new (this runs once per message).
        if !self.topics.contains_key(topic) {
            self.meta_seg.insert(topic.to_owned(), self.cur_seg);
            self.topics.insert(
                topic.to_owned(),
                TopicEntry {
                    confirmed: true,
                    ..TopicEntry::default()
                },
            );
        }
        let t = self.topics.get_mut(topic).expect("inserted above");
        t.confirmed |= catching_up;
        t
    }

    fn upsert(
        &mut self,
        topic: &str,
        NewMessage {
            id,
            timestamp,
            body_len,
            loc,
        }: NewMessage,
        topic_pending: Option<i64>,
        channels: &[(&str, i64, Option<u16>)],
    ) {
        let topic_pending = topic_pending.filter(|_| !self.is_settled(topic, "", &id));
        let channels: Vec<_> = channels
            .iter()
            .filter(|(c, _, _)| !self.is_settled(topic, c, &id))
            .copied()
            .collect();
        let t = self.topic_mut(topic);
        let names: Vec<Arc<str>> = channels
            .iter()
            .map(|(c, _, _)| t.channel(c, true))
            .collect();
        let mut created = false;
        let entry = t.messages.entry(id).or_insert_with(|| {
            created = true;
            MsgEntry {
                loc,
                timestamp,
                body_len,
                topic_pending: None,
                channels: Vec::new(),
            }
        });
        if let Some(due) = topic_pending {
            entry.topic_pending = Some((due, true));
        }
        for ((_, due, attempts), name) in channels.iter().zip(names) {
            match entry.channels.iter_mut().find(|p| p.name == name) {
                Some(p) => {
                    p.due = *due;
                    if let Some(a) = attempts {
                        p.attempts = *a;
                    }
                    p.confirmed = true;
                }
                None => entry.channels.push(ChanPending {
                    name,
                    due: *due,
                    attempts: attempts.unwrap_or(0),
                    confirmed: true,
                }),
            }
        }
        let dead = entry.is_dead();
        if created && dead {
            t.messages.remove(&id);
        } else if created {
            self.messages += 1;
            self.live_bytes += u64::from(body_len) + MESSAGE_OVERHEAD;
            *self.seg_live.entry(loc.segment).or_insert(0) += 1;
        }
    }

    fn apply_pub(&mut self, p: &Pub, loc: Loc) {
        if self.topic_deleted_in_catchup(&p.topic) {
            // Published after the deletion: the topic exists again.
            if let Some(c) = self.catchup.as_mut() {
                c.deleted.remove(&(p.topic.clone(), String::new()));
            }
        }
        self.topic_mut(&p.topic);
        let channels: Vec<(&str, i64, Option<u16>)> = p
            .channels
            .iter()
            .map(|c| (c.as_str(), p.defer_until, None))
            .collect();
        let topic_pending = p.channels.is_empty().then_some(p.defer_until);
        for m in &p.messages {
            let new = NewMessage {
                id: m.id,
                timestamp: m.timestamp,
                body_len: m.body.len() as u32,
                loc,
            };
            self.upsert(&p.topic, new, topic_pending, &channels);
        }
    }

    fn apply_topic_item(&mut self, item: &TopicItem) {
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
            let name = t.channel(&c.name, catching_up);
            if let Some(meta) = t.channels.get_mut(&name) {
                meta.paused = c.paused;
                meta.settings.clone_from(&c.settings);
            }
            listed += 1;
        }
        // An item that describes the whole metadata is where replaying it can start.
        if listed == item.channels.len() && listed == t.channels.len() {
            self.meta_seg.insert(item.topic.clone(), self.cur_seg);
        }
    }

    fn apply_message_item(&mut self, m: &MessageItem, loc: Loc) {
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
            timestamp: m.timestamp,
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

    fn reap(&mut self, topic: &str, id: &MessageId) {
        let Some(t) = self.topics.get_mut(topic) else {
            return;
        };
        if t.messages.get(id).is_some_and(MsgEntry::is_dead) {
            let e = t.messages.remove(id).expect("present");
            self.forget(&e);
        }
    }

    fn forget(&mut self, e: &MsgEntry) {
        self.messages -= 1;
        self.live_bytes -= u64::from(e.body_len) + MESSAGE_OVERHEAD;
        if let Some(n) = self.seg_live.get_mut(&e.loc.segment) {
            *n -= 1;
            if *n == 0 {
                self.seg_live.remove(&e.loc.segment);
            }
        }
    }

    fn apply_fin(&mut self, fin: &Fin) {
        for id in &fin.ids {
            let removed = self
                .topics
                .get_mut(&fin.topic)
                .and_then(|t| t.messages.get_mut(id))
                .and_then(|e| {
                    let i = e.channels.iter().position(|p| *p.name == *fin.channel)?;
                    e.channels.swap_remove(i);
                    Some(())
                })
                .is_some();
            if removed {
                self.reap(&fin.topic, id);
            } else if let Some(c) = self.catchup.as_mut() {
                c.settled
                    .insert((fin.topic.clone(), fin.channel.clone(), *id));
            }
        }
    }

    fn apply_req(&mut self, req: &Req) {
        let Some(t) = self.topics.get_mut(&req.topic) else {
            return;
        };
        for e in &req.entries {
            if let Some(p) = t
                .messages
                .get_mut(&e.id)
                .and_then(|m| m.channels.iter_mut().find(|p| *p.name == *req.channel))
            {
                p.due = e.due;
                p.attempts = e.attempts;
                p.confirmed = true;
            }
        }
    }

    fn apply_fanout(&mut self, fo: &Fanout) {
        let catching_up = self.catchup.is_some();
        let mut unknown = Vec::new();
        if let Some(t) = self.topics.get_mut(&fo.topic) {
            let names: Vec<Arc<str>> = fo
                .channels
                .iter()
                .map(|c| t.channel(c, catching_up))
                .collect();
            for id in &fo.ids {
                let Some(e) = t.messages.get_mut(id) else {
                    unknown.push(*id);
                    continue;
                };
                let Some((due, _)) = e.topic_pending else {
                    continue;
                };
                for name in &names {
                    if !e.channels.iter().any(|p| p.name == *name) {
                        e.channels.push(ChanPending {
                            name: name.clone(),
                            due,
                            attempts: 0,
                            confirmed: true,
                        });
                    }
                }
                if !fo.more {
                    e.topic_pending = None;
                }
            }
        } else {
            unknown.extend(fo.ids.iter().copied());
        }
        if !fo.more {
            if let Some(c) = self.catchup.as_mut() {
                for id in &unknown {
                    c.settled.insert((fo.topic.clone(), String::new(), *id));
                }
            }
        }
        for id in &fo.ids {
            self.reap(&fo.topic, id);
        }
    }

    fn apply_admin(&mut self, a: &Admin) {
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
                    let name = t.channel(&a.channel, catching_up);
                    if let Some(meta) = t.channels.get_mut(&name) {
                        meta.paused = paused;
                    }
                }
            }
            // Settings change only a known topic or channel.
            AdminOp::Settings => {
                if let Some(t) = self.topics.get_mut(&a.topic) {
                    if on_topic {
                        t.settings.clone_from(&a.settings);
                    } else if let Some(meta) = t.channels.get_mut(&*a.channel) {
                        meta.settings.clone_from(&a.settings);
                    }
                }
            }
            AdminOp::Delete if on_topic => {
                if let Some(t) = self.topics.remove(&a.topic) {
                    for e in t.messages.values() {
                        self.forget(e);
                    }
                }
                self.meta_seg.remove(&a.topic);
                if let Some(c) = self.catchup.as_mut() {
                    c.deleted.insert((a.topic.clone(), String::new()));
                }
            }
            AdminOp::Delete | AdminOp::Empty => {
                let delete = a.op == AdminOp::Delete;
                let mut touched = Vec::new();
                if let Some(t) = self.topics.get_mut(&a.topic) {
                    if delete && !on_topic {
                        t.channels.retain(|k, _| **k != *a.channel);
                    }
                    for (id, e) in t.messages.iter_mut() {
                        if on_topic {
                            if e.topic_pending.take().is_some() {
                                touched.push(*id);
                            }
                        } else if let Some(i) =
                            e.channels.iter().position(|p| *p.name == *a.channel)
                        {
                            e.channels.swap_remove(i);
                            touched.push(*id);
                        }
                    }
                }
                if delete {
                    if let Some(c) = self.catchup.as_mut() {
                        c.deleted.insert((a.topic.clone(), a.channel.clone()));
                    }
                }
                for id in &touched {
                    self.reap(&a.topic, id);
                }
            }
        }
    }

    fn begin_catchup(&mut self) {
        for t in self.topics.values_mut() {
            t.confirmed = false;
            for meta in t.channels.values_mut() {
                meta.confirmed = false;
            }
            for e in t.messages.values_mut() {
                if let Some((_, c)) = e.topic_pending.as_mut() {
                    *c = false;
                }
                for p in &mut e.channels {
                    p.confirmed = false;
                }
            }
        }
        self.catchup = Some(Catchup::default());
        self.catchup_seg = Some(self.cur_seg);
    }

    fn end_catchup(&mut self) {
        self.catchup = None;
        self.catchup_seg = None;
        let mut dead = Vec::new();
        self.topics.retain(|name, t| {
            t.channels.retain(|_, meta| meta.confirmed);
            for (id, e) in t.messages.iter_mut() {
                if e.topic_pending.is_some_and(|(_, c)| !c) {
                    e.topic_pending = None;
                }
                e.channels.retain(|p| p.confirmed);
                if e.is_dead() {
                    dead.push((name.clone(), *id));
                }
            }
            t.confirmed || !t.messages.is_empty()
        });
        for (topic, id) in dead {
            self.reap(&topic, &id);
        }
        // A topic kept only for its messages that all died goes with them.
        self.topics
            .retain(|_, t| t.confirmed || !t.messages.is_empty());
        let topics = &self.topics;
        self.meta_seg.retain(|k, _| topics.contains_key(k));
    }
}

impl Oracle {
    pub(super) fn trimmable(&self, segments: &[u64]) -> usize {
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

    pub(super) fn pinned_only_by_metadata(&self, segment: u64) -> Vec<TopicItem> {
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

    pub(super) fn topics(&self) -> Vec<TopicItem> {
        self.topics
            .iter()
            .map(|(name, t)| TopicItem {
                topic: name.clone(),
                paused: t.paused,
                settings: t.settings.clone(),
                channels: t
                    .channels
                    .iter()
                    .map(|(c, meta)| ChannelItem {
                        name: c.to_string(),
                        paused: meta.paused,
                        settings: meta.settings.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    pub(super) fn unsettled(&self) -> Vec<(Loc, MessageItem)> {
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
