//! Crash (SIGKILL) recovery: the data-dir lock is released with the process, and messages that
//! reached the disk queue and were synced before the crash are delivered after a restart.

use std::collections::HashSet;
use std::time::Duration;

use nsq_integration_tests::{consume_all, find_topic, int, Bytes, Nsqd};

#[test]
fn kill9_after_sync_then_restart_delivers_synced_messages() {
    // Everything goes through the disk queue, synced at least every 200 ms.
    let args = ["--mem-queue-size=0", "--sync-timeout=200ms"];
    let nsqd = Nsqd::start(&args);
    let mut p = nsqd.connect();
    for batch in 0..3 {
        p.mpublish(
            "crash",
            (batch * 1000..(batch + 1) * 1000)
                .map(|i| Bytes::from(format!("c-{i:04}")))
                .collect(),
        );
    }
    let stats = nsqd.stats();
    let t = find_topic(&stats, "crash").expect("topic");
    assert_eq!((int(t, "depth"), int(t, "backend_depth")), (3000, 3000));
    // Give the 200 ms sync timer (and the async nsqd.dat write) ample time.
    std::thread::sleep(Duration::from_secs(2));
    drop(p);
    let dir = nsqd.kill9();

    let nsqd = Nsqd::start_in(dir, &args);
    let stats = nsqd.stats();
    let t = find_topic(&stats, "crash").expect("topic reloaded from nsqd.dat");
    assert_eq!(int(t, "depth"), 3000, "synced messages survive a crash");
    let got = consume_all(
        nsqd.tcp_addr,
        "crash",
        "ch",
        500,
        3000,
        Duration::from_secs(30),
    );
    let distinct: HashSet<&Bytes> = got.iter().map(|(b, _)| b).collect();
    assert_eq!(distinct.len(), 3000);
    assert!(got.iter().all(|(_, attempts)| *attempts == 1));
}
