//! Replication with the real binary (issue 22, docs/replication.md): the flags' fatal
//! messages, a replica killed (SIGKILL) and restarted on its data directory while an origin
//! publishes, an origin killed and restarted (its previous epoch taken over at once), and an
//! origin killed for good (taken over after the timeout, found through nsqlookupd).
//!
//! Build first: `cargo build -p nsqd-bin` (or set NSQD_BIN).

use std::time::Duration;

use nsq_integration_tests::{
    consume_all, http_post, int, nsqd_bin, run_tool, Bytes, Nsqd, Nsqlookupd, V2Conn, Value,
};
use nsq_protocol::command::Command;

/// A free TCP port on 127.0.0.1 (bound to `:0`, then released for the daemon to take).
fn free_port() -> u16 {
    nsq_testkit::free_port()
}

/// The `replication.backlogs` of `/stats` whose origin is `origin`.
fn backlogs_of(stats: &Value, origin: &str) -> Vec<Value> {
    stats["replication"]["backlogs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|b| b["origin"] == origin)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn node_id(n: &Nsqd) -> String {
    n.stats()["replication"]["node_id"]
        .as_str()
        .expect("replication on")
        .to_string()
}

#[test]
fn bad_replication_flags_are_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("--data-path={}", dir.path().display());
    let empty = dir.path().join("empty-secret");
    std::fs::write(&empty, "\n").unwrap();
    let empty_secret = format!("--replication-secret-file={}", empty.display());
    let empty_fatal = format!(
        "FATAL: failed to start replication - --replication-secret-file {}: the file is empty",
        empty.display()
    );
    for (args, msg) in [
        (
            vec!["--replicas=2"],
            "FATAL: --replicas=2 needs at least 1 --replication-peer",
        ),
        (
            vec!["--replicas=0"],
            "FATAL: --replicas must be >= 1 (got 0)",
        ),
        (
            vec!["--replication-peer=nohost"],
            "FATAL: --replication-peer must be host:port (got \"nohost\")",
        ),
        (
            vec!["--replication-peer=a:1", "--replication-ack-timeout=0"],
            "FATAL: --replication-ack-timeout must be > 0",
        ),
        (
            vec!["--replication-peer=127.0.0.1:1", empty_secret.as_str()],
            empty_fatal.as_str(),
        ),
    ] {
        let mut all = vec![
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            data.as_str(),
        ];
        all.extend(args.iter().copied());
        let out = run_tool(&nsqd_bin(), &all, b"", Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(msg), "{args:?}: {stderr}");
    }
    // Nothing was written: no replication.dat.
    assert!(!dir.path().join("replication.dat").exists());
}

/// A replica backlog that cannot be replayed (here a segment that is a directory) is fatal,
/// also now that the replay runs while nsqd already serves: exit status 1 and the reason.
#[test]
fn a_backlog_that_cannot_be_replayed_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir
        .path()
        .join("replica/00abcdef01234567.1/0000000000000001.seg");
    std::fs::create_dir_all(&seg).unwrap();
    let data = format!("--data-path={}", dir.path().display());
    let peer = format!("--replication-peer=127.0.0.1:{}", free_port());
    let args = [
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        data.as_str(),
        peer.as_str(),
    ];
    let out = run_tool(&nsqd_bin(), &args, b"", Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let fatal = format!(
        "FATAL: failed to start replication - failed to open replica backlog {}",
        seg.parent().unwrap().display()
    );
    assert!(stderr.contains(&fatal), "{stderr}");
}

