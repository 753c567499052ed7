//! nsqd's options: every flag of the reference nsqd v1.3.0 with its default and usage line
//! (declared once as a [`FlagSet`], which gives the Go `flag` parsing, the `-h` text and the
//! TOML `--config` resolution; see `nsq_go::flag`), nsqd's own flag types (`--tls-required`,
//! `--tls-min-version`, `--sigterm`), startup validation, and the `/config/<key>` JSON view of each option.
//! The reference's counterparts are nsqd/options.go (`NewOptions`) and apps/nsqd/options.go
//! (`nsqdFlagSet`).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use nsq_go::flag::{self, FlagSet};
use nsq_go::quote::go_quote;
use nsq_go::strconv::format_float;
use serde_json::Value;

pub use nsq_go::flag::FlagError;
pub use nsq_go::os::hostname;
pub use nsq_go::LogLevel;
pub use types::{BadSigtermMode, SigtermMode, TlsRequired, TlsVersion};

mod types;

/// The version nsqd reports (`-version`, `/info`, `/stats`).
pub const VERSION: &str = nsq_http::version::VERSION;

/// `nsqd v1.3.0 (built w/rustc1.95.0)`.
pub fn version_string() -> String {
    nsq_http::version::version_string("nsqd")
}

/// An option value nsqd refuses; `Display` is the reference's text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    #[error("--max-deflate-level must be [1,9]")]
    MaxDeflateLevel,
    #[error("--node-id must be [0,1024)")]
    NodeId,
    #[error("cannot require TLS client connections without TLS key and cert")]
    TlsWithoutCert,
    #[error("invalid E2E processing latency percentile: {}", format_float(*.0))]
    E2ePercentile(f64),
    /// `--tls-required` that is neither `tcp-https` nor a Go bool (lower-cased value).
    #[error("strconv.ParseBool: parsing {}: invalid syntax", go_quote(.0.as_bytes()))]
    TlsRequired(String),
    /// `--tls-min-version` naming no version (lower-cased value).
    #[error("unknown tlsVersionOption {}", go_quote(.0.as_bytes()))]
    TlsVersion(String),
    /// `--replicas` below 1 (docs/replication.md, Flags).
    #[error("--replicas must be >= 1 (got {0})")]
    Replicas(i64),
    /// `--replicas=N` with fewer than N-1 `--replication-peer`.
    #[error("--replicas={0} needs at least {1} --replication-peer")]
    ReplicasPeers(i64, i64),
    /// A `--replication-peer` that is not `host:port`.
    #[error("--replication-peer must be host:port (got {})", go_quote(.0.as_bytes()))]
    ReplicationPeer(String),
    #[error("--replication-takeover-timeout must be > 0")]
    TakeoverTimeout,
    #[error("--replication-ack-timeout must be > 0")]
    AckTimeout,
    #[error("--replication-max-backlog-bytes must be > 0")]
    MaxBacklogBytes,
    #[error("--max-queue-depth must be >= 0")]
    MaxQueueDepth,
    #[error("--max-queue-bytes must be >= 0")]
    MaxQueueBytes,
    #[error("--max-attempts must be in [0, 65535]")]
    MaxAttempts,
    #[error("--dead-letter-topic must be a valid topic name (got {})", go_quote(.0.as_bytes()))]
    DeadLetterTopic(String),
}

/// Every nsqd option, one field per flag (nsqd/options.go, `Options`), holding the resolved
/// value.
///
/// Integers the reference stores as Go `int`/`int64` are `i64` here so that out-of-range values
/// survive until [`NsqdOptions::validate`] (or the consumer) can report them as the reference
/// does.
#[derive(Debug, Clone, PartialEq)]
pub struct NsqdOptions {
    // --- basic ---
    /// `-config`: path of the TOML file that was loaded (`""` = none).
    pub config: String,
    pub log_level: LogLevel,
    pub log_prefix: String,
    /// `-verbose`: deprecated, no effect.
    pub verbose: bool,
    /// `-node-id` (config `id`): node part of message IDs, must be in `[0,1024)`.
    pub node_id: i64,
    /// `-worker-id`: deprecated, no effect.
    pub worker_id: bool,

