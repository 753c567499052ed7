//! The statsd pusher: the metric lines of a push (against the reference's observed datagram),
//! counter deltas, ephemeral exclusion, percentile names, packing, and whole pushes from an
//! in-process nsqd to a local UDP socket.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::start_with;
use nsqd::statsd::{self, ChannelSnapshot, Config, MemStats, Snapshot, TopicSnapshot};
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::{timeout, Instant};

const PREFIX: &str = "nsq.myhost_43215.";

fn topic(name: &str, count: u64, bytes: u64) -> TopicSnapshot {
    TopicSnapshot {
        name: name.to_string(),
        message_count: count,
        message_bytes: bytes,
        ..TopicSnapshot::default()
    }
}

fn channel(name: &str) -> ChannelSnapshot {
    ChannelSnapshot {
        name: name.to_string(),
        ..ChannelSnapshot::default()
    }
}

#[test]
fn matches_the_observed_datagram() {
    let snap = Snapshot {
        topics: vec![topic("st.a", 2, 3)],
        ..Snapshot::default()
    };
    let mem = MemStats {
        heap_objects: 12345,
        ..MemStats::default()
    };
    let lines = statsd::lines(PREFIX, &snap, None, false, &[], Some(&mem));
    let packets = statsd::pack(&lines, 200);
    assert_eq!(
        String::from_utf8(packets[0].clone()).unwrap(),
        "nsq.myhost_43215.topic.st.a.message_count:2|c\nnsq.myhost_43215.topic.st.a.message_bytes:3|c\nnsq.myhost_43215.topic.st.a.depth:0|g\nnsq.myhost_43215.topic.st.a.backend_depth:0|g\n"
    );
    assert!(packets.iter().all(|p| p.len() <= 200));
    let all: Vec<u8> = packets.concat();
    let expected: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(all, expected.into_bytes(), "nothing lost or reordered");
    assert_eq!(
        &lines[4..],
        &[
            "nsq.myhost_43215.mem.heap_objects:12345|g",
            "nsq.myhost_43215.mem.heap_idle_bytes:0|g",
            "nsq.myhost_43215.mem.heap_in_use_bytes:0|g",
            "nsq.myhost_43215.mem.heap_released_bytes:0|g",
            "nsq.myhost_43215.mem.gc_pause_usec_100:0|g",
            "nsq.myhost_43215.mem.gc_pause_usec_99:0|g",
            "nsq.myhost_43215.mem.gc_pause_usec_95:0|g",
            "nsq.myhost_43215.mem.next_gc_bytes:0|g",
            "nsq.myhost_43215.mem.gc_runs:0|c",
        ]
    );
}

fn full_snapshot(count: u64, requeues: u64) -> Snapshot {
    Snapshot {
        topics: vec![TopicSnapshot {
            e2e: vec![2_000_000.9, 1_500_000.0],
            depth: 7,
            backend_depth: 5,
            channels: vec![ChannelSnapshot {
                message_count: count,
                depth: 4,
                backend_depth: 3,
                in_flight_count: 2,
                deferred_count: 1,
                requeue_count: requeues,
                timeout_count: 6,
                clients: 3,
                e2e: vec![9.0, 8.0],
                ..channel("c")
            }],
            ..topic("t", count, count * 10)
        }],
        ..Snapshot::default()
    }
}

#[test]
fn every_metric_in_order() {
    let lines = statsd::lines("p.", &full_snapshot(5, 2), None, false, &[1.0, 0.99], None);
    assert_eq!(
        lines,
        [
            "p.topic.t.message_count:5|c",
            "p.topic.t.message_bytes:50|c",
            "p.topic.t.depth:7|g",
            "p.topic.t.backend_depth:5|g",
            "p.topic.t.e2e_processing_latency_100:2000000|g",
            "p.topic.t.e2e_processing_latency_99:1500000|g",
            "p.topic.t.channel.c.message_count:5|c",
            "p.topic.t.channel.c.depth:4|g",
            "p.topic.t.channel.c.backend_depth:3|g",
            "p.topic.t.channel.c.in_flight_count:2|g",
            "p.topic.t.channel.c.deferred_count:1|g",
            "p.topic.t.channel.c.requeue_count:2|c",
            "p.topic.t.channel.c.timeout_count:6|c",
            "p.topic.t.channel.c.clients:3|g",
            "p.topic.t.channel.c.e2e_processing_latency_100:9|g",
            "p.topic.t.channel.c.e2e_processing_latency_99:8|g",
        ]
    );
}

