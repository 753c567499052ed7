//! DiskQueue recovery from damaged files: metadata that is empty, truncated, garbage,
//! negative, mis-shaped or pointing past the data never makes a queue unusable (positions are
//! rebuilt from the data files and every complete record is served), and a data file cut
//! mid-record delivers every complete record before the cut, then is set aside as `.bad`
//! (go-diskqueue diskqueue.go, handleReadError).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use nsq_core::backend::BackendQueue;
use nsq_core::diskqueue::{DiskQueue, DiskQueueOptions};

/// 100-byte bodies in nsqd's message encoding: 126-byte payloads, 130-byte records.
const RECORD: usize = 130;
const COUNT: usize = 10_000;

fn opts(dir: &Path) -> DiskQueueOptions {
    DiskQueueOptions {
        sync_every: i64::MAX,
        sync_timeout: Duration::from_secs(3600),
        ..DiskQueueOptions::new(dir)
    }
}

fn data_file(dir: &Path, name: &str, n: i64) -> PathBuf {
    dir.join(format!("{name}.diskqueue.{n:06}.dat"))
}

fn meta_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.diskqueue.meta.dat"))
}

fn payload(i: usize) -> Vec<u8> {
    let mut p = format!("{i:026}").into_bytes();
    p.resize(RECORD - 4, b'b');
    p
}

/// The setup: 10,000 130-byte records in `cr:c`, closed cleanly.
fn fill(dir: &Path, name: &str) {
    let q = DiskQueue::open(name, opts(dir)).unwrap();
    for chunk in (0..COUNT).collect::<Vec<_>>().chunks(200) {
        q.put_batch(chunk.len(), &mut |i, out| {
            out.extend_from_slice(&payload(chunk[i]))
        })
        .unwrap();
    }
    q.close().unwrap();
    assert_eq!(
        fs::read(meta_file(dir, name)).unwrap(),
        format!("{COUNT}\n0,0\n0,{}\n", COUNT * RECORD).into_bytes()
    );
}

fn read_all(q: &DiskQueue) -> Vec<Bytes> {
    let mut out = Vec::new();
    while q.read_batch(1000, &mut out) > 0 {}
    out
}

fn assert_first_n(got: &[Bytes], n: usize) {
    assert_eq!(
        got.len(),
        n,
        "delivered {} of {n} complete records",
        got.len()
    );
    for (i, b) in got.iter().enumerate() {
        assert_eq!(b.as_ref(), payload(i).as_slice(), "record {i}");
    }
}

/// After recovery the queue must keep working: put, read back, restart, nothing left over.
fn assert_usable(dir: &Path, name: &str, q: &DiskQueue) {
    let extra = payload(777_777);
    q.put(&extra).unwrap();
    assert_eq!(read_all(q), vec![Bytes::from(extra.clone())]);
    q.put(&extra).unwrap();
    q.close().unwrap();
    let q = DiskQueue::open(name, opts(dir)).unwrap();
    assert_eq!(q.depth(), 1);
    assert_eq!(read_all(&q), vec![Bytes::from(extra)]);
    q.close().unwrap();
}

fn corrupt_meta_case(meta: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let (d, name) = (dir.path(), "cr:c");
    fill(d, name);
    fs::write(meta_file(d, name), meta).unwrap();
    let q = DiskQueue::open(name, opts(d)).expect("bad metadata must not make the queue unusable");
    assert_eq!(
        q.depth(),
        COUNT as i64,
        "meta {:?}",
        String::from_utf8_lossy(meta)
    );
    assert_first_n(&read_all(&q), COUNT);
    assert_eq!(q.depth(), 0);
    assert_usable(d, name, &q);
}

#[test]
fn empty_meta_file_is_rebuilt_from_data() {
    corrupt_meta_case(b"");
}

#[test]
fn five_bytes_of_meta_is_rebuilt_from_data() {
    corrupt_meta_case(&format!("{COUNT}\n0,0\n0,{}\n", COUNT * RECORD).as_bytes()[..5]);
}

#[test]
fn garbage_meta_is_rebuilt_from_data() {
    corrupt_meta_case(b"garbage\n");
}

#[test]
fn negative_meta_is_rebuilt_from_data() {
    corrupt_meta_case(b"-5\n0,-100\n0,-1\n");
}

#[test]
fn meta_with_too_many_or_too_few_lines_is_rebuilt_from_data() {
    corrupt_meta_case(b"10000\n0,0\n0,1300000\n0,0\n");
    corrupt_meta_case(b"10000\n0,0\n");
    corrupt_meta_case(b"10000\n");
}

#[test]
fn meta_positions_past_the_data_are_rebuilt_from_data() {
    // Read position past the end of its file.
    corrupt_meta_case(b"10000\n0,5000000\n0,9000000\n");
    // Reader beyond writer.
    corrupt_meta_case(b"10000\n0,2600\n0,1300\n");
    // Files that do not exist, while the real data is elsewhere.
    corrupt_meta_case(b"10000\n3,0\n7,100\n");
    // Absurd file numbers.
    corrupt_meta_case(b"1\n9223372036854775807,0\n9223372036854775807,5\n");
}