    // --- network / cluster ---
    /// `host:port`, or a unix-socket path.
    pub tcp_address: String,
    /// `host:port`, a unix-socket path, or `""` (HTTP disabled).
    pub http_address: String,
    /// Used only when TLS is configured; `""` disables HTTPS.
    pub https_address: String,
    pub broadcast_address: String,
    /// 0 = the actual TCP port (see [`NsqdOptions::apply_listeners`]).
    pub broadcast_tcp_port: i64,
    /// 0 = the actual HTTP port (see [`NsqdOptions::apply_listeners`]).
    pub broadcast_http_port: i64,
    /// `-lookupd-tcp-address` (config `nsqlookupd_tcp_addresses`).
    pub lookupd_tcp_addresses: Vec<String>,
    /// `-auth-http-address` (config `auth_http_addresses`); non-empty enables AUTH.
    pub auth_http_addresses: Vec<String>,
    pub http_client_connect_timeout: Duration,
    pub http_client_request_timeout: Duration,

    // --- disk queue / memory ---
    /// `""` = the current working directory.
    pub data_path: String,
    pub mem_queue_size: i64,
    pub max_bytes_per_file: i64,
    pub sync_every: i64,
    pub sync_timeout: Duration,
    /// `--durable` (ours, not the reference's): every OK to a publisher means fdatasync'd, and
    /// in-flight and deferred messages survive a crash; implies `--mem-queue-size=0`. See
    /// docs/durability.md.
    pub durable: bool,
    pub queue_scan_worker_pool_max: i64,
    pub queue_scan_selection_count: i64,

    // --- messages and commands ---
    pub msg_timeout: Duration,
    pub max_msg_timeout: Duration,
    pub max_msg_size: i64,
    pub max_body_size: i64,
    pub max_req_timeout: Duration,

    // --- client-negotiable limits ---
    pub max_heartbeat_interval: Duration,
    pub max_rdy_count: i64,
    pub max_output_buffer_size: i64,
    pub max_output_buffer_timeout: Duration,
    pub min_output_buffer_timeout: Duration,
    pub output_buffer_timeout: Duration,
    /// 0 = unlimited.
    pub max_channel_consumers: i64,
    /// `--parked-reads` (ours, not the reference's): a saturated consumer's socket is read on
    /// a 1 ms timer instead of on readiness, so its FINs batch up (crate::park). `false`
    /// reads every connection on readiness.
    pub parked_reads: bool,

    // --- statsd ---
    /// UDP `host:port`; `""` disables statsd.
    pub statsd_address: String,
    pub statsd_interval: Duration,
    pub statsd_mem_stats: bool,
    /// As configured (`nsq.%s`) until [`NsqdOptions::apply_listeners`] expands it.
    pub statsd_prefix: String,
    pub statsd_udp_packet_size: i64,
    pub statsd_exclude_ephemeral: bool,

    // --- end-to-end latency ---
    /// The flag form is sorted descending; the config form keeps the written order.
    pub e2e_processing_latency_percentiles: Vec<f64>,
    pub e2e_processing_latency_window_time: Duration,

    // --- TLS ---
    pub tls_cert: String,
    pub tls_key: String,
    /// `require` or `require-verify`; non-empty forces `tls_required` to `True` if it was
    /// `False` (applied by [`parse_args`]; see [`NsqdOptions::effective_tls_required`]).
    pub tls_client_auth_policy: String,
    pub tls_root_ca_file: String,
    pub tls_required: TlsRequired,
    pub tls_min_version: TlsVersion,

    // --- compression ---
    pub deflate: bool,
    pub max_deflate_level: i64,
    pub snappy: bool,
    /// `-sigterm`: what SIGTERM does (crate::drain); not in the reference.
    pub sigterm: SigtermMode,

    // --- replication (ours, docs/replication.md) ---
    /// `--replicas`: copies of each acknowledged message, this node's included.
    pub replicas: i64,
    /// `--replication-peer`: the group's other members (TCP addresses) given by hand; when
    /// replication is on: [`NsqdOptions::replication_enabled`].
    pub replication_peers: Vec<String>,
    pub replication_takeover_timeout: Duration,
    pub replication_ack_timeout: Duration,
    pub replication_max_backlog_bytes: i64,
    /// `--replication-secret-file`: the group's shared secret (empty: none; membership is
    /// then the peer list). Read when replication starts.
    pub replication_secret_file: String,
    /// The replica store's segment size (not a flag: 64 MiB; tests make it small).
    pub replication_segment_bytes: u64,

