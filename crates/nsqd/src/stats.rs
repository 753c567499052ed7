//! One stats snapshot of a running nsqd (nsqd/stats.go, `GetStats`, and nsqd/http.go,
//! `getMemStats`), taken once per request or push and rendered by each consumer: `/stats` JSON
//! and text (`http/stats.rs`), the statsd pusher (`statsd.rs`), and any later exporter. Every
//! number is read here and only here: topic/channel counters and depths, end-to-end latency
//! quantiles (per channel, and merged over a topic's channels), the connected clients, and the
//! process memory.
//!
//! Topics come sorted by name, and so do each topic's channels (as `GetStats` sorts them).

use std::sync::Arc;

use nsq_core::e2e::{quantiles, E2eSnapshot};
use nsq_core::{Channel, Engine};

use crate::client::{Client, ClientStats};
use crate::nsqd::Nsqd;

/// What to include (the `/stats` query parameters; statsd takes everything but clients).
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    /// `""` = every topic.
    pub topic: &'a str,
    /// `""` = every channel.
    pub channel: &'a str,
    /// Per-channel consumers and the producers.
    pub include_clients: bool,
    /// Process memory.
    pub include_mem: bool,
}

/// One snapshot.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `OK` or `NOK - <error>`.
    pub health: String,
    /// Unix seconds at startup.
    pub start_time: i64,
    /// The configured `--e2e-processing-latency-percentile`s, in order; the `e2e` values of
    /// topics and channels correspond to them.
    pub percentiles: Vec<f64>,
    /// `false` when the topic filter names an unknown topic (the reference then returns its
    /// zero `Stats`: no topics and no producers).
    pub topic_found: bool,
    pub topics: Vec<TopicSnapshot>,
    /// Connections that published, sorted by connection id (with `include_clients`).
    pub producers: Vec<ClientStats>,
    /// With `include_mem`.
    pub memory: Option<MemStats>,
    /// Drain mode (crate::drain).
    pub draining: bool,
}

#[derive(Debug, Clone, Default)]
pub struct TopicSnapshot {
    pub name: String,
    pub message_count: u64,
    pub message_bytes: u64,
    pub depth: i64,
    pub backend_depth: i64,
    pub paused: bool,
    /// Ours: messages of the topic's own queue dropped by `overflow=drop_oldest`.
    pub dropped_count: u64,
    /// Latency values (ns) in the order of the configured percentiles, merged over all
    /// channels (whatever the channel filter); empty when the topic has no channels or no
    /// percentiles are configured.
    pub e2e: Vec<f64>,
    /// Samples behind [`TopicSnapshot::e2e`]; `None` when latency is not tracked (rendered
    /// `"percentiles": null`).
    pub e2e_count: Option<u64>,
    pub channels: Vec<ChannelSnapshot>,
}

#[derive(Debug, Clone, Default)]
pub struct ChannelSnapshot {
    pub name: String,
    pub message_count: u64,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: u64,
    pub deferred_count: u64,
    pub requeue_count: u64,
    pub timeout_count: u64,
    /// Ours: messages dropped as older than the channel's TTL (crate::queue_settings).
    pub expired_count: u64,
    /// Ours: messages dropped at the channel's max attempts.
    pub dead_lettered_count: u64,
    /// Ours: queued messages dropped by `overflow=drop_oldest`.
    pub dropped_count: u64,
    pub paused: bool,
    /// Connected consumers.
    pub clients: u64,
    /// The consumers' own stats (with `include_clients`).
    pub client_stats: Vec<ClientStats>,
    /// Latency values (ns) in the order of the configured percentiles; empty when none are
    /// configured.
    pub e2e: Vec<f64>,
    /// Samples behind [`ChannelSnapshot::e2e`]; `None` when latency is not tracked.
    pub e2e_count: Option<u64>,
}

/// The `mem.*` values. Go reports its runtime's heap and GC statistics; we have no GC, so
/// [`MemStats::current`] fills in the resident set size as `heap_in_use_bytes` and leaves the
/// rest 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    pub heap_objects: u64,
    pub heap_idle_bytes: u64,
    pub heap_in_use_bytes: u64,
    pub heap_released_bytes: u64,
    pub gc_pause_usec_100: u64,
    pub gc_pause_usec_99: u64,
    pub gc_pause_usec_95: u64,
    pub next_gc_bytes: u64,
    /// GC runs (since the previous push, for statsd's `mem.gc_runs` counter).
    pub gc_runs: u64,
}

