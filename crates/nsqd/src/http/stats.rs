//! `GET /stats` renderings of the one [`Snapshot`] (`stats.rs`): the reference's JSON shape
//! (nsqd/http.go, `doStats`: field order, `null` vs `[]`, omitted fields, the single-entry
//! `pub_counts` quirk) and the `printStats` text layout (nsqd/http.go, `printStats`).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::client::ClientStats;
use crate::nsqd::Nsqd;
use crate::stats::{Filter, Snapshot};
use nsq_go::duration::format_nanos as go_duration;

/// What the query string asks for.
pub(crate) type StatsQuery<'a> = Filter<'a>;

/// The top-level `/stats?format=json` object.
#[derive(Serialize)]
pub(crate) struct StatsJson {
    version: &'static str,
    health: String,
    start_time: i64,
    /// `null` when the `topic` filter names an unknown topic.
    topics: Option<Vec<TopicJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemStats>,
    /// `null` when there are no producers or clients are excluded.
    producers: Option<Vec<ClientJson>>,
    /// Drain mode (crate::drain); not in the reference.
    draining: bool,
    /// Replication (docs/replication.md, Visibility): only when it is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    replication: Option<ReplicationJson>,
}

#[derive(Serialize)]
struct ReplicationJson {
    node_id: String,
    epoch: u64,
    replicas: usize,
    peers: Vec<PeerJson>,
    /// The replay of the backlogs at startup: `replaying` (the list is not complete yet),
    /// `done` or `failed`.
    replay: &'static str,
    /// Whether the replication core fenced this node's delivery of its replicated messages
    /// (docs/replication.md, The core, "Fencing"): no member or nsqlookupd proved recently
    /// that it hears this node, or a member claimed its epoch.
    fenced: bool,
    backlogs: Vec<BacklogJson>,
    publish_waiting: u64,
    publish_failures: u64,
    takeovers: u64,
    taken_over_by_peers: u64,
}

#[derive(Serialize)]
struct PeerJson {
    address: String,
    node_id: String,
    state: &'static str,
    in_replica_set: bool,
    catching_up: bool,
    acked_seq: u64,
    lag_frames: u64,
    last_seen_ms: Option<u64>,
}

#[derive(Serialize)]
struct BacklogJson {
    origin: String,
    epoch: u64,
    state: &'static str,
    messages: u64,
    bytes: u64,
    last_seq: u64,
    segments: usize,
}

fn replication_json(r: &crate::replication::Replication) -> ReplicationJson {
    let last = r.log.last_seq();
    ReplicationJson {
        node_id: format!("{:016x}", r.identity.node_id),
        epoch: r.epoch(),
        replicas: r.settings.replicas,
        peers: r
            .peers()
            .into_iter()
            .map(|p| PeerJson {
                lag_frames: p.lag_frames(last),
                address: p.address,
                node_id: format!("{:016x}", p.node_id),
                state: if p.connected {
                    "connected"
                } else {
                    "disconnected"
                },
                in_replica_set: p.in_replica_set,
                catching_up: p.catching_up,
                acked_seq: p.acked_seq,
                last_seen_ms: p.last_seen_ms,
            })
            .collect(),
        replay: r.replay_state(),
        fenced: r.fenced(),
        backlogs: r
            .backlogs()
            .into_iter()
            .map(|b| BacklogJson {
                origin: format!("{:016x}", b.origin),
                epoch: b.epoch,
                state: b.state,
                messages: b.messages,
                bytes: b.bytes,
                last_seq: b.last_seq,
                segments: b.segments,
            })
            .collect(),
        publish_waiting: r.publish_waiting(),
        publish_failures: r.publish_failures(),
        takeovers: r.takeovers(),
        taken_over_by_peers: 0,
    }
}

#[derive(Serialize)]
struct TopicJson {
    topic_name: String,
    channels: Vec<ChannelJson>,
    depth: i64,
    backend_depth: i64,
    message_count: u64,
    message_bytes: u64,
    paused: bool,
    /// Ours (queue settings' `overflow=drop_oldest` on a topic): absent while 0.
    #[serde(skip_serializing_if = "is_zero")]
    dropped_count: u64,
    e2e_processing_latency: E2eJson,
}