    // --- queue settings' node defaults (ours, nsq_core::queue_settings) ---
    /// `--max-queue-depth`: a topic's or channel's `max_depth` when it has none (0: none).
    pub max_queue_depth: i64,
    /// `--max-queue-bytes`: a topic's or channel's `max_bytes` when it has none (0: none).
    pub max_queue_bytes: i64,
    /// `--max-attempts`: a channel's `max_attempts` when it has none (0: none).
    pub max_attempts: i64,
    /// `--message-ttl`: a topic's or channel's `ttl` when neither has one (0: none).
    pub message_ttl: Duration,
    /// `--http-peek`: `GET /channel/peek` answers (off: 404 as any unknown path).
    pub http_peek: bool,
    /// `--dead-letter-topic`: a channel's `dead_letter_topic` when it has none (empty: none).
    pub dead_letter_topic: String,
}

impl Default for NsqdOptions {
    /// The reference defaults for this machine's host name.
    fn default() -> Self {
        NsqdOptions::with_hostname(&hostname())
    }
}

impl NsqdOptions {
    /// The reference defaults, with `hostname` as broadcast address and node-id source.
    pub fn with_hostname(hostname: &str) -> Self {
        NsqdOptions {
            config: String::new(),
            log_level: LogLevel::Info,
            log_prefix: "[nsqd] ".to_string(),
            verbose: false,
            node_id: nsq_core::message::default_node_id(hostname),
            worker_id: false,

            tcp_address: "0.0.0.0:4150".to_string(),
            http_address: "0.0.0.0:4151".to_string(),
            https_address: "0.0.0.0:4152".to_string(),
            broadcast_address: hostname.to_string(),
            broadcast_tcp_port: 0,
            broadcast_http_port: 0,
            lookupd_tcp_addresses: Vec::new(),
            auth_http_addresses: Vec::new(),
            http_client_connect_timeout: Duration::from_secs(2),
            http_client_request_timeout: Duration::from_secs(5),

            data_path: String::new(),
            mem_queue_size: 10_000,
            max_bytes_per_file: 100 * 1024 * 1024,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
            durable: false,
            queue_scan_worker_pool_max: 4,
            queue_scan_selection_count: 20,

            msg_timeout: Duration::from_secs(60),
            max_msg_timeout: Duration::from_secs(15 * 60),
            max_msg_size: 1024 * 1024,
            max_body_size: 5 * 1024 * 1024,
            max_req_timeout: Duration::from_secs(60 * 60),

            max_heartbeat_interval: Duration::from_secs(60),
            max_rdy_count: 2500,
            max_output_buffer_size: 64 * 1024,
            max_output_buffer_timeout: Duration::from_secs(30),
            min_output_buffer_timeout: Duration::from_millis(25),
            output_buffer_timeout: Duration::from_millis(250),
            max_channel_consumers: 0,
            parked_reads: true,

            statsd_address: String::new(),
            statsd_interval: Duration::from_secs(60),
            statsd_mem_stats: true,
            statsd_prefix: "nsq.%s".to_string(),
            statsd_udp_packet_size: 508,
            statsd_exclude_ephemeral: false,

            e2e_processing_latency_percentiles: Vec::new(),
            e2e_processing_latency_window_time: Duration::from_secs(10 * 60),

            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_auth_policy: String::new(),
            tls_root_ca_file: String::new(),
            tls_required: TlsRequired::False,
            tls_min_version: TlsVersion::Tls10,

            deflate: true,
            max_deflate_level: 6,
            snappy: true,
            sigterm: SigtermMode::Shutdown,

            replicas: 1,
            replication_peers: Vec::new(),
            replication_takeover_timeout: Duration::from_secs(30),
            replication_ack_timeout: Duration::from_secs(10),
            replication_max_backlog_bytes: 10 << 30,
            max_queue_depth: 0,
            max_queue_bytes: 0,
            max_attempts: 0,
            message_ttl: Duration::ZERO,
            http_peek: false,
            dead_letter_topic: String::new(),
            replication_secret_file: String::new(),
            replication_segment_bytes: 64 << 20,
        }
    }