/// B is SIGKILLed while A publishes and restarted on its data directory: its backlog is
/// recovered (a torn tail cut), A resumes the link, and B ends up holding exactly what A has
/// not settled; once a consumer of A finished everything, B's backlog is empty.
#[test]
fn a_killed_replica_recovers_its_backlog() {
    let a_port = free_port();
    let b = Nsqd::start(&[&format!("--replication-peer=127.0.0.1:{a_port}")]);
    let b_port = b.tcp_addr.port();
    let a = Nsqd::start(&[
        &format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2",
        &format!("--replication-peer=127.0.0.1:{b_port}"),
        "--replication-ack-timeout=2s",
    ]);
    let origin = node_id(&a);

    let mut p = a.connect();
    for i in 0..20 {
        p.mpublish(
            "t",
            (0..50)
                .map(|j| Bytes::from(format!("m-{i:02}-{j:02}")))
                .collect(),
        );
    }
    // A publisher keeps going while B is killed: publishes fail (or wait) while B is away.
    let addr = a.tcp_addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut ok = 0usize;
            let mut failed = 0usize;
            let mut c = nsq_integration_tests::V2Conn::connect(addr);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.send(&[Command::Pub {
                    topic: "t".into(),
                    body: Bytes::from(format!("live-{i:05}")),
                }]);
                i += 1;
                match c.read_non_heartbeat(Duration::from_secs(10)) {
                    Ok(f) if f.frame_type == 0 => ok += 1,
                    _ => {
                        failed += 1;
                        c = nsq_integration_tests::V2Conn::connect(addr);
                    }
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let b_dir = b.kill9();
    std::thread::sleep(Duration::from_millis(500));
    let b = Nsqd::start_in(
        b_dir,
        &[
            &format!("--tcp-address=127.0.0.1:{b_port}"),
            &format!("--replication-peer=127.0.0.1:{a_port}"),
        ],
    );
    // The backlog is there once the replay at startup ends (recovered from its segments).
    b.wait_stats("B's replay", Duration::from_secs(10), |s| {
        s["replication"]["replay"] == "done"
    });
    let bl = backlogs_of(&b.stats(), &origin);
    assert_eq!(bl.len(), 1, "{bl:?}");
    assert!(int(&bl[0], "messages") >= 1000, "{bl:?}");
    std::thread::sleep(Duration::from_millis(3000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, _failed) = publisher.join().unwrap();
    assert!(ok > 0);
    // One more publish once everything is linked again: OK.
    let mut p = a.connect();
    p.publish("t", b"last");

    // B holds exactly what A holds (acknowledged or not: every publish A stored is in its
    // log).
    let depth = int(&a.topic_stats("t").unwrap(), "depth");
    b.wait_stats("B's backlog to match A", Duration::from_secs(10), |s| {
        backlogs_of(s, &origin)
            .first()
            .is_some_and(|b| int(b, "messages") == depth)
    });
    let got = consume_all(
        a.tcp_addr,
        "t",
        "c",
        200,
        depth as usize,
        Duration::from_secs(60),
    );
    assert_eq!(got.len(), depth as usize);
    b.wait_stats("B's backlog to drain", Duration::from_secs(10), |s| {
        backlogs_of(s, &origin)
            .first()
            .is_some_and(|b| int(b, "messages") == 0)
    });
    drop(b);
    drop(a);
}

/// A is SIGKILLed and restarted on its data directory: it starts the next epoch and says the
/// previous one ended unclean (HELLO's PREVIOUS_UNCLEAN), so B takes that epoch over at once,
/// without waiting for the takeover timeout (1 h here): B creates topic t and channel c and
/// delivers the 15 messages A had not settled; A, holding delivery since its unclean start,
/// applies B's manifest and delivers none of them again, and then goes on in its new epoch.
#[test]
fn a_killed_origin_restarted_has_its_previous_epoch_taken_over() {
    let a_port = free_port();
    let b = Nsqd::start(&[
        &format!("--replication-peer=127.0.0.1:{a_port}"),
        "--replication-takeover-timeout=1h",
    ]);
    let a_args = [
        format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2".to_string(),
        format!("--replication-peer={}", b.tcp_addr),
        "--mem-queue-size=0".to_string(),
        "--sync-timeout=100ms".to_string(),
    ];
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let a = Nsqd::start(&a_args);
    let origin = node_id(&a);
    let mut p = a.connect();
    p.mpublish("t", (0..10).map(|i| Bytes::from(format!("m{i}"))).collect());
    http_post(a.http_addr, "/channel/create?topic=t&channel=c", b"");
    p.mpublish(
        "t",
        (10..15).map(|i| Bytes::from(format!("m{i}"))).collect(),
    );
    let epoch1 = a.stats()["replication"]["epoch"].as_u64().unwrap();
    b.wait_stats("epoch 1 backlog", Duration::from_secs(10), |s| {
        backlogs_of(s, &origin)
            .iter()
            .any(|b| b["epoch"] == epoch1 && int(b, "messages") == 15)
    });
    std::thread::sleep(Duration::from_millis(500));
    drop(p);
    let a_dir = a.kill9();
    let a = Nsqd::start_in(a_dir, &a_args);
    assert_eq!(node_id(&a), origin);
    let epoch2 = a.stats()["replication"]["epoch"].as_u64().unwrap();
    assert_eq!(epoch2, epoch1 + 1);
    b.wait_stats("epoch 1 taken over", Duration::from_secs(10), |s| {
        s["replication"]["takeovers"] == 1
    });
    // A, held from delivering since its unclean stop, got B's manifest and acknowledged it
    // (MANIFEST_APPLIED): B deletes the manifest and links with A's new epoch.
    b.wait_stats("the manifest applied by A", Duration::from_secs(10), |s| {
        let bl = backlogs_of(s, &origin);
        !bl.is_empty() && bl.iter().all(|b| b["epoch"] == epoch2)
    });
    assert_eq!(a.stats()["replication"]["epoch"], epoch2);
    // B delivers the 15 messages; A delivers none of them again.
    let mut got: Vec<Bytes> = consume_all(b.tcp_addr, "t", "c", 100, 15, Duration::from_secs(30))
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    got.sort();
    let mut want: Vec<Bytes> = (0..15).map(|i| Bytes::from(format!("m{i}"))).collect();
    want.sort();
    assert_eq!(got, want);
    let again = consume_all(a.tcp_addr, "t", "c", 100, 1, Duration::from_secs(2));
    assert!(
        again.is_empty(),
        "A delivered taken-over messages: {again:?}"
    );
    // A still takes publishes (its new epoch is replicated to B) and delivers those (once
    // the consumer above is gone, or the message would go to it as its socket closes).
    a.wait_stats("the consumer to leave", Duration::from_secs(10), |s| {
        s["topics"][0]["channels"][0]["client_count"] == 0
    });
    let mut p = a.connect();
    p.publish("t", b"after");
    let after = consume_all(a.tcp_addr, "t", "c", 100, 1, Duration::from_secs(10));
    assert_eq!(after.len(), 1);
    assert_eq!(&after[0].0[..], b"after");
    drop(b);
    drop(a);
}

/// With one nsqlookupd: A (`--replicas=2`) and B register; a consumer of A finishes 4 of 10
/// messages; A is SIGKILLed (its lookupd connection closes, so it is unregistered at once).
/// B sees A's link lost and A absent from nsqlookupd's `/debug` for the takeover timeout,
/// takes A's epoch over and registers topic t and channel c; a consumer that discovers
/// through nsqlookupd's `/lookup?topic=t` finds B and gets the 6 unfinished messages.
#[test]
fn a_killed_origin_is_taken_over_and_found_through_nsqlookupd() {
    let l = Nsqlookupd::start(&[]);
    let lookupd = format!("--lookupd-tcp-address={}", l.tcp_addr);
    let a_port = free_port();
    let b = Nsqd::start(&[
        &format!("--replication-peer=127.0.0.1:{a_port}"),
        &lookupd,
        "--broadcast-address=127.0.0.1",
        "--replication-takeover-timeout=2s",
    ]);
    let a = Nsqd::start(&[
        &format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2",
        &format!("--replication-peer={}", b.tcp_addr),
        &lookupd,
        "--broadcast-address=127.0.0.1",
    ]);
    let origin = node_id(&a);
    http_post(a.http_addr, "/channel/create?topic=t&channel=c", b"");
    let mut p = a.connect();
    p.mpublish("t", (0..10).map(|i| Bytes::from(format!("m{i}"))).collect());
    let mut c = V2Conn::connect(a.tcp_addr);
    c.subscribe("t", "c");
    c.rdy(4);
    let mut finished = Vec::new();
    while finished.len() < 4 {
        let m = c.message(Duration::from_secs(10));
        c.fin(&m.id);
        finished.push(m.body);
    }
    b.wait_stats("B's backlog of A", Duration::from_secs(10), |s| {
        backlogs_of(s, &origin)
            .first()
            .is_some_and(|b| int(b, "messages") == 6)
    });
    let producers = |l: &Nsqlookupd| -> Vec<i64> {
        let r = l.get("/lookup?topic=t");
        if r.status != 200 {
            return Vec::new();
        }
        r.json()["producers"]
            .as_array()
            .map(|a| a.iter().map(|p| int(p, "tcp_port")).collect())
            .unwrap_or_default()
    };
    assert_eq!(producers(&l), [i64::from(a_port)]);

    drop((c, p));
    let killed = std::time::Instant::now();
    let _a_dir = a.kill9();
    let s = b.wait_stats("the takeover", Duration::from_secs(20), |s| {
        s["replication"]["takeovers"] == 1
    });
    let took = killed.elapsed();
    assert!(took >= Duration::from_secs(2), "before the timeout");
    // Issue 22's target is the timeout + 2 s; timing is measured here, not asserted.
    eprintln!("taken over {took:?} after the kill (timeout 2s)");
    assert_eq!(backlogs_of(&s, &origin)[0]["state"], "taken over");
    let b_port = i64::from(b.tcp_addr.port());
    nsq_integration_tests::wait_until(|| producers(&l) == [b_port]);
    let lookup = l.get_json("/lookup?topic=t");
    let prod = &lookup["producers"][0];
    let addr: std::net::SocketAddr = format!(
        "{}:{}",
        prod["broadcast_address"].as_str().unwrap(),
        int(prod, "tcp_port")
    )
    .parse()
    .unwrap();
    // One consumer for all of them: a second connection would leave whatever the first had
    // in flight when it closed waiting for --msg-timeout (60 s).
    let mut c = V2Conn::connect(addr);
    c.subscribe("t", "c");
    c.rdy(100);
    let first = c.message(Duration::from_secs(10));
    eprintln!(
        "first taken-over message {:?} after the kill (timeout 2s)",
        killed.elapsed()
    );
    c.fin(&first.id);
    let mut got = vec![first.body];
    while got.len() < 6 {
        let m = c.message(Duration::from_secs(30));
        c.fin(&m.id);
        got.push(m.body);
    }
    got.sort();
    let mut want: Vec<Bytes> = (0..10)
        .map(|i| Bytes::from(format!("m{i}")))
        .filter(|m| !finished.contains(m))
        .collect();
    want.sort();
    assert_eq!(got, want);
    drop(b);
}

/// Issue 28, defect 1, as a user met it: A and B (`--replicas=2` both, one nsqlookupd,
/// takeover timeout 3 s); 2,000 messages published to B and acknowledged; B is SIGKILLed,
/// its data directory deleted, and B is started again with the same flags at once. B comes
/// back with a new node ID at its old address, which nsqlookupd lists again — so B's old
/// identity never looks gone to a watch that asks nsqlookupd. A recognises the new node ID at
/// B's address, ends the old identity at once and delivers every acknowledged message.
#[test]
fn a_host_back_with_an_empty_data_dir_has_its_messages_delivered() {
    let l = Nsqlookupd::start(&[]);
    let lookupd = format!("--lookupd-tcp-address={}", l.tcp_addr);
    let b_port = free_port();
    let a = Nsqd::start(&[
        "--replicas=2",
        &format!("--replication-peer=127.0.0.1:{b_port}"),
        &lookupd,
        "--broadcast-address=127.0.0.1",
        "--replication-takeover-timeout=3s",
    ]);
    let b_args = [
        format!("--tcp-address=127.0.0.1:{b_port}"),
        "--replicas=2".to_string(),
        format!("--replication-peer={}", a.tcp_addr),
        lookupd.clone(),
        "--broadcast-address=127.0.0.1".to_string(),
        "--replication-takeover-timeout=3s".to_string(),
    ];
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Nsqd::start(&b_args);
    let old = node_id(&b);
    http_post(b.http_addr, "/topic/create?topic=t", b"");
    http_post(b.http_addr, "/channel/create?topic=t&channel=c", b"");
    let mut p = b.connect();
    for chunk in 0..20 {
        p.mpublish(
            "t",
            (0..100)
                .map(|i| Bytes::from(format!("m{}", chunk * 100 + i)))
                .collect(),
        );
    }
    drop(p);
    a.wait_stats("A's backlog of B", Duration::from_secs(10), |s| {
        backlogs_of(s, &old)
            .first()
            .is_some_and(|b| int(b, "messages") == 2000)
    });

    let b_dir = b.kill9();
    for e in std::fs::read_dir(b_dir.path()).unwrap().flatten() {
        if e.path().is_dir() {
            std::fs::remove_dir_all(e.path()).unwrap();
        } else {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let b = Nsqd::start_in(b_dir, &b_args);
    assert_ne!(node_id(&b), old);

    let mut got: Vec<Bytes> = consume_all(a.tcp_addr, "t", "c", 500, 2000, Duration::from_secs(20))
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    got.sort();
    got.dedup();
    let mut want: Vec<Bytes> = (0..2000).map(|i| Bytes::from(format!("m{i}"))).collect();
    want.sort();
    assert_eq!(
        got.len(),
        want.len(),
        "delivered of B's acknowledged messages"
    );
    assert_eq!(got, want);
    drop((a, b));
}

/// A frozen origin (SIGSTOP: its sockets stay open, its link heartbeats and nsqlookupd PINGs
/// stop) is taken over within the bound docs/replication.md ("Takeover") states: between
/// T + 4 s (the dead-link rule: 5 s after the last frame, a heartbeat at most 1 s before the
/// freeze) and T + 22 s (its lookupd entry goes stale 20 s after its last PING on the
/// lookupd's clock, absent for T more on that clock; the clock is read from B's own PINGs,
/// every T/8, at most a 1 s poll late, plus a 250 ms look and the polls' own time) after the
/// freeze; 1 s more is allowed for a loaded machine.
#[test]
fn a_frozen_origin_is_taken_over_within_the_documented_bound() {
    const T: Duration = Duration::from_secs(3);
    let l = Nsqlookupd::start(&[]);
    let lookupd = format!("--lookupd-tcp-address={}", l.tcp_addr);
    let a_port = free_port();
    let b = Nsqd::start(&[
        &format!("--replication-peer=127.0.0.1:{a_port}"),
        &lookupd,
        "--broadcast-address=127.0.0.1",
        "--replication-takeover-timeout=3s",
    ]);
    let a = Nsqd::start(&[
        &format!("--tcp-address=127.0.0.1:{a_port}"),
        "--replicas=2",
        &format!("--replication-peer={}", b.tcp_addr),
        &lookupd,
        "--broadcast-address=127.0.0.1",
    ]);
    let origin = node_id(&a);
    http_post(a.http_addr, "/channel/create?topic=t&channel=c", b"");
    let mut p = a.connect();
    p.mpublish("t", (0..5).map(|i| Bytes::from(format!("m{i}"))).collect());
    b.wait_stats("B's backlog of A", Duration::from_secs(10), |s| {
        backlogs_of(s, &origin)
            .first()
            .is_some_and(|b| int(b, "messages") == 5)
    });
    // A is registered (listed on the lookupd) before it freezes.
    nsq_integration_tests::wait_until(|| {
        let r = l.get("/lookup?topic=t");
        r.status == 200
            && r.json()["producers"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
    });
    drop(p);
    a.signal("STOP");
    let frozen = std::time::Instant::now();
    let s = b.wait_stats("the takeover", Duration::from_secs(40), |s| {
        s["replication"]["takeovers"] == 1
    });
    let took = frozen.elapsed();
    a.signal("CONT");
    eprintln!("a frozen origin taken over {took:?} after the freeze (timeout 3s)");
    assert!(took >= T + Duration::from_secs(4), "too early: {took:?}");
    assert!(took <= T + Duration::from_secs(23), "too late: {took:?}");
    assert_eq!(backlogs_of(&s, &origin)[0]["state"], "taken over");
    drop((a, b));
}
