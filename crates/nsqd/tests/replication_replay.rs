//! The replay of the replica backlogs at startup (docs/replication.md, "The replica store"):
//! nsqd serves its clients while the backlogs it holds for its peers are replayed, and a
//! replay that fails stops it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::origin::ORIGIN;
use common::pair::free_port;
use nsq_core::replica::{backlog_dir, Record, ReplicaStore, StoreOptions};
use nsq_protocol::replication::{Frame, Pub, PubMessage};
use nsq_protocol::MessageId;
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;

/// Writes a backlog of `ORIGIN` epoch 1 holding `frames` × `per_frame` messages.
fn write_backlog(data: &Path, frames: u64, per_frame: u64) {
    let dir = backlog_dir(data, ORIGIN, 1);
    let (mut store, _) = ReplicaStore::open(&dir, StoreOptions::default()).unwrap();
    let mut n = 0u64;
    let records: Vec<Record> = (1..=frames)
        .map(|seq| {
            let messages = (0..per_frame)
                .map(|_| {
                    n += 1;
                    let mut id = [0u8; 16];
                    id.copy_from_slice(format!("{n:016x}").as_bytes());
                    PubMessage {
                        id: MessageId(id),
                        timestamp: 1_600_000_000_000_000_000,
                        body: Bytes::from_static(b"a replicated body"),
                    }
                })
                .collect();
            Record::Frame(Frame::Pub(Pub {
                seq,
                topic: "replayed".into(),
                defer_until: 0,
                channels: vec!["c".into()],
                messages,
            }))
        })
        .collect();
    for chunk in records.chunks(256) {
        store.append(chunk).unwrap();
    }
    store.sync().unwrap();
}

/// A node holding a large backlog answers `/ping` before the backlog is replayed (it used to
/// serve nothing until the replay ended: a restarted replica missed its health checks), and
/// the backlog is whole once the replay ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_while_its_replica_backlogs_replay() {
    const FRAMES: u64 = 6_000;
    const PER_FRAME: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || write_backlog(&d, FRAMES, PER_FRAME))
        .await
        .unwrap();
    let peer = format!("--replication-peer=127.0.0.1:{}", free_port());
    let began = Instant::now();
    let h = nsqd::start(common::options(
        dir.path(),
        &["--replicas=2".to_string(), peer],
    ))
    .await
    .unwrap();
    let ping = request(h.http_addr().unwrap(), "GET", "/ping", &[], b"").await;
    let answered = began.elapsed();
    assert_eq!((ping.status, ping.body.as_slice()), (200, &b"OK"[..]));
    let r = h.nsqd.replication.clone().unwrap();
    assert!(
        r.backlogs().is_empty(),
        "the backlog was replayed before /ping answered ({answered:?})"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !r
        .backlogs()
        .iter()
        .any(|b| b.origin == ORIGIN && b.messages == FRAMES * PER_FRAME)
    {
        assert!(
            Instant::now() < deadline,
            "the backlog was not replayed whole"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "/ping answered after {answered:?}, the backlog replayed after {:?}",
        began.elapsed()
    );
    h.shutdown().await;
}

/// A backlog that cannot be read (a segment that is a directory) stops nsqd, as it did
/// when the replay ran before serving: replication must not run on a part of what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_fails_stops_nsqd() {
    let dir = tempfile::tempdir().unwrap();
    let seg = backlog_dir(dir.path(), ORIGIN, 1).join("0000000000000001.seg");
    std::fs::create_dir_all(&seg).unwrap();
    let peer = format!("--replication-peer=127.0.0.1:{}", free_port());
    let h = nsqd::start(common::options(
        dir.path(),
        &["--replicas=2".to_string(), peer],
    ))
    .await
    .unwrap();
    let r = h.nsqd.replication.clone().unwrap();
    eventually(async || r.replay_failed()).await;
    assert!(r.backlogs().is_empty());
    h.shutdown().await;
}