    /// `tls_required` after the reference's rule "a client-auth policy forces TLS": `True` when
    /// a policy is set and `tls_required` is `False`.
    pub fn effective_tls_required(&self) -> TlsRequired {
        if !self.tls_client_auth_policy.is_empty() && self.tls_required == TlsRequired::False {
            TlsRequired::True
        } else {
            self.tls_required
        }
    }

    /// The option checks the reference makes at startup (nsqd/nsqd.go, `New`), in its order,
    /// with its messages. Not checked here (the daemon does them): the data-path lock, loading the
    /// TLS cert/key/CA files (`failed to build TLS config - …`, which the reference checks
    /// between the node-id and the TLS-required rule), and binding the listeners.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if !(1..=9).contains(&self.max_deflate_level) {
            return Err(OptionsError::MaxDeflateLevel);
        }
        if !(0..1024).contains(&self.node_id) {
            return Err(OptionsError::NodeId);
        }
        if self.effective_tls_required() != TlsRequired::False
            && self.tls_cert.is_empty()
            && self.tls_key.is_empty()
        {
            return Err(OptionsError::TlsWithoutCert);
        }
        for &v in &self.e2e_processing_latency_percentiles {
            if v <= 0.0 || v > 1.0 {
                return Err(OptionsError::E2ePercentile(v));
            }
        }
        self.validate_replication()
    }

    /// Replication is on: at least one `--replication-peer`, or `--replicas` ≥ 2 with an
    /// nsqlookupd to find the members through.
    pub fn replication_enabled(&self) -> bool {
        !self.replication_peers.is_empty()
            || (self.replicas >= 2 && !self.lookupd_tcp_addresses.is_empty())
    }

    /// The startup checks of docs/replication.md (Flags), after the reference's own.
    fn validate_replication(&self) -> Result<(), OptionsError> {
        if self.replicas < 1 {
            return Err(OptionsError::Replicas(self.replicas));
        }
        let peers = self.replication_peers.len() as i64;
        if peers < self.replicas - 1 && self.lookupd_tcp_addresses.is_empty() {
            return Err(OptionsError::ReplicasPeers(
                self.replicas,
                self.replicas - 1,
            ));
        }
        for p in &self.replication_peers {
            let ok = p.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|n| n > 0)
            });
            if !ok {
                return Err(OptionsError::ReplicationPeer(p.clone()));
            }
        }
        if self.replication_takeover_timeout.is_zero() {
            return Err(OptionsError::TakeoverTimeout);
        }
        if self.replication_ack_timeout.is_zero() {
            return Err(OptionsError::AckTimeout);
        }
        if self.replication_max_backlog_bytes <= 0 {
            return Err(OptionsError::MaxBacklogBytes);
        }
        if self.max_queue_depth < 0 {
            return Err(OptionsError::MaxQueueDepth);
        }
        if self.max_queue_bytes < 0 {
            return Err(OptionsError::MaxQueueBytes);
        }
        if !(0..=i64::from(u16::MAX)).contains(&self.max_attempts) {
            return Err(OptionsError::MaxAttempts);
        }
        if !self.dead_letter_topic.is_empty()
            && !nsq_protocol::names::is_valid_topic_name(&self.dead_letter_topic)
        {
            return Err(OptionsError::DeadLetterTopic(
                self.dead_letter_topic.clone(),
            ));
        }
        Ok(())
    }

    /// The broadcast ports and statsd prefix as nsqd/nsqd.go's `New` and `Main` settle them,
    /// given the ports actually bound (`None`
    /// when that listener is a unix socket or disabled): a broadcast port of 0 becomes the
    /// bound port, then `%s` in a non-empty statsd prefix becomes
    /// `<broadcast_address>_<broadcast_http_port>` (`.` and `:` → `_`) and a trailing `.` is
    /// added. If the HTTP port is still unknown, the port of `--http-address` is used as the
    /// reference does; when that has none either the port is left empty.
    pub fn apply_listeners(&mut self, tcp_port: Option<u16>, http_port: Option<u16>) {
        if self.broadcast_tcp_port == 0 {
            if let Some(p) = tcp_port {
                self.broadcast_tcp_port = i64::from(p);
            }
        }
        if self.broadcast_http_port == 0 {
            if let Some(p) = http_port {
                self.broadcast_http_port = i64::from(p);
            }
        }
        if self.statsd_prefix.is_empty() {
            return;
        }
        let port = if self.broadcast_http_port != 0 {
            self.broadcast_http_port.to_string()
        } else {
            self.http_address
                .rsplit_once(':')
                .map(|(_, p)| p.to_string())
                .unwrap_or_default()
        };
        let host = if self.broadcast_address.contains(':') {
            format!("[{}]:{port}", self.broadcast_address)
        } else {
            format!("{}:{port}", self.broadcast_address)
        };
        let key = host.replace(['.', ':'], "_");
        let mut prefix = self.statsd_prefix.replace("%s", &key);
        if !prefix.ends_with('.') {
            prefix.push('.');
        }
        self.statsd_prefix = prefix;
    }

    /// The queue engine's share of the options. Negative sizes/counts (which the reference
    /// accepts and then misbehaves on) become 0; `data_path` `""` becomes `.`.
    pub fn engine_options(&self) -> nsq_core::Options {
        let to_usize = |v: i64| usize::try_from(v).unwrap_or(0);
        let scan_defaults = nsq_core::ScanOptions::default();
        nsq_core::Options {
            data_path: if self.data_path.is_empty() {
                PathBuf::from(".")
            } else {
                PathBuf::from(&self.data_path)
            },
            mem_queue_size: if self.durable {
                0
            } else {
                to_usize(self.mem_queue_size)
            },
            max_bytes_per_file: self.max_bytes_per_file,
            sync_every: self.sync_every,
            sync_timeout: self.sync_timeout,
            max_msg_size: self.max_msg_size,
            max_msg_timeout: self.max_msg_timeout,
            max_channel_consumers: to_usize(self.max_channel_consumers),
            node_id: self.node_id,
            queue_scan: nsq_core::ScanOptions {
                selection_count: to_usize(self.queue_scan_selection_count),
                worker_pool_max: to_usize(self.queue_scan_worker_pool_max),
                ..scan_defaults
            },
            e2e_percentiles: self.e2e_processing_latency_percentiles.clone(),
            e2e_window: self.e2e_processing_latency_window_time,
            // `--sync-every=1` promises a sync per write: the OK waits for it too.
            durable: self.durable || self.sync_every == 1,
            // A clean shutdown must find room for what memory holds (nsq_core::reserve).
            reserve: true,
            queue_defaults: nsq_core::queue_settings::QueueSettings {
                max_depth: u64::try_from(self.max_queue_depth).ok().filter(|&d| d > 0),
                max_bytes: u64::try_from(self.max_queue_bytes).ok().filter(|&b| b > 0),
                max_attempts: u16::try_from(self.max_attempts).ok().filter(|&n| n > 0),
                ttl: Some(self.message_ttl).filter(|d| !d.is_zero()),
                dead_letter_topic: Some(self.dead_letter_topic.clone()).filter(|t| !t.is_empty()),
                ..Default::default()
            },
        }
    }

    /// The value of the option whose config-file key is `key`, shaped as the reference's
    /// `GET /config/<key>` renders it (nsqd/http.go, `doConfig`): strings as
    /// [`Value::String`] (the HTTP layer sends those raw, not JSON-quoted), integers and bools
    /// as JSON, durations as integer nanoseconds, lists as arrays, `log_level` 1–5,
    /// `tls_required` 0–2, `tls_min_version` 769–772. `None` for unknown keys and for options
    /// without a config key (`node_id`, `verbose`, …) → `400 INVALID_OPTION`.
    pub fn get_json(&self, key: &str) -> Option<Value> {
        let spec = FLAGS.by_config_key(key)?;
        if spec.name == "tls-required" {
            return Some(Value::from(self.effective_tls_required().code()));
        }
        let mut copy = self.clone();
        let json = (spec.slot)(&mut copy).to_json();
        Some(json)
    }
}

