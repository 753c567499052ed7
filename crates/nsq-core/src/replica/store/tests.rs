//! The store on real files in a temporary directory: restart, torn tail, damage, trimming,
//! compaction, the size bound, the takeover walk.

use std::fs::{self, OpenOptions};
use std::io::Write;

use bytes::Bytes;
use nsq_protocol::replication::{Fin, Frame, Pub, PubMessage};
use nsq_protocol::MessageId;

use super::*;

fn id(n: u64) -> MessageId {
    MessageId::from_u64(n)
}

fn body(n: u64) -> Bytes {
    Bytes::from(format!("body-{n}-{}", "x".repeat((n % 7) as usize)))
}

fn publish(seq: u64, channels: &[&str], ids: &[u64]) -> Record {
    Record::Frame(Frame::Pub(Pub {
        seq,
        topic: "t".into(),
        defer_until: 0,
        channels: channels.iter().map(|c| c.to_string()).collect(),
        messages: ids
            .iter()
            .map(|n| PubMessage {
                id: id(*n),
                timestamp: *n as i64,
                body: body(*n),
            })
            .collect(),
    }))
}

fn fin(seq: u64, channel: &str, ids: &[u64]) -> Record {
    Record::Frame(Frame::Fin(Fin {
        seq,
        topic: "t".into(),
        channel: channel.into(),
        ids: ids.iter().map(|n| id(*n)).collect(),
    }))
}

fn small() -> StoreOptions {
    StoreOptions {
        max_bytes: 1 << 30,
        segment_bytes: 512,
    }
}

/// Every unsettled message as `(id, body, channels)`, and the unreadable count.
fn walk(s: &ReplicaStore) -> (Vec<(MessageId, Bytes, Vec<String>)>, u64) {
    let mut out = Vec::new();
    let bad = s
        .for_each_unsettled(|m| {
            out.push((
                m.id,
                m.body,
                m.channels.into_iter().map(|c| c.name).collect(),
            ))
        })
        .unwrap();
    out.sort_by_key(|m| m.0);
    (out, bad)
}

fn seg_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn backlog_dir_names_origin_and_epoch() {
    assert_eq!(
        backlog_dir(Path::new("/d"), 0x6d1f0c33a9e2b774, 3),
        Path::new("/d/replica/6d1f0c33a9e2b774.3")
    );
}

#[test]
fn restart_rebuilds_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("b");
    let (mut s, report) = ReplicaStore::open(&dir, small()).unwrap();
    assert_eq!(report, OpenReport::default());
    s.append(&[publish(1, &["a", "b"], &[1, 2, 3]), fin(2, "a", &[1])])
        .unwrap();
    s.append(&[fin(3, "b", &[1, 2])]).unwrap();
    s.sync().unwrap();
    let before = walk(&s);
    assert_eq!(before.0.len(), 2);
    assert_eq!(before.0[0], (id(2), body(2), vec!["a".to_string()]));
    drop(s);
    let (s, report) = ReplicaStore::open(&dir, small()).unwrap();
    assert_eq!(report.records, 3);
    assert_eq!(s.last_seq(), 3);
    assert_eq!(walk(&s), before);
    assert_eq!(s.topics().len(), 1);
}

#[test]
fn refused_batches_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    s.append(&[publish(1, &["a"], &[1])]).unwrap();
    let bytes = s.bytes();
    let e = s
        .append(&[fin(2, "a", &[9]), publish(4, &["a"], &[2])])
        .unwrap_err();
    assert!(matches!(
        e,
        StoreError::Index(IndexError::OutOfSequence {
            expected: 3,
            got: 4
        })
    ));
    assert!(matches!(
        s.append(&[Record::Base { last_seq: 1 }]),
        Err(StoreError::Index(IndexError::NotARecord(0x71)))
    ));
    assert_eq!(s.bytes(), bytes);
    assert_eq!(s.last_seq(), 1);
}

#[test]
fn torn_tail_is_cut_and_appending_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), StoreOptions::default()).unwrap();
    s.append(&[publish(1, &["a"], &[1, 2])]).unwrap();
    s.append(&[fin(2, "a", &[1])]).unwrap();
    let good = s.bytes();
    let expect = walk(&s);
    drop(s);
    // A write cut short: half of the next record.
    let mut extra = Vec::new();
    record::encode(&fin(3, "a", &[2]), &mut extra).unwrap();
    let path = tmp.path().join(segment_name(1));
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&extra[..extra.len() / 2]).unwrap();
    drop(f);
    let (mut s, report) = ReplicaStore::open(tmp.path(), StoreOptions::default()).unwrap();
    assert_eq!(report.truncated, Some((1, good, (extra.len() / 2) as u64)));
    assert_eq!(fs::metadata(&path).unwrap().len(), good);
    assert_eq!(walk(&s), expect);
    s.append(&[fin(3, "a", &[2])]).unwrap();
    assert_eq!(s.index().messages(), 0);
    drop(s);
    let (s, report) = ReplicaStore::open(tmp.path(), StoreOptions::default()).unwrap();
    assert_eq!(report.truncated, None);
    assert_eq!(s.last_seq(), 3);
    assert_eq!(s.index().messages(), 0);
}

