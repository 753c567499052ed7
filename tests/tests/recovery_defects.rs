//! Issue 9, defects 1 and 2, reproduced over the nsqd binary exactly as filed: a corrupt or
//! empty diskqueue meta file (channel and topic) must not brick the queue, and a truncated
//! data file must still deliver every complete record before the cut (a damaged tail — a cut
//! inside a record — is set aside as `.bad`, as go-diskqueue's `handleReadError` does).
//!
//! Setup of both: `--mem-queue-size=0`, topic `cr` with channel `c`, MPUBs of 100-byte bodies
//! (130-byte records on disk), SIGTERM.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use nsq_integration_tests::{consume_all, find_channel, http_post, Bytes, DataDir, Nsqd};

const ARGS: &[&str] = &["--mem-queue-size=0"];

/// A 100-byte body carrying its index.
fn body(i: usize) -> Bytes {
    Bytes::from(format!("{i:0100}"))
}

/// Starts nsqd, creates `topic` (with channel `c` unless `channel` is false), MPUBs `n`
/// messages in batches of 500 and stops it with SIGTERM.
fn prepare(topic: &str, channel: bool, n: usize) -> DataDir {
    let nsqd = Nsqd::start(ARGS);
    nsqd.http_ok(&format!("/topic/create?topic={topic}"));
    if channel {
        nsqd.http_ok(&format!("/channel/create?topic={topic}&channel=c"));
    }
    let mut p = nsqd.connect();
    for start in (0..n).step_by(500) {
        p.mpublish(topic, (start..(start + 500).min(n)).map(body).collect());
    }
    drop(p);
    nsqd.sigterm_and_wait()
}

/// Reads `want` distinct messages from `topic`/`c` (FINing them) and asserts they are exactly
/// bodies `0..want`, then that nothing more arrives.
fn assert_delivers_exactly(nsqd: &Nsqd, topic: &str, want: usize) {
    let got = consume_all(
        nsqd.tcp_addr,
        topic,
        "c",
        500,
        want,
        Duration::from_secs(60),
    );
    let distinct: HashSet<Bytes> = got.into_iter().map(|(b, _)| b).collect();
    let expected: HashSet<Bytes> = (0..want).map(body).collect();
    assert_eq!(
        distinct.len(),
        want,
        "expected {want} distinct messages; log:\n{}",
        nsqd.log().join("\n")
    );
    assert_eq!(distinct, expected);
    let mut c = nsqd.connect();
    c.subscribe(topic, "c");
    c.rdy(100);
    let extra = c.messages(Duration::from_secs(1));
    assert!(
        extra.is_empty(),
        "{} unexpected extra messages",
        extra.len()
    );
}

fn corrupt_meta_then_restart(meta: &[u8]) {
    let dir = prepare("cr", true, 1000);
    let path = dir.path().join("cr:c.diskqueue.meta.dat");
    let original = std::fs::read(&path).expect("channel meta exists after SIGTERM");
    let replacement = if meta == b"<5 bytes>" {
        original[..5].to_vec()
    } else {
        meta.to_vec()
    };
    std::fs::write(&path, &replacement).unwrap();

    let nsqd = Nsqd::start_in(dir, ARGS);
    let r = http_post(nsqd.http_addr, "/channel/create?topic=cr&channel=c", b"");
    assert_eq!(r.status, 200, "/channel/create: {}", r.text());
    assert!(
        find_channel(&nsqd.stats(), "cr", "c").is_some(),
        "channel gone from /stats"
    );
    // Every complete record on disk is served: positions are rebuilt by scanning the files.
    assert_delivers_exactly(&nsqd, "cr", 1000);
    // And the channel stays usable across another restart.
    let dir = nsqd.sigterm_and_wait();
    let nsqd = Nsqd::start_in(dir, ARGS);
    let mut p = nsqd.connect();
    p.publish("cr", &body(1000));
    let mut c = nsqd.connect();
    c.subscribe("cr", "c");
    c.rdy(1);
    let m = c.message(Duration::from_secs(15));
    assert_eq!(m.body, body(1000));
}

#[test]
fn channel_meta_empty_file() {
    corrupt_meta_then_restart(b"");
}

#[test]
fn channel_meta_first_5_bytes() {
    corrupt_meta_then_restart(b"<5 bytes>");
}

#[test]
fn channel_meta_garbage() {
    corrupt_meta_then_restart(b"garbage\n");
}

#[test]
fn channel_meta_negative_positions() {
    corrupt_meta_then_restart(b"-5\n0,-100\n0,-1\n");
}

#[test]
fn topic_meta_corrupt_does_not_refuse_publishes() {
    // No channel: the backlog sits in the topic's own diskqueue.
    let dir = prepare("cr", false, 1000);
    std::fs::write(dir.path().join("cr.diskqueue.meta.dat"), b"garbage\n").unwrap();
    let nsqd = Nsqd::start_in(dir, ARGS);
    let mut p = nsqd.connect();
    p.publish("cr", &body(1000));
    drop(p);
    // The backlog on disk and the new message all reach a channel created now.
    assert_delivers_exactly(&nsqd, "cr", 1001);
}

fn truncated_data_file(len: u64, complete: usize) {
    let dir = prepare("cr", true, 10_000);
    let data = dir.path().join("cr:c.diskqueue.000000.dat");
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 1_300_000);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len)
        .unwrap();
    let nsqd = Nsqd::start_in(dir, ARGS);
    assert_delivers_exactly(&nsqd, "cr", complete);
    if !len.is_multiple_of(130) {
        assert!(
            has_bad_file(nsqd.data_path()),
            "the damaged tail is set aside as .bad"
        );
    }
}

fn has_bad_file(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".bad"))
}

#[test]
fn truncated_data_file_260007() {
    truncated_data_file(260_007, 2_000);
}

#[test]
fn truncated_data_file_780000() {
    truncated_data_file(780_000, 6_000);
}

#[test]
fn truncated_data_file_1170007() {
    truncated_data_file(1_170_007, 9_000);
}
