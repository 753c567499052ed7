//! `GET /metrics`: the node's stats in the Prometheus text exposition format (nsqio/nsq #732),
//! rendered from the same [`Snapshot`] that feeds `/stats` and statsd, so a scrape and a
//! `/stats` taken at the same moment agree. docs/metrics.md lists every family.
//!
//! Per-client series are off by default (one series per connection multiplies the
//! cardinality): `GET /metrics?per_client=true` adds them, the way `/stats` has
//! `include_clients`. Prometheus sends it with `params: {per_client: ["true"]}` in the scrape
//! config.
//!
//! Naming follows Prometheus' conventions (`nsq_` prefix, base units, `_total` counters,
//! `topic`/`channel` labels); the `process_*` families are the standard ones of every client
//! library (see `nsq_prometheus::process`).

use std::time::{SystemTime, UNIX_EPOCH};

use nsq_prometheus::process::ProcessStats;
use nsq_prometheus::{Exposition, Kind};

use crate::client::ClientStats;
use crate::nsqd::Nsqd;
use crate::replication::{PeerInfo, Replication};
use crate::stats::{ChannelSnapshot, Filter, Snapshot, TopicSnapshot};

fn b(v: bool) -> f64 {
    if v {
        1.0
    } else {
        0.0
    }
}

