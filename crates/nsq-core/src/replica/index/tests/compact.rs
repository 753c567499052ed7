//! The compact representation's own cases: a message goes wide and comes back, IDs that are
//! not GUIDs, places past 4 GiB, a catch-up's REQ, chunks freed as messages settle.

use bytes::Bytes;
use nsq_protocol::replication::{Frame, Pub, PubMessage, Req, ReqEntry};
use nsq_protocol::MessageId;

use super::super::ids::CHUNK;
use super::super::state::NARROW_SLOTS;
use super::{fanout, fin, id, loc, pending, publish, run, Index, Loc, Record};

/// `(chunks, wide states, due times)` of topic `t`.
fn shape(ix: &Index, t: &str) -> (usize, usize, usize) {
    ix.topics[t].msgs.check()
}

fn req(seq: u64, channel: &str, n: u64, due: i64, attempts: u16) -> Record {
    Record::Frame(Frame::Req(Req {
        seq,
        topic: "t".into(),
        channel: channel.into(),
        entries: vec![ReqEntry {
            id: id(n),
            due,
            attempts,
        }],
    }))
}

#[test]
fn deferred_and_requeued_messages() {
    let mut ix = run(&[
        publish(1, "t", &["a"], &[1], 0),
        publish(2, "t", &["a", "b"], &[2], 500),
    ]);
    assert_eq!(
        shape(&ix, "t"),
        (1, 0, 1),
        "deferred: narrow, its due time aside"
    );
    ix.apply(&req(3, "a", 1, 0, 3), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 1, 1), "with attempts: wide");
    assert_eq!(
        pending(&ix)[&("t".into(), id(1))],
        (false, vec![("a".into(), 0, 3)])
    );
    // Due at once on one channel, still deferred on the other: wide.
    ix.apply(&req(4, "a", 2, 0, 0), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 2, 0));
    assert_eq!(
        pending(&ix)[&("t".into(), id(2))],
        (false, vec![("a".into(), 0, 0), ("b".into(), 500, 0)])
    );
    // One due time again: narrow.
    ix.apply(&fin(5, "t", "a", &[1, 2]), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 0, 1));
    assert_eq!(
        pending(&ix)[&("t".into(), id(2))],
        (false, vec![("b".into(), 500, 0)])
    );
    ix.apply(&fin(6, "t", "b", &[2]), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (0, 0, 0));
    assert_eq!(ix.messages(), 0);
}

#[test]
fn a_deferred_publish_to_the_topic_keeps_its_time_when_fanned_out() {
    let mut ix = run(&[publish(1, "t", &[], &[1, 2], 900)]);
    assert_eq!(shape(&ix, "t"), (1, 0, 2));
    ix.apply(&fanout(2, "t", &["a", "b"], &[1], false), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 0, 2));
    let p = pending(&ix);
    assert_eq!(
        p[&("t".into(), id(1))],
        (false, vec![("a".into(), 900, 0), ("b".into(), 900, 0)])
    );
    assert_eq!(p[&("t".into(), id(2))], (true, vec![]));
    assert_eq!(ix.unsettled()[1].1.topic_due, 900);
}

#[test]
fn more_channels_than_bits() {
    let n = NARROW_SLOTS as usize;
    let names: Vec<String> = (0..n + 2).map(|c| format!("c{c:02}")).collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut ix = run(&[
        publish(1, "t", &all, &[1], 0),
        publish(2, "t", &all[..3], &[2], 0),
    ]);
    assert_eq!(shape(&ix, "t"), (1, 1, 0));
    ix.apply(&fin(3, "t", all[n], &[1]), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 1, 0));
    ix.apply(&fin(4, "t", all[n + 1], &[1]), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 0, 0), "back within the narrow slots");
    assert_eq!(pending(&ix)[&("t".into(), id(1))].1.len(), n);
    // Fanned out to a channel past the bits: wide.
    ix.apply(&publish(5, "t", &[], &[3], 0), loc(1, 99));
    ix.apply(&fanout(6, "t", &[all[n + 1]], &[3], false), loc(1, 99));
    assert_eq!(shape(&ix, "t"), (1, 1, 0));
    assert_eq!(
        pending(&ix)[&("t".into(), id(3))],
        (false, vec![(all[n + 1].into(), 0, 0)])
    );
}

