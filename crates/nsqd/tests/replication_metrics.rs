//! Replication's `/metrics` families (docs/metrics.md, docs/replication.md "Visibility"): two
//! in-process nsqd, A publishing with `--replicas=2` and B as its peer (the small harness of
//! tests/replication.rs), and the exact lines for A's peer and B's backlog of A; with
//! replication off the exposition is byte for byte what it was before replication existed.

mod common;

use std::time::Duration;

use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::http::request;
use nsq_testkit::wait::eventually;
use nsqd::NsqdHandle;

use common::pair::Pair;

/// The lines of `family` in `text`: its `# HELP`, `# TYPE` and samples.
fn lines_of(text: &str, family: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            let l = l
                .strip_prefix("# HELP ")
                .or_else(|| l.strip_prefix("# TYPE "))
                .unwrap_or(l);
            l.split([' ', '{']).next() == Some(family)
        })
        .map(str::to_string)
        .collect()
}

/// The exposition without the samples whose values depend on the clock (start time, uptime;
/// their `# HELP` and `# TYPE` lines stay) and without the `process_*` families (read from
/// `/proc`, absent where it is not).
fn stable(text: &str) -> String {
    text.lines()
        .filter(|l| {
            !(l.starts_with("nsq_nsqd_start_time_seconds ")
                || l.starts_with("nsq_nsqd_uptime_seconds ")
                || l.starts_with("process_")
                || l.starts_with("# HELP process_")
                || l.starts_with("# TYPE process_"))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The exposition of a node without replication (one topic `t`, one channel `c`, one message)
/// as rendered before replication had any `/metrics` family (commit 493192e), [`stable`].
const WITHOUT_REPLICATION: &str = r#"# HELP nsq_nsqd_info Always 1; the labels carry the nsqd version and broadcast address.
# TYPE nsq_nsqd_info gauge
nsq_nsqd_info{version="1.3.0",broadcast_address="127.0.0.1"} 1
# HELP nsq_nsqd_healthy 1 when nsqd is healthy (/ping answers OK), 0 after a backend write error.
# TYPE nsq_nsqd_healthy gauge
nsq_nsqd_healthy 1
# HELP nsq_nsqd_draining 1 while nsqd is draining (--sigterm=drain, PUT /config/drain): no new messages, exit when empty.
# TYPE nsq_nsqd_draining gauge
nsq_nsqd_draining 0
# HELP nsq_nsqd_start_time_seconds When nsqd started, in seconds since the Unix epoch (/stats start_time).
# TYPE nsq_nsqd_start_time_seconds gauge
# HELP nsq_nsqd_uptime_seconds Seconds since nsqd started.
# TYPE nsq_nsqd_uptime_seconds gauge
# HELP nsq_nsqd_tcp_connections Connected TCP clients (producers and consumers).
# TYPE nsq_nsqd_tcp_connections gauge
nsq_nsqd_tcp_connections 0
# HELP nsq_nsqd_topics Topics on this node.
# TYPE nsq_nsqd_topics gauge
nsq_nsqd_topics 1
# HELP nsq_nsqd_channels Channels on this node, over all topics.
# TYPE nsq_nsqd_channels gauge
nsq_nsqd_channels 1
# HELP nsq_topic_depth Messages queued in the topic, in memory and on disk (/stats depth).
# TYPE nsq_topic_depth gauge
nsq_topic_depth{topic="t"} 0
# HELP nsq_topic_backend_depth Messages queued in the topic's disk queue (/stats backend_depth).
# TYPE nsq_topic_backend_depth gauge
nsq_topic_backend_depth{topic="t"} 0
# HELP nsq_topic_messages_total Messages published to the topic (/stats message_count).
# TYPE nsq_topic_messages_total counter
nsq_topic_messages_total{topic="t"} 1
# HELP nsq_topic_message_bytes_total Bytes of message bodies published to the topic (/stats message_bytes).
# TYPE nsq_topic_message_bytes_total counter
nsq_topic_message_bytes_total{topic="t"} 4
# HELP nsq_topic_paused 1 when the topic is paused.
# TYPE nsq_topic_paused gauge
nsq_topic_paused{topic="t"} 0
# HELP nsq_topic_dropped_total Messages of the topic's own queue dropped at its max_depth or max_bytes with overflow=drop_oldest (queue settings; /stats dropped_count).
# TYPE nsq_topic_dropped_total counter
nsq_topic_dropped_total{topic="t"} 0
# HELP nsq_topic_e2e_processing_latency_seconds Publish-to-FIN latency quantiles over all of the topic's channels, within --e2e-processing-latency-window-time (only with --e2e-processing-latency-percentile).
# TYPE nsq_topic_e2e_processing_latency_seconds summary
# HELP nsq_channel_depth Messages queued in the channel, in memory and on disk (/stats depth).
# TYPE nsq_channel_depth gauge
nsq_channel_depth{topic="t",channel="c"} 1
# HELP nsq_channel_backend_depth Messages queued in the channel's disk queue (/stats backend_depth).
# TYPE nsq_channel_backend_depth gauge
nsq_channel_backend_depth{topic="t",channel="c"} 0
# HELP nsq_channel_in_flight Messages sent to a consumer and not yet finished, requeued or timed out.
# TYPE nsq_channel_in_flight gauge
nsq_channel_in_flight{topic="t",channel="c"} 0
# HELP nsq_channel_deferred Messages waiting for their defer or requeue delay to pass.
# TYPE nsq_channel_deferred gauge
nsq_channel_deferred{topic="t",channel="c"} 0
# HELP nsq_channel_messages_total Messages the channel received from its topic (/stats message_count).
# TYPE nsq_channel_messages_total counter
nsq_channel_messages_total{topic="t",channel="c"} 1
# HELP nsq_channel_requeued_total Messages requeued by consumers (REQ) (/stats requeue_count).
# TYPE nsq_channel_requeued_total counter
nsq_channel_requeued_total{topic="t",channel="c"} 0
# HELP nsq_channel_timed_out_total In-flight messages that timed out and were requeued (/stats timeout_count).
# TYPE nsq_channel_timed_out_total counter
nsq_channel_timed_out_total{topic="t",channel="c"} 0
# HELP nsq_channel_expired_total Messages dropped as older than the channel's TTL (queue settings; /stats expired_count).
# TYPE nsq_channel_expired_total counter
nsq_channel_expired_total{topic="t",channel="c"} 0
# HELP nsq_channel_dead_lettered_total Messages not delivered again at the channel's max attempts (queue settings; /stats dead_lettered_count).
# TYPE nsq_channel_dead_lettered_total counter
nsq_channel_dead_lettered_total{topic="t",channel="c"} 0
# HELP nsq_channel_dropped_total Queued messages dropped at the channel's max_depth or max_bytes with overflow=drop_oldest (queue settings; /stats dropped_count).
# TYPE nsq_channel_dropped_total counter
nsq_channel_dropped_total{topic="t",channel="c"} 0
# HELP nsq_channel_clients Consumers subscribed to the channel (/stats client_count).
# TYPE nsq_channel_clients gauge
nsq_channel_clients{topic="t",channel="c"} 0
# HELP nsq_channel_paused 1 when the channel is paused.
# TYPE nsq_channel_paused gauge
nsq_channel_paused{topic="t",channel="c"} 0
# HELP nsq_channel_e2e_processing_latency_seconds Publish-to-FIN latency quantiles of the channel, within --e2e-processing-latency-window-time (only with --e2e-processing-latency-percentile).
# TYPE nsq_channel_e2e_processing_latency_seconds summary
"#;

#[tokio::test]
async fn without_replication_metrics_are_as_before() {
    let (h, _dir) = common::start_with(&["--broadcast-address=127.0.0.1"]).await;
    assert!(h.nsqd.replication.is_none());
    let t = h.nsqd.topic("t").await.unwrap();
    t.get_or_create_channel("c").unwrap();
    t.put(bytes::Bytes::from_static(b"body"), Duration::ZERO)
        .unwrap();
    let text = nsqd::metrics::render(&h.nsqd, false);
    assert_eq!(stable(&text), WITHOUT_REPLICATION, "{text}");
    assert!(!text.contains("replica"), "{text}");
    h.shutdown().await;
}

/// The `# HELP` and `# TYPE` lines of every replication family, in order.
const FAMILIES: [(&str, &str, &str); 10] = [
    (
        "nsq_nsqd_replication_peer_up",
        "gauge",
        "1 while the replication link to the peer is up (/stats replication.peers state).",
    ),
    (
        "nsq_nsqd_replication_peer_in_set",
        "gauge",
        "1 when the peer is in this node's replica set: its acknowledgements count.",
    ),
    (
        "nsq_nsqd_replication_peer_lag_frames",
        "gauge",
        "Replication frames this node logged that the peer has not acknowledged (0 while the link is down).",
    ),
    (
        "nsq_nsqd_replica_backlog_messages",
        "gauge",
        "Unsettled messages of a peer (origin) this node holds in its replica backlogs, over all of the origin's epochs.",
    ),
    (
        "nsq_nsqd_replica_backlog_bytes",
        "gauge",
        "Bytes of a peer's (origin's) replica backlogs on this node's disk, over all of the origin's epochs.",
    ),
    (
        "nsq_nsqd_replication_publish_waiting",
        "gauge",
        "Publishes waiting for their replica acknowledgements now.",
    ),
    (
        "nsq_nsqd_replication_fenced",
        "gauge",
        "1 while the replication core fences this node's delivery of its replicated messages (/stats replication.fenced).",
    ),
    (
        "nsq_nsqd_replication_publish_failures_total",
        "counter",
        "Publishes failed because too few replicas acknowledged them within --replication-ack-timeout.",
    ),
    (
        "nsq_nsqd_replication_takeovers_total",
        "counter",
        "Backlogs of lost peers this node took over (published into its own queues).",
    ),
    (
        "nsq_nsqd_replication_catchups_total",
        "counter",
        "Replication links to peers that began with a catch-up instead of resuming.",
    ),
];

fn render(h: &NsqdHandle) -> String {
    nsqd::metrics::render(&h.nsqd, false)
}

/// `family`'s lines as they must be: `# HELP`, `# TYPE`, then `samples` (`{labels} value`
/// or ` value`, appended to the name).
fn expect(family: &str, samples: &[String]) -> Vec<String> {
    let (_, kind, help) = FAMILIES.iter().find(|f| f.0 == family).unwrap();
    let mut v = vec![
        format!("# HELP {family} {help}"),
        format!("# TYPE {family} {kind}"),
    ];
    v.extend(samples.iter().map(|s| format!("{family}{s}")));
    v
}

/// A's peer B and B's backlog of A after a few publishes, line for line; then, with B
/// stopped, a publish that fails for want of an acknowledgement and the peer shown down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_and_backlog_lines() {
    let mut p = Pair::start(&["--replication-ack-timeout=500ms"]).await;
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"one")).await;
    c.send_ok(&sized("PUB t\n", b"two")).await;
    let r = request(
        p.a.http_addr().unwrap(),
        "POST",
        "/pub?topic=t",
        &[],
        b"three",
    )
    .await;
    r.assert_text_ok("OK");

    // A: its peer B is linked, in the set and (once the ACK of the last frame is in) not behind.
    let peer = format!("{{peer=\"127.0.0.1:{}\"}}", p.b_port);
    eventually(async || {
        lines_of(&render(&p.a), "nsq_nsqd_replication_peer_lag_frames")
            == expect(
                "nsq_nsqd_replication_peer_lag_frames",
                &[format!("{peer} 0")],
            )
    })
    .await;
    let text = render(&p.a);
    // The replication families come after the channel families, before `process_*`, in order.
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let at = families
        .iter()
        .position(|f| *f == "nsq_channel_e2e_processing_latency_seconds")
        .unwrap();
    assert_eq!(
        &families[at + 1..at + 1 + FAMILIES.len()],
        FAMILIES.map(|f| f.0).as_slice(),
        "{text}"
    );
    assert!(families[at + 1 + FAMILIES.len()..]
        .iter()
        .all(|f| f.starts_with("process_")));
    let one = |family: &str, sample: String| {
        assert_eq!(lines_of(&text, family), expect(family, &[sample]), "{text}");
    };
    one("nsq_nsqd_replication_peer_up", format!("{peer} 1"));
    one("nsq_nsqd_replication_peer_in_set", format!("{peer} 1"));
    one("nsq_nsqd_replication_publish_waiting", " 0".into());
    // B answers A's PINGs: A delivers.
    one("nsq_nsqd_replication_fenced", " 0".into());
    one("nsq_nsqd_replication_publish_failures_total", " 0".into());
    one("nsq_nsqd_replication_takeovers_total", " 0".into());
    // B started after A: the first session is a catch-up (every new backlog starts with one).
    one("nsq_nsqd_replication_catchups_total", " 1".into());
    // A holds no backlog (B does not replicate to it).
    for f in [
        "nsq_nsqd_replica_backlog_messages",
        "nsq_nsqd_replica_backlog_bytes",
    ] {
        assert_eq!(lines_of(&text, f), expect(f, &[]), "{text}");
    }

    // B: the backlog of A holds the three messages; the bytes are the store's.
    let b_repl = p.b().nsqd.replication.as_ref().unwrap();
    let backlogs = b_repl.backlogs();
    assert_eq!(backlogs.len(), 1, "{backlogs:?}");
    assert_eq!(backlogs[0].messages, 3, "{backlogs:?}");
    assert!(backlogs[0].bytes > 0, "{backlogs:?}");
    let text = nsqd::metrics::render(&p.b().nsqd, false);
    let origin = format!("{{origin=\"{:016x}\"}}", p.a_node());
    let one = |family: &str, samples: &[String]| {
        assert_eq!(lines_of(&text, family), expect(family, samples), "{text}");
    };
    one(
        "nsq_nsqd_replica_backlog_messages",
        &[format!("{origin} 3")],
    );
    one(
        "nsq_nsqd_replica_backlog_bytes",
        &[format!("{origin} {}", backlogs[0].bytes)],
    );
    // B replicates nothing of its own (`--replicas=1`): it dials no peer, no peer series.
    for f in [
        "nsq_nsqd_replication_peer_up",
        "nsq_nsqd_replication_peer_in_set",
        "nsq_nsqd_replication_peer_lag_frames",
    ] {
        one(f, &[]);
    }
    one("nsq_nsqd_replication_catchups_total", &[" 0".into()]);
    // A `--replicas=1` node never fences.
    one("nsq_nsqd_replication_fenced", &[" 0".into()]);
    // The same numbers as /stats.
    let st = request(
        p.b().http_addr().unwrap(),
        "GET",
        "/stats?format=json",
        &[],
        b"",
    )
    .await
    .json();
    assert_eq!(st["replication"]["backlogs"][0]["bytes"], backlogs[0].bytes);

    // B stops: A's publish fails after --replication-ack-timeout, the peer is down.
    p.b.take().unwrap().shutdown().await;
    eventually(async || {
        lines_of(&render(&p.a), "nsq_nsqd_replication_peer_up")
            == expect("nsq_nsqd_replication_peer_up", &[format!("{peer} 0")])
    })
    .await;
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    c.send(&sized("PUB t\n", b"four")).await;
    c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 500ms")
        .await;
    let text = nsqd::metrics::render(&p.a.nsqd, false);
    let one = |family: &str, sample: String| {
        assert_eq!(lines_of(&text, family), expect(family, &[sample]), "{text}");
    };
    one("nsq_nsqd_replication_peer_in_set", format!("{peer} 0"));
    one("nsq_nsqd_replication_peer_lag_frames", format!("{peer} 0"));
    one("nsq_nsqd_replication_publish_failures_total", " 1".into());
    one("nsq_nsqd_replication_publish_waiting", " 0".into());
    p.shutdown().await;
}

