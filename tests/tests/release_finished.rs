//! What consumers finished is released while nsqd runs (issue 19, defect 1): once every message
//! of a channel is FINed, within `--sync-timeout` its diskqueue metadata reads
//! `0 / F,P / F,P` (read position = write position, as go-diskqueue leaves it), at most one
//! data file of the queue is left, and a `kill -9` of the idle, drained nsqd re-delivers
//! nothing. Checked in each setup that routes messages through the channel's diskqueue:
//! `--mem-queue-size=0`, `100`, `10000` (part in memory, part on disk) and `--durable`.

use std::path::Path;
use std::time::{Duration, Instant};

use nsq_integration_tests::{consume_all, int, Bytes, DataDir, Nsqd};

const TOPIC: &str = "t";
const CHANNEL: &str = "c";
const MESSAGES: usize = 30_000;

/// A 200-byte body carrying its index.
fn body(i: usize) -> Bytes {
    let mut b = format!("{i:08}").into_bytes();
    b.resize(200, b'x');
    Bytes::from(b)
}

fn publish_all(nsqd: &Nsqd) {
    let mut c = nsqd.connect();
    for start in (0..MESSAGES).step_by(100) {
        c.mpublish(TOPIC, (start..start + 100).map(body).collect());
    }
}

/// A diskqueue position: (file number, byte offset).
type Pos = (i64, i64);

/// The channel queue's metadata: (depth, read position, write position).
fn meta(dir: &Path) -> Option<(i64, Pos, Pos)> {
    let text =
        std::fs::read_to_string(dir.join(format!("{TOPIC}:{CHANNEL}.diskqueue.meta.dat"))).ok()?;
    let mut lines = text.lines();
    let depth = lines.next()?.trim().parse().ok()?;
    let pair = |l: &str| -> Option<(i64, i64)> {
        let (a, b) = l.trim().split_once(',')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    Some((depth, pair(lines.next()?)?, pair(lines.next()?)?))
}

/// Data files of queue `name` in `dir`.
fn data_files(dir: &Path, name: &str) -> Vec<String> {
    let prefix = format!("{name}.diskqueue.");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".dat") && !n.ends_with("meta.dat"))
        .collect();
    v.sort();
    v
}

fn released_after_fin(args: &[&str]) {
    let mut all = vec!["--max-bytes-per-file=1048576", "--sync-timeout=2s"];
    all.extend_from_slice(args);
    let nsqd = Nsqd::start(&all);
    nsqd.http_ok(&format!("/topic/create?topic={TOPIC}"));
    nsqd.http_ok(&format!("/channel/create?topic={TOPIC}&channel={CHANNEL}"));
    publish_all(&nsqd);
    let got = consume_all(
        nsqd.tcp_addr,
        TOPIC,
        CHANNEL,
        200,
        MESSAGES,
        Duration::from_secs(60),
    );
    assert_eq!(
        got.len(),
        MESSAGES,
        "{args:?}: every message delivered once"
    );
    let dir = nsqd.data_path().to_path_buf();
    // The FINs of the last batch are in flight when consume_all returns: wait for depth and
    // in-flight 0, then for the metadata (the syncer writes it within --sync-timeout).
    nsqd.wait_stats("the channel drained", Duration::from_secs(10), |s| {
        nsq_integration_tests::find_channel(s, TOPIC, CHANNEL)
            .is_some_and(|c| int(c, "depth") == 0 && int(c, "in_flight_count") == 0)
    });
    let drained = Instant::now();
    let deadline = drained + Duration::from_secs(5);
    let settled = loop {
        let m = meta(&dir);
        let files = data_files(&dir, &format!("{TOPIC}:{CHANNEL}"));
        if matches!(m, Some((0, r, w)) if r == w) && files.len() <= 1 {
            break (m, files);
        }
        assert!(
            Instant::now() < deadline,
            "{args:?}: 5 s after the last FIN the channel queue still reads {m:?} with files {files:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "{args:?}: released {:?} after the drain: meta {:?}, files {:?}",
        drained.elapsed(),
        settled.0,
        settled.1
    );
    // The topic's own queue holds nothing either (the channel existed before the publish).
    assert!(data_files(&dir, TOPIC).len() <= 1, "{args:?}: topic files");

    // An idle, fully drained nsqd killed with -9 re-delivers nothing.
    let dir: DataDir = nsqd.kill9();
    let nsqd = Nsqd::start_in(dir, &all);
    let again = consume_all(
        nsqd.tcp_addr,
        TOPIC,
        CHANNEL,
        200,
        1,
        Duration::from_secs(3),
    );
    assert!(
        again.is_empty(),
        "{args:?}: {} FINed messages re-delivered after kill -9",
        again.len()
    );
}

#[test]
fn released_with_mem_queue_size_0() {
    released_after_fin(&["--mem-queue-size=0"]);
}

#[test]
fn released_with_mem_queue_size_100() {
    released_after_fin(&["--mem-queue-size=100"]);
}

#[test]
fn released_with_mem_queue_size_10000() {
    released_after_fin(&["--mem-queue-size=10000"]);
}

#[test]
fn released_with_durable() {
    released_after_fin(&["--durable"]);
}