#[test]
fn ids_that_are_not_guids() {
    let odd = MessageId(*b"not-a-guid-00001");
    let upper = MessageId(*b"00000000000000AB");
    let record = Record::Frame(Frame::Pub(Pub {
        seq: 1,
        topic: "t".into(),
        defer_until: 0,
        channels: vec!["a".into()],
        messages: [odd, upper, id(0xab)]
            .into_iter()
            .map(|id| PubMessage {
                id,
                timestamp: 0,
                body: Bytes::from_static(b"x"),
            })
            .collect(),
    }));
    let mut ix = run(&[record]);
    assert_eq!(
        ix.messages(),
        3,
        "an upper-case ID is not the GUID's lower-case one"
    );
    let fin_odd = Record::Frame(Frame::Fin(nsq_protocol::replication::Fin {
        seq: 2,
        topic: "t".into(),
        channel: "a".into(),
        ids: vec![odd, upper],
    }));
    ix.apply(&fin_odd, loc(1, 99));
    assert_eq!(ix.messages(), 1);
    assert_eq!(ix.unsettled()[0].1.id, id(0xab));
}

#[test]
fn places_past_four_gib() {
    let mut ix = Index::new();
    let far = Loc {
        segment: 1 << 33,
        offset: 7,
        len: 50,
    };
    let deep = Loc {
        segment: 3,
        offset: 5 << 30,
        len: 50,
    };
    ix.apply(&publish(1, "t", &["a"], &[1], 0), far);
    ix.apply(&publish(2, "t", &["a"], &[2], 0), deep);
    assert_eq!(shape(&ix, "t"), (1, 2, 0));
    let places: Vec<(u64, u64)> = ix
        .unsettled()
        .iter()
        .map(|(l, _)| (l.segment, l.offset))
        .collect();
    assert_eq!(places, [(3, 5 << 30), (1 << 33, 7)]);
    let held: Vec<u64> = ix.live.per_segment.keys().copied().collect();
    assert_eq!(held, [3, 1 << 33]);
    ix.apply(&fin(3, "t", "a", &[1, 2]), loc(1, 99));
    assert!(ix.live.per_segment.is_empty());
    assert_eq!(shape(&ix, "t"), (0, 0, 0));
}

#[test]
fn a_requeue_during_a_catchup_confirms() {
    let ix = run(&[
        publish(1, "t", &["a", "b"], &[1, 2], 0),
        Record::Frame(Frame::CatchupBegin { seq: 1 }),
        req(2, "a", 1, 0, 0),
        Record::Frame(Frame::CatchupEnd { seq: 2 }),
    ]);
    // Only the requeued pending was confirmed; the rest of the old state went.
    assert_eq!(ix.messages(), 1);
    assert_eq!(
        pending(&ix)[&("t".into(), id(1))],
        (false, vec![("a".into(), 0, 0)])
    );
}

#[test]
fn a_fanout_listing_a_message_twice_during_a_catchup() {
    // The first listing settles it (no channel to go to); the second must not leave a
    // tombstone that keeps the catch-up's STATE of it out.
    let ix = run(&[
        Record::Frame(Frame::CatchupBegin { seq: 0 }),
        publish(1, "t", &[], &[1], 0),
        fanout(2, "t", &[], &[1, 1], false),
        super::state_msg("t", 1, true, &[]),
        Record::Frame(Frame::CatchupEnd { seq: 2 }),
    ]);
    assert_eq!(pending(&ix)[&("t".into(), id(1))], (true, vec![]));
}

#[test]
fn chunks_follow_what_is_held() {
    let n = 10 * CHUNK as u64;
    let mut records: Vec<Record> = (1..=n).map(|i| publish(i, "t", &["a"], &[i], 0)).collect();
    let mut ix = run(&records);
    assert_eq!(shape(&ix, "t"), (10, 0, 0));
    records.clear();
    for (k, chunk) in (1..=n).collect::<Vec<_>>().chunks(64).enumerate() {
        ix.apply(&fin(n + 1 + k as u64, "t", "a", chunk), loc(1, 99));
    }
    assert_eq!(ix.messages(), 0);
    assert_eq!(shape(&ix, "t"), (0, 0, 0));
}
