//! A host back with an empty data directory (docs/replication.md, "Node identity"): B, an
//! origin whose messages A holds, stops, loses its data directory and starts again at the
//! same address with a new node ID. A sees a member answer where B did — B's HELLO address on
//! A's side as replica, or B's peer address on A's side as origin — and ends B's old identity
//! at once, as if it had sent PREVIOUS_UNCLEAN: A takes the backlog over and delivers every
//! message B acknowledged. The takeover timeout is 60 s, so nothing here is the timeout's
//! doing. Ports are all bound to `:0`.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::pair::{start_on, Pair};
use nsq_protocol::replication::{
    self, Frame, Hello, Pub, PubMessage, LINK_VERSION, MAGIC_R1, NONCE_LEN,
};
use nsq_protocol::MessageId;
use nsq_testkit::frames::FrameConn;
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MESSAGES: usize = 200;

/// The entries under `<data>/replica/` of `origin` (backlog directories, manifests), not
/// counting an applied manifest's take-point record (`<origin>.<epoch>.applied` and `.taken`,
/// deleted 10 minutes after: docs/replication.md, "Return").
fn kept_of(data: &std::path::Path, origin: u64) -> Vec<String> {
    let prefix = format!("{origin:016x}.");
    std::fs::read_dir(data.join("replica"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .filter(|n| !n.ends_with(".applied") && !n.ends_with(".taken"))
                .collect()
        })
        .unwrap_or_default()
}

/// B (with `--replicas=2`, so A holds its backlog) is sent `MESSAGES`, stopped, its data
/// directory emptied, and started again with `b_again`; every message B acknowledged is
/// delivered by A within a few seconds. A runs with `a_extra`, and is restarted while B is
/// down when `restart_a`.
async fn back_empty(a_extra: &str, b_again: &[&str], restart_a: bool) {
    let slow = "--replication-takeover-timeout=60s";
    let mut p = Pair::start_with(&[slow, a_extra], &["--replicas=2", slow]).await;
    let b_http = p.b().http_addr().unwrap();
    for target in ["/topic/create?topic=t", "/channel/create?topic=t&channel=c"] {
        let r = request(b_http, "POST", target, &[], b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let mut sent = BTreeSet::new();
    for chunk in 0..MESSAGES / 50 {
        let bodies: Vec<String> = (0..50).map(|i| format!("m{}", chunk * 50 + i)).collect();
        let r = request(
            b_http,
            "POST",
            "/mpub?topic=t",
            &[],
            bodies.join("\n").as_bytes(),
        )
        .await;
        r.assert_text_ok("OK");
        sent.extend(bodies);
    }
    let b_node = p.b().nsqd.replication.as_ref().unwrap().identity.node_id;
    let a_holds = |p: &Pair| {
        p.a.nsqd
            .replication
            .as_ref()
            .unwrap()
            .backlogs()
            .into_iter()
            .find(|b| b.origin == b_node)
            .map_or(0, |b| b.messages)
    };
    assert_eq!(
        a_holds(&p),
        MESSAGES as u64,
        "A holds every acknowledged message"
    );

    // B goes, and its data directory with it; it comes back at the same address.
    p.b.take().unwrap().shutdown().await;
    for e in std::fs::read_dir(p.b_dir.path()).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    if restart_a {
        // A forgets what answered at B's address; B's backlog (with B's address in its
        // origin.json) is reopened from disk.
        let Pair {
            a,
            b: _,
            a_dir,
            b_dir,
            b_port,
        } = p;
        a.shutdown().await;
        let args = [
            "--replicas=2".to_string(),
            format!("--replication-peer=127.0.0.1:{b_port}"),
            slow.to_string(),
            a_extra.to_string(),
        ];
        let a = start_on(a_dir.path(), &args).await;
        p = Pair {
            a,
            b: None,
            a_dir,
            b_dir,
            b_port,
        };
        assert_eq!(a_holds(&p), MESSAGES as u64);
    }
    p.start_b_with(b_again).await;
    let new_node = p.b().nsqd.replication.as_ref().unwrap().identity.node_id;
    assert_ne!(new_node, b_node);

    // A takes B's old identity over now (not after 60 s) and delivers its messages.
    let a_repl = p.a.nsqd.replication.as_ref().unwrap();
    eventually(async || a_repl.takeovers() == 1).await;
    // Nothing of the old identity is kept: no backlog, no manifest (it never applies one).
    eventually(async || a_repl.backlogs().iter().all(|b| b.origin != b_node)).await;
    eventually(async || kept_of(p.a_dir.path(), b_node).is_empty()).await;
    let mut sub = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(format!("RDY {MESSAGES}\n").as_bytes()).await;
    let mut got = BTreeSet::new();
    while got.len() < MESSAGES {
        let m = tokio::time::timeout(Duration::from_secs(10), sub.message())
            .await
            .expect("every message of B's old identity");
        sub.send(format!("FIN {}\n", String::from_utf8_lossy(&m.id.0)).as_bytes())
            .await;
        got.insert(String::from_utf8(m.body.to_vec()).unwrap());
    }
    assert_eq!(got, sent);
    p.shutdown().await;
}

/// B comes back with `--replicas=2`: its HELLO to A carries B's old address (A runs with
/// `--replicas=1`, so it does not dial B itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_an_empty_data_dir_ends_its_old_identity_at_its_hello() {
    back_empty("--replicas=1", &["--replicas=2"], false).await;
}

/// B comes back with `--replicas=1` (it dials nobody): A's own dial of B's address is
/// answered by another node ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_an_empty_data_dir_ends_its_old_identity_at_the_origins_dial() {
    back_empty("--replicas=2", &[], false).await;
}

