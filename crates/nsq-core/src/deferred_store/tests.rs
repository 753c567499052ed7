//! The deferred journal on real files: replay, torn tails, damage, compaction, the group
//! commit.

use std::ops::Range;

use bytes::Bytes;

use super::record::Record;
use super::*;

fn msg(n: u8) -> Message {
    let mut id = [b'0'; 16];
    id[15] = n;
    let mut m = Message::new(MessageId(id), Bytes::from(vec![n; 3]));
    m.attempts = u16::from(n);
    m.timestamp = 1_000 + i64::from(n);
    m
}

fn open(dir: &Path) -> (Arc<DeferredStore>, Vec<Replayed>) {
    DeferredStore::open(DeferredStore::path_for(dir, "t:c")).unwrap()
}

#[test]
fn add_del_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (s, got) = open(dir.path());
    assert!(got.is_empty());
    s.add([(10, &msg(1)), (20, &msg(2))]).unwrap();
    s.add([(30, &msg(3))]).unwrap();
    s.del([msg(2).id]).unwrap();
    drop(s);
    let (_, got) = open(dir.path());
    assert_eq!(got, vec![(10, msg(1)), (30, msg(3))]);
}

/// The `.bad` files in `dir`, sorted.
fn bad_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".bad"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_tail_is_cut_and_later_writes_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    s.add([(10, &msg(1))]).unwrap();
    s.add([(20, &msg(2))]).unwrap();
    drop(s);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 3).unwrap();
    let (s, got) = open(dir.path());
    assert_eq!(got, vec![(10, msg(1))]);
    assert!(bad_files(dir.path()).is_empty(), "a torn tail is no damage");
    s.add([(30, &msg(3))]).unwrap();
    drop(s);
    let (_, got) = open(dir.path());
    assert_eq!(got, vec![(10, msg(1)), (30, msg(3))]);
}

#[test]
fn torn_header_is_cut_without_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    s.add([(10, &msg(1))]).unwrap();
    drop(s);
    let one = std::fs::metadata(&path).unwrap().len();
    let mut data = std::fs::read(&path).unwrap();
    // The first 5 bytes of a second record's header, then a header and kind byte alone.
    let mut second = Vec::new();
    encode_add(&mut second, 20, &msg(2));
    for cut in [5, 9] {
        data.truncate(one as usize);
        data.extend_from_slice(&second[..cut]);
        std::fs::write(&path, &data).unwrap();
        let (_, got) = open(dir.path());
        assert_eq!(got, vec![(10, msg(1))]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), one);
    }
    assert!(bad_files(dir.path()).is_empty());
}

#[test]
fn damaged_last_record_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    s.add([(10, &msg(1))]).unwrap();
    s.add([(20, &msg(2))]).unwrap();
    drop(s);
    let mut data = std::fs::read(&path).unwrap();
    let last = data.len() - 1;
    data[last] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    let (_, got) = open(dir.path());
    assert_eq!(got, vec![(10, msg(1))]);
    // Whole but with a bad checksum: damage, not a torn write.
    assert_eq!(
        bad_files(dir.path()),
        vec![dir.path().join("t:c.deferred.dat.bad")]
    );
    assert_eq!(
        std::fs::read(dir.path().join("t:c.deferred.dat.bad")).unwrap(),
        data
    );
}

/// A message with a 16-digit decimal ID `i` and a 40-byte body.
fn msg_n(i: u32) -> Message {
    let id: [u8; 16] = format!("{i:016}").into_bytes().try_into().unwrap();
    let mut m = Message::new(MessageId(id), Bytes::from(format!("{i:040}")));
    m.attempts = 1;
    m.timestamp = 1_000_000 + i64::from(i);
    m
}