#[test]
fn counters_are_deltas_since_the_previous_push() {
    let first = full_snapshot(5, 2);
    let mut second = full_snapshot(8, 2);
    second.topics.push(topic("new", 4, 40));
    let lines = statsd::lines("", &second, Some(&first), false, &[1.0, 0.99], None);
    let get = |name: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} in {lines:?}"))
            .clone()
    };
    assert_eq!(get("topic.t.message_count"), "topic.t.message_count:3|c");
    assert_eq!(get("topic.t.message_bytes"), "topic.t.message_bytes:30|c");
    assert_eq!(
        get("topic.t.depth"),
        "topic.t.depth:7|g",
        "gauges are absolute"
    );
    assert_eq!(
        get("topic.t.channel.c.requeue_count"),
        "topic.t.channel.c.requeue_count:0|c",
        "zero deltas are sent"
    );
    assert_eq!(
        get("topic.t.channel.c.timeout_count"),
        "topic.t.channel.c.timeout_count:0|c"
    );
    assert_eq!(
        get("topic.new.message_count"),
        "topic.new.message_count:4|c",
        "a topic new since the last push counts from 0"
    );

    // A re-created topic has lower totals: the reference sends int64(uint64 difference).
    let lines = statsd::lines("", &first, Some(&second), false, &[], None);
    assert_eq!(lines[0], "topic.t.message_count:-3|c");
}

#[test]
fn ephemeral_topics_and_channels_can_be_excluded() {
    let mut t = topic("t", 1, 1);
    t.channels = vec![channel("a#ephemeral"), channel("b")];
    let snap = Snapshot {
        topics: vec![topic("e#ephemeral", 1, 1), t],
        ..Snapshot::default()
    };
    let names = |exclude| -> Vec<String> {
        statsd::lines("", &snap, None, exclude, &[], None)
            .into_iter()
            .filter(|l| l.ends_with("message_count:1|c") || l.ends_with("message_count:0|c"))
            .map(|l| l.split(':').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(false),
        [
            "topic.e#ephemeral.message_count",
            "topic.t.message_count",
            "topic.t.channel.a#ephemeral.message_count",
            "topic.t.channel.b.message_count",
        ]
    );
    assert_eq!(
        names(true),
        ["topic.t.message_count", "topic.t.channel.b.message_count"]
    );
}

#[test]
fn percentile_names() {
    assert_eq!(statsd::percentile_name(0.99), "99");
    assert_eq!(statsd::percentile_name(1.0), "100");
    assert_eq!(statsd::percentile_name(0.999), "100");
    assert_eq!(statsd::percentile_name(0.5), "50");
    assert_eq!(statsd::percentile_name(0.95), "95");
    let mut c = channel("c");
    c.e2e = vec![1.0, 2.0, 3.0];
    let mut t = topic("t", 0, 0);
    t.channels = vec![c];
    let lines = statsd::lines(
        "",
        &Snapshot {
            topics: vec![t],
            ..Snapshot::default()
        },
        None,
        false,
        &[1.0, 0.999, 0.5],
        None,
    );
    let e2e: Vec<&String> = lines.iter().filter(|l| l.contains("e2e")).collect();
    assert_eq!(
        e2e,
        [
            "topic.t.channel.c.e2e_processing_latency_100:1|g",
            "topic.t.channel.c.e2e_processing_latency_100:2|g",
            "topic.t.channel.c.e2e_processing_latency_50:3|g",
        ],
        "a topic without merged values sends no topic e2e lines"
    );
}

#[test]
fn oversized_lines_go_alone() {
    let long = "x".repeat(30);
    let lines = vec!["a".to_string(), long.clone(), "b".to_string()];
    let p = statsd::pack(&lines, 10);
    assert_eq!(
        p,
        vec![
            b"a\n".to_vec(),
            format!("{long}\n").into_bytes(),
            b"b\n".to_vec()
        ]
    );
}

// ---- end to end ---------------------------------------------------------------------------

/// Receives datagrams until one contains `last`; returns them in arrival order.
async fn receive_until(sock: &UdpSocket, last: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = timeout(Duration::from_secs(10), sock.recv(&mut buf))
            .await
            .expect("a datagram within 10s")
            .unwrap();
        let d = String::from_utf8(buf[..n].to_vec()).unwrap();
        let done = d.contains(last);
        out.push(d);
        if done {
            return out;
        }
    }
}

