//! The replication settings (`--replicas`, `--replication-*`, the TLS files), from the options.

use std::time::Duration;

use nsq_core::replica::StoreOptions;

use crate::options::NsqdOptions;

/// The replication settings, from the options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--replicas`.
    pub replicas: usize,
    pub peers: Vec<String>,
    pub ack_timeout: Duration,
    pub store: StoreOptions,
    /// Acknowledge only what the replica synced (`--durable` or `--sync-every=1`).
    pub sync: bool,
    /// The largest link frame this node accepts.
    pub max_frame: u32,
    /// This node's `--node-id`, broadcast address and ports (HELLO).
    pub nsqd_node_id: u16,
    pub broadcast_address: String,
    pub tcp_port: u16,
    pub http_port: u16,
    /// `--replication-takeover-timeout`.
    pub takeover_timeout: Duration,
    /// At least one `--lookupd-tcp-address` is configured (the takeover then also needs the
    /// origin's absence from nsqlookupd).
    pub lookupds: bool,
    /// `--replication-secret-file` (empty: none).
    pub secret_file: String,
    /// `--tls-cert`, `--tls-key`, `--tls-root-ca-file`: links are TLS with a certificate.
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_root_ca_file: String,
}

impl Settings {
    pub fn from_options(o: &NsqdOptions) -> Settings {
        let max_frame = nsq_protocol::replication::MIN_MAX_FRAME
            .max(u32::try_from(o.max_body_size.max(0).saturating_mul(2)).unwrap_or(u32::MAX));
        Settings {
            replicas: o.replicas.max(1) as usize,
            peers: o.replication_peers.clone(),
            ack_timeout: o.replication_ack_timeout,
            store: StoreOptions {
                max_bytes: o.replication_max_backlog_bytes.max(1) as u64,
                segment_bytes: o.replication_segment_bytes.max(1),
            },
            sync: o.durable || o.sync_every == 1,
            max_frame,
            nsqd_node_id: o.node_id as u16,
            broadcast_address: o.broadcast_address.clone(),
            tcp_port: o.broadcast_tcp_port as u16,
            http_port: o.broadcast_http_port as u16,
            takeover_timeout: o.replication_takeover_timeout,
            lookupds: !o.lookupd_tcp_addresses.is_empty(),
            secret_file: o.replication_secret_file.clone(),
            tls_cert: o.tls_cert.clone(),
            tls_key: o.tls_key.clone(),
            tls_root_ca_file: o.tls_root_ca_file.clone(),
        }
    }
}
