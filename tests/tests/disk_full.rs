//! A full disk never costs an acknowledged message (issue 9, "Beyond NSQ"): on a 20 MB tmpfs
//! data dir with `--mem-queue-size=100` and a channel, publishes are acknowledged until the disk
//! is full, then refused (`E_MPUB_FAILED` / `E_PUB_FAILED` over TCP, `503` over HTTP); nsqd
//! restarts on the full disk; consumers drain it, which frees space (1 MB data files are
//! deleted once read); publishing then works again; every acknowledged message is delivered.
//!
//! Needs root (to mount a tmpfs); skipped with a message otherwise. CI runs as root.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::{Duration, Instant};

use nsq_integration_tests::{find_channel, http_post, int, Bytes, DataDir, Nsqd, V2Conn};
use nsq_protocol::command::Command;

const TOPIC: &str = "full";
const ARGS: &[&str] = &["--mem-queue-size=100", "--max-bytes-per-file=1048576"];

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("nsqd-full-")
            .tempdir()
            .ok()?;
        let path = dir.path().join("data");
        std::fs::create_dir(&path).ok()?;
        let ok = Process::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { _dir: dir, path })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Process::new("umount").arg(&self.path).status();
    }
}

fn is_root() -> bool {
    Process::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// A ~1000-byte body carrying its index in the first 8 bytes.
fn body(i: usize) -> Bytes {
    let mut b = format!("{i:08}").into_bytes();
    b.resize(1000, b'x');
    Bytes::from(b)
}

fn index(b: &[u8]) -> usize {
    std::str::from_utf8(&b[..8]).unwrap().parse().unwrap()
}

/// Sends one publish command and returns `Ok` or the error frame's text.
fn publish(c: &mut V2Conn, cmd: Command) -> Result<(), String> {
    c.send(&[cmd]);
    let f = c
        .read_non_heartbeat(Duration::from_secs(30))
        .expect("a response to the publish");
    match f.frame_type {
        0 if &f.data[..] == b"OK" => Ok(()),
        _ => Err(String::from_utf8_lossy(&f.data).into_owned()),
    }
}

fn mpub(nsqd: &Nsqd, range: std::ops::Range<usize>) -> Result<(), String> {
    let mut c = nsqd.connect();
    publish(
        &mut c,
        Command::Mpub {
            topic: TOPIC.into(),
            bodies: range.map(body).collect(),
        },
    )
}

fn pub1(nsqd: &Nsqd, i: usize) -> Result<(), String> {
    let mut c = nsqd.connect();
    publish(
        &mut c,
        Command::Pub {
            topic: TOPIC.into(),
            body: body(i),
        },
    )
}

/// Consumes (and FINs) until `stop` says so or `timeout` passes; returns the indices seen.
fn consume(
    nsqd: &Nsqd,
    timeout: Duration,
    stop: impl Fn(&HashSet<usize>, usize) -> bool,
) -> HashSet<usize> {
    let mut c = nsqd.connect();
    c.subscribe(TOPIC, "c");
    c.rdy(50);
    let mut seen = HashSet::new();
    let mut total = 0;
    let deadline = Instant::now() + timeout;
    while !stop(&seen, total) && Instant::now() < deadline {
        let batch = c.messages(Duration::from_secs(1));
        c.fin_all(batch.iter().map(|m| &m.id));
        for m in batch {
            total += 1;
            seen.insert(index(&m.body));
        }
    }
    // Let the FINs land before the connection closes.
    let _ = c.messages(Duration::from_millis(300));
    seen
}

/// A 20 MB tmpfs with nsqd on it and the topic and channel created; `None` (the test skips)
/// without root or when the mount fails.
fn start_on_tmpfs() -> Option<(Tmpfs, Nsqd)> {
    if !is_root() {
        eprintln!("SKIPPED: disk_full needs root to mount a tmpfs (CI runs as root)");
        return None;
    }
    let Some(fs) = Tmpfs::mount("20m") else {
        eprintln!("SKIPPED: could not mount a tmpfs");
        return None;
    };
    let nsqd = Nsqd::start_in(DataDir::Path(fs.path.clone()), ARGS);
    nsqd.http_ok(&format!("/topic/create?topic={TOPIC}"));
    nsqd.http_ok(&format!("/channel/create?topic={TOPIC}&channel=c"));
    Some((fs, nsqd))
}

#[test]
fn full_disk_refuses_publishes_keeps_every_acknowledged_message_and_recovers() {
    // The tmpfs stays mounted while `_fs` lives.
    let Some((_fs, nsqd)) = start_on_tmpfs() else {
        return;
    };

    // 1. Publish until refused: MPUBs of 50, then single PUBs, then HTTP /pub.
    let mut acked: HashSet<usize> = HashSet::new();
    let mut next = 0;
    let mpub_err = loop {
        assert!(next < 100_000, "20 MB never filled up");
        match mpub(&nsqd, next..next + 50) {
            Ok(()) => acked.extend(next..next + 50),
            Err(e) => break e,
        }
        next += 50;
    };
    assert!(
        mpub_err.starts_with("E_MPUB_FAILED MPUB failed "),
        "{mpub_err}"
    );
    next += 50;
    assert!(acked.len() > 10_000, "only {} acknowledged", acked.len());
    let pub_err = loop {
        match pub1(&nsqd, next) {
            Ok(()) => acked.insert(next),
            Err(e) => break e,
        };
        next += 1;
        assert!(next < 200_000, "single PUBs never refused");
    };
    assert!(pub_err.starts_with("E_PUB_FAILED PUB failed "), "{pub_err}");
    next += 1;
    let http_status = loop {
        let r = http_post(nsqd.http_addr, &format!("/pub?topic={TOPIC}"), &body(next));
        if r.status == 200 {
            acked.insert(next);
            next += 1;
            continue;
        }
        assert_eq!(
            r.text(),
            "{\"message\":\"EXITING\"}",
            "HTTP body when refused"
        );
        break r.status;
    };
    assert_eq!(http_status, 503);
    next += 1;
    eprintln!("acknowledged {} before the disk filled up; refused: {mpub_err:?}, {pub_err:?}, HTTP {http_status}", acked.len());
    let stats = nsqd.stats();
    assert!(!stats["health"].as_str().unwrap_or("OK").starts_with("OK"));

    // 2. Take the in-memory part off (so a clean stop has nothing to flush), then restart on
    //    the full disk: nsqd must start, and still refuse publishes.
    let first = consume(&nsqd, Duration::from_secs(30), |_, n| n >= 150);
    let dir_back = nsqd.sigterm_and_wait();
    let nsqd = Nsqd::start_in(dir_back, ARGS);
    // The shutdown gave back the memory reserve's space (nsq_core::reserve), which the restart
    // may not get back: publishes fill it, then are refused again.
    acked.extend(fill(&nsqd, &mut next));

    // 3. Drain everything: every acknowledged message arrives.
    let mut seen = first;
    let rest = consume(&nsqd, Duration::from_secs(120), |s, _| {
        acked.iter().all(|i| s.contains(i) || seen.contains(i))
    });
    seen.extend(rest);
    let lost: Vec<usize> = acked
        .iter()
        .filter(|i| !seen.contains(i))
        .copied()
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged messages lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    let unknown: Vec<usize> = seen.iter().filter(|i| **i >= next).copied().collect();
    assert!(unknown.is_empty(), "never-published messages: {unknown:?}");

    // 4. Space returned: publishing works again, on its own.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match mpub(&nsqd, next..next + 50) {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "still refused: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let again = consume(&nsqd, Duration::from_secs(30), |s, _| {
        (next..next + 50).all(|i| s.contains(&i))
    });
    assert!((next..next + 50).all(|i| again.contains(&i)));
    let c = find_channel(&nsqd.stats(), TOPIC, "c").cloned().unwrap();
    assert_eq!(int(&c, "depth"), 0);
}

