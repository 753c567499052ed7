//! Issue 19, defect 4, reproduced over the nsqd binary as filed: 1,000 DPUBs into a channel's
//! deferred journal (`--mem-queue-size=0`), kill -9, 64 garbage bytes written over the middle
//! of `<topic>:<channel>.deferred.dat`, restart. Replay must resynchronise after the damage —
//! only the records the garbage overlaps may be lost — and the damaged file must be kept as
//! `.bad` (crates/nsq-core/src/deferred_store.rs).

use std::time::{Duration, Instant};

use nsq_integration_tests::{find_channel, int, Nsqd};

const ARGS: &[&str] = &["--mem-queue-size=0"];
const TOPIC: &str = "dj";
const CHANNEL: &str = "c";
const N: usize = 1000;

/// A 100-byte body carrying its index (every journal record then has the same size).
fn body(i: usize) -> Vec<u8> {
    format!("{i:0100}").into_bytes()
}

/// The channel's `deferred_count` once it reaches `want` (the channel is restored while nsqd
/// starts, but give it a few seconds), or the last count seen.
fn deferred_count(nsqd: &Nsqd, want: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n =
            find_channel(&nsqd.stats(), TOPIC, CHANNEL).map_or(-1, |c| int(c, "deferred_count"));
        if n == want || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn garbage_in_the_middle_of_the_deferred_journal_loses_only_what_it_overlaps() {
    let nsqd = Nsqd::start(ARGS);
    nsqd.http_ok(&format!("/topic/create?topic={TOPIC}"));
    nsqd.http_ok(&format!("/channel/create?topic={TOPIC}&channel={CHANNEL}"));
    // The channel must be in nsqd.dat before the kill (it is written asynchronously).
    let md = nsqd.data_path().join("nsqd.dat");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&md).is_ok_and(|s| s.contains(&format!("\"{CHANNEL}\""))) {
        assert!(
            Instant::now() < deadline,
            "nsqd.dat never listed the channel"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut p = nsqd.connect();
    for i in 0..N {
        p.dpublish(TOPIC, 3_600_000, &body(i));
    }
    nsqd.wait_stats("1,000 deferred", Duration::from_secs(20), |s| {
        find_channel(s, TOPIC, CHANNEL).is_some_and(|c| int(c, "deferred_count") == N as i64)
    });
    drop(p);
    let dir = nsqd.kill9();

    let journal = dir.path().join(format!("{TOPIC}:{CHANNEL}.deferred.dat"));
    let mut data = std::fs::read(&journal).expect("the deferred journal exists after kill -9");
    assert_eq!(
        data.len() % N,
        0,
        "{N} records of one size: {} bytes",
        data.len()
    );
    let size = data.len() / N;
    // 64 garbage bytes over the middle, every one different from what it replaces.
    let at = data.len() / 2 - 32;
    let mut x: u32 = 0x9e37_79b9;
    for b in &mut data[at..at + 64] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b ^= (x as u8) | 1;
    }
    std::fs::write(&journal, &data).unwrap();
    let overlapped = (0..N)
        .filter(|i| i * size < at + 64 && at < (i + 1) * size)
        .count();
    assert!(overlapped <= 2);

    let nsqd = Nsqd::start_in(dir, ARGS);
    let got = deferred_count(&nsqd, (N - overlapped) as i64);
    assert_eq!(
        got,
        (N - overlapped) as i64,
        "every record outside the garbage is replayed; log:\n{}",
        nsqd.log().join("\n")
    );
    // The damaged file is kept as found, and the error names the damage.
    let bad = nsqd
        .data_path()
        .join(format!("{TOPIC}:{CHANNEL}.deferred.dat.bad"));
    assert_eq!(
        std::fs::read(&bad).expect("the damaged journal is kept as .bad"),
        data
    );
    let log = nsqd.log().join("\n");
    for line in log.lines().filter(|l| l.contains("unreadable bytes")) {
        eprintln!("{line}");
    }
    assert!(
        log.contains("unreadable bytes") && log.contains(".deferred.dat.bad"),
        "the damage is logged; log:\n{log}"
    );
    // The journal was rewritten with the live entries: another crash and restart replays the
    // same set without finding anything to set aside.
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len() as usize,
        (N - overlapped) * size
    );
    let dir = nsqd.kill9();
    let nsqd = Nsqd::start_in(dir, ARGS);
    assert_eq!(
        deferred_count(&nsqd, (N - overlapped) as i64),
        (N - overlapped) as i64
    );
    let log = nsqd.log().join("\n");
    assert!(
        !log.contains("unreadable bytes"),
        "clean replay; log:\n{log}"
    );
    let bads = std::fs::read_dir(nsqd.data_path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".bad")
        })
        .count();
    assert_eq!(bads, 1);
}
