//! DiskQueue durability API: `read_batch_pos` positions, `wait_durable` group commit and its
//! sync accounting (`sync_every` as go-diskqueue's ioLoop counts it), and the durable-read
//! watermark (`set_read_watermark`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_core::backend::{BackendQueue, DropSink, RecordPos, WriteTicket};
use nsq_core::diskqueue::{DiskQueue, DiskQueueOptions};

fn opts(dir: &Path, max_bytes_per_file: i64, sync_every: i64) -> DiskQueueOptions {
    DiskQueueOptions {
        data_path: dir.to_path_buf(),
        max_bytes_per_file,
        min_msg_size: 26,
        max_msg_size: 1024 * 1024 + 26,
        sync_every,
        sync_timeout: Duration::from_secs(3600),
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("{i:026}").into_bytes();
    p.resize(len.max(26), b'x');
    p
}

fn pos(file_num: i64, offset: i64) -> RecordPos {
    RecordPos { file_num, offset }
}

#[test]
fn read_batch_pos_reports_each_record_start() {
    let dir = tempfile::tempdir().unwrap();
    let q = DiskQueue::open("rp", opts(dir.path(), 100, i64::MAX)).unwrap();
    for i in 0..5 {
        q.put(&payload(i, 32)).unwrap();
    }
    let mut out: Vec<(Bytes, RecordPos)> = Vec::new();
    assert_eq!(q.read_batch_pos(3, &mut out), 3);
    assert_eq!(q.read_batch_pos(10, &mut out), 2);
    let positions: Vec<RecordPos> = out.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        positions,
        vec![pos(0, 0), pos(0, 36), pos(1, 0), pos(1, 36), pos(2, 0)]
    );
    for (i, (b, _)) in out.iter().enumerate() {
        assert_eq!(b.as_ref(), payload(i, 32).as_slice());
    }
    assert!(pos(0, 36) < pos(1, 0));
    q.close().unwrap();
}

#[tokio::test]
async fn wait_durable_syncs_promptly_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    // Neither sync_every nor sync_timeout would sync: only the waiter can make it happen.
    let q = DiskQueue::open("wd", opts(dir.path(), 1 << 20, i64::MAX)).unwrap();
    let t1 = q.put(&payload(1, 40)).unwrap();
    let t2 = q.put(&payload(2, 40)).unwrap();
    assert!(t2 > t1);
    assert_eq!(q.data_syncs(), 0);
    tokio::time::timeout(Duration::from_secs(60), q.wait_durable(t2))
        .await
        .expect("wait_durable must start a sync itself")
        .unwrap();
    let after = q.data_syncs();
    assert!(after >= 1);
    // Already covered: no new sync.
    q.wait_durable(t1).await.unwrap();
    q.wait_durable(t2).await.unwrap();
    assert_eq!(q.data_syncs(), after);
    q.close().unwrap();
}

#[tokio::test]
async fn drop_sink_is_durable_at_once() {
    let s = DropSink;
    let t = s.put(&payload(0, 30)).unwrap();
    s.wait_durable(t).await.unwrap();
    s.wait_durable(WriteTicket(99)).await.unwrap();
}

#[tokio::test]
async fn deleted_queue_fails_pending_waiters_or_had_synced() {
    let dir = tempfile::tempdir().unwrap();
    let q: Arc<DiskQueue> = DiskQueue::open("del", opts(dir.path(), 1 << 20, i64::MAX)).unwrap();
    let t = q.put(&payload(1, 40)).unwrap();
    let wait = q.wait_durable(t);
    q.delete().unwrap();
    // Either the syncer got there first (Ok) or the job was dropped (exiting): never a hang.
    let r = tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("a waiter must be released when its queue is deleted");
    if let Err(e) = r {
        assert_eq!(e.to_string(), "exiting");
    }
}
