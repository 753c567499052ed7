//! Pipelined publishes with replication on (issue 22, docs/replication.md, Acknowledgement):
//! a connection's publishes are stored in command order and their acknowledgements awaited
//! together, while the answers still go out one per command, in command order
//! (nsqd/protocol_v2.go, `IOLoop`). A publishes with `--replicas=2` and B as its peer.

mod common;

use nsq_testkit::frames::{sized, FrameConn};

use common::pair::Pair;

async fn v2(p: &Pair) -> FrameConn {
    FrameConn::connect(p.a.tcp_addr(), b"  V2").await
}

fn mpub(bodies: &[&[u8]]) -> Vec<u8> {
    let mut body = (bodies.len() as u32).to_be_bytes().to_vec();
    for b in bodies {
        body.extend_from_slice(&(b.len() as u32).to_be_bytes());
        body.extend_from_slice(b);
    }
    sized("MPUB t\n", &body)
}

/// 50 PUBs, an IDENTIFY and 10 MPUBs of 3 in one write: every answer, in command order (the
/// IDENTIFY's JSON between the 25th and 26th OK), each OK only once B stored its publish,
/// and the messages are stored on A in command order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_publishes_are_answered_in_order_once_replicated() {
    let p = Pair::start(&[]).await;
    let mut c = v2(&p).await;
    let mut batch = Vec::new();
    for i in 0..50 {
        batch.extend(sized("PUB t\n", format!("m{i}").as_bytes()));
        if i == 24 {
            batch.extend(sized("IDENTIFY\n", br#"{"feature_negotiation":true}"#));
        }
    }
    for _ in 0..10 {
        batch.extend(mpub(&[b"x", b"y", b"z"]));
    }
    c.send(&batch).await;
    for i in 0..60 {
        let f = c.frame().await.expect("a frame");
        assert_eq!(f.frame_type, 0, "answer {i}: {f:?}");
        assert_eq!(&f.data[..], b"OK", "answer {i}");
        if i == 24 {
            let f = c.frame().await.expect("IDENTIFY's response");
            assert_eq!(f.frame_type, 0);
            assert!(f.data.starts_with(b"{"), "{f:?}");
        }
    }
    // The last OK came after B stored everything before it.
    assert_eq!(p.replicated(), 80);
    // Stored in command order: a consumer gets m0..m49 first.
    let mut sub = v2(&p).await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 50\n").await;
    for i in 0..50 {
        let m = sub.message().await;
        assert_eq!(m.body, format!("m{i}").as_bytes());
    }
    p.shutdown().await;
}

/// A decoder error after pipelined publishes is answered after their OKs, then closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_command_after_pipelined_publishes_answers_in_turn() {
    let p = Pair::start(&[]).await;
    let mut c = v2(&p).await;
    let mut batch = sized("PUB t\n", b"a");
    batch.extend(sized("PUB t\n", b"b"));
    batch.extend(sized("PUB  t\n", b"c"));
    c.send(&batch).await;
    c.expect_response(b"OK").await;
    c.expect_response(b"OK").await;
    c.expect_fatal("E_BAD_TOPIC PUB topic name \"\" is not valid")
        .await;
    assert_eq!(p.replicated(), 2);
    p.shutdown().await;
}

/// With B gone, a replicated publish between two that need no replica (ephemeral topics)
/// fails in its turn with the usual text and closes the connection: the publish before it is
/// answered, none after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_replicated_publish_in_a_pipeline_is_fatal_in_its_turn() {
    let mut p = Pair::start(&["--replication-ack-timeout=300ms"]).await;
    p.b.take().unwrap().shutdown().await;
    let mut c = v2(&p).await;
    let mut batch = sized("PUB e#ephemeral\n", b"a");
    batch.extend(sized("PUB t\n", b"b"));
    batch.extend(sized("PUB t\n", b"c"));
    batch.extend(sized("PUB e#ephemeral\n", b"d"));
    c.send(&batch).await;
    c.expect_response(b"OK").await;
    c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 300ms")
        .await;
    let repl = p.a.nsqd.replication.as_ref().unwrap();
    // The pending wait of the PUB after it was dropped with the connection, and counted out.
    nsq_testkit::wait::eventually(async || repl.publish_waiting() == 0).await;
    p.shutdown().await;
}
