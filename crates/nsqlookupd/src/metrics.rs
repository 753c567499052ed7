//! `GET /metrics`: the registration database in the Prometheus text exposition format
//! (nsqio/nsq #732): producers (IDENTIFYed nsqd), topics, channels and tombstones, counted with
//! the same liveness rules `/nodes` and `/lookup` apply, plus the standard `process_*`
//! families. docs/metrics.md lists every family.

use nsq_prometheus::process::ProcessStats;
use nsq_prometheus::{Exposition, Kind};

use crate::db::{now_nanos, Category};
use crate::nsqlookupd::Nsqlookupd;

/// Renders the whole exposition.
pub fn render(lookupd: &Nsqlookupd) -> String {
    let db = &lookupd.db;
    let now = now_nanos();
    let live = lookupd.opts.liveness();
    let nodes = db.nodes(now, live);
    let topics = db.topics();
    let channels = db.find_registrations(Category::Channel, "*", "*").len();
    let tombstones: usize = nodes
        .iter()
        .map(|n| n.tombstones.iter().filter(|t| **t).count())
        .sum();

    let mut e = Exposition::new();
    e.family(
        "nsq_lookupd_info",
        Kind::Gauge,
        "Always 1; the label carries the nsqlookupd version.",
    )
    .sample(
        "nsq_lookupd_info",
        &[("version", crate::options::VERSION)],
        1.0,
    );
    e.single(
        "nsq_lookupd_producers",
        Kind::Gauge,
        "Registered nsqd nodes that are active (seen within --inactive-producer-timeout), as /nodes lists them.",
        nodes.len() as f64,
    );
    e.single(
        "nsq_lookupd_topics",
        Kind::Gauge,
        "Topic registrations (/topics).",
        topics.len() as f64,
    );
    e.single(
        "nsq_lookupd_channels",
        Kind::Gauge,
        "Channel registrations over all topics.",
        channels as f64,
    );
    e.single(
        "nsq_lookupd_tombstones",
        Kind::Gauge,
        "Topic producers currently tombstoned (within --tombstone-lifetime), counted per (topic, node).",
        tombstones as f64,
    );
    let name = "nsq_lookupd_topic_producers";
    e.family(
        name,
        Kind::Gauge,
        "Active, non-tombstoned producers of the topic, as /lookup returns them.",
    );
    for t in &topics {
        if let Some((_, producers)) = db.lookup(t, now, live) {
            e.sample(name, &[("topic", t)], producers.len() as f64);
        }
    }
    ProcessStats::read().write(&mut e);
    e.finish()
}

/// The `/metrics` response.
pub fn response(lookupd: &Nsqlookupd) -> axum::response::Response {
    use nsq_http::reply::{raw, set};
    let mut r = raw(axum::http::StatusCode::OK, render(lookupd));
    set(
        &mut r,
        axum::http::header::CONTENT_TYPE,
        nsq_prometheus::CONTENT_TYPE,
    );
    r
}