#[test]
fn garbage_in_the_middle_loses_only_what_it_overlaps() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    let msgs: Vec<Message> = (0..1000).map(msg_n).collect();
    for (i, m) in msgs.iter().enumerate() {
        s.add([(i as i64, m)]).unwrap();
    }
    drop(s);
    let mut data = std::fs::read(&path).unwrap();
    let size = data.len() / 1000;
    assert_eq!(size * 1000, data.len(), "records of one size");
    // 64 bytes over the middle, every byte changed.
    let g = data.len() / 2 - 32;
    for (k, b) in data[g..g + 64].iter_mut().enumerate() {
        *b ^= 0x5a ^ (k as u8 | 1);
    }
    std::fs::write(&path, &data).unwrap();
    let hit = |i: usize| i * size < g + 64 && g < (i + 1) * size;
    let want: Vec<Replayed> = msgs
        .iter()
        .enumerate()
        .filter(|(i, _)| !hit(*i))
        .map(|(i, m)| (i as i64, m.clone()))
        .collect();
    assert!(want.len() >= 998, "64 bytes overlap at most 2 records");

    let (s, got) = open(dir.path());
    assert_eq!(got, want);
    // The file as found is kept, damaged bytes included.
    let bad = dir.path().join("t:c.deferred.dat.bad");
    assert_eq!(bad_files(dir.path()), vec![bad.clone()]);
    assert_eq!(std::fs::read(&bad).unwrap(), data);
    // The journal was rewritten with the live entries: the next open is clean.
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        (want.len() * size) as u64
    );
    assert!(!s.wants_compaction());
    s.add([(5000, &msg_n(5000))]).unwrap();
    drop(s);
    let (_, again) = open(dir.path());
    assert_eq!(again.len(), want.len() + 1);
    assert_eq!(again[..want.len()], want[..]);
    assert_eq!(bad_files(dir.path()).len(), 1, "nothing new set aside");
}

#[test]
fn second_damage_gets_its_own_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    for round in 0..2u8 {
        let (s, _) = open(dir.path());
        for n in 0..3 {
            s.add([(1, &msg(10 * round + n))]).unwrap();
        }
        drop(s);
        let mut data = std::fs::read(&path).unwrap();
        data[0] ^= 0xff; // the first record's length
        std::fs::write(&path, &data).unwrap();
        open(dir.path());
    }
    assert_eq!(
        bad_files(dir.path()),
        vec![
            dir.path().join("t:c.deferred.dat.1.bad"),
            dir.path().join("t:c.deferred.dat.bad"),
        ]
    );
    let (_, got) = open(dir.path());
    let ids: Vec<u8> = got.iter().map(|(_, m)| m.id.0[15]).collect();
    // Round 0 lost record 0; round 1's damage hit the first record, 1, again.
    assert_eq!(ids, vec![2, 10, 11, 12]);
}

#[test]
fn failed_rewrite_keeps_using_the_damaged_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    for n in 1..=3 {
        s.add([(i64::from(n), &msg(n))]).unwrap();
    }
    drop(s);
    let mut data = std::fs::read(&path).unwrap();
    data[0] ^= 0xff; // record 1 lost
    std::fs::write(&path, &data).unwrap();
    // The rewrite's temporary file cannot be created.
    let tmp = path.with_extension("dat.tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (s, got) = open(dir.path());
    assert_eq!(got, vec![(2, msg(2)), (3, msg(3))]);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        data,
        "the damaged file is used as it is"
    );
    assert!(bad_files(dir.path()).is_empty(), "nothing set aside");
    // Appending after the damage is safe: the next replay skips it again.
    s.add([(4, &msg(4))]).unwrap();
    drop(s);
    std::fs::remove_dir(&tmp).unwrap();
    let (_, got) = open(dir.path());
    assert_eq!(got, vec![(2, msg(2)), (3, msg(3)), (4, msg(4))]);
    let bad = bad_files(dir.path());
    assert_eq!(bad.len(), 1);
    let mut as_found = data;
    encode_add(&mut as_found, 4, &msg(4));
    assert_eq!(std::fs::read(&bad[0]).unwrap(), as_found);
    let (_, again) = open(dir.path());
    assert_eq!(again, got);
    assert!(!tmp.exists());
}

mod damage {
    use super::*;
    use proptest::prelude::*;