/// What the command line asks for.
pub type ParseOutcome = flag::ParseOutcome<NsqdOptions>;

/// Every flag except `-version`, in apps/nsqd/options.go order (also the order in which config
/// values are resolved).
pub static FLAGS: FlagSet<NsqdOptions> = FlagSet {
    program: "nsqd",
    flags: nsq_go::flags![NsqdOptions; @daemon;
    "node-id" => node_id: Int, Some("id"),
        "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)";
    "worker-id" => worker_id: Bool, None,
        "[deprecated] use --node-id";
    "tcp-address" => tcp_address: Str, Some("tcp_address"),
        "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)";
    "http-address" => http_address: Str, Some("http_address"),
        "address to listen on for HTTP clients (<addr>:<port> for TCP/IP or <path> for unix socket)";
    "https-address" => https_address: Str, Some("https_address"),
        "<addr>:<port> to listen on for HTTPS clients";
    "broadcast-address" => broadcast_address: Str, Some("broadcast_address"),
        "address that will be registered with lookupd (defaults to the OS hostname)";
    "broadcast-tcp-port" => broadcast_tcp_port: Int, Some("broadcast_tcp_port"),
        "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)";
    "broadcast-http-port" => broadcast_http_port: Int, Some("broadcast_http_port"),
        "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)";
    "lookupd-tcp-address" => lookupd_tcp_addresses: StrList, Some("nsqlookupd_tcp_addresses"),
        "lookupd TCP address (may be given multiple times)";
    "auth-http-address" => auth_http_addresses: StrList, Some("auth_http_addresses"),
        "<addr>:<port> or a full url to query auth server (may be given multiple times)";
    "http-client-connect-timeout" => http_client_connect_timeout: Dur, Some("http_client_connect_timeout"),
        "timeout for HTTP connect";
    "http-client-request-timeout" => http_client_request_timeout: Dur, Some("http_client_request_timeout"),
        "timeout for HTTP request";
    "data-path" => data_path: Str, Some("data_path"),
        "path to store disk-backed messages";
    "mem-queue-size" => mem_queue_size: Int, Some("mem_queue_size"),
        "number of messages to keep in memory (per topic/channel)";
    "max-bytes-per-file" => max_bytes_per_file: Int, Some("max_bytes_per_file"),
        "number of bytes per diskqueue file before rolling";
    "sync-every" => sync_every: Int, Some("sync_every"),
        "number of messages per diskqueue fsync";
    "sync-timeout" => sync_timeout: Dur, Some("sync_timeout"),
        "duration of time per diskqueue fsync";
    "durable" => durable: Bool, Some("durable"),
        "acknowledge a publish only once it is fdatasync'd, and keep in-flight and deferred messages across crashes (implies -mem-queue-size=0)";
    "queue-scan-worker-pool-max" => queue_scan_worker_pool_max: Int, Some("queue_scan_worker_pool_max"),
        "max concurrency for checking in-flight and deferred message timeouts";
    "queue-scan-selection-count" => queue_scan_selection_count: Int, Some("queue_scan_selection_count"),
        "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts";
    "msg-timeout" => msg_timeout: Dur, Some("msg_timeout"),
        "default duration to wait before auto-requeing a message";
    "max-msg-timeout" => max_msg_timeout: Dur, Some("max_msg_timeout"),
        "maximum duration before a message will timeout";
    "max-msg-size" => max_msg_size: Int, Some("max_msg_size"),
        "maximum size of a single message in bytes";
    "max-body-size" => max_body_size: Int, Some("max_body_size"),
        "maximum size of a single command body";
    "max-req-timeout" => max_req_timeout: Dur, Some("max_req_timeout"),
        "maximum requeuing timeout for a message";
    "max-heartbeat-interval" => max_heartbeat_interval: Dur, Some("max_heartbeat_interval"),
        "maximum client configurable duration of time between client heartbeats";
    "max-rdy-count" => max_rdy_count: Int, Some("max_rdy_count"),
        "maximum RDY count for a client";
    "max-output-buffer-size" => max_output_buffer_size: Int, Some("max_output_buffer_size"),
        "maximum client configurable size (in bytes) for a client output buffer";
    "max-output-buffer-timeout" => max_output_buffer_timeout: Dur, Some("max_output_buffer_timeout"),
        "maximum client configurable duration of time between flushing to a client";
    "min-output-buffer-timeout" => min_output_buffer_timeout: Dur, Some("min_output_buffer_timeout"),
        "minimum client configurable duration of time between flushing to a client";
    "output-buffer-timeout" => output_buffer_timeout: Dur, Some("output_buffer_timeout"),
        "default duration of time between flushing data to clients";
    "max-attempts" => max_attempts: Int, Some("max_attempts"),
        "deliveries of a message on a channel after which it is not delivered there again but moved to the dead-letter topic, or dropped without one (0: no limit; a channel's own max_attempts, POST /channel/config, overrides it)";
    "message-ttl" => message_ttl: Dur, Some("message_ttl"),
        "age past which a message is not delivered but dropped (0: none; a topic's or channel's own ttl, POST /topic/config or /channel/config, overrides it)";
    "http-peek" => http_peek: Bool, Some("http_peek"),
        "answer GET /channel/peek?topic=T&channel=C&n=20: a channel's next, in-flight and deferred messages with their bodies, without changing delivery (off: 404; it shows message bodies to whoever reaches the HTTP port)";
    "max-queue-bytes" => max_queue_bytes: Int, Some("max_queue_bytes"),
        "the most bytes a topic or a channel holds (each queued message's size on disk, 4 + 26 + body bytes, in memory and on disk) before a publish to it fails with 'E_PUB_FAILED ... is full' (0: no bound; a topic's or channel's own max_bytes, POST /topic/config or /channel/config, overrides it)";
    "max-queue-depth" => max_queue_depth: Int, Some("max_queue_depth"),
        "the most messages a topic or a channel holds, in memory and on disk, before a publish to it fails with 'E_PUB_FAILED ... is full' (0: no bound; a topic's or channel's own max_depth, POST /topic/config or /channel/config, overrides it)";
    "max-channel-consumers" => max_channel_consumers: Int, Some("max_channel_consumers"),
        "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)";
    "parked-reads" => parked_reads: Bool, Some("parked_reads"),
        "read a consumer with most of its RDY window in flight every 1ms instead of on every arriving FIN (less daemon CPU per message; false: always read on arrival)";
    "statsd-address" => statsd_address: Str, Some("statsd_address"),
        "UDP <addr>:<port> of a statsd daemon for pushing stats";
    "statsd-interval" => statsd_interval: Dur, Some("statsd_interval"),
        "duration between pushing to statsd";
    "statsd-mem-stats" => statsd_mem_stats: Bool, Some("statsd_mem_stats"),
        "toggle sending memory and GC stats to statsd";
    "statsd-prefix" => statsd_prefix: Str, Some("statsd_prefix"),
        "prefix used for keys sent to statsd (%s for host replacement)";
    "statsd-udp-packet-size" => statsd_udp_packet_size: Int, Some("statsd_udp_packet_size"),
        "the size in bytes of statsd UDP packets";
    "statsd-exclude-ephemeral" => statsd_exclude_ephemeral: Bool, Some("statsd_exclude_ephemeral"),
        "Skip ephemeral topics and channels when sending stats to statsd";
    "e2e-processing-latency-percentile" => e2e_processing_latency_percentiles: FloatList, Some("e2e_processing_latency_percentiles"),
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)";
    "e2e-processing-latency-window-time" => e2e_processing_latency_window_time: Dur, Some("e2e_processing_latency_window_time"),
        "calculate end to end latency quantiles for this duration of time (ie: 60s would only show quantile calculations from the past 60 seconds)";
    "tls-cert" => tls_cert: Str, Some("tls_cert"),
        "path to certificate file";
    "tls-key" => tls_key: Str, Some("tls_key"),
        "path to key file";
    "tls-client-auth-policy" => tls_client_auth_policy: Str, Some("tls_client_auth_policy"),
        "client certificate auth policy ('require' or 'require-verify')";
    "tls-root-ca-file" => tls_root_ca_file: Str, Some("tls_root_ca_file"),
        "path to certificate authority file";
    "tls-required" => tls_required: Custom, Some("tls_required"),
        "require TLS for client connections (true, false, tcp-https)";
    "tls-min-version" => tls_min_version: Custom, Some("tls_min_version"),
        "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')";
    "dead-letter-topic" => dead_letter_topic: Str, Some("dead_letter_topic"),
        "topic a message goes to when it reaches its channel's max attempts, instead of being dropped (empty: none; a channel's own dead_letter_topic, POST /channel/config, overrides it; channels of this topic itself drop theirs)";
    "deflate" => deflate: Bool, Some("deflate"),
        "enable deflate feature negotiation (client compression)";
    "max-deflate-level" => max_deflate_level: Int, Some("max_deflate_level"),
        "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)";
    "snappy" => snappy: Bool, Some("snappy"),
        "enable snappy feature negotiation (client compression)";
    "sigterm" => sigterm: Custom, Some("sigterm"),
        "what SIGTERM does: 'shutdown' (clean shutdown) or 'drain' (accept no new messages, deliver the queued ones, then shut down)";
    "replicas" => replicas: Int, Some("replicas"),
        "copies of each acknowledged message, this node's included (1: no replication of this node's publishes)";
    "replication-peer" => replication_peers: StrList, Some("replication_peer"),
        "<addr>:<port> (TCP) of a peer nsqd that replicates with this one (may be given multiple times; replication is on when one is given, or with --replicas >= 2 and --lookupd-tcp-address, which finds the peers)";
    "replication-takeover-timeout" => replication_takeover_timeout: Dur, Some("replication_takeover_timeout"),
        "how long a peer must be gone before this node delivers its replicated backlog";
    "replication-ack-timeout" => replication_ack_timeout: Dur, Some("replication_ack_timeout"),
        "how long a publish waits for its replicas' acknowledgements before it fails";
    "replication-max-backlog-bytes" => replication_max_backlog_bytes: Int, Some("replication_max_backlog_bytes"),
        "the most this node keeps on disk of one peer's replicated backlog";
    "replication-secret-file" => replication_secret_file: Str, Some("replication_secret_file"),
        "path to a file holding the replication group's shared secret (members prove it on every link; without it any host at a peer's address may link)";
    ],
    // nsqd's `cfg.Validate()` (apps/nsqd/main.go) checks these three before resolving.
    config_checks: &["tls_required", "tls_min_version", "log_level"],
};