impl MemStats {
    /// The resident set size (`VmRSS` of /proc/self/status) as `heap_in_use_bytes`.
    pub fn current() -> MemStats {
        let rss = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024);
        MemStats {
            heap_in_use_bytes: rss,
            ..MemStats::default()
        }
    }
}

impl Snapshot {
    /// Everything of a running daemon that `filter` asks for.
    pub fn take(nsqd: &Nsqd, filter: &Filter<'_>) -> Snapshot {
        let mut s = Snapshot::of_engine(&nsqd.engine, filter);
        s.health = nsqd.health();
        s.start_time = nsqd.start_time;
        s.draining = nsqd.drain.is_draining();
        if filter.include_clients && s.topic_found {
            let mut producers: Vec<Arc<Client>> = nsqd
                .clients()
                .into_iter()
                .filter(|c| c.is_producer())
                .collect();
            producers.sort_by_key(|c| c.id);
            s.producers = producers.iter().map(|c| c.stats()).collect();
        }
        s
    }

    /// The topics and channels of `engine` (no daemon-level fields, no producers).
    pub fn of_engine(engine: &Engine, filter: &Filter<'_>) -> Snapshot {
        let percentiles = engine.options().e2e_percentiles.clone();
        let mut s = Snapshot {
            memory: filter.include_mem.then(MemStats::current),
            ..Snapshot::default()
        };
        let topics = if filter.topic.is_empty() {
            engine.topics()
        } else {
            match engine.get_topic(filter.topic) {
                Some(t) => vec![t],
                None => {
                    s.percentiles = percentiles;
                    return s;
                }
            }
        };
        s.topic_found = true;
        for t in topics {
            let ts = t.stats();
            let mut channels = ts.channels;
            channels.sort_by(|a, b| a.name().cmp(b.name()));
            let selected: Vec<&Arc<Channel>> = if filter.channel.is_empty() {
                channels.iter().collect()
            } else {
                match channels.iter().find(|c| c.name() == filter.channel) {
                    Some(c) => vec![c],
                    None => continue,
                }
            };
            let (e2e, e2e_count) = topic_e2e(&channels, &percentiles);
            s.topics.push(TopicSnapshot {
                name: ts.name,
                message_count: ts.message_count,
                message_bytes: ts.message_bytes,
                depth: ts.depth,
                backend_depth: ts.backend_depth,
                paused: ts.paused,
                dropped_count: ts.dropped_count,
                e2e,
                e2e_count,
                channels: selected
                    .into_iter()
                    .map(|c| channel_snapshot(c, filter.include_clients))
                    .collect(),
            });
        }
        s.percentiles = percentiles;
        s
    }
}

fn channel_snapshot(c: &Channel, include_clients: bool) -> ChannelSnapshot {
    let cs = c.stats();
    let client_stats = if include_clients {
        cs.consumers.iter().map(|cons| cons.stats()).collect()
    } else {
        Vec::new()
    };
    let (e2e, e2e_count) = values(c.e2e().snapshot());
    ChannelSnapshot {
        name: cs.name,
        message_count: cs.message_count,
        depth: cs.depth,
        backend_depth: cs.backend_depth,
        in_flight_count: cs.in_flight_count as u64,
        deferred_count: cs.deferred_count as u64,
        requeue_count: cs.requeue_count,
        timeout_count: cs.timeout_count,
        expired_count: cs.expired_count,
        dead_lettered_count: cs.dead_lettered_count,
        dropped_count: cs.dropped_count,
        paused: cs.paused,
        clients: cs.consumers.len() as u64,
        client_stats,
        e2e,
        e2e_count,
    }
}

fn values(s: Option<E2eSnapshot>) -> (Vec<f64>, Option<u64>) {
    match s {
        None => (Vec::new(), None),
        Some(s) => (
            s.percentiles.into_iter().map(|(_, v)| v).collect(),
            Some(s.count),
        ),
    }
}

/// A topic's latency: every channel's samples merged; nothing without channels that track
/// latency or without configured percentiles.
fn topic_e2e(channels: &[Arc<Channel>], percentiles: &[f64]) -> (Vec<f64>, Option<u64>) {
    let enabled: Vec<&Arc<Channel>> = channels.iter().filter(|c| c.e2e().enabled()).collect();
    if enabled.is_empty() || percentiles.is_empty() {
        return (Vec::new(), None);
    }
    let mut samples = Vec::new();
    let count = enabled.iter().map(|c| c.e2e().collect(&mut samples)).sum();
    values(Some(quantiles(percentiles, count, samples)))
}
