//! Catch-up between two in-process nsqd (issue 28, defects 4 and 5; docs/replication.md,
//! "Who holds which origin's messages"): a snapshot that cannot be read completely ends the
//! session without CATCHUP_END, and the next session catches up again.

mod common;

use common::pair::Pair;
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::wait::eventually;

/// A's topic diskqueue cannot be read (a directory where its data file was): the catch-up
/// of a B that lost its copy ends without CATCHUP_END, session after session — B's backlog
/// stays "catching up" (not a complete, empty copy) — and once the file is back the next
/// session completes it with every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_read_sends_no_catchup_end() {
    let mut p = Pair::start(&["--mem-queue-size=0", "--replication-ack-timeout=5s"]).await;
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    for i in 0..5 {
        c.send_ok(&sized("PUB t\n", format!("m{i}").as_bytes()))
            .await;
    }
    assert_eq!(p.backlog().unwrap().messages, 5);

    p.b.take().unwrap().shutdown().await;
    std::fs::remove_dir_all(p.b_dir.path().join("replica")).unwrap();
    // The topic has no channel: its 5 messages are unread in its diskqueue.
    let data = p.a_dir.path().join("t.diskqueue.000000.dat");
    let saved = p.a_dir.path().join("saved.dat");
    std::fs::rename(&data, &saved).unwrap();
    std::fs::create_dir(&data).unwrap();
    let repl = p.a.nsqd.replication.clone().unwrap();
    let before = repl.catchups();
    p.start_b().await;
    // Two catch-ups failed (the second after the first ended the session)...
    eventually(async || repl.catchups() >= before + 2).await;
    // ...and B never called its copy complete: it holds the backlog it was catching up
    // (each failed session sent CATCHUP_BEGIN before it ended), and it stays incomplete.
    eventually(async || p.backlog().is_some()).await;
    for _ in 0..10 {
        let bl = p.backlog().expect("B keeps the backlog it was catching up");
        assert!(bl.catching_up, "{bl:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    std::fs::remove_dir(&data).unwrap();
    std::fs::rename(&saved, &data).unwrap();
    eventually(async || {
        p.backlog()
            .is_some_and(|b| !b.catching_up && b.messages == 5)
    })
    .await;
    p.shutdown().await;
}