/// As above, A restarted meanwhile: the CHALLENGE that answers A's dial carries B's old
/// broadcast address and TCP port, which A's backlog of B recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_an_empty_data_dir_is_recognised_by_its_address_after_a_restart() {
    back_empty("--replicas=2", &[], true).await;
}

/// A raw origin linked to `to` (no secret: `to` lists 127.0.0.1 as a peer): HELLO of `node`
/// announcing `127.0.0.1:port`, the handshake, a catch-up of nothing and one PUB of `body` to
/// topic t, acknowledged. The connection stays open and sends nothing more.
async fn raw_origin(to: SocketAddr, node: u64, port: u16, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut hello = Hello::other_version(LINK_VERSION);
    hello.node_id = node;
    hello.epoch = 1;
    hello.replicas = 2;
    hello.max_frame = replication::MIN_MAX_FRAME;
    hello.broadcast_address = "127.0.0.1".into();
    hello.tcp_port = port;
    hello.nonce = [node as u8; NONCE_LEN];
    let mut out = BytesMut::from(&MAGIC_R1[..]);
    replication::encode(&Frame::Hello(hello), &mut out);
    s.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    let mut next = async |s: &mut TcpStream| loop {
        if let Some(f) = replication::decode(&mut buf, replication::MIN_MAX_FRAME).unwrap() {
            if !matches!(
                f,
                Frame::Heartbeat | Frame::Status(_) | Frame::Ping { .. } | Frame::Pong { .. }
            ) {
                return f;
            }
            continue;
        }
        assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed");
    };
    assert!(matches!(next(&mut s).await, Frame::Challenge(_)));
    let mut out = BytesMut::new();
    replication::encode(
        &Frame::Auth {
            proof: Bytes::new(),
        },
        &mut out,
    );
    s.write_all(&out).await.unwrap();
    assert!(matches!(next(&mut s).await, Frame::Welcome(_)));
    let mut out = BytesMut::new();
    for f in [
        Frame::CatchupBegin { seq: 0 },
        Frame::CatchupEnd { seq: 0 },
        Frame::Pub(Pub {
            seq: 1,
            topic: "t".into(),
            defer_until: 0,
            channels: vec![],
            messages: vec![PubMessage {
                id: MessageId(*b"0000000000000001"),
                timestamp: 1,
                body: Bytes::from(body.to_string()),
            }],
        }),
    ] {
        replication::encode(&f, &mut out);
    }
    s.write_all(&out).await.unwrap();
    // CATCHUP_END is acknowledged first when the replica read it apart from the PUB.
    let mut ack = next(&mut s).await;
    if ack == (Frame::Ack { seq: 0 }) {
        ack = next(&mut s).await;
    }
    assert_eq!(ack, Frame::Ack { seq: 1 });
    s
}

/// The old identity's link still looks live when the new one says HELLO (its host died
/// without closing the connection): A waits for the dead-link rule (5 s without a frame) to
/// end that session, then takes the old identity over — not one timeout (60 s) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_identity_whose_link_still_looks_live_ends_once_the_link_dies() {
    let dir = tempfile::tempdir().unwrap();
    let a = start_on(
        dir.path(),
        &[
            "--replication-peer=127.0.0.1:1".to_string(),
            "--replication-takeover-timeout=60s".to_string(),
        ],
    )
    .await;
    let repl = a.nsqd.replication.as_ref().unwrap();
    let (old, new) = (0x0101_0000_0000_0001, 0x0202_0000_0000_0002);
    let _silent = raw_origin(a.tcp_addr(), old, 7777, "old").await;
    let _new = raw_origin(a.tcp_addr(), new, 7777, "new").await;
    assert_eq!(repl.takeovers(), 0, "the old identity's link is live");
    assert!(repl
        .backlogs()
        .iter()
        .any(|b| b.origin == old && b.state == "replicating"));
    eventually(async || repl.takeovers() == 1).await;
    // The backlog is gone, and so is its manifest: the old identity never applies it.
    eventually(async || repl.backlogs().iter().all(|b| b.origin != old)).await;
    // (Its directory goes just after it leaves the views.)
    eventually(async || kept_of(dir.path(), old).is_empty()).await;
    let mut sub = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 1\n").await;
    assert_eq!(&sub.message().await.body[..], b"old");
    a.shutdown().await;
}
