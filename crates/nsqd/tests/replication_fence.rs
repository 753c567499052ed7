//! Fencing (docs/replication.md, The core, "Fencing"): an origin with `--replicas` ≥ 2
//! delivers its replicated messages only while a member proved, within T/2 on the origin's
//! clock, that it heard it — a PONG to a PING stamped with the origin's clock (link version
//! 3). Decided by the replication core (`nsq_core::replication::Member`), carried out by the
//! engine's delivery fence. Ports are all bound to `:0`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pair::Pair;
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::wait::eventually;
use tokio::net::TcpListener;

/// T = 2 s: A fences 1 s after the last PONG.
const T: &str = "--replication-takeover-timeout=2s";

fn fenced(p: &Pair) -> bool {
    p.a.nsqd.replication.as_ref().unwrap().fenced()
}

/// While B answers A's PINGs, A delivers, for longer than the fencing interval (without the
/// stamped PING/PONG A would fence 1 s after linking). Once B is gone for T/2, A hands
/// nothing more to its consumers — a peer could be taking these messages over — while an
/// ephemeral channel, which no peer holds, keeps delivering; when B is back, delivery
/// resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_no_member_hears_stops_delivering_until_one_does() {
    let mut p = Pair::start(&[T]).await;
    let mut pubc = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    let mut sub = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    let mut eph = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    eph.send_ok(b"SUB t e#ephemeral\n").await;
    eph.send(b"RDY 100\n").await;

    // Three seconds linked (three fencing intervals): still delivering.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!fenced(&p), "A fenced while B answers its PINGs");
    pubc.send_ok(&sized("PUB t\n", b"one")).await;
    sub.send(b"RDY 1\n").await;
    let m = sub.message().await;
    assert_eq!(&m.body[..], b"one");
    // No more for now (RDY 0 before the FIN frees the consumer's window).
    sub.send(format!("RDY 0\nFIN {}\n", m.id).as_bytes()).await;
    assert_eq!(&eph.message().await.body[..], b"one");
    tokio::time::sleep(Duration::from_millis(200)).await;

    pubc.send_ok(&sized("PUB t\n", b"two")).await;
    assert_eq!(&eph.message().await.body[..], b"two");
    let stopped = Instant::now();
    p.b.take().unwrap().shutdown().await;
    eventually(async || fenced(&p)).await;
    // Fenced once T/2 passed without a PONG (the last one answered a PING sent at most a
    // PING interval, 250 ms, before B began to stop).
    assert!(
        stopped.elapsed() >= Duration::from_millis(700),
        "fenced after {:?}",
        stopped.elapsed()
    );
    // "two" is not handed out while fenced.
    sub.send(b"RDY 1\n").await;
    let got = tokio::time::timeout(Duration::from_millis(1500), sub.frame()).await;
    assert!(got.is_err(), "delivered while fenced: {got:?}");
    // The ephemeral channel still delivers (its copy is on no peer), messages published
    // with the replicated channel's delivery fenced included (A stores them locally; their
    // publish fails for want of B's ACK — the connection closes).
    let mut pubc = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    pubc.send(&sized("PUB t\n", b"three")).await;
    assert_eq!(&eph.message().await.body[..], b"three");

    // B is back: its PONGs lift the fence and "two" is delivered.
    p.start_b().await;
    let m = tokio::time::timeout(Duration::from_secs(10), sub.message())
        .await
        .expect("delivered once B is back");
    assert_eq!(&m.body[..], b"two");
    assert!(!fenced(&p));
    p.shutdown().await;
}

/// `--replicas=1` (the default) never fences, whatever the peers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_replicate_its_publishes_never_fences() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::pair::free_port();
    let a = common::pair::start_on(
        dir.path(),
        &[
            T.to_string(),
            format!("--replication-peer=127.0.0.1:{port}"),
        ],
    )
    .await;
    let mut c = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"one")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!a.nsqd.replication.as_ref().unwrap().fenced());
    let mut sub = FrameConn::connect(a.tcp_addr(), b"  V2").await;
    sub.send_ok(b"SUB t c\n").await;
    sub.send(b"RDY 1\n").await;
    assert_eq!(&sub.message().await.body[..], b"one");
    a.shutdown().await;
}

/// An nsqlookupd stand-in that answers while `answering` is set (`common::lookupd_tcp`).
async fn lookupd_answering_while(answering: Arc<AtomicBool>) -> String {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    common::lookupd_tcp::serve(tcp, 1, answering);
    addr
}

/// The rule: an origin fences when it has heard neither a member nor an nsqlookupd
/// for the fencing interval. With B gone but the lookupd answering A's PINGs (sent every
/// T/8, at least 250 ms, while replicating), A keeps delivering; once the lookupd stops
/// answering too, A fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_a_lookupd_hears_keeps_delivering_without_its_members() {
    let answering = Arc::new(AtomicBool::new(true));
    let lookupd = lookupd_answering_while(answering.clone()).await;
    let mut p = Pair::start(&[T, &format!("--lookupd-tcp-address={lookupd}")]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    p.b.take().unwrap().shutdown().await;
    // Three fencing intervals without B.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!fenced(&p), "A fenced while the lookupd answers its PINGs");
    answering.store(false, Ordering::SeqCst);
    let silent = Instant::now();
    eventually(async || fenced(&p)).await;
    assert!(
        silent.elapsed() >= Duration::from_millis(500),
        "fenced {:?} after the lookupd went silent",
        silent.elapsed()
    );
    p.shutdown().await;
}
