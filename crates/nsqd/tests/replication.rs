//! Replication between two in-process nsqd (issue 22, docs/replication.md): A publishes with
//! `--replicas=2` and B as its peer; B keeps A's backlog. Ports are all bound to `:0`.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::pair::{free_port, start_on, Pair};
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;

async fn v2(addr: SocketAddr) -> FrameConn {
    FrameConn::connect(addr, b"  V2").await
}

fn mpub(bodies: &[&[u8]]) -> Vec<u8> {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for b in bodies {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b);
    }
    sized("MPUB t\n", &body)
}

/// With replication off, `"  R1"` is an unknown magic: `E_BAD_PROTOCOL` and close, exactly
/// as for any other (nsqd/tcp.go, `Handle`).
#[tokio::test]
async fn r1_magic_without_replication_is_bad_protocol() {
    let (h, _dir) = common::start_with(&["--replicas=1"]).await;
    assert!(h.nsqd.replication.is_none());
    let mut c = FrameConn::connect(h.tcp_addr(), b"  R1").await;
    // A HELLO-sized frame follows; it is never read.
    c.send(&[0, 0, 0, 1, 1]).await;
    let got = c.rest().await;
    assert_eq!(got, b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL");
    // No replication.dat, no replica directory.
    assert!(!_dir.path().join("replication.dat").exists());
    assert!(!_dir.path().join("replica").exists());
    // /stats is as without replication: no `replication` key.
    let st = request(
        h.http_addr().unwrap(),
        "GET",
        "/stats?format=json",
        &[],
        b"",
    )
    .await
    .json();
    assert!(st.get("replication").is_none(), "{st}");
    h.shutdown().await;
}

/// PUB, MPUB, DPUB and HTTP `/pub` `/mpub` to A are OK'd once B stored them; B's backlog of A
/// follows A's settlements (fan-out to a new channel, REQ, FIN) down to nothing, and its
/// segment files are trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_publish_reaches_the_replica_and_fins_drain_it() {
    let p = Pair::start(&[]).await;
    assert!(p.a_dir.path().join("replication.dat").exists());
    let body = vec![b'x'; 300];
    let mut c = v2(p.a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", &body)).await;
    c.send_ok(&mpub(&[&body, &body, &body])).await;
    c.send_ok(&sized("DPUB t 1\n", &body)).await;
    let http = p.a.http_addr().unwrap();
    let r = request(http, "POST", "/pub?topic=t", &[], &body).await;
    r.assert_text_ok("OK");
    let r = request(http, "POST", "/mpub?topic=t", &[], b"m1\nm2").await;
    r.assert_text_ok("OK");
    // Every OK came after B stored the publish: 1 + 3 + 1 + 1 + 2 messages, pending on the
    // topic (it has no channel yet).
    let bl = p.backlog().expect("B holds a backlog of A");
    assert_eq!(bl.messages, 8, "{bl:?}");
    assert!(!bl.catching_up);
    // And /stats shows it (last key, only with replication on).
    let b_http = p.b().http_addr().unwrap();
    let st = request(b_http, "GET", "/stats?format=json", &[], b"")
        .await
        .json();
    let backlogs = &st["replication"]["backlogs"];
    assert_eq!(backlogs[0]["origin"], format!("{:016x}", p.a_node()));
    assert_eq!(backlogs[0]["messages"], 8);
    let st = request(http, "GET", "/stats?format=json", &[], b"")
        .await
        .json();
    let peer = &st["replication"]["peers"][0];
    assert_eq!(peer["state"], "connected");
    assert_eq!(peer["in_replica_set"], true);
    let text = request(http, "GET", "/stats", &[], b"").await.text();
    assert!(text.contains("\nReplication: node "), "{text}");

    // A consumer: the channel is created (ADMIN), the topic's backlog fans out to it
    // (FANOUT), one message is requeued (REQ) and everything is finished (FIN).
    let mut sub = v2(p.a.tcp_addr()).await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 100\n").await;
    let first = sub.message().await;
    sub.send(format!("REQ {} 0\n", String::from_utf8_lossy(&first.id.0)).as_bytes())
        .await;
    let mut fins = 0;
    while fins < 8 {
        let m = sub.message().await;
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
        fins += 1;
    }
    eventually(async || p.backlog().is_some_and(|b| b.messages == 0)).await;
    // Trimmed: what is left is the segment being written (and at most the one before it
    // when it still holds the topic's metadata).
    eventually(async || p.backlog_files().0 <= 2).await;
    let (_, bytes) = p.backlog_files();
    assert!(bytes < 3 * 2048 + 1024, "{bytes}");

    // Deleting the channel and the topic is streamed too; publishing again still works.
    c.send_ok(&sized("PUB t\n", b"again")).await;
    eventually(async || p.backlog().is_some_and(|b| b.messages == 1)).await;
    let r = request(http, "POST", "/topic/delete?topic=t", &[], b"").await;
    assert_eq!(r.status, 200);
    eventually(async || p.backlog().is_some_and(|b| b.messages == 0)).await;

    // B (--replicas=1 with a peer) hosts A's backlog; its own publishes are acknowledged as
    // today and not replicated: A holds no backlog of B, and B has no origin link.
    let mut cb = v2(p.b().tcp_addr()).await;
    cb.send_ok(&sized("PUB t\n", b"on-b")).await;
    let a_repl = p.a.nsqd.replication.as_ref().unwrap();
    assert!(a_repl.backlogs().is_empty());
    assert!(p.b().nsqd.replication.as_ref().unwrap().peers()[0].node_id == 0);

    // Ephemeral topics are not replicated: acknowledged as today, nothing streamed.
    let seq = p.backlog().unwrap().last_seq;
    c.send_ok(&sized("PUB e#ephemeral\n", b"x")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(p.backlog().unwrap().last_seq, seq);

    let Pair { a, b, .. } = p;
    b.unwrap().shutdown().await;
    a.shutdown().await;
}

/// With B stopped, a publish to A waits `--replication-ack-timeout` and fails with the doc's
/// text (TCP: fatal `E_PUB_FAILED`, HTTP: 503 EXITING); B restarted on its data directory
/// recovers its backlog from disk, A resumes the link and publishes succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_fails_without_the_replica_and_recovers_when_it_returns() {
    let mut p = Pair::start(&["--replication-ack-timeout=500ms"]).await;
    let mut c = v2(p.a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", b"one")).await;
    c.send_ok(&mpub(&[b"two", b"three"])).await;
    assert_eq!(p.backlog().unwrap().messages, 3);

    p.b.take().unwrap().shutdown().await;
    let started = std::time::Instant::now();
    c.send(&sized("PUB t\n", b"four")).await;
    c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 500ms")
        .await;
    assert!(started.elapsed() >= Duration::from_millis(450));
    let mut c = v2(p.a.tcp_addr()).await;
    c.send(&mpub(&[b"five"])).await;
    c.expect_fatal("E_MPUB_FAILED MPUB failed not enough replicas: 0 of 1 stored it within 500ms")
        .await;
    let http = p.a.http_addr().unwrap();
    let r = request(http, "POST", "/pub?topic=t", &[], b"six").await;
    r.assert_err(503, "EXITING");
    let stats = p.a.nsqd.replication.as_ref().unwrap();
    assert_eq!(stats.publish_failures(), 3);

    // B comes back on its data directory: the backlog is recovered from its segments.
    p.start_b().await;
    let bl = p.backlog().expect("recovered");
    assert_eq!(bl.messages, 3, "{bl:?}");
    // A resumes the link (its reconnection backs off up to 2 s, longer than this test's ack
    // timeout): the refused publishes (stored on A, and in its outbox) reach B, and new
    // publishes are acknowledged again.
    let repl = p.a.nsqd.replication.clone().unwrap();
    eventually(async || repl.peers()[0].connected && repl.peers()[0].in_replica_set).await;
    let mut c = v2(p.a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", b"seven")).await;
    assert_eq!(p.backlog().unwrap().messages, 7);
    assert_eq!(p.a.nsqd.engine.get_topic("t").unwrap().depth(), 7);

    let Pair { a, b, .. } = p;
    b.unwrap().shutdown().await;
    a.shutdown().await;
}

/// A replica that joins after messages were published (here: B's backlog deleted while it was
/// down) is caught up: CATCHUP_BEGIN, a STATE per topic and per message A holds (memory
/// queue, in flight, deferred), CATCHUP_END; then it acknowledges and publishes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_replica_is_caught_up() {
    late_replica(&["--replication-ack-timeout=5s"]).await;
}

/// The same with everything on disk (`--durable`: no memory queue, replicas sync before
/// they acknowledge): the catch-up reads the unread part of the topic's and the channel's
/// diskqueues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_replica_is_caught_up_from_the_diskqueues() {
    late_replica(&["--replication-ack-timeout=5s", "--durable"]).await;
}

async fn late_replica(flags: &[&str]) {
    let mut p = Pair::start(flags).await;
    let mut c = v2(p.a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", b"pending-on-topic")).await;
    c.send_ok(&sized("PUB u\n", b"on-the-topic-u")).await;
    let mut sub = v2(p.a.tcp_addr()).await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 1\n").await;
    let inflight = sub.message().await;
    c.send_ok(&mpub(&[b"q1", b"q2"])).await;
    c.send_ok(&sized("DPUB t 60000\n", b"deferred")).await;
    eventually(async || p.backlog().is_some_and(|b| b.messages == 5)).await;

    // B loses its copy while down.
    p.b.take().unwrap().shutdown().await;
    std::fs::remove_dir_all(p.b_dir.path().join("replica")).unwrap();
    p.start_b().await;
    // A catches it up: one in flight, two queued, one deferred on t:c, one on topic u.
    eventually(async || {
        p.backlog()
            .is_some_and(|b| b.messages == 5 && !b.catching_up && b.last_seq > 0)
    })
    .await;
    // And settlements after the catch-up apply: FIN of the one in flight, then the queued
    // ones delivered and finished.
    sub.send(format!("FIN {}\n", String::from_utf8_lossy(&inflight.id.0)).as_bytes())
        .await;
    c.send_ok(&sized("PUB t\n", b"after")).await;
    eventually(async || p.backlog().is_some_and(|b| b.messages == 5)).await;
    sub.send(b"RDY 10\n").await;
    // (Through the topic's diskqueue, with --durable, a DPUB that queued behind the pump
    // loses its deferral, as in NSQ; then one of q1, q2 and "after" is left instead.)
    let durable = flags.contains(&"--durable");
    for _ in 0..3 {
        let m = sub.message().await;
        assert!(durable || &m.body[..] != b"deferred");
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
    }
    // Left: the deferred message on t:c and the one pending on topic u.
    eventually(async || p.backlog().is_some_and(|b| b.messages == 2)).await;

    let Pair { a, b, .. } = p;
    b.unwrap().shutdown().await;
    a.shutdown().await;
}

/// A replica whose backlog of the origin would pass `--replication-max-backlog-bytes` refuses
/// the publish (ERROR 2, "backlog full"): the origin counts it as not acknowledging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replica_backlog_refuses() {
    let mut p = Pair::start(&["--replication-ack-timeout=500ms"]).await;
    p.b.take().unwrap().shutdown().await;
    p.start_b_with(&["--replication-max-backlog-bytes=3000"])
        .await;
    let repl = p.a.nsqd.replication.clone().unwrap();
    eventually(async || repl.peers()[0].connected).await;
    let mut c = v2(p.a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", &[b'a'; 1000])).await;
    c.send(&sized("PUB t\n", &[b'b'; 2500])).await;
    c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 500ms")
        .await;
    assert_eq!(p.backlog().unwrap().messages, 1);

    let Pair { a, b, .. } = p;
    b.unwrap().shutdown().await;
    a.shutdown().await;
}

/// A message that stays unsettled at the front of the backlog while later ones are settled
/// pins its segment; the replica compacts (off the acknowledgement path) so its disk use
/// follows the origin's unsettled backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_compacts_around_an_old_unsettled_message() {
    let p = Pair::start(&[]).await;
    let mut sub = v2(p.a.tcp_addr()).await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 1000\n").await;
    let mut c = v2(p.a.tcp_addr()).await;
    let body = vec![b'x'; 300];
    c.send_ok(&sized("PUB t\n", b"old")).await;
    let old = sub.message().await;
    assert_eq!(&old.body[..], b"old");
    for _ in 0..40 {
        c.send_ok(&sized("PUB t\n", &body)).await;
        let m = sub.message().await;
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
    }
    eventually(async || p.backlog().is_some_and(|b| b.messages == 1)).await;
    // 40 × ~360 bytes passed through 2 KiB segments; the old message's segment would keep
    // them all without a compaction.
    eventually(async || p.backlog_files().0 <= 2).await;
    assert_eq!(p.backlog().unwrap().messages, 1);

    let Pair { a, b, .. } = p;
    b.unwrap().shutdown().await;
    a.shutdown().await;
}

/// A clean stop of the origin records `clean_seq`; restarted on its data directory (and
/// port) it continues the same epoch, the replica resumes without a catch-up, and its
/// backlog still matches what the origin holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanly_restarted_origin_continues_its_epoch() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a_port, b_port) = (free_port(), free_port());
    let a_args = vec![
        format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2".to_string(),
        format!("--replication-peer=127.0.0.1:{b_port}"),
    ];
    let b_args = vec![
        format!("--tcp-address=127.0.0.1:{b_port}"),
        format!("--replication-peer=127.0.0.1:{a_port}"),
    ];
    let a = start_on(a_dir.path(), &a_args).await;
    let b = start_on(b_dir.path(), &b_args).await;
    let a_repl = a.nsqd.replication.clone().unwrap();
    let (node, epoch) = (a_repl.identity.node_id, a_repl.identity.epoch);
    let mut c = v2(a.tcp_addr()).await;
    c.send_ok(&mpub(&[b"1", b"2", b"3"])).await;
    drop(c);
    let last = a_repl.log.last_seq();
    drop(a_repl);
    a.shutdown().await;
    let text = std::fs::read_to_string(a_dir.path().join("replication.dat")).unwrap();
    assert!(
        text.ends_with(&format!(r#""epoch":{epoch},"clean_seq":{last}}}"#)),
        "{text}"
    );

    let a = start_on(a_dir.path(), &a_args).await;
    let a_repl = a.nsqd.replication.clone().unwrap();
    assert_eq!(
        (a_repl.identity.node_id, a_repl.identity.epoch),
        (node, epoch)
    );
    assert_eq!(a_repl.identity.start_seq, last);
    let mut c = v2(a.tcp_addr()).await;
    c.send_ok(&sized("PUB t\n", b"4")).await;
    let backlogs = b.nsqd.replication.as_ref().unwrap().backlogs();
    assert_eq!(backlogs.len(), 1, "{backlogs:?}");
    assert_eq!((backlogs[0].origin, backlogs[0].epoch), (node, epoch));
    assert_eq!(backlogs[0].messages, 4);
    assert_eq!(a.nsqd.engine.get_topic("t").unwrap().depth(), 4);
    drop((a_repl, c));
    b.shutdown().await;
    a.shutdown().await;
}
