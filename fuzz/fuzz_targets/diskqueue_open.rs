//! Fuzz target: a diskqueue opened on arbitrary metadata and data files must never panic or
//! hang, must serve only whole records, and must work normally afterwards: after draining it,
//! what is put is exactly what is read back, also across a close and reopen.
//!
//! Input layout: byte 0 picks the record size limits and the file size, byte 1 the number of
//! data files (0..=4) and the first file number; then the metadata and each data file, each
//! as a big-endian u16 length followed by that many bytes (shorter input = shorter files).
#![no_main]

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nsq_core::backend::BackendQueue;
use nsq_core::diskqueue::{DiskQueue, DiskQueueOptions};

const NAME: &str = "fz";

fn take<'a>(input: &mut &'a [u8]) -> &'a [u8] {
    if input.len() < 2 {
        let all = *input;
        *input = &[];
        return all;
    }
    let len = u16::from_be_bytes([input[0], input[1]]) as usize;
    let rest = &input[2..];
    let len = len.min(rest.len());
    *input = &rest[len..];
    &rest[..len]
}

fn opts(dir: &Path, control: u8) -> DiskQueueOptions {
    let (min, max) = match control & 3 {
        0 => (26, 1024 * 1024 + 26),
        1 => (1, 64),
        2 => (0, 16),
        _ => (4, 300),
    };
    DiskQueueOptions {
        data_path: dir.to_path_buf(),
        max_bytes_per_file: [64, 200, 1000, 100 * 1024 * 1024][(control >> 2) as usize & 3],
        min_msg_size: min,
        max_msg_size: max,
        sync_every: if control & 0x10 != 0 { 1 } else { i64::MAX },
        sync_timeout: Duration::from_secs(3600),
    }
}

/// Reads everything; a bounded number of calls (a hang is a finding too).
fn drain(q: &DiskQueue) -> Vec<Bytes> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        if q.read_batch(64, &mut out) == 0 {
            return out;
        }
    }
    panic!("read_batch never ran dry");
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (control, files) = (data[0], data[1]);
    let mut input = &data[2..];
    let dir = tempfile::Builder::new()
        .prefix("dqfuzz")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let o = opts(dir.path(), control);
    let meta = take(&mut input);
    if control & 0x20 == 0 {
        std::fs::write(dir.path().join(format!("{NAME}.diskqueue.meta.dat")), meta).unwrap();
    }
    let first = i64::from(files >> 4);
    for n in 0..i64::from(files & 7).min(4) {
        let bytes = take(&mut input);
        let path = dir
            .path()
            .join(format!("{NAME}.diskqueue.{:06}.dat", first + n));
        std::fs::write(path, bytes).unwrap();
    }

    let q = DiskQueue::open(NAME, o.clone()).expect("open never fails on bad files");
    for r in drain(&q) {
        assert!(r.len() >= o.min_msg_size as usize && r.len() <= o.max_msg_size as usize);
    }
    assert_eq!(q.depth(), 0, "depth after draining");

    // Now it must behave like a fresh queue.
    let len = (o.min_msg_size.max(1) as usize).min(o.max_msg_size as usize);
    let recs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; len]).collect();
    q.put_batch(3, &mut |i, out| out.extend_from_slice(&recs[i]))
        .unwrap();
    let got = drain(&q);
    assert_eq!(
        got,
        recs[..3]
            .iter()
            .map(|r| Bytes::from(r.clone()))
            .collect::<Vec<_>>()
    );
    q.put_batch(2, &mut |i, out| out.extend_from_slice(&recs[3 + i]))
        .unwrap();
    let mut pos = Vec::new();
    assert_eq!(q.read_batch_pos(1, &mut pos), 1);
    q.set_read_watermark(Some(pos[0].1));
    q.close().unwrap();

    // Reopen: the watermark's record and the unread one come back, nothing else.
    let q = DiskQueue::open(NAME, o.clone()).expect("reopen");
    let got = drain(&q);
    assert_eq!(
        got,
        recs[3..]
            .iter()
            .map(|r| Bytes::from(r.clone()))
            .collect::<Vec<_>>()
    );
    q.close().unwrap();
});
