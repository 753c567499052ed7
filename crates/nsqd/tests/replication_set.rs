//! Only the replica set stores (issue 29; docs/replication.md, "Who holds which origin's
//! messages"): of three members with `--replicas=2`, one holds each origin's copy and the
//! other holds nothing of it — on disk either; when the holder goes, the other catches up
//! and holds it; when the first comes back it is told STANDBY and its copy is deleted.

mod common;

use std::path::Path;

use common::pair::{free_port, start_on};
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::wait::eventually;
use nsqd::NsqdHandle;
use tempfile::TempDir;

fn repl(n: &NsqdHandle) -> &nsqd::replication::Replication {
    n.nsqd.replication.as_ref().unwrap()
}

/// What `n` holds of `origin`: the messages of its backlogs (`None`: no backlog).
fn held(n: &NsqdHandle, origin: u64) -> Option<u64> {
    let v: Vec<u64> = repl(n)
        .backlogs()
        .into_iter()
        .filter(|b| b.origin == origin)
        .map(|b| b.messages)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// The backlog directories of `origin` under `dir`'s replica store.
fn dirs_of(dir: &Path, origin: u64) -> usize {
    let prefix = format!("{origin:016x}.");
    std::fs::read_dir(dir.join("replica"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0)
}

async fn start(dir: &TempDir, port: u16, peers: [u16; 2]) -> NsqdHandle {
    let args = vec![
        format!("--tcp-address=127.0.0.1:{port}"),
        "--replicas=2".to_string(),
        format!("--replication-peer=127.0.0.1:{}", peers[0]),
        format!("--replication-peer=127.0.0.1:{}", peers[1]),
        "--replication-ack-timeout=3s".to_string(),
        // Far longer than the tests wait: a planned leave does not wait for it.
        "--replication-takeover-timeout=60s".to_string(),
    ];
    start_on(dir.path(), &args).await
}

fn depth(n: &NsqdHandle) -> i64 {
    n.nsqd
        .engine
        .get_topic("t")
        .and_then(|t| t.get_channel("c"))
        .map_or(0, |c| c.stats().depth + c.stats().in_flight_count as i64)
}

async fn publish(n: &NsqdHandle, count: usize) {
    let mut c = FrameConn::connect(n.tcp_addr(), b"  V2").await;
    for i in 0..count {
        c.send_ok(&sized("PUB t\n", format!("m{i}").as_bytes()))
            .await;
    }
}

/// Member `k`'s peers: the other two ports.
fn peers_of(ports: &[u16; 3], k: usize) -> [u16; 2] {
    let p: Vec<u16> = (0..3).filter(|&j| j != k).map(|j| ports[j]).collect();
    [p[0], p[1]]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_replica_set_stores_and_a_member_outside_it_deletes_its_copy() {
    let dirs = [
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
    ];
    let ports = [free_port(), free_port(), free_port()];
    let a = start(&dirs[0], ports[0], peers_of(&ports, 0)).await;
    let mut n: [Option<NsqdHandle>; 3] = [None, None, None];
    for k in 1..3 {
        n[k] = Some(start(&dirs[k], ports[k], peers_of(&ports, k)).await);
    }
    let origin = repl(&a).identity.node_id;
    eventually(async || repl(&a).peers().iter().all(|p| p.connected)).await;
    // Until A's set is settled, its other peer may still hold an empty copy.
    // A channel, so the messages stay unsettled.
    let mut sub = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    drop(sub);
    publish(&a, 100).await;

    // Exactly one of B and C holds A's 100 messages; the other nothing, on disk neither.
    let holds = |n: &[Option<NsqdHandle>; 3], k: usize| n[k].as_ref().and_then(|x| held(x, origin));
    eventually(async || {
        let h = [holds(&n, 1), holds(&n, 2)];
        h.contains(&Some(100)) && h.contains(&None)
    })
    .await;
    let in_set: Vec<bool> = repl(&a).peers().iter().map(|p| p.in_replica_set).collect();
    assert_eq!(in_set.iter().filter(|&&x| x).count(), 1, "{in_set:?}");
    let (holder, other) = if holds(&n, 1).is_some() {
        (1, 2)
    } else {
        (2, 1)
    };
    eventually(async || dirs_of(dirs[other].path(), origin) == 0).await;
    assert_eq!(dirs_of(dirs[holder].path(), origin), 1);

    // The holder stops: the other joins the set, catches up, and holds all 100.
    n[holder].take().unwrap().shutdown().await;
    eventually(async || holds(&n, other) == Some(100)).await;
    publish(&a, 10).await;
    eventually(async || holds(&n, other) == Some(110)).await;

    // It comes back: outside the set now (sticky), told STANDBY, its copy deleted.
    n[holder] = Some(start(&dirs[holder], ports[holder], peers_of(&ports, holder)).await);
    eventually(async || holds(&n, holder).is_none() && dirs_of(dirs[holder].path(), origin) == 0)
        .await;
    assert_eq!(holds(&n, other), Some(110));
    for x in n.into_iter().flatten() {
        x.shutdown().await;
    }
    a.shutdown().await;
}

/// A draining member hands its unsettled messages to its replica set at once (a planned
/// takeover, the takeover timeout of 60 s not waited for): the taker holds every one of them,
/// those in flight at A included, and A none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_member_hands_its_messages_to_its_replica_set_at_once() {
    let dirs = [
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
    ];
    let ports = [free_port(), free_port(), free_port()];
    let mut n = Vec::new();
    for k in 0..3 {
        n.push(start(&dirs[k], ports[k], peers_of(&ports, k)).await);
    }
    let a = &n[0];
    eventually(async || repl(a).peers().iter().all(|p| p.connected)).await;
    let mut sub = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    publish(a, 500).await;
    // 10 in flight at A when it leaves, never finished.
    sub.send(b"RDY 10\n").await;
    for _ in 0..10 {
        sub.message().await;
    }
    assert_eq!(depth(a), 500);
    let began = std::time::Instant::now();
    assert!(a.nsqd.start_drain());
    eventually(async || depth(a) == 0 && depth(&n[1]) + depth(&n[2]) == 500).await;
    let took = began.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    // One taker (A's replica set), none of A's messages twice.
    assert!(depth(&n[1]) == 0 || depth(&n[2]) == 0);
    println!("handed over in {took:?}");
    drop(sub);
    for x in n {
        x.shutdown().await;
    }
}
