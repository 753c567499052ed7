//! The compact index against the one it replaced (`oracle.rs`), record by record, on
//! histories with catch-ups, STATE items, deferrals, requeues, more channels than a narrow
//! state has bits for, IDs that are not GUIDs and places past 4 GiB: every query answers
//! the same (the location's length and the timestamp aside, which the index no longer
//! keeps).

use bytes::Bytes;
use nsq_protocol::replication::{
    Admin, AdminOp, ChannelItem, Fanout, Fin, Frame, Item, MessageItem, PendingChannel, Pub,
    PubMessage, Req, ReqEntry, TopicItem,
};
use nsq_protocol::MessageId;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::Cell;

use super::super::state::NARROW_SLOTS;
use super::oracle::Oracle;
use super::{Index, Loc, Record};

const TOPICS: [&str; 2] = ["t0", "t1"];

fn channel(c: u8) -> String {
    format!("c{c:02}")
}

/// Message `n`: mostly a GUID, some IDs of other bytes.
fn mid(n: u16) -> MessageId {
    if n % 11 == 5 {
        let mut b = *b"odd-id-000000000";
        b[11..].copy_from_slice(format!("{:05}", n).as_bytes());
        MessageId(b)
    } else {
        MessageId::from_u64((440_000_000_000u64 << 22) | (u64::from(n) * 3))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Pub(usize, Vec<u8>, u8, bool),
    Fin(usize, u8, Vec<u16>),
    Req(usize, u8, Vec<u16>, i64, u16),
    Fanout(usize, Vec<u8>, Vec<u16>, bool),
    Admin(u8, usize, Option<u8>),
    StateTopic(usize, bool, Vec<(u8, bool)>),
    StateMsg(usize, u16, Option<i64>, Vec<(u8, i64, u16)>),
    Begin(u8),
    End,
    /// A new segment: 0 plain, 1 with offsets past 4 GiB, 2 numbered past 2^32.
    Segment(u8),
    Reset,
}

/// Queue settings that vary with `n`: none for a third of the values (cleared).
fn settings_for(n: u64) -> Vec<(String, String)> {
    if n.is_multiple_of(3) {
        Vec::new()
    } else {
        vec![("ttl".into(), n.to_string())]
    }
}

fn op() -> impl Strategy<Value = Op> {
    let chan = || prop_oneof![0..3u8, 0..20u8];
    let chans = move || proptest::collection::vec(chan(), 0..4);
    // How far back from the newest message (the one settled are mostly the recent ones).
    let ids = || proptest::collection::vec(0..16u16, 1..5);
    let due = || prop::sample::select(vec![0i64, 0, 500]);
    prop_oneof![
        6 => (0..2usize, chans(), 1..4u8, any::<bool>()).prop_map(|(t, c, n, d)| Op::Pub(t, c, n, d)),
        5 => (0..2usize, chan(), ids()).prop_map(|(t, c, i)| Op::Fin(t, c, i)),
        3 => (0..2usize, chan(), ids(), due(), 0..2u16)
            .prop_map(|(t, c, i, d, a)| Op::Req(t, c, i, d, a)),
        3 => (0..2usize, chans(), ids(), any::<bool>())
            .prop_map(|(t, c, i, m)| Op::Fanout(t, c, i, m)),
        1 => (1..=6u8, 0..2usize, prop::option::of(chan())).prop_map(|(o, t, c)| Op::Admin(o, t, c)),
        // Up to 20 channels at once: more than a narrow state has bits for.
        1 => (0..2usize, any::<bool>(), proptest::collection::vec((0..20u8, any::<bool>()), 0..20))
            .prop_map(|(t, p, c)| Op::StateTopic(t, p, c)),
        3 => (0..2usize, 0..20u16, prop::option::of(due()),
              proptest::collection::vec((chan(), due(), 0..3u16), 0..3))
            .prop_map(|(t, i, tp, c)| Op::StateMsg(t, i, tp, c)),
        2 => (0..3u8).prop_map(Op::Begin),
        2 => Just(Op::End),
        1 => prop::sample::select(vec![0u8, 0, 0, 1, 2]).prop_map(Op::Segment),
        1 => (0..20u8).prop_map(|n| if n == 0 { Op::Reset } else { Op::Segment(0) }),
    ]
}

/// The records of `ops` with their places, as a store would lay them out.
struct Log {
    seq: u64,
    catching_up: bool,
    next_id: u16,
    segment: u64,
    offset: u64,
    segments: Vec<u64>,
}

impl Log {
    fn place(&mut self) -> Loc {
        let loc = Loc {
            segment: self.segment,
            offset: self.offset,
            len: 10,
        };
        self.offset += 10;
        loc
    }

    /// The message `back` before the next one.
    fn id(&self, back: u16) -> MessageId {
        mid(self.next_id.saturating_sub(back + 1))
    }

    fn ids(&self, back: &[u16]) -> Vec<MessageId> {
        back.iter().map(|b| self.id(*b)).collect()
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn record(&mut self, op: &Op) -> Option<Record> {
        let frame = match op {
            Op::Pub(t, chans, n, defer) => {
                let first = self.next_id;
                self.next_id += u16::from(*n);
                Frame::Pub(Pub {
                    seq: self.next_seq(),
                    topic: TOPICS[*t].into(),
                    defer_until: if *defer { 700 } else { 0 },
                    channels: chans.iter().map(|c| channel(*c)).collect(),
                    messages: (first..self.next_id)
                        .map(|n| PubMessage {
                            id: mid(n),
                            timestamp: i64::from(n),
                            body: Bytes::from(vec![b'x'; usize::from(n % 5)]),
                        })
                        .collect(),
                })
            }
            Op::Fin(t, c, ids) => Frame::Fin(Fin {
                seq: self.next_seq(),
                topic: TOPICS[*t].into(),
                channel: channel(*c),
                ids: self.ids(ids),
            }),
            Op::Req(t, c, ids, due, attempts) => Frame::Req(Req {
                seq: self.next_seq(),
                topic: TOPICS[*t].into(),
                channel: channel(*c),
                entries: ids
                    .iter()
                    .map(|n| ReqEntry {
                        id: self.id(*n),
                        due: *due,
                        attempts: *attempts,
                    })
                    .collect(),
            }),
            Op::Fanout(t, chans, ids, more) => Frame::Fanout(Fanout {
                seq: self.next_seq(),
                topic: TOPICS[*t].into(),
                more: *more,
                channels: chans.iter().map(|c| channel(*c)).collect(),
                ids: self.ids(ids),
            }),
            Op::Admin(o, t, c) => {
                let seq = self.next_seq();
                let op = [
                    AdminOp::Create,
                    AdminOp::Delete,
                    AdminOp::Empty,
                    AdminOp::Pause,
                    AdminOp::Unpause,
                    AdminOp::Settings,
                ][usize::from(*o) - 1];
                Frame::Admin(Admin {
                    seq,
                    op,
                    topic: TOPICS[*t].into(),
                    channel: c.map_or(String::new(), channel),
                    settings: if op == AdminOp::Settings {
                        settings_for(seq)
                    } else {
                        Vec::new()
                    },
                })
            }
            Op::StateTopic(t, paused, chans) => Frame::State(Item::Topic(TopicItem {
                topic: TOPICS[*t].into(),
                paused: *paused,
                settings: settings_for(u64::from(*paused) + *t as u64),
                channels: chans
                    .iter()
                    .map(|(c, p)| ChannelItem {
                        name: channel(*c),
                        paused: *p,
                        settings: settings_for(u64::from(*c) + u64::from(*p)),
                    })
                    .collect(),
            })),
            // 16 and over: a message not published yet (a later PUB may bring it again).
            Op::StateMsg(t, n, topic_due, chans) => Frame::State(Item::Message(MessageItem {
                topic: TOPICS[*t].into(),
                id: if *n < 16 {
                    self.id(*n)
                } else {
                    mid(self.next_id + n - 16)
                },
                timestamp: i64::from(*n),
                topic_pending: topic_due.is_some(),
                topic_due: topic_due.unwrap_or(0),
                channels: chans
                    .iter()
                    .map(|(c, due, attempts)| PendingChannel {
                        name: channel(*c),
                        due: *due,
                        attempts: *attempts,
                    })
                    .collect(),
                body: Bytes::from_static(b"yy"),
            })),
            Op::Begin(skip) => {
                self.seq += u64::from(*skip);
                self.catching_up = true;
                Frame::CatchupBegin { seq: self.seq }
            }
            Op::End if self.catching_up => {
                self.catching_up = false;
                Frame::CatchupEnd { seq: self.seq }
            }
            Op::End => return None,
            Op::Segment(kind) => {
                self.segment += if *kind == 2 { 1 << 32 } else { 1 };
                self.offset = if *kind == 1 { 5 << 30 } else { 0 };
                self.segments.push(self.segment);
                return Some(Record::Base { last_seq: self.seq });
            }
            Op::Reset => {
                self.catching_up = false;
                return Some(Record::Reset { last_seq: self.seq });
            }
        };
        Some(Record::Frame(frame))
    }
}

/// Both indexes' answers, the location's length and the timestamp left out.
fn unsettled_of(v: Vec<(Loc, MessageItem)>) -> Vec<(Loc, MessageItem)> {
    v.into_iter()
        .map(|(mut loc, mut m)| {
            loc.len = 0;
            m.timestamp = 0;
            (loc, m)
        })
        .collect()
}

/// What the histories reached, so that a generator that stops reaching it is noticed.
#[derive(Default)]
struct Reached {
    wide: Cell<usize>,
    deferred: Cell<usize>,
    slots_past_narrow: Cell<usize>,
    other_ids: Cell<usize>,
    catchups_ended: Cell<usize>,
}

fn bump(c: &Cell<usize>, when: bool) {
    c.set(c.get() + usize::from(when));
}

#[test]
fn the_compact_index_answers_as_the_old_one() {
    let reached = Reached::default();
    let mut runner = TestRunner::new(Config {
        cases: 400,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..120), |ops| {
        let mut log = Log {
            seq: 0,
            catching_up: false,
            next_id: 0,
            segment: 1,
            offset: 0,
            segments: vec![1],
        };
        let mut ix = Index::new();
        let mut old = Oracle::new();
        for op in &ops {
            let Some(r) = log.record(op) else { continue };
            prop_assert!(ix.check(std::iter::once(&r)).is_ok(), "{:?}", r);
            let loc = log.place();
            ix.apply(&r, loc);
            old.apply(&r, loc);
            prop_assert_eq!(ix.topics(), old.topics(), "after {:?}", r);
            let unsettled = unsettled_of(ix.unsettled());
            prop_assert_eq!(&unsettled, &unsettled_of(old.unsettled()), "after {:?}", r);
            prop_assert_eq!(ix.messages(), old.messages());
            prop_assert_eq!(ix.live_bytes(), old.live_bytes());
            prop_assert_eq!(ix.last_seq(), old.last_seq());
            prop_assert_eq!(ix.catching_up(), old.catching_up());
            prop_assert_eq!(ix.trimmable(&log.segments), old.trimmable(&log.segments));
            for s in &log.segments {
                prop_assert_eq!(ix.pins(*s), old.pins(*s));
                prop_assert_eq!(
                    ix.pinned_only_by_metadata(*s),
                    old.pinned_only_by_metadata(*s)
                );
            }
            for t in ix.topics.values() {
                let (_, wide, dues) = t.msgs.check();
                bump(&reached.wide, wide > 0);
                bump(&reached.deferred, dues > 0);
            }
            bump(
                &reached.slots_past_narrow,
                unsettled.iter().any(|(_, m)| {
                    m.channels.iter().any(|c| {
                        ix.topics[&m.topic]
                            .slot(&c.name)
                            .is_some_and(|s| s >= NARROW_SLOTS)
                    })
                }),
            );
            bump(
                &reached.other_ids,
                unsettled.iter().any(|(_, m)| m.id.0.starts_with(b"odd")),
            );
            bump(
                &reached.catchups_ended,
                matches!(r, Record::Frame(Frame::CatchupEnd { .. })) && ix.messages() > 0,
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    for (what, n) in [
        ("wide states", &reached.wide),
        ("deferred narrow states", &reached.deferred),
        (
            "a channel slot past the narrow ones",
            &reached.slots_past_narrow,
        ),
        ("IDs that are not GUIDs", &reached.other_ids),
        (
            "catch-ups ending with messages held",
            &reached.catchups_ended,
        ),
    ] {
        assert!(n.get() > 0, "no history reached {what}");
    }
}
