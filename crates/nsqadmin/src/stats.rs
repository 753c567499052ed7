//! nsqd `/stats` as nsqadmin re-emits it (nsq's internal/clusterinfo/types.go and data.go, `GetNSQDStats`): the raw shapes read from
//! nsqd, the per-node topic/channel/client objects with `node`, `hostname` and `memory_depth`
//! added, and the cross-node aggregates (`node:"*"`).
//!
//! Differences from the reference, on purpose (its [ref-defect]s): an aggregate channel is a
//! fresh object, so per-node entries (`nodes[i].channels`) keep their own numbers; the
//! aggregate latency `min` is the minimum of the per-node minima (the reference derives it from
//! the maxima). A channel present on a single node is shown as that node's object, exactly as
//! the reference shows it.

use std::collections::BTreeMap;

use serde::Serialize;

/// One e2e percentile map (`quantile`, `value`, `min`, `max`, `average`, `count`); a sorted
/// map so the keys come out in Go's order.
pub type Percentile = BTreeMap<String, f64>;

mod raw;

pub use raw::*;

// ---- what nsqadmin emits --------------------------------------------------------------------

/// The latency object (internal/quantile, `E2eProcessingLatencyAggregate`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct E2e {
    pub count: i64,
    pub percentiles: Option<Vec<Percentile>>,
    pub topic: String,
    pub channel: String,
    pub host: String,
}

impl E2e {
    /// A node's object: every percentile gets `min = max = average = value`, `count`.
    fn from_raw(r: RawE2e) -> E2e {
        let count = r.count;
        let percentiles = r.percentiles.map(|ps| {
            ps.into_iter()
                .map(|mut p| {
                    let v = p.get("value").copied().unwrap_or(0.0);
                    p.insert("min".into(), v);
                    p.insert("max".into(), v);
                    p.insert("average".into(), v);
                    p.insert("count".into(), count as f64);
                    p
                })
                .collect()
        });
        E2e {
            count,
            percentiles,
            ..E2e::default()
        }
    }

    /// Merges `other` into this aggregate (`host:"*"`): percentiles matched by quantile,
    /// `max` of maxima, `min` of minima, counts summed, `average` count-weighted.
    fn add(&mut self, other: &E2e) {
        self.host = "*".to_string();
        self.count += other.count;
        for value in other.percentiles.iter().flatten() {
            let get = |k: &str| value.get(k).copied().unwrap_or(0.0);
            let q = get("quantile");
            let ps = self.percentiles.get_or_insert_with(Vec::new);
            let (p, fresh) = match ps.iter().position(|p| p.get("quantile") == Some(&q)) {
                Some(i) => (&mut ps[i], false),
                None => {
                    let mut m = Percentile::new();
                    m.insert("quantile".into(), q);
                    ps.push(m);
                    let last = ps.len() - 1;
                    (&mut ps[last], true)
                }
            };
            let cur = |p: &Percentile, k: &str| p.get(k).copied().unwrap_or(0.0);
            let (max, min) = if fresh {
                (get("max"), get("min"))
            } else {
                (cur(p, "max").max(get("max")), cur(p, "min").min(get("min")))
            };
            p.insert("max".into(), max);
            p.insert("min".into(), min);
            let count = cur(p, "count") + get("count");
            p.insert("count".into(), count);
            if count == 0.0 {
                p.insert("average".into(), 0.0);
                continue;
            }
            let avg = cur(p, "average");
            let delta = get("average") - avg;
            p.insert("average".into(), avg + delta * get("count") / count);
        }
    }
}

