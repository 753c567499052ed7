//! Memory of connection bursts (issue: RSS 173 → 794 MB after 8 rounds of 10,000 connections,
//! 16.8 KB per idle connection): rounds of opening and closing thousands of idle V2 connections
//! must cost little per connection while open and leave the daemon's RSS close to where it was
//! soon after they close. The per-connection bound is issue 21's target (6 KB; a debug build
//! measures ~3.8 KB, a release build 4.1 KB at 19,000; a read buffer held by every idle
//! connection — stale readiness after the magic — cost 4 KB more and fails it). The other
//! bounds are looser than the targets (within 50 MB after 10,000) so that a debug build and a
//! loaded machine pass; bench/README.md has the full measurement.

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::Nsqd;

const ROUNDS: usize = 3;
/// Connections per round, fewer if the open-files limit is low (both ends are in this test's
/// process and the daemon, each needing one descriptor per connection).
const CONNS: usize = 2000;
/// Per idle connection while open (issue 21's target).
const MAX_PER_CONN: i64 = 6 * 1024;
/// RSS must come back within this of the pre-burst value (a burst adds ~10 MB) ...
const SLACK: i64 = 6 * 1024 * 1024;
/// ... within this long after the connections close.
const SETTLE: Duration = Duration::from_secs(10);

fn rss_bytes(pid: u32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

/// Opens `n` connections and sends the V2 magic on each, as an idle client does. A short
/// pause every 200 connections keeps the daemon's accept queue from overflowing (dropped SYNs
/// are retried only after a second or more).
fn burst(nsqd: &Nsqd, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            if i % 200 == 199 {
                thread::sleep(Duration::from_millis(20));
            }
            let mut s = TcpStream::connect(nsqd.tcp_addr).expect("connect");
            s.write_all(b"  V2").expect("magic");
            s
        })
        .collect()
}

/// Waits until RSS has not grown for a while (the daemon has accepted and set up every
/// connection), up to 10 s; returns the last value.
fn settled_rss(pid: u32) -> i64 {
    let start = Instant::now();
    let mut last = rss_bytes(pid);
    let mut stable = 0;
    while start.elapsed() < Duration::from_secs(10) && stable < 3 {
        thread::sleep(Duration::from_millis(200));
        let now = rss_bytes(pid);
        if now > last {
            stable = 0;
        } else {
            stable += 1;
        }
        last = last.max(now);
    }
    last
}

#[test]
fn connection_bursts_cost_little_and_memory_is_given_back() {
    let n = CONNS.min(open_files_limit().saturating_sub(200) / 2);
    assert!(n >= 500, "open-files limit too low for this test");
    let nsqd = Nsqd::start(&[]);
    let pid = nsqd.pid();
    // Warm up (runtime threads, first allocations), then take the baseline.
    drop(burst(&nsqd, 200));
    thread::sleep(Duration::from_secs(1));
    let base = rss_bytes(pid);

    for round in 0..ROUNDS {
        // What this round's connections cost is measured from the RSS just before it: what an
        // earlier round left (within SLACK, asserted below) is not theirs. (Measured from the
        // first baseline, round 2 once read 6,211 B per connection on top of 4 MB an earlier
        // round had not yet given back, where rounds 0 and 1 read 4,370 B.)
        let before = rss_bytes(pid);
        let t0 = Instant::now();
        let conns = burst(&nsqd, n);
        let opened = t0.elapsed();
        let open = settled_rss(pid);
        eprintln!(
            "round {round}: {n} connections opened in {opened:?}, RSS {before} -> {open} after {:?}",
            t0.elapsed()
        );
        let per_conn = (open - before) / n as i64;
        assert!(
            per_conn <= MAX_PER_CONN,
            "round {round}: {per_conn} bytes per idle connection (RSS {before} -> {open} with {n})"
        );
        drop(conns);
        let closed_at = Instant::now();
        let mut now = rss_bytes(pid);
        while now > base + SLACK && closed_at.elapsed() < SETTLE {
            thread::sleep(Duration::from_millis(250));
            now = rss_bytes(pid);
        }
        eprintln!(
            "round {round}: RSS {now} {:?} after closing",
            closed_at.elapsed()
        );
        assert!(
            now <= base + SLACK,
            "round {round}: RSS {now} still more than {SLACK} above {base} {SETTLE:?} after \
             {n} connections closed (peak {open})"
        );
    }
}