#[derive(Serialize)]
struct ChannelJson {
    channel_name: String,
    depth: i64,
    backend_depth: i64,
    in_flight_count: usize,
    deferred_count: usize,
    message_count: u64,
    requeue_count: u64,
    timeout_count: u64,
    /// Ours (queue settings' `ttl`): absent while 0, so the JSON is NSQ's without a TTL.
    #[serde(skip_serializing_if = "is_zero")]
    expired_count: u64,
    /// Ours (queue settings' `max_attempts`): absent while 0.
    #[serde(skip_serializing_if = "is_zero")]
    dead_lettered_count: u64,
    /// Ours (queue settings' `overflow=drop_oldest`): absent while 0.
    #[serde(skip_serializing_if = "is_zero")]
    dropped_count: u64,
    client_count: usize,
    /// `null` when clients are excluded.
    clients: Option<Vec<ClientJson>>,
    paused: bool,
    e2e_processing_latency: E2eJson,
}

#[derive(Serialize)]
struct E2eJson {
    count: u64,
    percentiles: Option<Vec<QuantileJson>>,
}

#[derive(Serialize)]
struct QuantileJson {
    quantile: f64,
    value: f64,
}

#[derive(Serialize)]
struct ClientJson {
    client_id: String,
    hostname: String,
    version: &'static str,
    remote_address: String,
    state: u8,
    ready_count: i64,
    in_flight_count: i64,
    message_count: u64,
    finish_count: u64,
    requeue_count: u64,
    connect_ts: i64,
    sample_rate: i32,
    deflate: bool,
    snappy: bool,
    user_agent: String,
    #[serde(skip_serializing_if = "is_false")]
    authed: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    auth_identity: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    auth_identity_url: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub_counts: Vec<PubCountJson>,
    tls: bool,
    tls_cipher_suite: String,
    tls_version: String,
    tls_negotiated_protocol: String,
    tls_negotiated_protocol_is_mutual: bool,
}

#[derive(Serialize)]
struct PubCountJson {
    topic: String,
    count: u64,
}