/// Renders the whole exposition.
pub fn render(nsqd: &Nsqd, per_client: bool) -> String {
    let snapshot = Snapshot::take(
        nsqd,
        &Filter {
            include_clients: per_client,
            ..Filter::default()
        },
    );
    let topics = &snapshot.topics;
    let mut e = Exposition::new();

    e.family(
        "nsq_nsqd_info",
        Kind::Gauge,
        "Always 1; the labels carry the nsqd version and broadcast address.",
    )
    .sample(
        "nsq_nsqd_info",
        &[
            ("version", nsq_protocol::VERSION),
            ("broadcast_address", &nsqd.opts.broadcast_address),
        ],
        1.0,
    );
    e.single(
        "nsq_nsqd_healthy",
        Kind::Gauge,
        "1 when nsqd is healthy (/ping answers OK), 0 after a backend write error.",
        b(snapshot.health == "OK"),
    );
    e.single(
        "nsq_nsqd_draining",
        Kind::Gauge,
        "1 while nsqd is draining (--sigterm=drain, PUT /config/drain): no new messages, exit when empty.",
        b(snapshot.draining),
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    e.single(
        "nsq_nsqd_start_time_seconds",
        Kind::Gauge,
        "When nsqd started, in seconds since the Unix epoch (/stats start_time).",
        snapshot.start_time as f64,
    );
    e.single(
        "nsq_nsqd_uptime_seconds",
        Kind::Gauge,
        "Seconds since nsqd started.",
        (now - snapshot.start_time as f64).max(0.0),
    );
    e.single(
        "nsq_nsqd_tcp_connections",
        Kind::Gauge,
        "Connected TCP clients (producers and consumers).",
        nsqd.clients().len() as f64,
    );
    e.single(
        "nsq_nsqd_topics",
        Kind::Gauge,
        "Topics on this node.",
        topics.len() as f64,
    );
    e.single(
        "nsq_nsqd_channels",
        Kind::Gauge,
        "Channels on this node, over all topics.",
        topics.iter().map(|t| t.channels.len()).sum::<usize>() as f64,
    );

    topic_families(&mut e, &snapshot);
    channel_families(&mut e, &snapshot);
    if per_client {
        client_families(&mut e, &snapshot);
    }
    if let Some(r) = nsqd.replication.as_deref() {
        replication_families(&mut e, r);
    }
    ProcessStats::read().write(&mut e);
    e.finish()
}

fn topic_families(e: &mut Exposition, s: &Snapshot) {
    let topics = &s.topics;
    type Get = fn(&TopicSnapshot) -> f64;
    let gauges: [(&str, Kind, &str, Get); 6] = [
        (
            "nsq_topic_depth",
            Kind::Gauge,
            "Messages queued in the topic, in memory and on disk (/stats depth).",
            |t| t.depth as f64,
        ),
        (
            "nsq_topic_backend_depth",
            Kind::Gauge,
            "Messages queued in the topic's disk queue (/stats backend_depth).",
            |t| t.backend_depth as f64,
        ),
        (
            "nsq_topic_messages_total",
            Kind::Counter,
            "Messages published to the topic (/stats message_count).",
            |t| t.message_count as f64,
        ),
        (
            "nsq_topic_message_bytes_total",
            Kind::Counter,
            "Bytes of message bodies published to the topic (/stats message_bytes).",
            |t| t.message_bytes as f64,
        ),
        (
            "nsq_topic_paused",
            Kind::Gauge,
            "1 when the topic is paused.",
            |t| b(t.paused),
        ),
        (
            "nsq_topic_dropped_total",
            Kind::Counter,
            "Messages of the topic's own queue dropped at its max_depth or max_bytes with overflow=drop_oldest (queue settings; /stats dropped_count).",
            |t| t.dropped_count as f64,
        ),
    ];
    for (name, kind, help, get) in gauges {
        e.family(name, kind, help);
        for t in topics {
            e.sample(name, &[("topic", &t.name)], get(t));
        }
    }
    let name = "nsq_topic_e2e_processing_latency_seconds";
    e.family(
        name,
        Kind::Summary,
        "Publish-to-FIN latency quantiles over all of the topic's channels, within \
         --e2e-processing-latency-window-time (only with --e2e-processing-latency-percentile).",
    );
    for t in topics {
        if t.e2e_count.is_some() {
            quantile_samples(e, name, &[("topic", &t.name)], &s.percentiles, &t.e2e);
        }
    }
}

fn channel_families(e: &mut Exposition, s: &Snapshot) {
    let topics = &s.topics;
    type Get = fn(&ChannelSnapshot) -> f64;
    let families: [(&str, Kind, &str, Get); 12] = [
        (
            "nsq_channel_depth",
            Kind::Gauge,
            "Messages queued in the channel, in memory and on disk (/stats depth).",
            |c| c.depth as f64,
        ),
        (
            "nsq_channel_backend_depth",
            Kind::Gauge,
            "Messages queued in the channel's disk queue (/stats backend_depth).",
            |c| c.backend_depth as f64,
        ),
        (
            "nsq_channel_in_flight",
            Kind::Gauge,
            "Messages sent to a consumer and not yet finished, requeued or timed out.",
            |c| c.in_flight_count as f64,
        ),
        (
            "nsq_channel_deferred",
            Kind::Gauge,
            "Messages waiting for their defer or requeue delay to pass.",
            |c| c.deferred_count as f64,
        ),
        (
            "nsq_channel_messages_total",
            Kind::Counter,
            "Messages the channel received from its topic (/stats message_count).",
            |c| c.message_count as f64,
        ),
        (
            "nsq_channel_requeued_total",
            Kind::Counter,
            "Messages requeued by consumers (REQ) (/stats requeue_count).",
            |c| c.requeue_count as f64,
        ),
        (
            "nsq_channel_timed_out_total",
            Kind::Counter,
            "In-flight messages that timed out and were requeued (/stats timeout_count).",
            |c| c.timeout_count as f64,
        ),
        (
            "nsq_channel_expired_total",
            Kind::Counter,
            "Messages dropped as older than the channel's TTL (queue settings; /stats expired_count).",
            |c| c.expired_count as f64,
        ),
        (
            "nsq_channel_dead_lettered_total",
            Kind::Counter,
            "Messages not delivered again at the channel's max attempts (queue settings; /stats dead_lettered_count).",
            |c| c.dead_lettered_count as f64,
        ),
        (
            "nsq_channel_dropped_total",
            Kind::Counter,
            "Queued messages dropped at the channel's max_depth or max_bytes with overflow=drop_oldest (queue settings; /stats dropped_count).",
            |c| c.dropped_count as f64,
        ),
        (
            "nsq_channel_clients",
            Kind::Gauge,
            "Consumers subscribed to the channel (/stats client_count).",
            |c| c.clients as f64,
        ),
        (
            "nsq_channel_paused",
            Kind::Gauge,
            "1 when the channel is paused.",
            |c| b(c.paused),
        ),
    ];
    for (name, kind, help, get) in families {
        e.family(name, kind, help);
        for t in topics {
            for c in &t.channels {
                e.sample(name, &[("topic", &t.name), ("channel", &c.name)], get(c));
            }
        }
    }
    let name = "nsq_channel_e2e_processing_latency_seconds";
    e.family(
        name,
        Kind::Summary,
        "Publish-to-FIN latency quantiles of the channel, within \
         --e2e-processing-latency-window-time (only with --e2e-processing-latency-percentile).",
    );
    for t in topics {
        for c in &t.channels {
            if c.e2e_count.is_some() {
                let labels = [("topic", t.name.as_str()), ("channel", c.name.as_str())];
                quantile_samples(e, name, &labels, &s.percentiles, &c.e2e);
            }
        }
    }
}

/// The quantile series of a summary (nanoseconds → seconds). No `_sum`/`_count`: NSQ keeps
/// only a sliding window of samples, whose count is not the monotonic total `_count` means.
fn quantile_samples(
    e: &mut Exposition,
    name: &str,
    labels: &[(&str, &str)],
    percentiles: &[f64],
    values: &[f64],
) {
    for (q, v) in percentiles.iter().zip(values) {
        let q = q.to_string();
        let mut l = labels.to_vec();
        l.push(("quantile", &q));
        e.sample(name, &l, v / 1e9);
    }
}

fn client_families(e: &mut Exposition, s: &Snapshot) {
    let topics = &s.topics;
    type Get = fn(&ClientStats) -> f64;
    let families: [(&str, Kind, &str, Get); 5] = [
        (
            "nsq_client_ready",
            Kind::Gauge,
            "The consumer's RDY count.",
            |c| c.ready_count as f64,
        ),
        (
            "nsq_client_in_flight",
            Kind::Gauge,
            "Messages in flight to the consumer.",
            |c| c.in_flight_count as f64,
        ),
        (
            "nsq_client_messages_total",
            Kind::Counter,
            "Messages sent to the consumer.",
            |c| c.message_count as f64,
        ),
        (
            "nsq_client_finished_total",
            Kind::Counter,
            "Messages the consumer finished (FIN).",
            |c| c.finish_count as f64,
        ),
        (
            "nsq_client_requeued_total",
            Kind::Counter,
            "Messages the consumer requeued (REQ).",
            |c| c.requeue_count as f64,
        ),
    ];
    for (name, kind, help, get) in families {
        e.family(name, kind, help);
        for t in topics {
            for ch in &t.channels {
                let mut clients: Vec<&ClientStats> = ch.client_stats.iter().collect();
                clients.sort_by(|a, b| a.remote_address.cmp(&b.remote_address));
                for c in clients {
                    let labels = [
                        ("topic", t.name.as_str()),
                        ("channel", ch.name.as_str()),
                        ("client_id", c.meta.client_id.as_str()),
                        ("hostname", c.meta.hostname.as_str()),
                        ("remote_address", c.remote_address.as_str()),
                    ];
                    e.sample(name, &labels, get(c));
                }
            }
        }
    }
    let name = "nsq_producer_messages_total";
    e.family(
        name,
        Kind::Counter,
        "Messages a connected producer published to a topic over TCP (PUB/MPUB/DPUB).",
    );
    let mut producers: Vec<&ClientStats> = s.producers.iter().collect();
    producers.sort_by(|a, b| a.remote_address.cmp(&b.remote_address));
    for p in producers {
        for (topic, n) in &p.pub_counts {
            let labels = [
                ("topic", topic.as_str()),
                ("client_id", p.meta.client_id.as_str()),
                ("hostname", p.meta.hostname.as_str()),
                ("remote_address", p.remote_address.as_str()),
            ];
            e.sample(name, &labels, *n as f64);
        }
    }
}

/// Replication's families (docs/replication.md, Visibility), only when replication is on: the
/// same numbers as `/stats`' `replication` key. Peers are labelled by their
/// `--replication-peer` address and have samples only on a node that replicates its own
/// publishes (`--replicas` ≥ 2: it is the one that dials them); backlogs are labelled by the
/// origin's node ID and summed over its epochs, so a series outlives an epoch change.
fn replication_families(e: &mut Exposition, r: &Replication) {
    let peers = if r.replicates_own() {
        r.peers()
    } else {
        Vec::new()
    };
    let last = r.log.last_seq();
    type Get = fn(&PeerInfo, u64) -> f64;
    let families: [(&str, &str, Get); 3] = [
        (
            "nsq_nsqd_replication_peer_up",
            "1 while the replication link to the peer is up (/stats replication.peers state).",
            |p, _| b(p.connected),
        ),
        (
            "nsq_nsqd_replication_peer_in_set",
            "1 when the peer is in this node's replica set: its acknowledgements count.",
            |p, _| b(p.in_replica_set),
        ),
        (
            "nsq_nsqd_replication_peer_lag_frames",
            "Replication frames this node logged that the peer has not acknowledged (0 while the link is down).",
            |p, last| p.lag_frames(last) as f64,
        ),
    ];
    for (name, help, get) in families {
        e.family(name, Kind::Gauge, help);
        for p in &peers {
            e.sample(name, &[("peer", &p.address)], get(p, last));
        }
    }

    // (origin, messages, bytes), summed over the origin's epochs; `backlogs()` is sorted.
    // A `taken over` entry is a kept manifest, not a backlog: it holds no message.
    let mut origins: Vec<(String, u64, u64)> = Vec::new();
    for bl in r.backlogs().into_iter().filter(|b| b.state != "taken over") {
        let origin = format!("{:016x}", bl.origin);
        match origins.last_mut() {
            Some(o) if o.0 == origin => {
                o.1 += bl.messages;
                o.2 += bl.bytes;
            }
            _ => origins.push((origin, bl.messages, bl.bytes)),
        }
    }
    let name = "nsq_nsqd_replica_backlog_messages";
    e.family(
        name,
        Kind::Gauge,
        "Unsettled messages of a peer (origin) this node holds in its replica backlogs, over all of the origin's epochs.",
    );
    for (origin, messages, _) in &origins {
        e.sample(name, &[("origin", origin)], *messages as f64);
    }
    let name = "nsq_nsqd_replica_backlog_bytes";
    e.family(
        name,
        Kind::Gauge,
        "Bytes of a peer's (origin's) replica backlogs on this node's disk, over all of the origin's epochs.",
    );
    for (origin, _, bytes) in &origins {
        e.sample(name, &[("origin", origin)], *bytes as f64);
    }

    e.single(
        "nsq_nsqd_replication_publish_waiting",
        Kind::Gauge,
        "Publishes waiting for their replica acknowledgements now.",
        r.publish_waiting() as f64,
    );
    e.single(
        "nsq_nsqd_replication_fenced",
        Kind::Gauge,
        "1 while the replication core fences this node's delivery of its replicated messages (/stats replication.fenced).",
        b(r.fenced()),
    );
    e.single(
        "nsq_nsqd_replication_publish_failures_total",
        Kind::Counter,
        "Publishes failed because too few replicas acknowledged them within --replication-ack-timeout.",
        r.publish_failures() as f64,
    );
    e.single(
        "nsq_nsqd_replication_takeovers_total",
        Kind::Counter,
        "Backlogs of lost peers this node took over (published into its own queues).",
        r.takeovers() as f64,
    );
    e.single(
        "nsq_nsqd_replication_catchups_total",
        Kind::Counter,
        "Replication links to peers that began with a catch-up instead of resuming.",
        r.catchups() as f64,
    );
}

/// The `/metrics` response: `per_client` is read as Go's `strconv.ParseBool` (absent or
/// unparsable = off).
pub fn response(nsqd: &Nsqd, raw_query: Option<&str>) -> axum::response::Response {
    use nsq_go::strconv::parse_bool as parse_go_bool;
    use nsq_go::url::Query;
    use nsq_http::reply::{raw, set};
    let q = Query::parse_lenient(raw_query.unwrap_or(""));
    let per_client = q.get("per_client").and_then(parse_go_bool).unwrap_or(false);
    let mut r = raw(axum::http::StatusCode::OK, render(nsqd, per_client));
    set(
        &mut r,
        axum::http::header::CONTENT_TYPE,
        nsq_prometheus::CONTENT_TYPE,
    );
    r
}