    /// One journal operation: ADD of message `id` (a payload of `len` bytes) or DEL of it.
    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, usize),
        Del(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![
                3 => (0u8..40, 0usize..300).prop_map(|(id, len)| Op::Add(id, len)),
                1 => (0u8..40).prop_map(Op::Del),
            ],
            1..80,
        )
    }

    fn message(id: u8, len: usize, seed: usize) -> Message {
        let mut m = msg(id);
        m.body = Bytes::from(
            (0..len)
                .map(|k| (k * 31 + seed * 7) as u8)
                .collect::<Vec<u8>>(),
        );
        m
    }

    /// The journal's bytes, each record's byte range, and the record itself.
    fn journal(ops: &[Op]) -> (Vec<u8>, Vec<(Range<usize>, Record)>) {
        let mut buf = Vec::new();
        let mut recs = Vec::new();
        for (seed, op) in ops.iter().enumerate() {
            let start = buf.len();
            let rec = match *op {
                Op::Add(id, len) => {
                    let m = message(id, len, seed);
                    encode_add(&mut buf, seed as i64, &m);
                    Record::Add(seed as i64, m)
                }
                Op::Del(id) => {
                    encode_del(&mut buf, msg(id).id);
                    Record::Del(msg(id).id)
                }
            };
            recs.push((start..buf.len(), rec));
        }
        (buf, recs)
    }

    /// What replaying exactly the records for which `keep` holds yields.
    fn model<'a>(recs: impl IntoIterator<Item = &'a Record>) -> Vec<Replayed> {
        let mut live: Vec<Replayed> = Vec::new();
        for rec in recs {
            match rec {
                Record::Add(due, m) => {
                    live.retain(|(_, l)| l.id != m.id);
                    live.push((*due, m.clone()));
                }
                Record::Del(id) => live.retain(|(_, l)| l.id != *id),
            }
        }
        live
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Damage anywhere (every byte of a random span changed) loses exactly the
        /// records it overlaps: every record wholly outside it is replayed, nothing is
        /// invented, and the file as found is kept as `.bad` unless the damage reads as a
        /// torn tail.
        #[test]
        fn random_damage_loses_only_what_it_overlaps(
            ops in ops(),
            start in 0.0f64..1.0,
            span in 1usize..400,
            xor in proptest::collection::vec(1u8..=255, 400),
        ) {
            let (mut data, recs) = journal(&ops);
            let a = ((data.len() as f64 * start) as usize).min(data.len() - 1);
            let b = (a + span).min(data.len());
            for (byte, x) in data[a..b].iter_mut().zip(&xor) {
                *byte ^= x;
            }
            let want = model(
                recs.iter()
                    .filter(|(r, _)| r.end <= a || b <= r.start)
                    .map(|(_, rec)| rec),
            );

            let dir = tempfile::tempdir().unwrap();
            let path = DeferredStore::path_for(dir.path(), "t:c");
            std::fs::write(&path, &data).unwrap();
            let (_, got) = open(dir.path());
            prop_assert_eq!(&got, &want);
            let bad = bad_files(dir.path());
            let last_start = recs.last().unwrap().0.start;
            if b <= last_start {
                // A valid record follows the damage: never a torn tail.
                prop_assert_eq!(bad.len(), 1);
            }
            if let Some(bad) = bad.first() {
                prop_assert_eq!(std::fs::read(bad).unwrap(), data);
            }
            // Whatever happened, the next open replays the same and sets nothing aside.
            let n_bad = bad.len();
            let (_, again) = open(dir.path());
            prop_assert_eq!(&again, &want);
            prop_assert_eq!(bad_files(dir.path()).len(), n_bad);
        }

        /// A cut anywhere keeps every record before it and sets nothing aside.
        #[test]
        fn random_cut_is_a_torn_tail(ops in ops(), at in 0.0f64..1.0) {
            let (data, recs) = journal(&ops);
            let cut = (data.len() as f64 * at) as usize;
            let want = model(recs.iter().filter(|(r, _)| r.end <= cut).map(|(_, rec)| rec));
            let dir = tempfile::tempdir().unwrap();
            let path = DeferredStore::path_for(dir.path(), "t:c");
            std::fs::write(&path, &data[..cut]).unwrap();
            let (_, got) = open(dir.path());
            prop_assert_eq!(got, want);
            prop_assert!(bad_files(dir.path()).is_empty());
            let kept = recs.iter().map(|(r, _)| r.end).filter(|&e| e <= cut).max().unwrap_or(0);
            prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), kept as u64);
        }
    }
}

#[test]
fn compaction_keeps_only_live_and_remove_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let path = DeferredStore::path_for(dir.path(), "t:c");
    let (s, _) = open(dir.path());
    for i in 0..200u8 {
        s.add([(i64::from(i), &msg(i))]).unwrap();
    }
    let before = std::fs::metadata(&path).unwrap().len();
    s.compact([(7, &msg(7))]).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < before / 100);
    s.add([(8, &msg(8))]).unwrap();
    s.sync_upto(s.ticket()).unwrap();
    drop(s);
    let (s, got) = open(dir.path());
    assert_eq!(got, vec![(7, msg(7)), (8, msg(8))]);
    s.remove().unwrap();
    assert!(!path.exists());
}

#[tokio::test]
async fn wait_durable_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = open(dir.path());
    let t = s.add([(1, &msg(1))]).unwrap();
    s.clone().wait_durable(t).await.unwrap();
    assert!(s.synced.load(Ordering::Acquire) >= t.0);
    // Already covered: no sync needed.
    s.clone().wait_durable(t).await.unwrap();
}