/// A client of a channel, as re-emitted (clusterinfo/types.go, `ClientStats`; fields in the reference's order).
#[derive(Debug, Clone, Serialize)]
pub struct ClientStats {
    pub node: String,
    pub remote_address: String,
    pub version: String,
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub connect_ts: i64,
    /// Nanoseconds since `connect_ts`, from a whole-second "now".
    pub connected: i64,
    pub in_flight_count: i64,
    pub ready_count: i64,
    pub finish_count: i64,
    pub requeue_count: i64,
    pub message_count: i64,
    pub sample_rate: i64,
    pub deflate: bool,
    pub snappy: bool,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The queue-settings counters of a channel (ours; nsqd's `/stats` has them per channel, only
/// when not 0): summed over nodes, and over a topic's channels for the topic. Written only
/// when not 0, so without queue settings the JSON is NSQ's.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct QueueCounters {
    /// Messages dropped or dead-lettered as older than their TTL.
    #[serde(skip_serializing_if = "is_zero")]
    pub expired_count: i64,
    /// Messages dead-lettered (or dropped) at their channel's max attempts.
    #[serde(skip_serializing_if = "is_zero")]
    pub dead_lettered_count: i64,
    /// Queued messages dropped by `overflow=drop_oldest`.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_count: i64,
}

impl QueueCounters {
    fn add(&mut self, o: &QueueCounters) {
        self.expired_count += o.expired_count;
        self.dead_lettered_count += o.dead_lettered_count;
        self.dropped_count += o.dropped_count;
    }
}

/// A channel on one node, or aggregated over nodes (`node:"*"`).
#[derive(Debug, Clone, Serialize)]
pub struct ChannelStats {
    pub node: String,
    pub hostname: String,
    pub topic_name: String,
    pub channel_name: String,
    pub depth: i64,
    pub memory_depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub requeue_count: i64,
    pub timeout_count: i64,
    #[serde(flatten)]
    pub queue_counters: QueueCounters,
    pub message_count: i64,
    pub client_count: i64,
    pub nodes: Option<Vec<ChannelStats>>,
    pub clients: Option<Vec<ClientStats>>,
    pub paused: bool,
    pub e2e_processing_latency: E2e,
}

/// A topic on one node, or aggregated over nodes (`node:"*"`).
#[derive(Debug, Clone, Serialize)]
pub struct TopicStats {
    pub node: String,
    pub hostname: String,
    pub topic_name: String,
    pub depth: i64,
    pub memory_depth: i64,
    pub backend_depth: i64,
    pub message_count: i64,
    /// Its channels' queue-settings counters summed (ours; absent when 0).
    #[serde(flatten)]
    pub queue_counters: QueueCounters,
    /// The topic's own `dropped_count` (its queue, not its channels'), summed over nodes. Not
    /// in the JSON (whose `dropped_count` is the channels' sum); the history charts add it.
    #[serde(skip)]
    pub own_dropped_count: i64,
    pub nodes: Option<Vec<TopicStats>>,
    pub channels: Option<Vec<ChannelStats>>,
    pub paused: bool,
    pub e2e_processing_latency: E2e,
}

impl ChannelStats {
    fn from_raw(r: RawChannel, topic: &str, node: &str, hostname: &str, now: i64) -> Self {
        ChannelStats {
            node: node.to_string(),
            hostname: hostname.to_string(),
            topic_name: topic.to_string(),
            channel_name: r.channel_name,
            depth: r.depth,
            memory_depth: r.depth - r.backend_depth,
            backend_depth: r.backend_depth,
            in_flight_count: r.in_flight_count,
            deferred_count: r.deferred_count,
            requeue_count: r.requeue_count,
            timeout_count: r.timeout_count,
            queue_counters: QueueCounters {
                expired_count: r.expired_count,
                dead_lettered_count: r.dead_lettered_count,
                dropped_count: r.dropped_count,
            },
            message_count: r.message_count,
            client_count: r.client_count,
            nodes: None,
            clients: r.clients.map(|cs| {
                cs.into_iter()
                    .map(|c| ClientStats::from_raw(c, node, now))
                    .collect()
            }),
            paused: r.paused,
            e2e_processing_latency: E2e::from_raw(r.e2e_processing_latency),
        }
    }

