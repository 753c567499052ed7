//! A host back with an empty data directory (docs/replication.md, "Node identity"): B, an
//! origin whose messages A holds, stops, loses its data directory and starts again at the
//! same address with a new node ID. A sees a member answer where B did — B's HELLO address on
//! A's side as replica, or B's peer address on A's side as origin — and ends B's old identity
//! at once, as if it had sent PREVIOUS_UNCLEAN: A takes the backlog over and delivers every
//! message B acknowledged. The takeover timeout is 60 s, so nothing here is the timeout's
//! doing. Ports are all bound to `:0`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pair::Pair;
use nsq_testkit::frames::FrameConn;
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;

const MESSAGES: usize = 200;

/// B (with `--replicas=2`, so A holds its backlog) is sent `MESSAGES`, stopped, its data
/// directory emptied, and started again with `b_again`; every message B acknowledged is
/// delivered by A within a few seconds. A runs with `a_extra`.
async fn back_empty(a_extra: &str, b_again: &[&str]) {
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
    p.start_b_with(b_again).await;
    let new_node = p.b().nsqd.replication.as_ref().unwrap().identity.node_id;
    assert_ne!(new_node, b_node);

    // A takes B's old identity over now (not after 60 s) and delivers its messages.
    eventually(async || p.a.nsqd.replication.as_ref().unwrap().takeovers() == 1).await;
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
    back_empty("--replicas=1", &["--replicas=2"]).await;
}

/// B comes back with `--replicas=1` (it dials nobody): A's own dial of B's address is
/// answered by another node ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_an_empty_data_dir_ends_its_old_identity_at_the_origins_dial() {
    back_empty("--replicas=2", &[]).await;
}
