//! Takeover and the replica's side of the return (issue 22 phase 2b, docs/replication.md
//! "Takeover", "Return"): B holds the backlog of an origin that is played here by a raw
//! client speaking the link codec (`nsq_protocol::replication`), so that the origin can vanish
//! without a clean stop (its connection simply closes, as a killed process's does) and come
//! back with any HELLO. Ports are all bound to `:0`.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::replication::{
    self, AdminOp, BacklogState, Fin, Frame, Pub, PubMessage, Req, ReqEntry, WelcomeAnswer,
};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;
use nsq_testkit::FrameConn;
use nsqd::NsqdHandle;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::origin::{admin, id, now_ns, publish, Origin, ORIGIN};

/// B: `--replication-peer` (so replication is on; with `--replicas=1` it dials nobody) and
/// `extra`.
async fn start_b(dir: &Path, extra: &[&str]) -> NsqdHandle {
    let mut args = vec!["--replication-peer=127.0.0.1:1".to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    common::start_replayed(common::options(dir, &args)).await
}

/// The origin's epoch 1 as B stores it: topic t with channel c (m1 finished, m2 requeued
/// after two attempts, m3 queued, m4 deferred until `due`), topic u without channels holding
/// m5 on the topic; topic p paused with its paused channel pc, empty.
async fn replicate_epoch_1(b: &NsqdHandle, due: i64) -> Origin {
    let (mut o, answer) = Origin::hello(b, 1, None).await;
    let Frame::Welcome(w) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(w.answer, WelcomeAnswer::Catchup);
    // A new origin's catch-up is of nothing.
    o.send(&Frame::CatchupBegin { seq: 0 }).await;
    o.send(&Frame::CatchupEnd { seq: 0 }).await;
    let frames = [
        admin(1, AdminOp::Create, "t", ""),
        admin(2, AdminOp::Create, "t", "c"),
        admin(3, AdminOp::Create, "u", ""),
        publish(4, "t", &["c"], 0, &[1, 2, 3]),
        Frame::Fin(Fin {
            seq: 5,
            topic: "t".into(),
            channel: "c".into(),
            ids: vec![id(1)],
        }),
        Frame::Req(Req {
            seq: 6,
            topic: "t".into(),
            channel: "c".into(),
            entries: vec![ReqEntry {
                id: id(2),
                due: 0,
                attempts: 2,
            }],
        }),
        publish(7, "t", &["c"], due, &[4]),
        publish(8, "u", &[], 0, &[5]),
        admin(9, AdminOp::Create, "p", ""),
        admin(10, AdminOp::Create, "p", "pc"),
        admin(11, AdminOp::Pause, "p", ""),
        admin(12, AdminOp::Pause, "p", "pc"),
    ];
    for f in &frames {
        o.send(f).await;
    }
    o.acked(12).await;
    o
}

fn repl(b: &NsqdHandle) -> &nsqd::replication::Replication {
    b.nsqd.replication.as_ref().unwrap()
}

fn backlog_state(b: &NsqdHandle) -> Option<&'static str> {
    repl(b)
        .backlogs()
        .into_iter()
        .find(|x| x.origin == ORIGIN)
        .map(|x| x.state)
}

