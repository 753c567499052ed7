//! Settlement streaming between two in-process nsqd (issue 28, defect 2; docs/replication.md,
//! "Settlement streaming"): when a consumer leaves with messages in flight, the replica's
//! backlog is the origin's unsettled state — every FIN the origin received was streamed.

mod common;

use common::pair::Pair;
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;

fn mpub(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for b in bodies {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b);
    }
    sized("MPUB t\n", &body)
}

/// 2,000 messages published to A, half with MPUB, half with HTTP `/mpub`.
async fn publish_2000(p: &Pair) {
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    let http = p.a.http_addr().unwrap();
    for k in 0..10 {
        let bodies: Vec<Vec<u8>> = (0..100).map(|i| format!("m{k}-{i}").into_bytes()).collect();
        c.send_ok(&mpub(&bodies)).await;
        let lines: Vec<String> = (0..100).map(|i| format!("h{k}-{i}")).collect();
        let r = request(
            http,
            "POST",
            "/mpub?topic=t",
            &[],
            lines.join("\n").as_bytes(),
        )
        .await;
        r.assert_text_ok("OK");
    }
    assert_eq!(p.backlog().unwrap().messages, 2000);
}

fn fin(id: &nsq_protocol::MessageId) -> Vec<u8> {
    format!("FIN {}\n", String::from_utf8_lossy(&id.0)).into_bytes()
}

/// A consumer with RDY 2500 receives all 2,000, FINs 500 in one write and leaves with the
/// other 1,500 in flight: B's backlog of A is exactly those 1,500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_leaving_with_messages_in_flight_leaves_the_replica_its_unsettled_ones() {
    let p = Pair::start(&[]).await;
    publish_2000(&p).await;
    let mut sub = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 2500\n").await;
    let mut ids = Vec::new();
    while ids.len() < 2000 {
        ids.push(sub.message().await.id);
    }
    let fins: Vec<u8> = ids[..500].iter().flat_map(fin).collect();
    sub.send(&fins).await;
    drop(sub);
    let ch = common::channel(&p.a, "t", "c");
    eventually(async || ch.consumer_count() == 0).await;
    assert_eq!(ch.in_flight_ids().len(), 1500);
    eventually(async || p.backlog().is_some_and(|b| b.messages == 1500)).await;
    p.shutdown().await;
}

/// The reported case: the consumer FINs 500 as they arrive and closes while the rest are
/// still on their way to it. Closing a socket with unread data makes the client's kernel
/// reset the connection and discard what it had not sent yet — most of those FINs never
/// reach A (the same happens with NSQ v1.3: A delivers them again after `--msg-timeout`).
/// Whatever reached A, B's backlog is A's unsettled state: a takeover delivers again only
/// what A would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_follows_the_origin_when_a_consumer_resets_its_connection() {
    let p = Pair::start(&[]).await;
    publish_2000(&p).await;
    let mut sub = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 1\n").await;
    let m = sub.message().await;
    sub.send(&fin(&m.id)).await;
    sub.send(b"RDY 2500\n").await;
    for _ in 0..499 {
        let m = sub.message().await;
        sub.send(&fin(&m.id)).await;
    }
    drop(sub);
    let ch = common::channel(&p.a, "t", "c");
    eventually(async || ch.consumer_count() == 0).await;
    let unsettled = ch.in_flight_ids().len() as u64 + ch.depth() as u64;
    assert!((1500..2000).contains(&unsettled), "{unsettled}");
    eventually(async || p.backlog().is_some_and(|b| b.messages == unsettled)).await;
    p.shutdown().await;
}
