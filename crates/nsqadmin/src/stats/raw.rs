//! What nsqd sends: the part of its `/stats?format=json` nsqadmin reads (nsq's
//! internal/clusterinfo/types.go), deserialized as it comes; `super` turns it into what
//! nsqadmin emits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The part of nsqd's `/stats?format=json` nsqadmin reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawStats {
    pub topics: Option<Vec<RawTopic>>,
    /// Only from an nsqd with replication on (ours; NSQ has no such key).
    pub replication: Option<Replication>,
}

/// An nsqd's `replication` key (ours, not NSQ's: docs/replication.md, Visibility), read as
/// nsqd writes it and re-emitted unchanged on `/api/nodes/:node`. Fields nsqd adds later
/// are not passed on until they are named here.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Replication {
    /// This node's replication ID (16 hex digits) and its current epoch.
    pub node_id: String,
    pub epoch: u64,
    /// `--replicas`.
    pub replicas: u64,
    pub peers: Vec<ReplicationPeer>,
    /// The replay of the node's backlogs at startup: `replaying`, `done` or `failed`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub replay: String,
    /// Whether the node's replication core fences its delivery of replicated messages
    /// (docs/replication.md, "Fencing"); absent from an nsqd that does not write it, and then
    /// not passed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fenced: Option<bool>,
    pub backlogs: Vec<ReplicaBacklog>,
    pub publish_waiting: u64,
    pub publish_failures: u64,
    pub takeovers: u64,
    pub taken_over_by_peers: u64,
}

/// One `--replication-peer` as the node (its origin) sees it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ReplicationPeer {
    pub address: String,
    pub node_id: String,
    /// `connected` or `disconnected`.
    pub state: String,
    pub in_replica_set: bool,
    pub catching_up: bool,
    pub acked_seq: u64,
    pub lag_frames: u64,
    /// Milliseconds since its last frame; `null` if it never answered.
    pub last_seen_ms: Option<u64>,
}

/// One backlog of another node's (an origin's) messages this node holds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ReplicaBacklog {
    pub origin: String,
    pub epoch: u64,
    pub state: String,
    pub messages: u64,
    pub bytes: u64,
    pub last_seq: u64,
    pub segments: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawTopic {
    pub topic_name: String,
    pub channels: Option<Vec<RawChannel>>,
    pub depth: i64,
    pub backend_depth: i64,
    pub message_count: i64,
    /// Ours: messages of the topic's own queue dropped by `overflow=drop_oldest` (nsqd writes
    /// it only when not 0).
    pub dropped_count: i64,
    pub paused: bool,
    pub e2e_processing_latency: RawE2e,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawChannel {
    pub channel_name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub message_count: i64,
    pub requeue_count: i64,
    pub timeout_count: i64,
    /// Ours (queue settings; nsqd writes them only when not 0).
    pub expired_count: i64,
    pub dead_lettered_count: i64,
    pub dropped_count: i64,
    pub client_count: i64,
    pub clients: Option<Vec<RawClient>>,
    pub paused: bool,
    pub e2e_processing_latency: RawE2e,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawClient {
    pub client_id: String,
    pub hostname: String,
    pub version: String,
    pub remote_address: String,
    pub ready_count: i64,
    pub in_flight_count: i64,
    pub message_count: i64,
    pub finish_count: i64,
    pub requeue_count: i64,
    pub connect_ts: i64,
    pub sample_rate: i64,
    pub deflate: bool,
    pub snappy: bool,
    pub user_agent: String,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawE2e {
    pub count: i64,
    pub percentiles: Option<Vec<BTreeMap<String, f64>>>,
}