/// The origin's link closes (a killed process): after `--replication-takeover-timeout` B
/// takes epoch 1 over — the topics and channels exist (pause flags kept), a consumer gets
/// exactly the unsettled messages with their original IDs, timestamps and bodies (m2 with its
/// attempts), the deferred one not before its due time, the message pending on topic u goes
/// to u's first channel; the backlog is gone, the manifest kept, `takeovers` is 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_origin_is_taken_over_after_the_timeout() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path(), &["--replication-takeover-timeout=1s"]).await;
    let due = now_ns() + 5_000_000_000;
    let o = replicate_epoch_1(&b, due).await;
    assert_eq!(backlog_state(&b), Some("replicating"));
    // Linked: never gone, however long.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(repl(&b).takeovers(), 0);
    assert!(b.nsqd.engine.get_topic("t").is_none());

    drop(o);
    eventually(async || backlog_state(&b) != Some("replicating")).await;
    eventually(async || repl(&b).takeovers() == 1).await;
    assert_eq!(backlog_state(&b), Some("taken over"));
    let info = repl(&b).backlogs();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].messages, 4, "m2, m3, m4 on t:c and m5 on u");
    let manifest = nsq_core::replica::manifest::manifest_path(dir.path(), ORIGIN, 1);
    assert!(manifest.exists());
    // The copy is deleted after the takeover is confirmed and counted (the core's
    // `DropBacklog`, carried out by a task of its own): wait for it, do not race it.
    let copy = nsq_core::replica::backlog_dir(dir.path(), ORIGIN, 1);
    eventually(async || !copy.exists()).await;
    let m = nsq_core::replica::manifest::read(&manifest, 1).unwrap();
    let listed: Vec<(String, String, usize)> = m
        .iter()
        .map(|m| (m.topic.clone(), m.channel.clone(), m.ids.len()))
        .collect();
    assert_eq!(
        listed,
        [("t".into(), "c".into(), 3), ("u".into(), "".into(), 1)]
    );

    // Topics and channels, pause flags kept.
    let p = b.nsqd.engine.get_topic("p").expect("p created");
    assert!(p.is_paused());
    assert!(p.get_channel("pc").expect("pc created").is_paused());
    assert!(!b.nsqd.engine.get_topic("t").unwrap().is_paused());

    // /stats.
    let st = request(
        b.http_addr().unwrap(),
        "GET",
        "/stats?format=json",
        &[],
        b"",
    )
    .await
    .json();
    assert_eq!(st["replication"]["takeovers"], 1);
    assert_eq!(st["replication"]["backlogs"][0]["state"], "taken over");

    // A consumer on t:c: m2 and m3 now, m4 at its due time.
    let mut sub = FrameConn::connect(b.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 10\n").await;
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = sub.message().await;
        got.push((m.id, m.body.clone(), m.timestamp_ns, m.attempts));
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
    }
    got.sort();
    assert_eq!(
        got,
        [
            (id(2), Bytes::from("body-2"), 1_600_000_000_000_000_002, 3),
            (id(3), Bytes::from("body-3"), 1_600_000_000_000_000_003, 1),
        ]
    );
    let m = sub.message().await;
    assert!(now_ns() >= due - 5_000_000, "m4 came before its due time");
    assert_eq!((m.id, &m.body[..]), (id(4), &b"body-4"[..]));
    sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
        .await;

    // The message pending on topic u goes to its first channel.
    let mut sub_u = FrameConn::connect(b.tcp_addr(), b"  V2").await;
    sub_u.send_ok(b"SUB u x\n").await;
    sub_u.send(b"RDY 10\n").await;
    let m = sub_u.message().await;
    assert_eq!((m.id, &m.body[..]), (id(5), &b"body-5"[..]));
    // Nothing else (m1 was finished at the origin).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = b.nsqd.engine.get_topic("t").unwrap();
    assert_eq!(t.get_channel("c").unwrap().depth(), 0);

    b.shutdown().await;
}

/// After the takeover, a HELLO of the taken-over epoch (or a later one) is answered with
/// TAKEN_OVER, the manifest and MANIFEST_END instead of WELCOME; MANIFEST_APPLIED deletes the
/// manifest (and the record of the copy taken beside it), and the origin's next epoch is
/// welcomed. A restarted B still knows the manifest and how far the copy taken went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_origin_gets_the_manifest() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path(), &["--replication-takeover-timeout=1s"]).await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    eventually(async || repl(&b).takeovers() == 1).await;
    let node = repl(&b).identity.node_id;
    b.shutdown().await;
    let b = start_b(dir.path(), &["--replication-takeover-timeout=1s"]).await;
    assert_eq!(backlog_state(&b), Some("taken over"));

    let manifest = nsq_core::replica::manifest::manifest_path(dir.path(), ORIGIN, 1);
    for epoch in [1, 2] {
        let (mut o, answer) = Origin::hello(&b, epoch, None).await;
        assert_eq!(
            answer,
            Frame::TakenOver {
                epoch: 1,
                by_node: node,
                entries: 4,
                // B restarted: how far the copy taken went is kept beside the manifest.
                last_seq: 12,
            }
        );
        let mut ids = Vec::new();
        loop {
            match o.recv().await {
                Frame::Manifest(m) => {
                    assert_eq!(m.epoch, 1);
                    ids.extend(
                        m.ids
                            .iter()
                            .map(|i| (m.topic.clone(), m.channel.clone(), *i)),
                    );
                }
                Frame::ManifestEnd { epoch: 1 } => break,
                other => panic!("{other:?}"),
            }
        }
        ids.sort();
        let q = |t: &str, c: &str, n| (t.to_string(), c.to_string(), id(n));
        assert_eq!(
            ids,
            [
                q("t", "c", 2),
                q("t", "c", 3),
                q("t", "c", 4),
                q("u", "", 5)
            ]
        );
        if epoch == 1 {
            // Not applied: the manifest stays.
            drop(o);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(manifest.exists());
        } else {
            o.send(&Frame::ManifestApplied { epoch: 1 }).await;
            eventually(async || !manifest.exists() && repl(&b).backlogs().is_empty()).await;
            // Kept for the retire period as the take point of what B adopted (a manifest of
            // one of B's own epochs must not take those messages back), then deleted.
            assert!(manifest.with_extension("applied").exists());
            assert!(manifest.with_extension("taken").exists());
        }
    }
    // The origin's next epoch is replicated as usual.
    let (_o, answer) = Origin::hello(&b, 2, None).await;
    assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
    b.shutdown().await;
}