/// `nsq_nsqd_replication_fenced` and `/stats`' `fenced` follow the core's fence
/// (docs/replication.md, The core, "Fencing"): 0 / `false` while B answers A's PINGs, 1 /
/// `true` once B is gone for T/2 (T = 2 s here), in `/metrics`, the JSON and the text `/stats`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_gauge_and_stats_follow_the_fence() {
    let mut p = Pair::start(&["--replication-takeover-timeout=2s"]).await;
    let http = p.a.http_addr().unwrap();
    let body = async || {
        request(http, "GET", "/stats?format=json", &[], b"")
            .await
            .text()
    };
    let text = async || request(http, "GET", "/stats", &[], b"").await.text();
    let fenced = |v: &str| expect("nsq_nsqd_replication_fenced", &[format!(" {v}")]);

    // `fenced` follows `replay`, before `backlogs`.
    let st = body().await;
    assert!(
        st.contains(r#","replay":"done","fenced":false,"backlogs":["#),
        "{st}"
    );
    assert!(text().await.contains(" fenced false\n"));
    assert_eq!(
        lines_of(&render(&p.a), "nsq_nsqd_replication_fenced"),
        fenced("0")
    );

    p.b.take().unwrap().shutdown().await;
    eventually(async || lines_of(&render(&p.a), "nsq_nsqd_replication_fenced") == fenced("1"))
        .await;
    let st = body().await;
    assert!(st.contains(r#","fenced":true,"#), "{st}");
    let t = text().await;
    assert!(t.contains(" fenced true\n"), "{t}");
    p.shutdown().await;
}
