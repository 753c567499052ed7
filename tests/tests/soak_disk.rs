//! A soak through the disk (issue 19): with `--mem-queue-size=0` every message goes through
//! the channel's diskqueue, while a producer publishes continuously and a consumer FINs most
//! messages, REQueues some (with and without a delay) and lets some time out. Tests that only
//! count losses let a design keep every byte it ever wrote; this one watches resources:
//!
//! - the data directory never holds more than a bound proportional to what is unsettled (the
//!   messages read in the last `--msg-timeout` + sync period, a few data files) although many
//!   times that volume passes through it;
//! - nsqd's RSS does not grow with the volume;
//! - within `--sync-timeout` of the last FIN the channel queue's metadata reads
//!   `0 / F,P / F,P` with at most one data file left per queue.
//!
//! `SOAK_SECS` (default 40) sets the publishing time.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::{find_channel, int, Bytes, Nsqd};

const TOPIC: &str = "soak";
const CHANNEL: &str = "c";
const FILE_BYTES: u64 = 256 * 1024;
/// Messages per second offered (MPUBs of 50 every 5 ms).
const RATE: u64 = 10_000;
const BODY: usize = 200;

fn body(i: u64) -> Bytes {
    let mut b = format!("{i:012}").into_bytes();
    b.resize(BODY, b'.');
    Bytes::from(b)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn data_files(dir: &Path, queue: &str) -> usize {
    let prefix = format!("{queue}.diskqueue.");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && !n.ends_with("meta.dat"))
        .count()
}

fn meta(dir: &Path, queue: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{queue}.diskqueue.meta.dat"))).unwrap_or_default()
}

