//! The index's rules one by one, and a property test against a plain model, including
//! "replaying what trimming leaves gives the same index".

use std::collections::BTreeMap;

use bytes::Bytes;
use nsq_protocol::replication::{
    Admin, AdminOp, ChannelItem, Fanout, Fin, Frame, Item, MessageItem, PendingChannel, Pub,
    PubMessage, Req, ReqEntry, TopicItem,
};
use nsq_protocol::MessageId;
use proptest::prelude::*;

use super::*;
use crate::replica::record::Record;

mod compact;
mod diff;
mod oracle;

fn id(n: u64) -> MessageId {
    MessageId::from_u64(n)
}

fn loc(segment: u64, offset: u64) -> Loc {
    Loc {
        segment,
        offset,
        len: 1,
    }
}

fn publish(seq: u64, topic: &str, channels: &[&str], ids: &[u64], defer: i64) -> Record {
    Record::Frame(Frame::Pub(Pub {
        seq,
        topic: topic.into(),
        defer_until: defer,
        channels: channels.iter().map(|c| c.to_string()).collect(),
        messages: ids
            .iter()
            .map(|n| PubMessage {
                id: id(*n),
                timestamp: *n as i64,
                body: Bytes::from(vec![b'x'; 3]),
            })
            .collect(),
    }))
}

fn fin(seq: u64, topic: &str, channel: &str, ids: &[u64]) -> Record {
    Record::Frame(Frame::Fin(Fin {
        seq,
        topic: topic.into(),
        channel: channel.into(),
        ids: ids.iter().map(|n| id(*n)).collect(),
    }))
}

fn admin(seq: u64, op: AdminOp, topic: &str, channel: &str) -> Record {
    Record::Frame(Frame::Admin(Admin {
        seq,
        op,
        topic: topic.into(),
        channel: channel.into(),
        settings: Vec::new(),
    }))
}

fn fanout(seq: u64, topic: &str, channels: &[&str], ids: &[u64], more: bool) -> Record {
    Record::Frame(Frame::Fanout(Fanout {
        seq,
        topic: topic.into(),
        more,
        channels: channels.iter().map(|c| c.to_string()).collect(),
        ids: ids.iter().map(|n| id(*n)).collect(),
    }))
}

fn state_msg(topic: &str, n: u64, topic_pending: bool, channels: &[(&str, i64, u16)]) -> Record {
    Record::Frame(Frame::State(Item::Message(MessageItem {
        topic: topic.into(),
        id: id(n),
        timestamp: n as i64,
        topic_pending,
        topic_due: 0,
        channels: channels
            .iter()
            .map(|(c, due, attempts)| PendingChannel {
                name: c.to_string(),
                due: *due,
                attempts: *attempts,
            })
            .collect(),
        body: Bytes::from_static(b"x"),
    })))
}

/// Applies records, each checked first, all in segment 1.
fn run(records: &[Record]) -> Index {
    let mut ix = Index::new();
    for (i, r) in records.iter().enumerate() {
        ix.check(std::iter::once(r)).unwrap();
        ix.apply(r, loc(1, i as u64));
    }
    ix
}

/// `(topic, id) -> (pending on the topic, [(channel, due, attempts)])`.
type Pending = BTreeMap<(String, MessageId), (bool, Vec<(String, i64, u16)>)>;

fn pending(ix: &Index) -> Pending {
    ix.unsettled()
        .into_iter()
        .map(|(_, m)| {
            (
                (m.topic, m.id),
                (
                    m.topic_pending,
                    m.channels
                        .into_iter()
                        .map(|c| (c.name, c.due, c.attempts))
                        .collect(),
                ),
            )
        })
        .collect()
}