/// Bytes used on the filesystem holding `dir`.
fn used_bytes(dir: &Path) -> u64 {
    let out = Process::new("df")
        .args(["-B1", "--output=used"])
        .arg(dir)
        .output()
        .expect("run df");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Publishes MPUBs of 50 until one is refused; returns what was acknowledged and moves `next`.
fn fill(nsqd: &Nsqd, next: &mut usize) -> HashSet<usize> {
    let mut acked = HashSet::new();
    loop {
        assert!(acked.len() < 100_000, "20 MB never filled up");
        let r = mpub(nsqd, *next..*next + 50);
        let range = *next..*next + 50;
        *next += 50;
        match r {
            Ok(()) => acked.extend(range),
            Err(e) => {
                assert!(e.starts_with("E_MPUB_FAILED MPUB failed "), "{e}");
                return acked;
            }
        }
    }
}

/// Issue 19, defects 1–3: a full disk recovers while nsqd runs, and a clean shutdown on a full
/// disk loses nothing and leaves consistent metadata. Fill; drain with a consumer (no
/// restart): the space returns, publishes are accepted and `/ping` says OK again; fill again
/// (100 messages sit in the channel's memory queue); SIGTERM: exit 0, nothing dropped; the
/// next start finds consistent metadata and every acknowledged message.
#[test]
fn full_disk_cycle_recovers_while_running_and_sigterm_loses_nothing() {
    let Some((fs, nsqd)) = start_on_tmpfs() else {
        return;
    };
    let dir: &Path = &fs.path;

    // 1. Fill.
    let mut next = 0;
    let acked = fill(&nsqd, &mut next);
    assert!(acked.len() > 10_000, "only {} acknowledged", acked.len());
    let full = used_bytes(dir);
    let ping = nsq_integration_tests::http_get(nsqd.http_addr, "/ping");
    assert_eq!(ping.status, 500, "/ping on a full disk: {}", ping.text());
    assert!(ping.text().starts_with("NOK - "), "{}", ping.text());

    // 2. Drain while running: every acknowledged message arrives and the space comes back.
    let seen = consume(&nsqd, Duration::from_secs(120), |s, _| {
        acked.iter().all(|i| s.contains(i))
    });
    assert!(
        acked.iter().all(|i| seen.contains(i)),
        "lost while draining"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while used_bytes(dir) > full / 4 {
        assert!(
            Instant::now() < deadline,
            "space not returned after the drain: {} of {full} bytes still used, files: {:?}",
            used_bytes(dir),
            std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // 2b. Health follows the disk: `/ping` says OK again within seconds of the space
    //     returning, before anything is written (a node behind a load balancer that checks
    //     `/ping` gets no publishes, so it would never write, so it would never recover).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ping = nsq_integration_tests::http_get(nsqd.http_addr, "/ping");
        if ping.status == 200 {
            assert_eq!(ping.text(), "OK");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/ping still {} {} 5 s after the space returned",
            ping.status,
            ping.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // 3. Publishing works again (more than the memory queue holds, so the diskqueue is
    //    written), and /ping says so.
    let mut c = nsqd.connect();
    let big: Vec<Bytes> = (next..next + 300).map(body).collect();
    let again: Vec<usize> = (next..next + 300).collect();
    next += 300;
    publish(
        &mut c,
        Command::Mpub {
            topic: TOPIC.into(),
            bodies: big,
        },
    )
    .expect("publishing after the drain");
    let ping = nsq_integration_tests::http_get(nsqd.http_addr, "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    let seen = consume(&nsqd, Duration::from_secs(30), |s, _| {
        again.iter().all(|i| s.contains(i))
    });
    assert!(again.iter().all(|i| seen.contains(i)));

    // 4. Fill again and stop cleanly on the full disk: nothing acknowledged may be lost.
    let acked = fill(&nsqd, &mut next);
    assert!(acked.len() > 10_000, "only {} acknowledged", acked.len());
    let c = find_channel(&nsqd.stats(), TOPIC, "c").cloned().unwrap();
    assert!(
        int(&c, "depth") > int(&c, "backend_depth"),
        "some messages are in memory: {c}"
    );
    let mut nsqd = nsqd;
    let status = nsqd.terminate();
    let log = nsqd.log().join("\n");
    assert!(status.success(), "exit {status}; log:\n{log}");
    assert!(!log.contains("failed to flush"), "log:\n{log}");
    let dir_back = nsqd.into_data_dir();

    // 5. The restart finds consistent metadata and every acknowledged message.
    let nsqd = Nsqd::start_in(dir_back, ARGS);
    let seen = consume(&nsqd, Duration::from_secs(120), |s, _| {
        acked.iter().all(|i| s.contains(i))
    });
    let lost = acked.iter().filter(|i| !seen.contains(i)).count();
    assert_eq!(
        lost,
        0,
        "{lost} of {} acknowledged messages lost",
        acked.len()
    );
    let log = nsqd.log().join("\n");
    for bad in ["writePos", "negative depth", "positive depth", "corrupt"] {
        assert!(!log.contains(bad), "restart logged {bad:?}:\n{log}");
    }
}