fn names(datagrams: &[String]) -> Vec<String> {
    datagrams
        .iter()
        .flat_map(|d| d.lines())
        .map(|l| l.to_string())
        .collect()
}

#[tokio::test]
async fn pushes_a_running_nsqd_to_udp() {
    let (h, _dir) = start_with(&["--e2e-processing-latency-percentile=1.0,0.5"]).await;
    let (t, _) = h.nsqd.engine.get_or_create_topic("st").unwrap();
    t.get_or_create_channel("ch").unwrap();
    t.put(Bytes::from_static(b"abc"), Duration::ZERO).unwrap();
    t.put(Bytes::from_static(b"de"), Duration::ZERO).unwrap();
    h.nsqd.engine.get_or_create_topic("e#ephemeral").unwrap();

    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let cfg = Config {
        address: sock.local_addr().unwrap().to_string(),
        prefix: "test.host_1.".to_string(),
        interval: Duration::from_secs(1),
        mem_stats: true,
        packet_size: 120,
        exclude_ephemeral: true,
        percentiles: h.nsqd.opts.e2e_processing_latency_percentiles.clone(),
    };
    let stop = Arc::new(Notify::new());
    let started = Instant::now();
    let task = tokio::spawn(statsd::run_with(h.nsqd.engine.clone(), cfg, stop.clone()));

    let first = receive_until(&sock, "mem.gc_runs").await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the first push comes one interval after start"
    );
    assert!(first.iter().all(|d| d.len() <= 120 && d.ends_with('\n')));
    assert!(first.len() > 1, "packed into several datagrams");
    let lines = names(&first);
    let keys: Vec<&str> = lines.iter().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "test.host_1.topic.st.message_count",
            "test.host_1.topic.st.message_bytes",
            "test.host_1.topic.st.depth",
            "test.host_1.topic.st.backend_depth",
            "test.host_1.topic.st.e2e_processing_latency_100",
            "test.host_1.topic.st.e2e_processing_latency_50",
            "test.host_1.topic.st.channel.ch.message_count",
            "test.host_1.topic.st.channel.ch.depth",
            "test.host_1.topic.st.channel.ch.backend_depth",
            "test.host_1.topic.st.channel.ch.in_flight_count",
            "test.host_1.topic.st.channel.ch.deferred_count",
            "test.host_1.topic.st.channel.ch.requeue_count",
            "test.host_1.topic.st.channel.ch.timeout_count",
            "test.host_1.topic.st.channel.ch.clients",
            "test.host_1.topic.st.channel.ch.e2e_processing_latency_100",
            "test.host_1.topic.st.channel.ch.e2e_processing_latency_50",
            "test.host_1.mem.heap_objects",
            "test.host_1.mem.heap_idle_bytes",
            "test.host_1.mem.heap_in_use_bytes",
            "test.host_1.mem.heap_released_bytes",
            "test.host_1.mem.gc_pause_usec_100",
            "test.host_1.mem.gc_pause_usec_99",
            "test.host_1.mem.gc_pause_usec_95",
            "test.host_1.mem.next_gc_bytes",
            "test.host_1.mem.gc_runs",
        ]
    );
    assert_eq!(lines[0], "test.host_1.topic.st.message_count:2|c");
    assert_eq!(lines[1], "test.host_1.topic.st.message_bytes:5|c");
    assert_eq!(
        lines[6],
        "test.host_1.topic.st.channel.ch.message_count:2|c"
    );
    assert_eq!(lines[7], "test.host_1.topic.st.channel.ch.depth:2|g");
    assert!(!lines[18].ends_with(":0|g"), "RSS as heap_in_use_bytes");

    // Second push: deltas.
    t.put(Bytes::from_static(b"f"), Duration::ZERO).unwrap();
    let second = names(&receive_until(&sock, "mem.gc_runs").await);
    assert_eq!(second[0], "test.host_1.topic.st.message_count:1|c");
    assert_eq!(second[1], "test.host_1.topic.st.message_bytes:1|c");
    assert_eq!(second[7], "test.host_1.topic.st.channel.ch.depth:3|g");

    stop.notify_waiters();
    timeout(Duration::from_secs(5), task)
        .await
        .expect("stops")
        .unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn stop_flushes_the_rest_without_waiting() {
    let (h, _dir) = common::start().await;
    for i in 0..20 {
        h.nsqd
            .engine
            .get_or_create_topic(&format!("topic{i:02}"))
            .unwrap();
    }
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    // A 30 s spread window: only a stop makes the push finish quickly.
    let cfg = Config {
        address: sock.local_addr().unwrap().to_string(),
        prefix: String::new(),
        interval: Duration::from_secs(31),
        mem_stats: false,
        packet_size: 60,
        exclude_ephemeral: false,
        percentiles: Vec::new(),
    };
    assert_eq!(cfg.spread_window(), Duration::from_secs(30));
    let stop = Arc::new(Notify::new());
    tokio::time::pause();
    let task = tokio::spawn(statsd::run_with(h.nsqd.engine.clone(), cfg, stop.clone()));
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_secs(31)).await;
    tokio::time::resume();
    let mut buf = vec![0u8; 65536];
    let n = timeout(Duration::from_secs(10), sock.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("topic.topic00.message_count:0|c\n"));
    stop.notify_one();
    let rest = receive_until(&sock, "topic.topic19.backend_depth").await;
    assert!(rest.len() > 10);
    timeout(Duration::from_secs(2), task)
        .await
        .expect("stops right after flushing")
        .unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn run_uses_the_daemon_options() {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (h, _dir) = start_with(&[
        &format!("--statsd-address={}", sock.local_addr().unwrap()),
        "--statsd-interval=1s",
        "--statsd-prefix=test.%s",
        "--statsd-mem-stats=false",
        "--broadcast-address=myhost",
    ])
    .await;
    let port = h.http_addr().unwrap().port();
    let prefix = format!("test.myhost_{port}.");
    assert_eq!(h.nsqd.opts.statsd_prefix, prefix);
    h.nsqd.engine.get_or_create_topic("t").unwrap();

    // The daemon may already run its own pusher; ours sends the same lines either way.
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(statsd::run(h.nsqd.clone(), stop.clone()));
    let got = names(&receive_until(&sock, "topic.t.backend_depth").await);
    assert!(got.contains(&format!("{prefix}topic.t.message_count:0|c")));
    assert!(got.iter().all(|l| l.starts_with(&prefix)), "{got:?}");
    assert!(got.iter().all(|l| !l.contains("mem.")));
    stop.notify_waiters();
    timeout(Duration::from_secs(5), task)
        .await
        .expect("stops")
        .unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn unresolvable_statsd_skips_the_round() {
    let (h, _dir) = common::start().await;
    let cfg = Config {
        address: "no-such-host.invalid:8125".to_string(),
        prefix: String::new(),
        interval: Duration::from_millis(200),
        mem_stats: true,
        packet_size: 508,
        exclude_ephemeral: false,
        percentiles: Vec::new(),
    };
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(statsd::run_with(h.nsqd.engine.clone(), cfg, stop.clone()));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!task.is_finished(), "keeps trying");
    stop.notify_one();
    timeout(Duration::from_secs(3), task)
        .await
        .expect("stops")
        .unwrap();
    h.shutdown().await;
}