    /// An empty aggregate for `topic`/`channel`.
    fn aggregate(topic: &str, channel: &str) -> Self {
        ChannelStats {
            node: "*".to_string(),
            hostname: String::new(),
            topic_name: topic.to_string(),
            channel_name: channel.to_string(),
            depth: 0,
            memory_depth: 0,
            backend_depth: 0,
            in_flight_count: 0,
            deferred_count: 0,
            requeue_count: 0,
            timeout_count: 0,
            queue_counters: QueueCounters::default(),
            message_count: 0,
            client_count: 0,
            nodes: None,
            clients: None,
            paused: false,
            e2e_processing_latency: E2e::default(),
        }
    }

    /// Adds one node's channel into this aggregate.
    fn add(&mut self, a: &ChannelStats) {
        self.node = "*".to_string();
        self.depth += a.depth;
        self.memory_depth += a.memory_depth;
        self.backend_depth += a.backend_depth;
        self.in_flight_count += a.in_flight_count;
        self.deferred_count += a.deferred_count;
        self.requeue_count += a.requeue_count;
        self.timeout_count += a.timeout_count;
        self.queue_counters.add(&a.queue_counters);
        self.message_count += a.message_count;
        self.client_count += a.client_count;
        self.paused |= a.paused;
        let nodes = self.nodes.get_or_insert_with(Vec::new);
        nodes.push(a.clone());
        nodes.sort_by(|x, y| x.hostname.cmp(&y.hostname));
        self.e2e_processing_latency.add(&a.e2e_processing_latency);
        self.e2e_processing_latency.topic = self.topic_name.clone();
        self.e2e_processing_latency.channel = self.channel_name.clone();
        if let Some(cs) = &a.clients {
            if !cs.is_empty() {
                let all = self.clients.get_or_insert_with(Vec::new);
                all.extend(cs.iter().cloned());
                all.sort_by(|x, y| x.hostname.cmp(&y.hostname));
            }
        }
    }
}

impl ClientStats {
    fn from_raw(c: RawClient, node: &str, now: i64) -> Self {
        ClientStats {
            node: node.to_string(),
            remote_address: c.remote_address,
            version: c.version,
            client_id: c.client_id,
            hostname: c.hostname,
            user_agent: c.user_agent,
            connect_ts: c.connect_ts,
            connected: (now - c.connect_ts).saturating_mul(1_000_000_000),
            in_flight_count: c.in_flight_count,
            ready_count: c.ready_count,
            finish_count: c.finish_count,
            requeue_count: c.requeue_count,
            message_count: c.message_count,
            sample_rate: c.sample_rate,
            deflate: c.deflate,
            snappy: c.snappy,
            authed: c.authed,
            auth_identity: c.auth_identity,
            auth_identity_url: c.auth_identity_url,
            tls: c.tls,
            tls_cipher_suite: c.tls_cipher_suite,
            tls_version: c.tls_version,
            tls_negotiated_protocol: c.tls_negotiated_protocol,
            tls_negotiated_protocol_is_mutual: c.tls_negotiated_protocol_is_mutual,
        }
    }
}

impl TopicStats {
    fn from_raw(r: RawTopic, node: &str, hostname: &str, now: i64) -> Self {
        let topic = r.topic_name;
        let channels: Option<Vec<ChannelStats>> = r.channels.map(|cs| {
            cs.into_iter()
                .map(|c| ChannelStats::from_raw(c, &topic, node, hostname, now))
                .collect()
        });
        let mut queue_counters = QueueCounters::default();
        for c in channels.iter().flatten() {
            queue_counters.add(&c.queue_counters);
        }
        TopicStats {
            node: node.to_string(),
            hostname: hostname.to_string(),
            depth: r.depth,
            memory_depth: r.depth - r.backend_depth,
            backend_depth: r.backend_depth,
            message_count: r.message_count,
            queue_counters,
            own_dropped_count: r.dropped_count,
            nodes: None,
            channels,
            paused: r.paused,
            e2e_processing_latency: E2e::from_raw(r.e2e_processing_latency),
            topic_name: topic,
        }
    }