#[test]
fn damage_in_an_older_segment_is_reported_and_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    // Message 0 stays live, so segment 1 is kept.
    s.append(&[publish(1, &["a"], &[0])]).unwrap();
    let mut seq = 1;
    for n in 1..40 {
        seq += 1;
        s.append(&[publish(seq, &["a"], &[n])]).unwrap();
    }
    assert!(s.segments() >= 3, "{}", s.segments());
    let seg1 = tmp.path().join(segment_name(1));
    let len = fs::metadata(&seg1).unwrap().len();
    drop(s);
    // Flip a byte in the last record of segment 1.
    let mut data = fs::read(&seg1).unwrap();
    let last = data.len() - 3;
    data[last] ^= 0xff;
    fs::write(&seg1, &data).unwrap();
    let (s, report) = ReplicaStore::open(tmp.path(), small()).unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert_eq!(report.damaged[0].segment, 1);
    assert!(report.damaged[0].skipped > 0 && report.damaged[0].offset < len);
    assert_eq!(report.truncated, None);
    // One message lost its copy; the rest are there, and the seq is known from later BASEs.
    assert_eq!(s.index().messages(), 39);
    assert_eq!(s.last_seq(), 40);
}

#[test]
fn settled_segments_are_deleted_and_disk_follows_the_backlog() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    let mut seq = 0;
    let mut peak = 0;
    for round in 0..200u64 {
        seq += 1;
        s.append(&[publish(seq, &["a", "b"], &[round])]).unwrap();
        seq += 1;
        s.append(&[fin(seq, "a", &[round])]).unwrap();
        seq += 1;
        s.append(&[fin(seq, "b", &[round])]).unwrap();
        peak = peak.max(s.bytes());
    }
    // The topic's creation is refreshed so the first segment can go too.
    assert!(s.segments() <= 2, "{:?}", seg_files(tmp.path()));
    assert!(peak <= 3 * 512, "peak {peak}");
    assert_eq!(s.index().messages(), 0);
    drop(s);
    let (s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    assert_eq!(s.last_seq(), seq);
    assert_eq!(s.topics()[0].channels.len(), 2);
}

#[test]
fn compaction_keeps_only_the_live_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    // Message 0 is never finished: it pins every segment after it.
    s.append(&[publish(1, &["a"], &[0])]).unwrap();
    let mut seq = 1;
    for n in 1..100 {
        seq += 1;
        s.append(&[publish(seq, &["a"], &[n])]).unwrap();
        seq += 1;
        s.append(&[fin(seq, "a", &[n])]).unwrap();
    }
    assert!(s.segments() > 5);
    assert!(s.wants_compaction());
    let before = walk(&s);
    let bytes = s.bytes();
    assert!(s.compact().unwrap());
    assert_eq!(s.segments(), 1);
    assert!(s.bytes() < bytes / 10, "{} of {bytes}", s.bytes());
    assert_eq!(walk(&s), before);
    assert!(!s.wants_compaction());
    // It keeps going after the compaction, and a restart sees the same.
    seq += 1;
    s.append(&[publish(seq, &["a"], &[500])]).unwrap();
    drop(s);
    assert_eq!(seg_files(tmp.path()).len(), 1);
    let (mut s, report) = ReplicaStore::open(tmp.path(), small()).unwrap();
    assert!(report.damaged.is_empty() && report.truncated.is_none());
    assert_eq!(s.last_seq(), seq);
    assert_eq!(s.index().messages(), 2);
    seq += 1;
    s.append(&[fin(seq, "a", &[0, 500])]).unwrap();
    assert_eq!(s.index().messages(), 0);
}

#[test]
fn compaction_left_half_done_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    s.append(&[publish(1, &["a"], &[1])]).unwrap();
    drop(s);
    fs::write(tmp.path().join(format!("{}.tmp", segment_name(2))), b"junk").unwrap();
    let (s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    assert_eq!(s.index().messages(), 1);
    assert_eq!(seg_files(tmp.path()), [segment_name(1)]);
}

#[test]
fn the_bound_refuses_messages_but_never_settlements() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        max_bytes: 400,
        segment_bytes: 1 << 20,
    };
    let (mut s, _) = ReplicaStore::open(tmp.path(), opts).unwrap();
    let mut seq = 0;
    let full = loop {
        match s.append(&[publish(seq + 1, &["a"], &[seq])]) {
            Ok(()) => seq += 1,
            Err(e) => break e,
        }
    };
    let StoreError::Full { used, needed, max } = full else {
        panic!("{full:?}")
    };
    assert_eq!(max, 400);
    assert!(used <= 400 && used + needed > 400);
    assert!(seq > 3);
    // Settlements still go in, beyond the bound if need be.
    s.append(&[fin(seq + 1, "a", &[0, 1, 2])]).unwrap();
    assert_eq!(s.index().messages(), seq - 3);
}

