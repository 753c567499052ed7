//! The holders of one origin's epoch when the taker's copy is not the whole of it (issue 28:
//! "the union of the holders is delivered when no complete copy survives"; docs/replication.md
//! "Takeover"). B and C are real nsqd linked to each other; the origin is played by hand
//! (`common/origin.rs`) and vanishes by closing its connections.

mod common;

use std::time::Duration;

use common::origin::{admin, publish, Origin};
use common::pair::free_port;
use nsq_protocol::replication::{AdminOp, Frame, WelcomeAnswer};
use nsq_testkit::wait::eventually;
use nsqd::NsqdHandle;
use tempfile::TempDir;

fn repl(n: &NsqdHandle) -> &nsqd::replication::Replication {
    n.nsqd.replication.as_ref().unwrap()
}

fn depth(n: &NsqdHandle) -> Option<i64> {
    Some(n.nsqd.engine.get_topic("t")?.get_channel("c")?.depth())
}

fn held(n: &NsqdHandle) -> Option<nsqd::replication::BacklogInfo> {
    repl(n)
        .backlogs()
        .into_iter()
        .find(|x| x.origin == common::origin::ORIGIN)
}

/// An nsqd at `port`, `--replicas=2` with `peer` as its peer, takeover timeout `t`, ACK
/// timeout 1 s.
async fn start(dir: &TempDir, port: u16, peer: u16, t: &str) -> NsqdHandle {
    let args = [
        format!("--tcp-address=127.0.0.1:{port}"),
        format!("--replication-peer=127.0.0.1:{peer}"),
        "--replicas=2".into(),
        format!("--replication-takeover-timeout={t}"),
        "--replication-ack-timeout=1s".into(),
    ];
    common::start_replayed(common::options(dir.path(), &args)).await
}

/// Replicates the origin's epoch 1 to `n` up to seq `upto` (3 or 4): topic t and channel c,
/// m1 and m2 at seq 3, m3 at seq 4; waits for the ACK.
async fn replicate(n: &NsqdHandle, upto: u64) -> Origin {
    let (mut o, answer) = Origin::hello(n, 1, None).await;
    assert!(
        matches!(&answer, Frame::Welcome(w) if w.answer == WelcomeAnswer::Catchup),
        "{answer:?}"
    );
    o.send(&Frame::CatchupBegin { seq: 0 }).await;
    o.send(&Frame::CatchupEnd { seq: 0 }).await;
    let frames = [
        admin(1, AdminOp::Create, "t", ""),
        admin(2, AdminOp::Create, "t", "c"),
        publish(3, "t", &["c"], 0, &[1, 2]),
        publish(4, "t", &["c"], 0, &[3]),
    ];
    for f in &frames[..usize::try_from(upto).unwrap()] {
        o.send(f).await;
    }
    o.acked(upto).await;
    o
}

/// B holds the origin's epoch complete up to seq 4 (m1, m2, m3: B, in the origin's replica
/// set, acknowledged m3); C, outside it, lagged and holds it complete up to seq 3 (m1, m2).
/// The origin is lost while B is down (a second, passing fault: B restarts): C takes the
/// epoch over from its copy. When B is back with its data, C's STATUS says it took the epoch
/// over up to seq 3 — short of B's copy — so B hands its copy off to C (HANDOFF), C adopts
/// what its own takeover lacked (m3; m1 and m2 are in its manifest) and answers
/// HANDOFF_DONE, and only then B deletes its copy: the union of the holders is delivered,
/// each message once, by the taker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_more_than_the_takers_copy_hands_it_off() {
    let (b_dir, c_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (b_port, c_port) = (free_port(), free_port());
    let b = start(&b_dir, b_port, c_port, "1s").await;
    let c = start(&c_dir, c_port, b_port, "1s").await;
    eventually(async || repl(&b).peers()[0].connected && repl(&c).peers()[0].connected).await;

    let oc = replicate(&c, 3).await;
    let ob = replicate(&b, 4).await;
    assert!(held(&b).is_some_and(|x| !x.catching_up && x.messages == 3 && x.last_seq == 4));
    assert!(held(&c).is_some_and(|x| !x.catching_up && x.messages == 2 && x.last_seq == 3));
    b.shutdown().await;
    drop((ob, oc));

    // C takes over (B is not alive to it): m1 and m2 are delivered from C.
    eventually(async || depth(&c) == Some(2)).await;
    // B back, with a takeover timeout it never reaches here: whatever it does, it does on
    // C's word.
    let b = start(&b_dir, b_port, c_port, "60s").await;
    eventually(async || depth(&c) == Some(3) && held(&b).is_none()).await;
    assert_eq!(repl(&b).takeovers(), 0);
    assert_eq!(depth(&b), None, "B delivers nothing of the origin's");
    let c_took = repl(&c).takeovers();
    // C's takeovers may also count B's own (empty) epoch: B was down for as long as the
    // origin.
    assert!((1..=2).contains(&c_took), "{c_took}");
    // Nothing more happens.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!((repl(&b).takeovers(), repl(&c).takeovers()), (0, c_took));
    assert_eq!((depth(&b), depth(&c)), (None, Some(3)));
    b.shutdown().await;
    c.shutdown().await;
}