    /// The aggregate over per-node topic stats (the `/api/topics/:topic` answer).
    pub fn aggregate(topic: &str, per_node: &[TopicStats]) -> TopicStats {
        let mut t = TopicStats {
            node: if per_node.is_empty() { "" } else { "*" }.to_string(),
            hostname: String::new(),
            topic_name: topic.to_string(),
            depth: 0,
            memory_depth: 0,
            backend_depth: 0,
            message_count: 0,
            queue_counters: QueueCounters::default(),
            own_dropped_count: 0,
            nodes: None,
            channels: None,
            paused: false,
            e2e_processing_latency: E2e::default(),
        };
        // Channel name → (first node's object, every node's object).
        let mut groups: Vec<(String, Vec<&ChannelStats>)> = Vec::new();
        for a in per_node {
            t.depth += a.depth;
            t.memory_depth += a.memory_depth;
            t.backend_depth += a.backend_depth;
            t.message_count += a.message_count;
            t.queue_counters.add(&a.queue_counters);
            t.own_dropped_count += a.own_dropped_count;
            t.paused |= a.paused;
            t.e2e_processing_latency.add(&a.e2e_processing_latency);
            t.e2e_processing_latency.topic = topic.to_string();
            for c in a.channels.iter().flatten() {
                match groups.iter_mut().find(|(n, _)| *n == c.channel_name) {
                    Some((_, v)) => v.push(c),
                    None => groups.push((c.channel_name.clone(), vec![c])),
                }
            }
        }
        let mut nodes = per_node.to_vec();
        nodes.sort_by(|x, y| x.hostname.cmp(&y.hostname));
        t.nodes = (!nodes.is_empty()).then_some(nodes);
        if !groups.is_empty() {
            t.channels = Some(
                groups
                    .into_iter()
                    .map(|(name, v)| {
                        if v.len() == 1 {
                            return v[0].clone();
                        }
                        let mut agg = ChannelStats::aggregate(topic, &name);
                        for c in v {
                            agg.add(c);
                        }
                        agg
                    })
                    .collect(),
            );
        }
        t
    }
}

/// The result of a stats fan-out (the reference's `GetNSQDStats`).
#[derive(Debug, Default, Clone)]
pub struct ClusterStats {
    /// Per-node topic stats, sorted by hostname (stable).
    pub topics: Vec<TopicStats>,
    /// Channel aggregates keyed by channel name (a topic was selected) or `topic:channel`,
    /// in order of first appearance.
    pub channels: Vec<(String, ChannelStats)>,
    /// The `replication` key of each node that has one, by node (`host:http_port`).
    pub replication: Vec<(String, Replication)>,
}

impl ClusterStats {
    /// Folds one node's answer in. `node` is `host:http_port`.
    pub fn add_node(
        &mut self,
        raw: RawStats,
        node: &str,
        hostname: &str,
        selected_topic: Option<&str>,
        now: i64,
    ) {
        if let Some(r) = raw.replication {
            self.replication.push((node.to_string(), r));
        }
        for rt in raw.topics.unwrap_or_default() {
            if selected_topic.is_some_and(|t| t != rt.topic_name) {
                continue;
            }
            let ts = TopicStats::from_raw(rt, node, hostname, now);
            for c in ts.channels.iter().flatten() {
                let key = match selected_topic {
                    Some(_) => c.channel_name.clone(),
                    None => format!("{}:{}", ts.topic_name, c.channel_name),
                };
                let idx = match self.channels.iter().position(|(k, _)| *k == key) {
                    Some(i) => i,
                    None => {
                        self.channels.push((
                            key,
                            ChannelStats::aggregate(&ts.topic_name, &c.channel_name),
                        ));
                        self.channels.len() - 1
                    }
                };
                self.channels[idx].1.add(c);
            }
            self.topics.push(ts);
        }
    }

    /// Sorts the per-node topics by hostname (call after the last node).
    pub fn finish(&mut self) {
        self.topics.sort_by(|x, y| x.hostname.cmp(&y.hostname));
    }

