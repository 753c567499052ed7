//! The `/stats` snapshot of one client connection (nsqd/stats.go, `ClientV2Stats`), which a
//! channel's [`crate::Consumer`] reports (nsqd/channel.go, `Consumer.Stats`). The channel only
//! hands it through; nsqd fills it in and renders it.

use std::collections::BTreeMap;

/// What IDENTIFY (and later AUTH/TLS) tell us about the client; read by `/stats`.
#[derive(Debug, Clone, Default)]
pub struct ClientMeta {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub deflate: bool,
    pub snappy: bool,
    pub tls: bool,
    pub tls_version: String,
    pub tls_cipher_suite: String,
    /// Subject CN of the client certificate (sent to the auth server as `common_name`).
    pub tls_common_name: String,
    pub authed: bool,
    pub auth_identity: String,
    pub auth_identity_url: String,
}

/// A snapshot of one client for `/stats`.
#[derive(Debug, Clone, Default)]
pub struct ClientStats {
    pub meta: ClientMeta,
    pub remote_address: String,
    /// The connection state's number (nsqd/protocol_v2.go: 0 init, 3 subscribed, 4 closing).
    pub state: u8,
    pub ready_count: i64,
    pub in_flight_count: i64,
    pub message_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
    pub connect_ts: i64,
    pub sample_rate: i32,
    /// Messages published per topic by this connection (PUB/MPUB/DPUB).
    pub pub_counts: BTreeMap<String, u64>,
}
