//! Drain mode against the real binary (nsqd::drain, nsqio/nsq #1302): a drain with queued,
//! in-flight and deferred messages and live consumers delivers every message and exits 0;
//! publishes and creations during the drain get the documented errors; nsqlookupd stops
//! listing the node; a second signal shuts down at once with the rest persisted;
//! `PUT /config/drain` and `PUT /config/shutdown`; `--sigterm` validation.

use std::collections::HashSet;
use std::process::Command as Process;
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::{
    find_channel, http_get, http_post, http_request, int, nsqd_bin, Bytes, Nsqd, Nsqlookupd, V2Conn,
};
use nsq_protocol::command::Command;

const LONG: Duration = Duration::from_secs(60);

/// Polls `pred` every 100 ms until it holds; panics with `what` after `timeout`.
fn wait_until(what: &str, timeout: Duration, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

fn draining(nsqd: &Nsqd) -> bool {
    let r = http_get(nsqd.http_addr, "/info");
    assert_eq!(r.status, 200);
    r.json()["draining"] == true
}

/// Consumes (RDY 10, FIN everything) until every body of `want` not in `seen` has arrived.
fn consume_until(
    c: &mut V2Conn,
    want: &HashSet<Bytes>,
    mut seen: HashSet<Bytes>,
    timeout: Duration,
) {
    c.rdy(10);
    let deadline = Instant::now() + timeout;
    while !want.iter().all(|b| seen.contains(b)) {
        assert!(
            Instant::now() < deadline,
            "only {} of {} messages arrived",
            seen.len(),
            want.len()
        );
        let batch = c.messages(Duration::from_secs(1));
        c.fin_all(batch.iter().map(|m| &m.id));
        for m in batch {
            seen.insert(m.body);
        }
    }
}

/// A fresh connection sends `cmd` and must get `error`, then be closed (fatal, as PUB errors
/// are in the reference).
fn expect_refused(nsqd: &Nsqd, cmd: Command, error: &[u8]) {
    let mut c = nsqd.connect();
    c.send(&[cmd]);
    c.expect_fatal(error);
}

#[test]
fn drain_delivers_queued_in_flight_and_deferred_then_exits_0() {
    let lookupd = Nsqlookupd::start(&[]);
    let lookupd_tcp = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
    let mut nsqd = Nsqd::start(&[
        "--sigterm=drain",
        &lookupd_tcp,
        "--broadcast-address=127.0.0.1",
        // Part of the queue lives in the disk queue.
        "--mem-queue-size=10",
    ]);
    nsqd.http_ok("/topic/create?topic=dr");
    nsqd.http_ok("/channel/create?topic=dr&channel=c1");
    nsqd.http_ok("/channel/create?topic=dr&channel=c2");
    let mut want: HashSet<Bytes> = HashSet::new();
    for i in 0..40 {
        let body = format!("queued-{i}");
        nsqd.http_pub("dr", body.as_bytes());
        want.insert(Bytes::from(body));
    }
    let mut producer = nsqd.connect();
    for i in 0..3 {
        let body = format!("deferred-{i}");
        producer.dpublish("dr", 2_000, body.as_bytes());
        want.insert(Bytes::from(body));
    }
    // Five messages in flight to a live consumer of c1.
    let mut c1 = nsqd.connect();
    c1.subscribe("dr", "c1");
    c1.rdy(5);
    let held: Vec<_> = (0..5)
        .map(|_| c1.message(Duration::from_secs(15)))
        .collect();
    nsqd.wait_stats("in flight and deferred", LONG, |s| {
        find_channel(s, "dr", "c1")
            .is_some_and(|c| int(c, "in_flight_count") == 5 && int(c, "deferred_count") == 3)
    });
    wait_until("lookupd to list the node", LONG, || {
        let r = lookupd.get("/lookup?topic=dr");
        r.status == 200
            && r.json()["producers"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
    });
    assert!(!draining(&nsqd));
    assert_eq!(nsqd.stats()["draining"], false);

    nsqd.signal("TERM");
    wait_until("/info to say draining", LONG, || draining(&nsqd));
    assert_eq!(nsqd.stats()["draining"], true);
    assert!(nsqd.is_running(), "exited with messages still queued");

    // New messages, topics and channels are refused.
    for path in [
        "/pub?topic=dr",
        "/pub?topic=dr&defer=1000",
        "/mpub?topic=dr",
        "/pub?topic=brand_new",
    ] {
        let r = http_post(nsqd.http_addr, path, b"late");
        assert_eq!(
            (r.status, r.text().as_str()),
            (503, r#"{"message":"DRAINING"}"#),
            "{path}"
        );
    }
    for path in [
        "/topic/create?topic=brand_new",
        "/channel/create?topic=dr&channel=c9",
    ] {
        let r = http_post(nsqd.http_addr, path, b"");
        assert_eq!(
            (r.status, r.text().as_str()),
            (503, r#"{"message":"DRAINING"}"#),
            "{path}"
        );
    }
    let refused = "nsqd is draining: publish to another nsqd";
    expect_refused(
        &nsqd,
        Command::Pub {
            topic: "dr".into(),
            body: Bytes::from_static(b"late"),
        },
        format!("E_PUB_FAILED PUB failed {refused}").as_bytes(),
    );
    expect_refused(
        &nsqd,
        Command::Mpub {
            topic: "dr".into(),
            bodies: vec![Bytes::from_static(b"late")],
        },
        format!("E_MPUB_FAILED MPUB failed {refused}").as_bytes(),
    );
    expect_refused(
        &nsqd,
        Command::Dpub {
            topic: "dr".into(),
            defer_ms: 10,
            body: Bytes::from_static(b"late"),
        },
        format!("E_DPUB_FAILED DPUB failed {refused}").as_bytes(),
    );
    for (topic, channel) in [("dr", "c9"), ("brand_new", "c1")] {
        expect_refused(
            &nsqd,
            Command::Sub {
                topic: topic.into(),
                channel: channel.into(),
            },
            b"E_SUB_FAILED SUB failed nsqd is draining: no new topics or channels",
        );
    }
    let stats = nsqd.stats();
    assert_eq!(stats["topics"].as_array().map(Vec::len), Some(1), "{stats}");
    assert!(find_channel(&stats, "dr", "c9").is_none());

    // Discovery moves on: lookupd no longer lists the node.
    wait_until("lookupd to drop the node", LONG, || {
        let r = lookupd.get("/lookup?topic=dr");
        let gone = r.status == 404
            || r.json()["producers"]
                .as_array()
                .is_some_and(|p| p.is_empty());
        gone && lookupd.get_json("/nodes")["producers"]
            .as_array()
            .is_some_and(|p| p.is_empty())
    });

    // Delivery goes on: the held messages, the queue and (after their delay) the deferred
    // ones on c1; c2 gets a consumer only now, during the drain.
    c1.fin_all(held.iter().map(|m| &m.id));
    consume_until(
        &mut c1,
        &want,
        held.iter().map(|m| m.body.clone()).collect(),
        LONG,
    );
    assert!(nsqd.is_running(), "exited while c2 still had messages");
    let mut c2 = nsqd.connect();
    c2.subscribe("dr", "c2");
    consume_until(&mut c2, &want, HashSet::new(), LONG);

    let status = nsqd.wait_exit(LONG);
    assert!(status.success(), "exit status {status}");
    let log = nsqd.log().join("\n");
    assert!(
        log.contains("DRAIN: every topic and channel is empty"),
        "{log}"
    );
}

#[test]
fn second_sigterm_during_drain_shuts_down_at_once_and_keeps_the_rest() {
    second_signal_during_drain("TERM");
}

#[test]
fn sigint_during_drain_shuts_down_at_once_and_keeps_the_rest() {
    second_signal_during_drain("INT");
}

/// SIGTERM starts a drain with messages queued, in flight and deferred; `second` ends it at
/// once, exit 0, and a restart serves everything that was not finished.
fn second_signal_during_drain(second: &str) {
    let mut nsqd = Nsqd::start(&["--sigterm=drain"]);
    nsqd.http_ok("/topic/create?topic=rest");
    nsqd.http_ok("/channel/create?topic=rest&channel=c");
    let mut want: HashSet<Bytes> = HashSet::new();
    for i in 0..20 {
        let body = format!("m-{i}");
        nsqd.http_pub("rest", body.as_bytes());
        want.insert(Bytes::from(body));
    }
    let mut p = nsqd.connect();
    p.dpublish("rest", 3_600_000, b"deferred-long");
    want.insert(Bytes::from_static(b"deferred-long"));
    let mut c = nsqd.connect();
    c.subscribe("rest", "c");
    c.rdy(3);
    for _ in 0..3 {
        c.message(Duration::from_secs(15));
    }

    nsqd.signal("TERM");
    wait_until("draining", LONG, || draining(&nsqd));
    thread::sleep(Duration::from_millis(300));
    assert!(nsqd.is_running(), "a drain with messages left must wait");
    nsqd.signal(second);
    let status = nsqd.wait_exit(LONG);
    assert!(status.success(), "exit status {status}");
    assert!(nsqd.log().join("\n").contains("DRAIN: second signal"));
    drop(c);

    // Everything not finished is still there after a restart (not draining any more).
    let nsqd = Nsqd::start_in(nsqd.into_data_dir(), &[]);
    assert!(!draining(&nsqd));
    let ch = nsqd.channel_stats("rest", "c").expect("channel survives");
    assert_eq!(int(&ch, "depth"), 21, "{ch}");
    let mut c = nsqd.connect();
    c.subscribe("rest", "c");
    consume_until(&mut c, &want, HashSet::new(), LONG);
}

#[test]
fn put_config_drain_and_shutdown() {
    let mut nsqd = Nsqd::start(&[]);
    nsqd.http_ok("/topic/create?topic=cfg");
    nsqd.http_ok("/channel/create?topic=cfg&channel=c");
    nsqd.http_pub("cfg", b"one");
    let r = http_get(nsqd.http_addr, "/config/drain");
    assert_eq!((r.status, r.text().as_str()), (200, "false"));

    let r = http_request(nsqd.http_addr, "PUT", "/config/drain", Some(b""));
    assert_eq!((r.status, r.text().as_str()), (200, "true"));
    assert!(draining(&nsqd));
    let r = http_get(nsqd.http_addr, "/config/drain");
    assert_eq!((r.status, r.text().as_str()), (200, "true"));
    let r = http_post(nsqd.http_addr, "/pub?topic=cfg", b"three");
    assert_eq!(r.status, 503);
    let r = http_request(
        nsqd.http_addr,
        "PUT",
        "/config/nsqlookupd_tcp_addresses",
        Some(br#"["127.0.0.1:4160"]"#),
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, r#"{"message":"DRAINING"}"#)
    );
    thread::sleep(Duration::from_millis(300));
    assert!(nsqd.is_running(), "the channel still holds a message");

    let r = http_request(nsqd.http_addr, "PUT", "/config/shutdown", Some(b""));
    assert_eq!(r.status, 200, "{}", r.text());
    let status = nsqd.wait_exit(LONG);
    assert!(status.success(), "exit status {status}");

    let nsqd = Nsqd::start_in(nsqd.into_data_dir(), &[]);
    let ch = nsqd.channel_stats("cfg", "c").expect("channel survives");
    assert_eq!(int(&ch, "depth"), 1, "{ch}");
}

#[test]
fn sigterm_flag_is_validated_like_go() {
    let out = Process::new(nsqd_bin())
        .args(["--sigterm=later", "--data-path=/nonexistent-never-used"])
        .output()
        .expect("run nsqd");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "invalid value \"later\" for flag -sigterm: must be 'shutdown' or 'drain'\n"
        ),
        "{err}"
    );
    assert!(err.contains("  -sigterm value\n"), "{err}");
}