    /// `node`'s `replication` key, if it sent one.
    pub fn replication(&self, node: &str) -> Option<&Replication> {
        self.replication
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, r)| r)
    }

    pub fn channel(&self, key: &str) -> Option<&ChannelStats> {
        self.channels.iter().find(|(k, _)| k == key).map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> RawStats {
        serde_json::from_str(json).unwrap()
    }

    const NODE_A: &str = r#"{"topics":[{"topic_name":"t","channels":[
        {"channel_name":"c","depth":3,"backend_depth":1,"in_flight_count":1,"message_count":5,
         "client_count":1,"clients":[{"hostname":"zz","connect_ts":100}],"paused":true,
         "e2e_processing_latency":{"count":2,"percentiles":[{"quantile":0.99,"value":10}]}}],
        "depth":2,"backend_depth":0,"message_count":5,"paused":false,
        "e2e_processing_latency":{"count":2,"percentiles":[{"quantile":0.99,"value":10}]}}]}"#;
    const NODE_B: &str = r#"{"topics":[{"topic_name":"t","channels":[
        {"channel_name":"c","depth":1,"backend_depth":0,"message_count":7,"client_count":1,
         "clients":[{"hostname":"aa","connect_ts":100}],
         "e2e_processing_latency":{"count":6,"percentiles":[{"quantile":0.99,"value":30}]}},
        {"channel_name":"d","depth":4,"clients":[]}],
        "depth":1,"backend_depth":0,"message_count":7,"paused":true,
        "e2e_processing_latency":{"count":6,"percentiles":[{"quantile":0.99,"value":30}]}}]}"#;

    #[test]
    fn per_node_and_channel_aggregates() {
        let mut cs = ClusterStats::default();
        cs.add_node(raw(NODE_A), "a:1", "ha", Some("t"), 101);
        cs.add_node(raw(NODE_B), "b:1", "hb", Some("t"), 101);
        cs.finish();
        assert_eq!(cs.topics.len(), 2);
        let c = cs.channel("c").unwrap();
        assert_eq!((c.node.as_str(), c.depth, c.memory_depth), ("*", 4, 3));
        assert_eq!((c.message_count, c.client_count, c.paused), (12, 2, true));
        let hosts: Vec<_> = c
            .clients
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.hostname.as_str())
            .collect();
        assert_eq!(hosts, ["aa", "zz"]);
        assert_eq!(c.clients.as_ref().unwrap()[0].connected, 1_000_000_000);
        assert_eq!(c.nodes.as_ref().unwrap().len(), 2);
        let p = &c.e2e_processing_latency.percentiles.as_ref().unwrap()[0];
        assert_eq!(
            p["min"], 10.0,
            "min is the minimum, not derived from the max"
        );
        assert_eq!(p["max"], 30.0);
        assert_eq!(p["count"], 8.0);
        assert_eq!(p["average"], 25.0);
        assert!(!p.contains_key("value"));
        assert_eq!(c.e2e_processing_latency.host, "*");
        assert_eq!(c.e2e_processing_latency.channel, "c");
    }

    #[test]
    fn topic_aggregate_keeps_node_objects() {
        let mut cs = ClusterStats::default();
        cs.add_node(raw(NODE_A), "a:1", "ha", Some("t"), 101);
        cs.add_node(raw(NODE_B), "b:1", "hb", Some("t"), 101);
        let t = TopicStats::aggregate("t", &cs.topics);
        assert_eq!((t.depth, t.message_count, t.paused), (3, 12, true));
        let chans = t.channels.as_ref().unwrap();
        assert_eq!(chans.len(), 2);
        assert_eq!((chans[0].node.as_str(), chans[0].depth), ("*", 4));
        assert_eq!((chans[1].node.as_str(), chans[1].depth), ("b:1", 4));
        // Per-node entries are untouched by the aggregation.
        let n0 = &t.nodes.as_ref().unwrap()[0];
        assert_eq!(n0.channels.as_ref().unwrap()[0].depth, 3);
        assert_eq!(t.e2e_processing_latency.topic, "t");
        let json = String::from_utf8(crate::json::to_vec(&t.e2e_processing_latency)).unwrap();
        assert_eq!(
            json,
            r#"{"count":8,"percentiles":[{"average":25,"count":8,"max":30,"min":10,"quantile":0.99}],"topic":"t","channel":"","host":"*"}"#
        );
    }

    /// A node's `replication` key goes through as nsqd wrote it; a node without one has none.
    #[test]
    fn replication_key_per_node() {
        let with = r#"{"topics":[],"replication":{"node_id":"6d1f0c33a9e2b774","epoch":3,
            "replicas":2,"peers":[{"address":"10.0.0.6:4150","node_id":"00000000000000aa",
            "state":"connected","in_replica_set":true,"catching_up":false,"acked_seq":81234,
            "lag_frames":12,"last_seen_ms":120}],"replay":"done","fenced":false,"backlogs":[{"origin":"00000000000000aa",
            "epoch":7,"state":"replicating","messages":5321,"bytes":1843200,"last_seq":90211,
            "segments":1}],"publish_waiting":1,"publish_failures":2,"takeovers":0,
            "taken_over_by_peers":0}}"#;
        let mut cs = ClusterStats::default();
        cs.add_node(raw(with), "a:1", "ha", None, 101);
        cs.add_node(raw(NODE_B), "b:1", "hb", None, 101);
        assert!(cs.replication("b:1").is_none());
        let r = cs.replication("a:1").unwrap();
        let json = String::from_utf8(crate::json::to_vec(r)).unwrap();
        assert!(
            json.starts_with(r#"{"node_id":"6d1f0c33a9e2b774","epoch":3,"replicas":2,"peers":[{"address":"10.0.0.6:4150","#),
            "nsqd's field order: {json}"
        );
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        let sent: serde_json::Value = serde_json::from_str(with).unwrap();
        assert_eq!(back, sent["replication"]);
    }

    /// The queue-settings counters (ours) are summed over nodes and, for a topic, over its
    /// channels; written only when not 0, so without them the JSON is NSQ's.
    #[test]
    fn queue_counters_summed_and_absent_when_zero() {
        let a = r#"{"topics":[{"topic_name":"t","channels":[
            {"channel_name":"c","expired_count":2,"dead_lettered_count":1},
            {"channel_name":"d","dropped_count":4}]}]}"#;
        let b = r#"{"topics":[{"topic_name":"t","channels":[
            {"channel_name":"c","expired_count":3},{"channel_name":"e"}]}]}"#;
        let mut cs = ClusterStats::default();
        cs.add_node(raw(a), "a:1", "ha", Some("t"), 101);
        cs.add_node(raw(b), "b:1", "hb", Some("t"), 101);
        let c = cs.channel("c").unwrap();
        let want = QueueCounters {
            expired_count: 5,
            dead_lettered_count: 1,
            dropped_count: 0,
        };
        assert_eq!(c.queue_counters, want);
        let json = String::from_utf8(crate::json::to_vec(c)).unwrap();
        assert!(
            json.contains(
                r#""timeout_count":0,"expired_count":5,"dead_lettered_count":1,"message_count":0"#
            ),
            "{json}"
        );
        let t = TopicStats::aggregate("t", &cs.topics);
        assert_eq!(
            (
                t.queue_counters.expired_count,
                t.queue_counters.dropped_count
            ),
            (5, 4)
        );
        let e = cs.channel("e").unwrap();
        let json = String::from_utf8(crate::json::to_vec(e)).unwrap();
        assert!(
            json.contains(r#""timeout_count":0,"message_count":0"#),
            "{json}"
        );
        assert!(
            !json.contains("expired") && !json.contains("dropped"),
            "{json}"
        );
    }

    #[test]
    fn node_percentile_shape() {
        let e = E2e::from_raw(RawE2e {
            count: 20,
            percentiles: Some(vec![[
                ("quantile".to_string(), 0.5),
                ("value".to_string(), 165389588.0),
            ]
            .into_iter()
            .collect()]),
        });
        let json = String::from_utf8(crate::json::to_vec(&e)).unwrap();
        assert_eq!(
            json,
            r#"{"count":20,"percentiles":[{"average":165389588,"count":20,"max":165389588,"min":165389588,"quantile":0.5,"value":165389588}],"topic":"","channel":"","host":""}"#
        );
    }
}