/// Kilobytes of resident memory of `pid`.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn disk_and_memory_stay_bounded_under_continuous_load() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let nsqd = Nsqd::start(&[
        "--mem-queue-size=0",
        "--max-bytes-per-file=262144",
        "--msg-timeout=1s",
        "--sync-timeout=1s",
    ]);
    nsqd.http_ok(&format!("/topic/create?topic={TOPIC}"));
    nsqd.http_ok(&format!("/channel/create?topic={TOPIC}&channel={CHANNEL}"));
    let dir = nsqd.data_path().to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let finished: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let last_fin: Arc<Mutex<Option<Instant>>> = Arc::default();

    let producer = {
        let (stop, published, addr) = (stop.clone(), published.clone(), nsqd.tcp_addr);
        thread::spawn(move || {
            let mut c = nsq_integration_tests::V2Conn::connect(addr);
            let start = Instant::now();
            let mut next = 0u64;
            while !stop.load(Ordering::Acquire) {
                // Hold the offered rate.
                let due = start + Duration::from_micros(next * 1_000_000 / RATE);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                c.mpublish(TOPIC, (next..next + 50).map(body).collect());
                next += 50;
                published.store(next, Ordering::Release);
            }
        })
    };
    let consumer = {
        let (stop, finished, last_fin, addr) = (
            stop.clone(),
            finished.clone(),
            last_fin.clone(),
            nsqd.tcp_addr,
        );
        thread::spawn(move || {
            let mut c = nsq_integration_tests::V2Conn::connect(addr);
            c.subscribe(TOPIC, CHANNEL);
            c.rdy(2500);
            let mut n = 0u64;
            let mut idle_since = Instant::now();
            loop {
                let batch = c.messages(Duration::from_millis(200));
                if batch.is_empty() {
                    if stop.load(Ordering::Acquire) && idle_since.elapsed() > Duration::from_secs(2)
                    {
                        return;
                    }
                    continue;
                }
                idle_since = Instant::now();
                let mut fin = Vec::new();
                let mut cmds = Vec::new();
                for m in &batch {
                    n += 1;
                    // First deliveries: 94 % FIN, 2 % REQ, 2 % REQ with 200 ms, 2 % left to
                    // time out. Redeliveries are FINed, so the run converges.
                    match (m.attempts, n % 100) {
                        (1, 0..=1) => cmds.push(nsq_protocol::command::Command::Req {
                            id: m.id,
                            timeout_ms: 0,
                        }),
                        (1, 2..=3) => cmds.push(nsq_protocol::command::Command::Req {
                            id: m.id,
                            timeout_ms: 200,
                        }),
                        (1, 4..=5) => {}
                        _ => {
                            fin.push(m.id);
                            let i: u64 =
                                std::str::from_utf8(&m.body[..12]).unwrap().parse().unwrap();
                            finished.lock().unwrap().insert(i);
                        }
                    }
                }
                c.fin_all(fin.iter());
                if !fin.is_empty() {
                    *last_fin.lock().unwrap() = Some(Instant::now());
                }
                if !cmds.is_empty() {
                    c.send(&cmds);
                }
            }
        })
    };

    // Watch the disk and memory while it runs. What the data dir may hold at any time: the
    // backlog not yet delivered, in flight and deferred (channel stats), the messages read in
    // the last msg-timeout (1 s) plus a sync period (1 s) at the offered rate (the oldest
    // unsettled record holds the files back that long at most), plus the file being written
    // and the one being read in each queue.
    const REC: u64 = 4 + 26 + BODY as u64;
    let slack = RATE * 2 * REC + 4 * FILE_BYTES + 64 * 1024;
    let start = Instant::now();
    let mut peak_dir = 0;
    let mut worst: Option<(u64, u64, String)> = None;
    let mut rss_early = 0;
    let mut rss_peak = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        thread::sleep(Duration::from_millis(250));
        let c = find_channel(&nsqd.stats(), TOPIC, CHANNEL)
            .cloned()
            .unwrap();
        let backlog =
            (int(&c, "depth") + int(&c, "in_flight_count") + int(&c, "deferred_count")) as u64;
        let used = dir_bytes(&dir);
        let bound = backlog * REC + slack;
        peak_dir = peak_dir.max(used);
        if used > bound && worst.as_ref().is_none_or(|w| used - bound > w.0 - w.1) {
            worst = Some((used, bound, c.to_string()));
        }
        let rss = rss_kb(nsqd.pid());
        if start.elapsed() < Duration::from_secs(5) {
            rss_early = rss_early.max(rss);
        }
        rss_peak = rss_peak.max(rss);
    }
    stop.store(true, Ordering::Release);
    producer.join().unwrap();
    let total = published.load(Ordering::Acquire);
    consumer.join().unwrap();
    let last_fin = last_fin.lock().unwrap().expect("some FIN");

    // Everything published was FINed.
    let done = finished.lock().unwrap();
    let missing = (0..total).filter(|i| !done.contains(i)).count();
    assert_eq!(missing, 0, "{missing} of {total} messages never FINed");
    let volume = total * (4 + 26 + BODY as u64);

    // What may be unsettled at any time: the messages read in the last msg-timeout (1 s) plus
    // a sync period (1 s) and the REQ delay, at the offered rate, twice over (the topic's queue
    // and the channel's), plus the file being written and the one being read in each queue.
    eprintln!(
        "soak: {total} messages ({} MB) in {secs} s; data dir peak {} KB (bound without backlog {} KB); RSS {} KB after 5 s, peak {} KB",
        volume >> 20,
        peak_dir >> 10,
        slack >> 10,
        rss_early,
        rss_peak
    );
    assert!(
        volume > 10 * slack,
        "too little went through to mean anything"
    );
    if let Some((used, bound, stats)) = worst {
        panic!("data dir held {used} bytes, bound {bound} for the backlog of {stats}");
    }
    assert!(
        rss_peak <= rss_early * 2 + 32 * 1024,
        "RSS grew from {rss_early} KB to {rss_peak} KB"
    );

    // Within --sync-timeout (1 s) of the last FIN, plus the syncer's 100 ms tick and a margin,
    // the queues are settled on disk. (The consumer waited 2 s for stragglers, so this is
    // normally judged at the first look.)
    let deadline = last_fin + Duration::from_millis(2500);
    loop {
        let c = find_channel(&nsqd.stats(), TOPIC, CHANNEL)
            .cloned()
            .unwrap();
        let m = meta(&dir, &format!("{TOPIC}:{CHANNEL}"));
        let lines: Vec<&str> = m.lines().collect();
        let settled = int(&c, "depth") == 0
            && int(&c, "in_flight_count") == 0
            && lines.len() == 3
            && lines[0] == "0"
            && lines[1] == lines[2]
            && data_files(&dir, &format!("{TOPIC}:{CHANNEL}")) <= 1
            && data_files(&dir, TOPIC) <= 1;
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled 2.5 s after the last FIN: meta {m:?}, files {} + {}, stats {c}",
            data_files(&dir, &format!("{TOPIC}:{CHANNEL}")),
            data_files(&dir, TOPIC)
        );
        thread::sleep(Duration::from_millis(100));
    }
}