#[test]
fn write_position_past_the_end_of_the_file_keeps_every_record() {
    // Writer past the end, reader fine: depth is recounted, every record served.
    corrupt_meta_case(b"10000\n0,0\n0,9999999\n");
    // Negative depth with sane positions: recounted.
    corrupt_meta_case(b"-5\n0,0\n0,1300000\n");
    // A depth no disk could hold (would overflow on the next put): recounted.
    corrupt_meta_case(b"9223372036854775807\n0,0\n0,1300000\n");
}

#[test]
fn rebuild_reads_several_files_and_keeps_the_newest_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (d, name) = (dir.path(), "multi");
    let mut o = opts(d);
    o.max_bytes_per_file = 1300; // 10 records per file
    let q = DiskQueue::open(name, o.clone()).unwrap();
    for i in 0..95 {
        q.put(&payload(i)).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(q.read_batch(25, &mut out), 25); // files 0 and 1 consumed and deleted
    q.close().unwrap();
    assert!(!data_file(d, name, 1).exists());
    fs::write(meta_file(d, name), b"garbage").unwrap();
    let q = DiskQueue::open(name, o.clone()).unwrap();
    // Rebuilt: read from file 2 at 0 (records 20..), write after record 94 in file 9.
    assert_eq!(q.depth(), 75);
    let got = read_all(&q);
    assert_eq!(got.len(), 75);
    for (k, b) in got.iter().enumerate() {
        assert_eq!(b.as_ref(), payload(20 + k).as_slice());
    }
    q.put(&payload(95)).unwrap();
    q.close().unwrap();
    // The new record went right after the last complete one of file 9.
    assert_eq!(
        fs::metadata(data_file(d, name, 9)).unwrap().len(),
        6 * RECORD as u64
    );
}

#[test]
fn rebuild_with_no_data_files_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(meta_file(dir.path(), "none"), b"garbage").unwrap();
    let q = DiskQueue::open("none", opts(dir.path())).unwrap();
    assert_eq!(q.depth(), 0);
    assert!(read_all(&q).is_empty());
    assert_usable(dir.path(), "none", &q);
}

fn truncated_case(cut: u64, delivered: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (d, name) = (dir.path(), "cr:c");
    fill(d, name);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(data_file(d, name, 0))
        .unwrap();
    f.set_len(cut).unwrap();
    drop(f);
    let q = DiskQueue::open(name, opts(d)).unwrap();
    assert_eq!(q.depth(), delivered as i64);
    assert_first_n(&read_all(&q), delivered);
    let bad = PathBuf::from(format!("{}.bad", data_file(d, name, 0).display()));
    assert_eq!(
        bad.exists(),
        !cut.is_multiple_of(RECORD as u64),
        "bad file for cut {cut}"
    );
    assert!(!data_file(d, name, 0).exists());
    assert_usable(d, name, &q);
}

#[test]
fn data_file_cut_at_260007_delivers_2000() {
    truncated_case(260_007, 2_000);
}

#[test]
fn data_file_cut_at_780000_delivers_6000() {
    truncated_case(780_000, 6_000);
}

#[test]
fn data_file_cut_at_1170007_delivers_9000() {
    truncated_case(1_170_007, 9_000);
}

#[test]
fn write_file_cut_while_open_still_delivers_records_before_the_cut() {
    // The reader's chunk (256 KiB) reaches past the cut: the short read must not discard
    // the complete records it did return.
    let dir = tempfile::tempdir().unwrap();
    let (d, name) = (dir.path(), "live");
    let q = DiskQueue::open(name, opts(d)).unwrap();
    for i in 0..COUNT {
        q.put(&payload(i)).unwrap();
    }
    let f = fs::OpenOptions::new()
        .write(true)
        .open(data_file(d, name, 0))
        .unwrap();
    f.set_len(260_007).unwrap();
    drop(f);
    assert_first_n(&read_all(&q), 2_000);
    assert!(PathBuf::from(format!("{}.bad", data_file(d, name, 0).display())).exists());
    assert_usable(d, name, &q);
}

#[test]
fn leftover_file_of_an_empty_queue_is_not_served_again() {
    // The queue was fully consumed (reader == writer at file 3, not created yet) but an old
    // data file survived its deletion: go-diskqueue ignores it, and so do we.
    let dir = tempfile::tempdir().unwrap();
    let (d, name) = (dir.path(), "left");
    fs::write(
        data_file(d, name, 1),
        [&(126i32).to_be_bytes()[..], &payload(1)].concat(),
    )
    .unwrap();
    fs::write(meta_file(d, name), b"0\n3,0\n3,0\n").unwrap();
    let q = DiskQueue::open(name, opts(d)).unwrap();
    assert_eq!(q.depth(), 0);
    assert!(read_all(&q).is_empty());
    q.put(&payload(2)).unwrap();
    assert_eq!(read_all(&q), vec![Bytes::from(payload(2))]);
    q.close().unwrap();
    assert_eq!(fs::read(meta_file(d, name)).unwrap(), b"0\n3,130\n3,130\n");
}