/// The bound is per origin: two epochs' stores sharing one [`OriginBytes`] are refused once
/// they hold the bound together, and the bytes of a dropped store count no more.
#[test]
fn the_bound_counts_every_store_of_the_origin() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        max_bytes: 400,
        segment_bytes: 1 << 20,
    };
    let shared = std::sync::Arc::new(OriginBytes::default());
    let (mut e1, _) =
        ReplicaStore::open_shared(&tmp.path().join("1"), opts, shared.clone()).unwrap();
    let mut seq = 0;
    while e1.bytes() < 250 {
        seq += 1;
        e1.append(&[publish(seq, &["a"], &[seq])]).unwrap();
    }
    assert_eq!(shared.get(), e1.bytes());
    let (mut e2, _) =
        ReplicaStore::open_shared(&tmp.path().join("2"), opts, shared.clone()).unwrap();
    let mut seq2 = 0;
    let full = loop {
        match e2.append(&[publish(seq2 + 1, &["a"], &[100 + seq2])]) {
            Ok(()) => seq2 += 1,
            Err(e) => break e,
        }
    };
    let StoreError::Full { used, needed, max } = full else {
        panic!("{full:?}")
    };
    assert_eq!(max, 400);
    assert_eq!(used, e1.bytes() + e2.bytes());
    assert!(used <= 400 && used + needed > 400);
    assert!(
        e2.bytes() < 400 - 250,
        "epoch 2 alone stayed under the bound"
    );
    // Epoch 1 gone: its bytes are free for epoch 2.
    let freed = e1.bytes();
    drop(e1);
    assert_eq!(shared.get(), e2.bytes());
    assert!(freed > 0);
    e2.append(&[publish(seq2 + 1, &["a"], &[100 + seq2])])
        .unwrap();
    // Reopened, a store counts its bytes again.
    let own = e2.bytes();
    drop(e2);
    assert_eq!(shared.get(), 0);
    let (e2, _) = ReplicaStore::open_shared(&tmp.path().join("2"), opts, shared.clone()).unwrap();
    assert_eq!((shared.get(), e2.bytes()), (own, own));
}

#[test]
fn takeover_walk_reads_bodies_and_deferrals() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    let mut deferred = publish(2, &["a", "b"], &[20]);
    if let Record::Frame(Frame::Pub(p)) = &mut deferred {
        p.defer_until = 1_000;
    }
    s.append(&[publish(1, &["a"], &[10, 11]), deferred])
        .unwrap();
    let mut seen = Vec::new();
    let bad = s
        .for_each_unsettled(|m| {
            let chans: Vec<(String, i64)> =
                m.channels.iter().map(|c| (c.name.clone(), c.due)).collect();
            seen.push((m.id, m.timestamp, m.body, chans));
        })
        .unwrap();
    assert_eq!(bad, 0);
    assert_eq!(
        seen,
        vec![
            (id(10), 10, body(10), vec![("a".into(), 0)]),
            (id(11), 11, body(11), vec![("a".into(), 0)]),
            (
                id(20),
                20,
                body(20),
                vec![("a".into(), 1_000), ("b".into(), 1_000)]
            ),
        ]
    );
}

/// The index keeps neither a record's length nor a message's timestamp: the walk reads
/// both from the record, through a compaction and a restart; a record damaged since is
/// unreadable, whatever its length field says.
#[test]
fn walk_reads_length_and_timestamp_from_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    s.append(&[publish(1, &["a"], &[5, 6]), publish(2, &["a"], &[7])])
        .unwrap();
    let stamps = |s: &ReplicaStore| {
        let mut v = Vec::new();
        let bad = s
            .for_each_unsettled(|m| v.push((m.id, m.timestamp)))
            .unwrap();
        (v, bad)
    };
    let want = vec![(id(5), 5), (id(6), 6), (id(7), 7)];
    assert_eq!(stamps(&s), (want.clone(), 0));
    assert!(s.compact().unwrap());
    assert_eq!(stamps(&s), (want.clone(), 0));
    drop(s);
    let (s, _) = ReplicaStore::open(tmp.path(), small()).unwrap();
    assert_eq!(stamps(&s), (want, 0));
    let seg = tmp.path().join(&seg_files(tmp.path())[0]);
    let data = fs::read(&seg).unwrap();
    // The last record holds message 7 (one STATE per message after the compaction); its
    // length field made huge, then the record cut short.
    let (loc, _) = s.index().unsettled().pop().unwrap();
    let at = loc.offset as usize;
    let mut bad = data.clone();
    bad[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    fs::write(&seg, &bad).unwrap();
    assert_eq!(stamps(&s), (vec![(id(5), 5), (id(6), 6)], 1));
    fs::write(&seg, &data[..data.len() - 1]).unwrap();
    assert_eq!(stamps(&s), (vec![(id(5), 5), (id(6), 6)], 1));
}

#[test]
fn drop_all_removes_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = backlog_dir(tmp.path(), 7, 1);
    let (mut s, _) = ReplicaStore::open(&dir, small()).unwrap();
    s.append(&[publish(1, &["a"], &[1])]).unwrap();
    assert_eq!(s.dir(), dir.as_path());
    s.drop_all().unwrap();
    assert!(!dir.exists());
}