/// An origin restarted after an unclean stop says so (PREVIOUS_UNCLEAN): its previous epoch is
/// taken over at once, without the takeover timeout. Its new epoch is welcomed while the
/// takeover runs (the core's rule: the taker never welcomes an origin into the epoch it takes
/// over, but does its next, whose ACKs its adoptions may need), and TAKEN_OVER with the
/// manifest follows on that session once the takeover is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclean_restart_ends_the_epoch_at_once() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path(), &["--replication-takeover-timeout=1h"]).await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    let (mut o, answer) = Origin::hello(&b, 2, Some(1)).await;
    let mut answer = answer;
    if matches!(answer, Frame::Welcome(_)) {
        o.send(&Frame::CatchupBegin { seq: 0 }).await;
        o.send(&Frame::CatchupEnd { seq: 0 }).await;
        answer = loop {
            match o.any().await {
                Frame::Heartbeat | Frame::Status(_) | Frame::Ack { .. } => {}
                other => break other,
            }
        };
    }
    let Frame::TakenOver {
        epoch: 1,
        entries,
        last_seq,
        ..
    } = answer
    else {
        panic!("{answer:?}")
    };
    assert_eq!(entries, 4);
    // The copy taken went up to seq 12 (link version 3: the origin applies the manifest only
    // to what it took up to there).
    assert_eq!(last_seq, 12);
    assert_eq!(repl(&b).takeovers(), 1);
    assert!(b.nsqd.engine.get_topic("t").is_some());
    loop {
        if let Frame::ManifestEnd { epoch: 1 } = o.recv().await {
            break;
        }
    }
    b.shutdown().await;
}

/// Two holders of the same epoch, linked to each other (`--replicas=2` both ways, so each
/// gets the other's STATUS): after the origin is lost, exactly one takes the epoch over (the
/// first after the origin in ring order), and the other drops its copy once the taker's
/// STATUS says `taken over` — it does not take over one timeout later (the chooser's
/// escalation) as it would without the gossip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_holders_one_takes_over_and_the_other_drops_its_copy() {
    let (b_dir, c_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (b_port, c_port) = (common::pair::free_port(), common::pair::free_port());
    let b_args = [
        format!("--tcp-address=127.0.0.1:{b_port}"),
        format!("--replication-peer=127.0.0.1:{c_port}"),
        "--replicas=2".into(),
        "--replication-takeover-timeout=1s".into(),
    ];
    let c_args = [
        format!("--tcp-address=127.0.0.1:{c_port}"),
        format!("--replication-peer=127.0.0.1:{b_port}"),
        "--replicas=2".into(),
        "--replication-takeover-timeout=1s".into(),
    ];
    let b = common::start_replayed(common::options(b_dir.path(), &b_args)).await;
    let c = common::start_replayed(common::options(c_dir.path(), &c_args)).await;
    eventually(async || repl(&b).peers()[0].connected && repl(&c).peers()[0].connected).await;
    let ob = replicate_epoch_1(&b, 0).await;
    let oc = replicate_epoch_1(&c, 0).await;
    // Each has told the other that it holds the epoch.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop((ob, oc));
    eventually(async || repl(&b).takeovers() + repl(&c).takeovers() == 1).await;
    let (taker, other) = if repl(&b).takeovers() == 1 {
        (&b, &c)
    } else {
        (&c, &b)
    };
    eventually(async || backlog_state(other).is_none()).await;
    assert_eq!(backlog_state(taker), Some("taken over"));
    // The taker's adopted messages were replicated to its replica (the other): m2, m3, m4
    // on t:c and m5 on topic u.
    let taker_node = repl(taker).identity.node_id;
    eventually(async || {
        repl(other)
            .backlogs()
            .iter()
            .any(|x| x.origin == taker_node && x.messages == 4)
    })
    .await;
    // Past the chooser's escalation (one more timeout): still one takeover.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(repl(&b).takeovers() + repl(&c).takeovers(), 1);
    assert!(other.nsqd.engine.get_topic("t").is_none());
    assert_eq!(
        taker
            .nsqd
            .engine
            .get_topic("t")
            .unwrap()
            .get_channel("c")
            .unwrap()
            .depth(),
        3
    );
    b.shutdown().await;
    c.shutdown().await;
}