#[test]
fn fins_on_every_channel_settle_a_message() {
    let ix = run(&[
        publish(1, "t", &["a", "b"], &[1, 2], 0),
        fin(2, "t", "a", &[1, 2]),
    ]);
    assert_eq!(ix.messages(), 2);
    let ix2 = run(&[
        publish(1, "t", &["a", "b"], &[1, 2], 0),
        fin(2, "t", "a", &[1, 2]),
        fin(3, "t", "b", &[1]),
    ]);
    assert_eq!(ix2.messages(), 1);
    assert_eq!(ix2.live_bytes(), 3 + MESSAGE_OVERHEAD);
    assert_eq!(ix2.last_seq(), 3);
    assert_eq!(
        pending(&ix2)[&("t".into(), id(2))],
        (false, vec![("b".into(), 0, 0)])
    );
}

#[test]
fn topic_pending_until_fanned_out() {
    let ix = run(&[
        publish(1, "t", &[], &[1, 2], 50),
        fanout(2, "t", &["a"], &[1], true),
        fanout(3, "t", &["b"], &[1], false),
    ]);
    let p = pending(&ix);
    assert_eq!(p[&("t".into(), id(2))], (true, vec![]));
    // Fanned-out messages keep the deferral they were published with.
    assert_eq!(
        p[&("t".into(), id(1))],
        (false, vec![("a".into(), 50, 0), ("b".into(), 50, 0)])
    );
    let names: Vec<_> = ix.topics()[0]
        .channels
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn req_updates_due_and_attempts() {
    let ix = run(&[
        publish(1, "t", &["a"], &[1], 0),
        Record::Frame(Frame::Req(Req {
            seq: 2,
            topic: "t".into(),
            channel: "a".into(),
            entries: vec![ReqEntry {
                id: id(1),
                due: 77,
                attempts: 3,
            }],
        })),
    ]);
    assert_eq!(
        pending(&ix)[&("t".into(), id(1))],
        (false, vec![("a".into(), 77, 3)])
    );
}

#[test]
fn administration() {
    let base = [
        publish(1, "t", &["a", "b"], &[1, 2], 0),
        publish(2, "t", &[], &[3], 0),
        publish(3, "u", &["a"], &[4], 0),
    ];
    let with = |extra: Record| {
        let mut v = base.to_vec();
        v.push(extra);
        run(&v)
    };
    let ix = with(admin(4, AdminOp::Delete, "t", "a"));
    assert_eq!(ix.messages(), 4);
    assert_eq!(ix.topics()[0].channels.len(), 1);
    let ix = with(admin(4, AdminOp::Empty, "t", "a"));
    assert_eq!(ix.topics()[0].channels.len(), 2);
    assert_eq!(
        pending(&ix)[&("t".into(), id(1))],
        (false, vec![("b".into(), 0, 0)])
    );
    // Emptying a topic drops only what is pending on the topic itself.
    let ix = with(admin(4, AdminOp::Empty, "t", ""));
    assert_eq!(ix.messages(), 3);
    let ix = with(admin(4, AdminOp::Delete, "t", ""));
    assert_eq!(ix.messages(), 1);
    assert_eq!(ix.topics().len(), 1);
    let ix = with(admin(4, AdminOp::Pause, "u", "a"));
    assert!(ix.topics()[1].channels[0].paused);
    assert!(!ix.topics()[1].paused);
    let ix = run(&[admin(1, AdminOp::Create, "v", "c")]);
    assert_eq!(
        ix.topics(),
        vec![TopicItem {
            topic: "v".into(),
            paused: false,
            settings: vec![],
            channels: vec![ChannelItem {
                name: "c".into(),
                paused: false,
                settings: vec![],
            }],
        }]
    );
}

#[test]
fn sequence_and_markers_are_checked() {
    let ix = run(&[publish(1, "t", &["a"], &[1], 0)]);
    assert_eq!(
        ix.check([&fin(3, "t", "a", &[1])]),
        Err(IndexError::OutOfSequence {
            expected: 2,
            got: 3
        })
    );
    assert_eq!(
        ix.check([&Record::Frame(Frame::CatchupEnd { seq: 1 })]),
        Err(IndexError::BadCatchupEnd {
            last: 1,
            got: 1,
            catching_up: false
        })
    );
    assert_eq!(
        ix.check([&Record::Frame(Frame::CatchupBegin { seq: 0 })]),
        Err(IndexError::CatchupBehind { last: 1, got: 0 })
    );
    assert_eq!(
        ix.check([&Record::Frame(Frame::Heartbeat)]),
        Err(IndexError::NotARecord(0x40))
    );
    // A batch is checked as a whole.
    assert!(ix
        .check([
            &Record::Frame(Frame::CatchupBegin { seq: 9 }),
            &fin(10, "t", "a", &[1]),
            &Record::Frame(Frame::CatchupEnd { seq: 10 }),
        ])
        .is_ok());
}

#[test]
fn catchup_trims_stale_entries_and_tombstones_early_settlements() {
    let ix = run(&[
        publish(1, "t", &["a", "b"], &[1, 2, 3], 0),
        publish(2, "old", &["z"], &[9], 0),
        // The origin went on without us; now it catches us up at seq 40.
        Record::Frame(Frame::CatchupBegin { seq: 40 }),
        // Live: a FIN of a message whose STATE has not come yet, and a FANOUT likewise.
        fin(41, "t", "a", &[5]),
        fanout(42, "t", &["a"], &[6], false),
        state_msg("t", 1, false, &[("b", 0, 2)]),
        state_msg("t", 5, false, &[("a", 0, 1), ("b", 0, 1)]),
        state_msg("t", 6, true, &[]),
        // A channel deleted during the catch-up is not brought back by a STATE.
        admin(43, AdminOp::Delete, "t", "c"),
        Record::Frame(Frame::State(Item::Topic(TopicItem {
            topic: "t".into(),
            paused: true,
            settings: vec![],
            channels: vec![
                ChannelItem {
                    name: "a".into(),
                    paused: false,
                    settings: vec![],
                },
                ChannelItem {
                    name: "b".into(),
                    paused: false,
                    settings: vec![],
                },
                ChannelItem {
                    name: "c".into(),
                    paused: false,
                    settings: vec![],
                },
            ],
        }))),
        Record::Frame(Frame::CatchupEnd { seq: 43 }),
    ]);
    assert!(!ix.catching_up());
    assert_eq!(ix.last_seq(), 43);
    let p = pending(&ix);
    // 1 keeps only what the STATE confirmed; 2 and 3 and the old topic are gone; 5 lost its
    // FINed channel; 6 was fanned out before its STATE arrived and is dead.
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(p[&("t".into(), id(1))], (false, vec![("b".into(), 0, 2)]));
    assert_eq!(p[&("t".into(), id(5))], (false, vec![("b".into(), 0, 1)]));
    let topics = ix.topics();
    assert_eq!(topics.len(), 1);
    assert!(topics[0].paused);
    let names: Vec<_> = topics[0].channels.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn trimming_rule() {
    let mut ix = Index::new();
    ix.apply(&publish(1, "t", &["a"], &[1], 0), loc(1, 0));
    ix.apply(&publish(2, "t", &["a"], &[2], 0), loc(2, 0));
    ix.apply(&fin(3, "t", "a", &[1]), loc(3, 0));
    // Segment 1 still holds the topic's creation.
    assert_eq!(ix.trimmable(&[1, 2, 3]), 0);
    assert_eq!(ix.pinned_only_by_metadata(1).len(), 1);
    assert!(ix.pinned_only_by_metadata(2).is_empty());
    let refresh = Record::Frame(Frame::State(Item::Topic(ix.topics().remove(0))));
    ix.apply(&refresh, loc(3, 1));
    assert_eq!(ix.trimmable(&[1, 2, 3]), 1);
    ix.apply(&fin(4, "t", "a", &[2]), loc(3, 2));
    assert_eq!(ix.trimmable(&[1, 2, 3]), 2);
    // Never the head.
    assert_eq!(ix.trimmable(&[3]), 0);
    assert_eq!(ix.trimmable(&[]), 0);
    // A catch-up in progress keeps its CATCHUP_BEGIN.
    ix.apply(&Record::Frame(Frame::CatchupBegin { seq: 4 }), loc(4, 0));
    assert!(ix.pins(4));
    assert_eq!(ix.trimmable(&[4, 5]), 0);
    assert!(ix.pinned_only_by_metadata(3).is_empty());
    ix.apply(&Record::Frame(Frame::CatchupEnd { seq: 4 }), loc(5, 0));
    assert!(!ix.pins(4));
}

// ------------------------------------------------------------------------------------------
// The model: plain maps, the rules written as directly as possible.

#[derive(Debug, Clone, Default, PartialEq)]
struct ModelMsg {
    topic_pending: Option<i64>,
    channels: BTreeMap<String, (i64, u16)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct ModelTopic {
    paused: bool,
    channels: BTreeMap<String, bool>,
    messages: BTreeMap<MessageId, ModelMsg>,
}

#[derive(Debug, Default)]
struct Model {
    topics: BTreeMap<String, ModelTopic>,
}

impl Model {
    fn apply(&mut self, r: &Record) {
        let Record::Frame(f) = r else { return };
        match f {
            Frame::Pub(p) => {
                let t = self.topics.entry(p.topic.clone()).or_default();
                for c in &p.channels {
                    t.channels.entry(c.clone()).or_insert(false);
                }
                for m in &p.messages {
                    let e = t.messages.entry(m.id).or_default();
                    if p.channels.is_empty() {
                        e.topic_pending = Some(p.defer_until);
                    }
                    for c in &p.channels {
                        let attempts = e.channels.get(c).map_or(0, |v| v.1);
                        e.channels.insert(c.clone(), (p.defer_until, attempts));
                    }
                }
            }
            Frame::Fin(fin) => {
                if let Some(t) = self.topics.get_mut(&fin.topic) {
                    for i in &fin.ids {
                        if let Some(e) = t.messages.get_mut(i) {
                            e.channels.remove(&fin.channel);
                        }
                    }
                }
            }
            Frame::Req(req) => {
                if let Some(t) = self.topics.get_mut(&req.topic) {
                    for en in &req.entries {
                        if let Some(v) = t
                            .messages
                            .get_mut(&en.id)
                            .and_then(|e| e.channels.get_mut(&req.channel))
                        {
                            *v = (en.due, en.attempts);
                        }
                    }
                }
            }
            Frame::Fanout(fo) => {
                if let Some(t) = self.topics.get_mut(&fo.topic) {
                    for c in &fo.channels {
                        t.channels.entry(c.clone()).or_insert(false);
                    }
                    for i in &fo.ids {
                        if let Some(e) = t.messages.get_mut(i) {
                            if let Some(due) = e.topic_pending {
                                for c in &fo.channels {
                                    e.channels.entry(c.clone()).or_insert((due, 0));
                                }
                                if !fo.more {
                                    e.topic_pending = None;
                                }
                            }
                        }
                    }
                }
            }
            Frame::Admin(a) => {
                let on_topic = a.channel.is_empty();
                match a.op {
                    AdminOp::Create | AdminOp::Pause | AdminOp::Unpause => {
                        let t = self.topics.entry(a.topic.clone()).or_default();
                        let v = a.op == AdminOp::Pause;
                        if on_topic {
                            if a.op != AdminOp::Create {
                                t.paused = v;
                            }
                        } else {
                            let c = t.channels.entry(a.channel.clone()).or_insert(false);
                            if a.op != AdminOp::Create {
                                *c = v;
                            }
                        }
                    }
                    // Settings are compared by the differential test (diff.rs).
                    AdminOp::Settings => {}
                    AdminOp::Delete if on_topic => {
                        self.topics.remove(&a.topic);
                    }
                    AdminOp::Delete | AdminOp::Empty => {
                        if let Some(t) = self.topics.get_mut(&a.topic) {
                            if a.op == AdminOp::Delete {
                                t.channels.remove(&a.channel);
                            }
                            for e in t.messages.values_mut() {
                                if on_topic {
                                    e.topic_pending = None;
                                } else {
                                    e.channels.remove(&a.channel);
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        for t in self.topics.values_mut() {
            t.messages
                .retain(|_, e| e.topic_pending.is_some() || !e.channels.is_empty());
        }
    }

    fn topics(&self) -> Vec<TopicItem> {
        self.topics
            .iter()
            .map(|(name, t)| TopicItem {
                topic: name.clone(),
                paused: t.paused,
                settings: vec![],
                channels: t
                    .channels
                    .iter()
                    .map(|(c, p)| ChannelItem {
                        name: c.clone(),
                        paused: *p,
                        settings: vec![],
                    })
                    .collect(),
            })
            .collect()
    }

    fn pending(&self) -> Pending {
        let mut out = BTreeMap::new();
        for (name, t) in &self.topics {
            for (i, e) in &t.messages {
                out.insert(
                    (name.clone(), *i),
                    (
                        e.topic_pending.is_some(),
                        e.channels
                            .iter()
                            .map(|(c, (d, a))| (c.clone(), *d, *a))
                            .collect(),
                    ),
                );
            }
        }
        out
    }
}

/// An operation with the seq left out (filled in order).
#[derive(Debug, Clone)]
enum Op {
    Pub(usize, Vec<usize>, u8, i64),
    Fin(usize, usize, Vec<u64>),
    Req(usize, usize, Vec<u64>, i64, u16),
    Fanout(usize, Vec<usize>, Vec<u64>, bool),
    Admin(u8, usize, Option<usize>),
}

const TOPICS: [&str; 2] = ["t0", "t1"];
const CHANNELS: [&str; 3] = ["a", "b", "c"];

fn op() -> impl Strategy<Value = Op> {
    let chans = || proptest::collection::vec(0..3usize, 0..3);
    let ids = || proptest::collection::vec(0..12u64, 1..4);
    prop_oneof![
        4 => (0..2usize, chans(), 1..4u8, prop::sample::select(vec![0i64, 100]))
            .prop_map(|(t, c, n, d)| Op::Pub(t, c, n, d)),
        4 => (0..2usize, 0..3usize, ids()).prop_map(|(t, c, i)| Op::Fin(t, c, i)),
        1 => (0..2usize, 0..3usize, ids(), 0..200i64, 0..5u16)
            .prop_map(|(t, c, i, d, a)| Op::Req(t, c, i, d, a)),
        2 => (0..2usize, chans(), ids(), any::<bool>())
            .prop_map(|(t, c, i, m)| Op::Fanout(t, c, i, m)),
        1 => (1..=5u8, 0..2usize, prop::option::of(0..3usize))
            .prop_map(|(o, t, c)| Op::Admin(o, t, c)),
    ]
}

/// Turns ops into records with consecutive seqs and fresh message IDs per publish.
fn records(ops: &[Op]) -> Vec<Record> {
    let mut next_id = 0u64;
    ops.iter()
        .enumerate()
        .map(|(i, op)| {
            let seq = i as u64 + 1;
            let names = |v: &[usize]| v.iter().map(|c| CHANNELS[*c]).collect::<Vec<_>>();
            match op {
                Op::Pub(t, c, n, d) => {
                    let ids: Vec<u64> = (next_id..next_id + u64::from(*n)).collect();
                    next_id += u64::from(*n);
                    let mut c = names(c);
                    c.dedup();
                    publish(seq, TOPICS[*t], &c, &ids, *d)
                }
                Op::Fin(t, c, ids) => fin(seq, TOPICS[*t], CHANNELS[*c], ids),
                Op::Req(t, c, ids, due, attempts) => Record::Frame(Frame::Req(Req {
                    seq,
                    topic: TOPICS[*t].into(),
                    channel: CHANNELS[*c].into(),
                    entries: ids
                        .iter()
                        .map(|n| ReqEntry {
                            id: id(*n),
                            due: *due,
                            attempts: *attempts,
                        })
                        .collect(),
                })),
                Op::Fanout(t, c, ids, more) => fanout(seq, TOPICS[*t], &names(c), ids, *more),
                Op::Admin(o, t, c) => {
                    let op = [
                        AdminOp::Create,
                        AdminOp::Delete,
                        AdminOp::Empty,
                        AdminOp::Pause,
                        AdminOp::Unpause,
                    ][*o as usize - 1];
                    admin(seq, op, TOPICS[*t], c.map_or("", |c| CHANNELS[c]))
                }
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The index agrees with the model after every record; and replaying only the segments
    /// trimming keeps (each starting with BASE, as the store writes them, and refreshing
    /// metadata as the store does) gives the same topics and pending entries.
    #[test]
    fn index_matches_model_and_trimmed_replay(
        ops in proptest::collection::vec(op(), 1..60),
        per_segment in 1usize..6,
    ) {
        let recs = records(&ops);
        let mut ix = Index::new();
        let mut model = Model::default();
        // (segment, record) as the store would have written them.
        let mut log: Vec<(u64, Record)> = Vec::new();
        let mut segment = 1u64;
        let mut in_segment = 0usize;
        let mut segments = vec![1u64];
        for r in &recs {
            if in_segment == per_segment {
                segment += 1;
                in_segment = 0;
                segments.push(segment);
                let base = Record::Base { last_seq: ix.last_seq() };
                ix.apply(&base, loc(segment, 0));
                log.push((segment, base));
            }
            prop_assert!(ix.check(std::iter::once(r)).is_ok());
            ix.apply(r, loc(segment, log.len() as u64));
            log.push((segment, r.clone()));
            in_segment += 1;
            model.apply(r);
            prop_assert_eq!(ix.topics(), model.topics());
            prop_assert_eq!(pending(&ix), model.pending());
            prop_assert_eq!(ix.messages() as usize, model.pending().len());
            // Trim as the store does: refresh metadata that alone holds the front.
            for _ in 0..segments.len() {
                let n = ix.trimmable(&segments);
                segments.drain(..n);
                if segments.len() < 2 {
                    break;
                }
                let refresh = ix.pinned_only_by_metadata(segments[0]);
                if refresh.is_empty() {
                    break;
                }
                for t in refresh {
                    let r = Record::Frame(Frame::State(Item::Topic(t)));
                    ix.apply(&r, loc(segment, log.len() as u64));
                    log.push((segment, r));
                }
            }
        }
        let mut replayed = Index::new();
        for (i, (seg, r)) in log.iter().enumerate() {
            if segments.contains(seg) {
                prop_assert!(replayed.check(std::iter::once(r)).is_ok(), "{:?}", r);
                replayed.apply(r, loc(*seg, i as u64));
            }
        }
        prop_assert_eq!(replayed.topics(), ix.topics());
        prop_assert_eq!(pending(&replayed), pending(&ix));
        prop_assert_eq!(replayed.last_seq(), ix.last_seq());
    }
}

/// Consecutive GUIDs of one time unit hash to consecutive buckets (the low bits), with tags
/// (the top 7 bits) that differ; other keys still hash (FxHash) and equal keys agree.
#[test]
fn id_hasher_keeps_a_time_unit_together() {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let b = BuildHasherDefault::<IdHasher>::default();
    let base = (12_345u64 << 22) | (7 << 12);
    let h: Vec<u64> = (0..64)
        .map(|seq| b.hash_one(MessageId::from_u64(base | seq)))
        .collect();
    for w in h.windows(2) {
        assert_eq!(
            (w[1].wrapping_sub(w[0])) & 0xffff,
            1,
            "{:x} {:x}",
            w[0],
            w[1]
        );
    }
    let tags: std::collections::HashSet<u64> = h.iter().map(|h| h >> 57).collect();
    assert!(tags.len() > 16, "{}", tags.len());
    let next_unit = b.hash_one(MessageId::from_u64(base + (1 << 22)));
    assert_ne!(next_unit & 0xffff_ffff, h[0] & 0xffff_ffff);
    let odd = MessageId(*b"not-hex-digits!!");
    assert_eq!(b.hash_one(odd), b.hash_one(odd));
    assert_ne!(b.hash_one(odd), b.hash_one(MessageId(*b"not-hex-digits!?")));
}