/// Parses nsqd's command line given **with the program name first** (`std::env::args()`),
/// then loads `-config` if given, and resolves every option as flag (if given, even equal to
/// its default) > config-file value > default. A `tls_client_auth_policy` forces
/// `tls_required` to `True` here, as the reference's startup does. Call
/// [`NsqdOptions::validate`] afterwards.
///
/// On `Err`, print [`FlagError::message`] to stderr (followed by [`usage`] for
/// [`FlagError::Usage`]) and exit with [`FlagError::exit_code`].
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    parse_args_with_defaults(args, NsqdOptions::default())
}

/// [`parse_args`] starting from the given defaults (tests use a fixed host name). `args`
/// includes the program name, as for [`parse_args`].
pub fn parse_args_with_defaults<I: IntoIterator<Item = String>>(
    args: I,
    defaults: NsqdOptions,
) -> Result<ParseOutcome, FlagError> {
    let mut outcome = FLAGS.parse(args, defaults)?;
    if let flag::ParseOutcome::Run(opts) = &mut outcome {
        if !opts.tls_client_auth_policy.is_empty() && opts.tls_required == TlsRequired::False {
            opts.tls_required = TlsRequired::True;
        }
    }
    Ok(outcome)
}

/// The reference's `nsqd -h` text, with this machine's host name and its hash as the defaults
/// of `-broadcast-address` and `-node-id`.
pub fn usage() -> &'static str {
    static USAGE: OnceLock<String> = OnceLock::new();
    USAGE.get_or_init(|| usage_for_hostname(&hostname()))
}

/// [`usage`] for a given host name.
pub fn usage_for_hostname(hostname: &str) -> String {
    FLAGS.usage(&NsqdOptions::with_hostname(hostname))
}

#[cfg(test)]
mod tests;