/// Go's `runtime.MemStats` subset; we have no GC, see `stats::MemStats` for what is filled.
#[derive(Serialize)]
struct MemStats {
    heap_objects: u64,
    heap_idle_bytes: u64,
    heap_in_use_bytes: u64,
    heap_released_bytes: u64,
    gc_pause_usec_100: u64,
    gc_pause_usec_99: u64,
    gc_pause_usec_95: u64,
    next_gc_bytes: u64,
    gc_total_runs: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Takes the snapshot and shapes it as the reference's `doStats` JSON.
pub(crate) fn collect(nsqd: &Nsqd, q: &StatsQuery<'_>) -> StatsJson {
    let mut s = to_json(Snapshot::take(nsqd, q), q);
    s.replication = nsqd.replication.as_deref().map(replication_json);
    s
}

fn to_json(s: Snapshot, q: &StatsQuery<'_>) -> StatsJson {
    let percentiles = s.percentiles;
    let e2e = |values: Vec<f64>, count: Option<u64>| match count {
        None => E2eJson {
            count: 0,
            percentiles: None,
        },
        Some(count) => E2eJson {
            count,
            percentiles: Some(
                percentiles
                    .iter()
                    .zip(values)
                    .map(|(&quantile, value)| QuantileJson { quantile, value })
                    .collect(),
            ),
        },
    };
    let topics = s.topic_found.then(|| {
        s.topics
            .into_iter()
            .map(|t| TopicJson {
                topic_name: t.name,
                channels: t
                    .channels
                    .into_iter()
                    .map(|c| ChannelJson {
                        channel_name: c.name,
                        depth: c.depth,
                        backend_depth: c.backend_depth,
                        in_flight_count: c.in_flight_count as usize,
                        deferred_count: c.deferred_count as usize,
                        message_count: c.message_count,
                        requeue_count: c.requeue_count,
                        timeout_count: c.timeout_count,
                        expired_count: c.expired_count,
                        dead_lettered_count: c.dead_lettered_count,
                        dropped_count: c.dropped_count,
                        client_count: c.clients as usize,
                        clients: q.include_clients.then(|| {
                            c.client_stats
                                .into_iter()
                                .map(|cl| client_json(cl, q.topic))
                                .collect()
                        }),
                        paused: c.paused,
                        e2e_processing_latency: e2e(c.e2e, c.e2e_count),
                    })
                    .collect(),
                depth: t.depth,
                backend_depth: t.backend_depth,
                message_count: t.message_count,
                message_bytes: t.message_bytes,
                paused: t.paused,
                dropped_count: t.dropped_count,
                e2e_processing_latency: e2e(t.e2e, t.e2e_count),
            })
            .collect()
    });
    StatsJson {
        version: nsq_protocol::VERSION,
        health: s.health,
        start_time: s.start_time,
        topics,
        memory: s.memory.map(|m| MemStats {
            heap_objects: m.heap_objects,
            heap_idle_bytes: m.heap_idle_bytes,
            heap_in_use_bytes: m.heap_in_use_bytes,
            heap_released_bytes: m.heap_released_bytes,
            gc_pause_usec_100: m.gc_pause_usec_100,
            gc_pause_usec_99: m.gc_pause_usec_99,
            gc_pause_usec_95: m.gc_pause_usec_95,
            next_gc_bytes: m.next_gc_bytes,
            gc_total_runs: u32::try_from(m.gc_runs).unwrap_or(u32::MAX),
        }),
        producers: (!s.producers.is_empty()).then(|| {
            s.producers
                .into_iter()
                .map(|c| client_json(c, q.topic))
                .collect()
        }),
        draining: s.draining,
        replication: None,
    }
}

fn client_json(s: ClientStats, topic_filter: &str) -> ClientJson {
    // The reference reports at most one pub_counts entry: the filtered topic's, or (without a
    // filter) one of the topics the connection published to.
    let pub_counts = if topic_filter.is_empty() {
        s.pub_counts
            .iter()
            .next()
            .map(|(t, n)| PubCountJson {
                topic: t.clone(),
                count: *n,
            })
            .into_iter()
            .collect()
    } else {
        s.pub_counts
            .get(topic_filter)
            .map(|n| PubCountJson {
                topic: topic_filter.to_string(),
                count: *n,
            })
            .into_iter()
            .collect()
    };
    let m = s.meta;
    ClientJson {
        client_id: m.client_id,
        hostname: m.hostname,
        version: "V2",
        remote_address: s.remote_address,
        state: s.state,
        ready_count: s.ready_count,
        in_flight_count: s.in_flight_count,
        message_count: s.message_count,
        finish_count: s.finish_count,
        requeue_count: s.requeue_count,
        connect_ts: s.connect_ts,
        sample_rate: s.sample_rate,
        deflate: m.deflate,
        snappy: m.snappy,
        user_agent: m.user_agent,
        authed: m.authed,
        auth_identity: m.auth_identity,
        auth_identity_url: m.auth_identity_url,
        pub_counts,
        tls: m.tls,
        tls_cipher_suite: m.tls_cipher_suite,
        tls_version: m.tls_version,
        tls_negotiated_protocol: String::new(),
        tls_negotiated_protocol_is_mutual: m.tls,
    }
}

// ---- text format --------------------------------------------------------------------------

/// The reference's `printStats`, byte for byte (except the toolchain in line 1).
pub(crate) fn render_text(s: &StatsJson) -> String {
    use std::fmt::Write as _;
    let now_ns = unix_nanos();
    let mut w = String::with_capacity(1024);
    let _ = writeln!(w, "{}", crate::options::version_string());
    let _ = writeln!(
        w,
        "start_time {}",
        rfc3339(s.start_time, &jiff::tz::TimeZone::system())
    );
    let uptime = now_ns.saturating_sub(i128::from(s.start_time) * 1_000_000_000);
    let _ = writeln!(w, "uptime {}", go_duration(uptime));
    let _ = write!(w, "\nHealth: {}\n", s.health);

    if let Some(m) = &s.memory {
        w.push_str("\nMemory:\n");
        let rows: [(&str, u64); 9] = [
            ("heap_objects", m.heap_objects),
            ("heap_idle_bytes", m.heap_idle_bytes),
            ("heap_in_use_bytes", m.heap_in_use_bytes),
            ("heap_released_bytes", m.heap_released_bytes),
            ("gc_pause_usec_100", m.gc_pause_usec_100),
            ("gc_pause_usec_99", m.gc_pause_usec_99),
            ("gc_pause_usec_95", m.gc_pause_usec_95),
            ("next_gc_bytes", m.next_gc_bytes),
            ("gc_total_runs", u64::from(m.gc_total_runs)),
        ];
        for (k, v) in rows {
            let _ = writeln!(w, "   {k:<25}\t{v}");
        }
    }

    let topics = s.topics.as_deref().unwrap_or(&[]);
    if topics.is_empty() {
        w.push_str("\nTopics: None\n");
    } else {
        w.push_str("\nTopics:");
    }
    let now_s = now_ns.div_euclid(1_000_000_000);
    for t in topics {
        let prefix = if t.paused { "*P " } else { "   " };
        let _ = writeln!(
            w,
            "\n{prefix}[{:<15}] depth: {:<5} be-depth: {:<5} msgs: {:<8} e2e%: {}",
            t.topic_name,
            t.depth,
            t.backend_depth,
            t.message_count,
            e2e_text(&t.e2e_processing_latency)
        );
        if t.dropped_count > 0 {
            // Ours: on the topic's line, only once its drop_oldest dropped something.
            w.pop();
            let _ = writeln!(w, " dropped: {}", t.dropped_count);
        }
        for c in &t.channels {
            let prefix = if c.paused { "   *P " } else { "      " };
            let _ = writeln!(
                w,
                "{prefix}[{:<25}] depth: {:<5} be-depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8} e2e%: {}",
                c.channel_name,
                c.depth,
                c.backend_depth,
                c.in_flight_count,
                c.deferred_count,
                c.requeue_count,
                c.timeout_count,
                c.message_count,
                e2e_text(&c.e2e_processing_latency)
            );
            if c.expired_count > 0 {
                // Ours: on the channel's line, only once a TTL expired something.
                w.pop();
                let _ = writeln!(w, " expired: {}", c.expired_count);
            }
            if c.dead_lettered_count > 0 {
                w.pop();
                let _ = writeln!(w, " dead-lettered: {}", c.dead_lettered_count);
            }
            if c.dropped_count > 0 {
                w.pop();
                let _ = writeln!(w, " dropped: {}", c.dropped_count);
            }
            for cl in c.clients.as_deref().unwrap_or(&[]) {
                let _ = writeln!(w, "        {}", client_text(cl, now_s));
            }
        }
    }

    match s.producers.as_deref() {
        None | Some([]) => w.push_str("\nProducers: None\n"),
        Some(ps) => {
            w.push_str("\nProducers:\n");
            for p in ps {
                let _ = writeln!(w, "   {}", client_text(p, now_s));
            }
        }
    }
    if let Some(r) = &s.replication {
        let _ = writeln!(
            w,
            "\nReplication: node {} epoch {} replicas {} publish_waiting {} publish_failures {} fenced {}",
            r.node_id, r.epoch, r.replicas, r.publish_waiting, r.publish_failures, r.fenced
        );
        for p in &r.peers {
            let _ = writeln!(
                w,
                "   peer {} ({}) {}{}{} acked: {} lag: {}",
                p.address,
                p.node_id,
                p.state,
                if p.in_replica_set { " in-set" } else { "" },
                if p.catching_up { " catching-up" } else { "" },
                p.acked_seq,
                p.lag_frames
            );
        }
        for b in &r.backlogs {
            let _ = writeln!(
                w,
                "   backlog {}.{} {} msgs: {} bytes: {} seq: {} segments: {}",
                b.origin, b.epoch, b.state, b.messages, b.bytes, b.last_seq, b.segments
            );
        }
    }
    w
}

/// `quantile.Result.String()`: each value through `NanoSecondToHuman`, joined by `, `.
fn e2e_text(e: &E2eJson) -> String {
    let Some(ps) = &e.percentiles else {
        return String::new();
    };
    ps.iter()
        .map(|p| nanos_to_human(p.value))
        .collect::<Vec<_>>()
        .join(", ")
}

fn nanos_to_human(v: f64) -> String {
    let (v, suffix) = if v > 1e9 {
        (v / 1e9, "s")
    } else if v > 1e6 {
        (v / 1e6, "ms")
    } else if v > 1e3 {
        (v / 1e3, "us")
    } else {
        (v, "ns")
    };
    format!("{v:.1}{suffix}")
}

/// `ClientStats.String()`: the producer form when the (filtered) `pub_counts` is non-empty,
/// else the consumer form.
fn client_text(c: &ClientJson, now_s: i128) -> String {
    let connected = go_duration((now_s - i128::from(c.connect_ts)) * 1_000_000_000);
    let port = c
        .remote_address
        .rsplit_once(':')
        .map(|(_, p)| p)
        .unwrap_or("");
    let id = format!("{}:{} {}", c.hostname, port, c.user_agent);
    if !c.pub_counts.is_empty() {
        let total: u64 = c.pub_counts.iter().map(|p| p.count).sum();
        let topics: Vec<String> = c
            .pub_counts
            .iter()
            .map(|p| format!("{}={}", p.topic, p.count))
            .collect();
        return format!(
            "[{} {:<21}] msgs: {:<8} topics: {} connected: {}",
            c.version,
            id,
            total,
            topics.join(","),
            connected
        );
    }
    format!(
        "[{} {:<21}] state: {} inflt: {:<4} rdy: {:<4} fin: {:<8} re-q: {:<8} msgs: {:<8} connected: {}",
        c.version, id, c.state, c.in_flight_count, c.ready_count, c.finish_count, c.requeue_count, c.message_count, connected
    )
}

fn unix_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Go's `time.RFC3339` at second precision in `zone` (`Z` for a zero offset, as Go prints
/// it). `TimeZone::system()` finds the zone as Go's `time.Local` does on Linux: `$TZ`, else
/// `/etc/localtime`.
fn rfc3339(secs: i64, zone: &jiff::tz::TimeZone) -> String {
    let Ok(ts) = jiff::Timestamp::from_second(secs) else {
        return String::new();
    };
    let z = ts.to_zoned_datetime(zone.clone());
    let offset = z.offset().seconds();
    let dt = z.datetime();
    let zone = if offset == 0 {
        "Z".to_string()
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let a = offset.abs();
        format!("{sign}{:02}:{:02}", a / 3600, a % 3600 / 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{zone}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

/// `skip_serializing_if` for counters that are ours and absent while zero.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_nanos() {
        assert_eq!(nanos_to_human(307_376_716.0), "307.4ms");
        assert_eq!(nanos_to_human(0.0), "0.0ns");
        assert_eq!(nanos_to_human(2.5e9), "2.5s");
        assert_eq!(nanos_to_human(1500.0), "1.5us");
    }

    #[test]
    fn dates() {
        let fixed =
            |secs| jiff::tz::TimeZone::fixed(jiff::tz::Offset::from_seconds(secs).expect("offset"));
        assert_eq!(rfc3339(0, &fixed(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_949_307, &fixed(0)), "2026-11-29T10:48:27Z");
        assert_eq!(
            rfc3339(1_795_949_307, &fixed(3600)),
            "2026-11-29T11:48:27+01:00"
        );
        assert_eq!(
            rfc3339(0, &fixed(-5 * 3600 - 1800)),
            "1969-12-31T18:30:00-05:30"
        );
        // A named zone from the system's tzdata, when installed (Go's LoadLocation).
        if let Ok(tokyo) = jiff::tz::TimeZone::get("Asia/Tokyo") {
            assert_eq!(rfc3339(1_795_949_307, &tokyo), "2026-11-29T19:48:27+09:00");
        }
    }
}