/// A fake nsqlookupd: TCP V1 (answers IDENTIFY with its HTTP port, OK to anything else) and
/// HTTP answering every request with the current `debug` text as JSON (`/debug`).
async fn fake_lookupd(debug: std::sync::Arc<parking_lot::Mutex<String>>) -> String {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_port = http.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = http.accept().await.unwrap();
            let body = debug.lock().clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    let addr = tcp.local_addr().unwrap().to_string();
    common::lookupd_tcp::serve(
        tcp,
        http_port,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    addr
}

/// A `/debug` answer of a fake nsqlookupd whose clock reads `clock` milliseconds: the
/// watcher's own entry (B, PINGing, `last_update` = the clock) and, when `origin` is Some,
/// the origin's (its HELLO's broadcast address and TCP port) with that `last_update`.
fn debug_answer(clock: i64, origin: Option<i64>) -> String {
    let entry = |port: u16, id: &str, last: i64| {
        format!(
            r#"{{"broadcast_address":"127.0.0.1","hostname":"{id}","http_port":2,"id":"127.0.0.1:{port}","last_update":{},"tcp_port":{port},"tombstoned":false,"tombstoned_at":0,"version":"1.3.0"}}"#,
            last * 1_000_000
        )
    };
    let mut producers = vec![entry(9, "b", clock)];
    if let Some(o) = origin {
        producers.push(entry(1, "o", o));
    }
    format!(r#"{{"client::":[{}]}}"#, producers.join(","))
}

/// A fake nsqlookupd whose clock ticks every 250 ms; `origin` says whether the origin is
/// listed, PINGing (its `last_update` follows the clock).
async fn ticking_lookupd(
    origin: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (String, tokio::task::JoinHandle<()>) {
    let debug = std::sync::Arc::new(parking_lot::Mutex::new(debug_answer(0, Some(0))));
    let d = debug.clone();
    let ticker = tokio::spawn(async move {
        for n in 1.. {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let clock = n * 250;
            let listed = origin.load(std::sync::atomic::Ordering::SeqCst);
            *d.lock() = debug_answer(clock, listed.then_some(clock));
        }
    });
    (fake_lookupd(debug).await, ticker)
}

/// With an nsqlookupd configured, the lost link is not enough: while the lookupd lists the
/// origin (its HELLO's broadcast address and TCP port) with a `last_update` that keeps
/// changing, B does not take over; once the lookupd stops listing it, B takes over one
/// timeout later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_still_listed_by_nsqlookupd_is_not_taken_over() {
    let listed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (lookupd, _ticker) = ticking_lookupd(listed.clone()).await;
    let dir = TempDir::new().unwrap();
    let b = start_b(
        dir.path(),
        &[
            "--replication-takeover-timeout=1s",
            &format!("--lookupd-tcp-address={lookupd}"),
        ],
    )
    .await;
    eventually(async || !b.nsqd.lookup.http_addresses().is_empty()).await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    eventually(async || backlog_state(&b) == Some("detached")).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(repl(&b).takeovers(), 0, "still listed by the lookupd");
    // It stops being listed (unregistered): gone one timeout later.
    listed.store(false, std::sync::atomic::Ordering::SeqCst);
    let unlisted = std::time::Instant::now();
    eventually(async || repl(&b).takeovers() == 1).await;
    assert!(unlisted.elapsed() >= Duration::from_millis(900));
    b.shutdown().await;
}

/// Fail closed (issue 28, defect 6): with two nsqlookupds configured, one that never answers
/// (B cannot reach it — it may be the one the origin still reaches) blocks the takeover,
/// however long the other has not listed the origin; once the configuration lists only the
/// answering one (`PUT /config/nsqlookupd_tcp_addresses`), B takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookupd_that_does_not_answer_blocks_the_takeover() {
    let listed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (lookupd, _ticker) = ticking_lookupd(listed).await;
    let unreachable = format!("127.0.0.1:{}", common::pair::free_port());
    let dir = TempDir::new().unwrap();
    let b = start_b(
        dir.path(),
        &[
            "--replication-takeover-timeout=1s",
            &format!("--lookupd-tcp-address={lookupd}"),
            &format!("--lookupd-tcp-address={unreachable}"),
        ],
    )
    .await;
    eventually(async || !b.nsqd.lookup.http_addresses().is_empty()).await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    eventually(async || backlog_state(&b) == Some("detached")).await;
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert_eq!(
        repl(&b).takeovers(),
        0,
        "a configured lookupd that does not answer blocks the takeover"
    );
    let r = request(
        b.http_addr().unwrap(),
        "PUT",
        "/config/nsqlookupd_tcp_addresses",
        &[],
        format!(r#"["{lookupd}"]"#).as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    eventually(async || repl(&b).takeovers() == 1).await;
    b.shutdown().await;
}

/// Fail closed (issue 28, defect 4): B takes epoch 1 over, but B's own replica set cannot
/// acknowledge the adopted messages (B has `--replicas=2` and neither of its peers runs):
/// the messages are delivered from B and the manifest is kept, but the backlog is not
/// deleted — it stays `taking over`, also after several failed waits for the replicas. Once
/// a peer C starts, B catches C up, C acknowledges, and only then the backlog goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_keeps_the_backlog_until_the_takers_replicas_acknowledge() {
    let (dir, c_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let c_port = common::pair::free_port();
    let b = start_b(
        dir.path(),
        &[
            "--replication-takeover-timeout=1s",
            "--replicas=2",
            &format!("--replication-peer=127.0.0.1:{c_port}"),
            "--replication-ack-timeout=300ms",
        ],
    )
    .await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    // Delivered here: the topics exist, the manifest is written.
    let manifest = nsq_core::replica::manifest::manifest_path(dir.path(), ORIGIN, 1);
    eventually(async || b.nsqd.engine.get_topic("t").is_some() && manifest.exists()).await;
    // Three waits for B's replicas failed (each is a publish failure in the metrics), or
    // the backlog went.
    let backlog = nsq_core::replica::backlog_dir(dir.path(), ORIGIN, 1);
    eventually(async || repl(&b).publish_failures() >= 3 || !backlog.exists()).await;
    assert!(backlog.exists(), "the backlog was deleted unconfirmed");
    assert_eq!(backlog_state(&b), Some("taking over"));
    assert_eq!(repl(&b).takeovers(), 0);
    assert!(manifest.exists());
    assert_eq!(
        b.nsqd
            .engine
            .get_topic("t")
            .unwrap()
            .get_channel("c")
            .unwrap()
            .depth(),
        3,
        "m2, m3 and m4 are delivered from B"
    );

    // A replica for B: caught up, it acknowledges; the takeover completes.
    let c_args = [
        format!("--tcp-address=127.0.0.1:{c_port}"),
        format!("--replication-peer={}", b.tcp_addr()),
    ];
    let c = common::start_replayed(common::options(c_dir.path(), &c_args)).await;
    eventually(async || repl(&b).takeovers() == 1).await;
    // Deleted by the core's `DropBacklog` after the count (see the test above).
    eventually(async || !backlog.exists()).await;
    assert_eq!(backlog_state(&b), Some("taken over"));
    let b_node = repl(&b).identity.node_id;
    assert!(repl(&c)
        .backlogs()
        .iter()
        .any(|x| x.origin == b_node && x.messages == 4));
    c.shutdown().await;
    b.shutdown().await;
}

/// `--replication-max-backlog-bytes` bounds what B keeps of one origin across all its epochs
/// (issue 28, defect 7): epoch 1 holds most of the bound; a publish of epoch 2 that would fit
/// the bound alone, but not beside epoch 1, is refused with ERROR code 2 (backlog full).
/// (Epoch 2's HELLO ends epoch 1, which B takes over; B's own replica set cannot acknowledge
/// the adopted messages — its peer does not run — so the backlog of epoch 1 stays, `taking
/// over`, and still counts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_bound_counts_every_epoch_of_the_origin() {
    let dir = TempDir::new().unwrap();
    let b = start_b(
        dir.path(),
        &["--replication-max-backlog-bytes=8192", "--replicas=2"],
    )
    .await;
    let big = |seq: u64, n: u8| {
        Frame::Pub(Pub {
            seq,
            topic: "t".into(),
            defer_until: 0,
            channels: vec!["c".into()],
            messages: vec![PubMessage {
                id: id(n),
                timestamp: 1,
                body: Bytes::from(vec![b'x'; 5000]),
            }],
        })
    };
    let mut origins = Vec::new();
    for epoch in [1, 2] {
        let (mut o, answer) = Origin::hello(&b, epoch, None).await;
        assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
        o.send(&Frame::CatchupBegin { seq: 0 }).await;
        o.send(&Frame::CatchupEnd { seq: 0 }).await;
        o.send(&admin(1, AdminOp::Create, "t", "")).await;
        o.send(&big(2, epoch as u8)).await;
        if epoch == 1 {
            // Stored before epoch 2 begins.
            o.acked(2).await;
        }
        origins.push(o);
    }
    let refused = loop {
        match origins[1].recv().await {
            Frame::Ack { seq } if seq < 2 => {}
            other => break other,
        }
    };
    let Frame::Error { code, text } = refused else {
        panic!("expected ERROR backlog full, got {refused:?}")
    };
    assert_eq!(code, replication::LinkErrorCode::Full, "{text}");
    // (The view reads 0 for a backlog whose takeover holds its store at that moment.)
    let held = || -> Vec<(u64, u64)> {
        repl(&b)
            .backlogs()
            .iter()
            .map(|x| (x.epoch, x.messages))
            .collect()
    };
    eventually(async || held() == [(1, 1), (2, 0)]).await;
    b.shutdown().await;
}

/// A manifest still listed but gone from the disk (issue 28, defect 7: a quick restart logged
/// `manifest … No such file or directory` and its link was refused) counts as applied: the
/// origin's next HELLO is welcomed, not refused, and the epoch is no longer `taken over`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_gone_from_the_disk_does_not_refuse_the_origin() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path(), &["--replication-takeover-timeout=1s"]).await;
    let o = replicate_epoch_1(&b, 0).await;
    drop(o);
    eventually(async || repl(&b).takeovers() == 1).await;
    let manifest = nsq_core::replica::manifest::manifest_path(dir.path(), ORIGIN, 1);
    std::fs::remove_file(&manifest).unwrap();
    let (_o, answer) = Origin::hello(&b, 2, None).await;
    assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
    assert!(repl(&b).backlogs().iter().all(|x| x.state != "taken over"));
    b.shutdown().await;
}

/// Link version 3's stamps: a PING carrying the origin's clock is answered with a PONG
/// echoing it, and the replica's STATUS then gives that stamp as the `echo` of the origin's
/// epoch, `replicating` and `complete` once its catch-up ended — each the origin's proof
/// that a member heard it then (its fencing counts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_is_answered_with_its_stamp_and_echoed_in_status() {
    let dir = TempDir::new().unwrap();
    let b = start_b(dir.path(), &[]).await;
    let (mut o, answer) = Origin::hello(&b, 1, None).await;
    assert!(matches!(answer, Frame::Welcome(_)), "{answer:?}");
    o.send(&Frame::CatchupBegin { seq: 0 }).await;
    o.send(&Frame::CatchupEnd { seq: 0 }).await;
    const STAMP: u64 = 123_456_789;
    o.send(&Frame::Ping { stamp: STAMP }).await;
    loop {
        match o.any().await {
            Frame::Pong { stamp } => {
                assert_eq!(stamp, STAMP);
                break;
            }
            Frame::Heartbeat | Frame::Status(_) | Frame::Ack { .. } => {}
            other => panic!("expected PONG, got {other:?}"),
        }
    }
    // The next STATUS (they come every second) echoes it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no STATUS echoed the PING"
        );
        let Frame::Status(entries) = o.any().await else {
            continue;
        };
        let Some(e) = entries.iter().find(|e| e.origin == ORIGIN && e.epoch == 1) else {
            continue;
        };
        if e.echo == STAMP {
            assert_eq!(e.state, BacklogState::Replicating);
            assert!(e.complete, "{e:?}");
            break;
        }
    }
    b.shutdown().await;
}
