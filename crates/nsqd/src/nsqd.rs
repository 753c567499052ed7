//! The shared state of one nsqd (nsqd/nsqd.go, `NSQD`): what every connection task, HTTP
//! handler and background task holds an `Arc` of — the options, the queue engine, the TLS
//! config, the registry of TCP clients, the nsqlookupd connections — and the operations that
//! span them (topic creation with channel pre-creation from nsqlookupd, `nsqd.dat` writes,
//! health). Starting and stopping the daemon is `server.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nsq_core::{BackendError, Engine, Hooks, Topic};
use nsq_protocol::command::Limits;
use nsq_protocol::identify::{ClientSettings, IdentifyLimits, ServerFeatures};
use nsq_protocol::names::is_ephemeral;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::lookup::Lookup;
use crate::metadata;
use crate::options::NsqdOptions;

/// The V2 protocol's settings, derived once from the options.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    pub limits: Limits,
    pub identify_limits: IdentifyLimits,
    pub features: ServerFeatures,
    pub auth_required: bool,
    pub tls_required: bool,
    /// `--parked-reads` (crate::park).
    pub parked_reads: bool,
}

/// Engine hooks: tell nsqlookupd (ephemeral names too, as the reference) and schedule a
/// metadata write on every non-ephemeral create/delete.
pub(crate) struct DaemonHooks {
    pub(crate) metadata_dirty: Arc<Notify>,
    pub(crate) lookup: Lookup,
}

impl Hooks for DaemonHooks {
    fn topic_created(&self, topic: &str) {
        self.lookup.register(topic, None);
        if !is_ephemeral(topic) {
            self.metadata_dirty.notify_one();
        }
    }
    fn topic_deleted(&self, topic: &str) {
        self.lookup.unregister(topic, None);
        if !is_ephemeral(topic) {
            self.metadata_dirty.notify_one();
        }
    }
    fn channel_created(&self, topic: &str, channel: &str) {
        self.lookup.register(topic, Some(channel));
        if !is_ephemeral(topic) && !is_ephemeral(channel) {
            self.metadata_dirty.notify_one();
        }
    }
    fn channel_deleted(&self, topic: &str, channel: &str) {
        self.lookup.unregister(topic, Some(channel));
        if !is_ephemeral(topic) && !is_ephemeral(channel) {
            self.metadata_dirty.notify_one();
        }
    }
    fn metadata_changed(&self) {
        self.metadata_dirty.notify_one();
    }
}

/// Shared daemon state, handed to every connection and HTTP handler.
pub struct Nsqd {
    pub opts: NsqdOptions,
    pub tcp: TcpConfig,
    /// The TLS server config (`--tls-cert`/`--tls-key`), for IDENTIFY `tls_v1` and HTTPS.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub engine: Arc<Engine>,
    /// Unix seconds at startup (`/stats` `start_time`).
    pub start_time: i64,
    pub data_path: PathBuf,
    pub tcp_addr: SocketAddr,
    pub http_addr: Option<SocketAddr>,
    pub https_addr: Option<SocketAddr>,
    pub(crate) clients: Mutex<FxHashMap<u64, Arc<Client>>>,
    pub(crate) next_client_id: AtomicU64,
    pub(crate) metadata_dirty: Arc<Notify>,
    /// The nsqlookupd connections (registration and channel pre-creation).
    pub lookup: Lookup,
    /// The outgoing HTTP(S) client (nsqlookupd `/channels`, auth servers), verifying HTTPS
    /// servers against `--tls-root-ca-file` (nsqd/nsqd.go, `buildClientTLSConfig`).
    pub http_client: nsq_http::client::HttpClient,
    /// Serialises metadata writes (async scheduled ones and synchronous pause writes).
    pub(crate) metadata_lock: Mutex<()>,
    /// Drain mode (crate::drain).
    pub drain: crate::drain::Drain,
    /// Replication (crate::replication), when `--replication-peer` is given.
    pub replication: Option<Arc<crate::replication::Replication>>,
}

impl Nsqd {
    /// Registers a new TCP client.
    pub(crate) fn new_client(&self, peer: SocketAddr) -> Arc<Client> {
        let id = self.next_client_id.fetch_add(1, Ordering::Relaxed) + 1;
        let c = Client::new(
            id,
            peer,
            ClientSettings::defaults(&self.tcp.identify_limits),
        );
        self.clients.lock().insert(id, c.clone());
        c
    }

    pub(crate) fn remove_client(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    /// Starts draining (crate::drain); `false` if the node was draining already.
    pub fn start_drain(&self) -> bool {
        let started = self.drain.start(&self.engine, &self.lookup);
        if started {
            // Replicated: the messages go to the replica set at once (a planned leave).
            if let Some(r) = &self.replication {
                r.leave();
            }
        }
        started
    }

    /// Every connected TCP client.
    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.clients.lock().values().cloned().collect()
    }

    /// Gets or creates a topic for a publish or SUB. A new topic first gets every
    /// non-ephemeral channel that any nsqlookupd knows for it (nsqd/nsqd.go, `GetTopic`), so messages
    /// published to a brand-new topic on this node are not lost for existing consumers.
    pub async fn topic(&self, name: &str) -> Result<Arc<Topic>, BackendError> {
        if let Some(t) = self.engine.get_topic(name) {
            return Ok(t);
        }
        if self.drain.is_draining() {
            // A draining node creates no topics (crate::drain); callers refuse earlier.
            return Err(BackendError::Exiting);
        }
        let lookupds = self.lookup.http_addresses();
        if lookupds.is_empty() {
            if !self.opts.lookupd_tcp_addresses.is_empty() {
                tracing::error!("no available nsqlookupd to query for channels to pre-create for new topic {name}");
            }
            return Ok(self.engine.get_or_create_topic(name)?.0);
        }
        let (t, created) = self.engine.get_or_create_topic_with(name, false)?;
        if created {
            // Boxed: the lookupd queries' futures are large and rare (every connection's
            // reader task would otherwise be sized for them).
            for ch in Box::pin(self.lookupd_channels(&lookupds, name)).await {
                if let Err(e) = t.get_or_create_channel(&ch) {
                    tracing::error!("failed to pre-create channel {name}:{ch} - {e}");
                }
            }
            t.start();
        }
        Ok(t)
    }

    /// The union of `/channels?topic=` over every lookupd, sorted, without ephemeral names.
    async fn lookupd_channels(&self, lookupds: &[String], topic: &str) -> Vec<String> {
        let topic_q = nsq_go::url::query_escape(topic);
        let queries = lookupds.iter().cloned().map(|addr| {
            let client = self.http_client.clone();
            let url = format!("http://{addr}/channels?topic={topic_q}");
            async move {
                let r = client.get_v1(&url).await;
                (addr, r)
            }
        });
        let mut channels: Vec<String> = Vec::new();
        let mut ok = 0;
        for (addr, r) in futures_join_all(queries).await {
            match r {
                Ok(body) => {
                    ok += 1;
                    #[derive(serde::Deserialize)]
                    struct Channels {
                        channels: Vec<String>,
                    }
                    match serde_json::from_slice::<Channels>(&body) {
                        Ok(c) => channels.extend(c.channels),
                        Err(e) => tracing::warn!("bad /channels answer from {addr} - {e}"),
                    }
                }
                Err(e) => tracing::warn!("failed to query lookupd {addr} for channels - {e}"),
            }
        }
        if ok == 0 {
            tracing::warn!("no lookupd answered for channels of new topic {topic}");
        }
        channels.sort();
        channels.dedup();
        channels.retain(|c| !is_ephemeral(c) && nsq_protocol::names::is_valid_channel_name(c));
        channels
    }

    /// Writes `nsqd.dat` now (pause/unpause do this synchronously, as the reference).
    pub fn persist_metadata(&self) -> std::io::Result<()> {
        let _g = self.metadata_lock.lock();
        metadata::write(&self.data_path, &metadata::snapshot(&self.engine))
    }

    /// Waits for the replicas of a publish whose receipt carried `seq` (0: not replicated,
    /// nothing to wait for); `Err` is the reason the publish fails with.
    pub async fn replicated(&self, seq: u64) -> Result<(), String> {
        match (&self.replication, seq) {
            (Some(r), 1..) => r.wait_replicated(seq).await,
            _ => Ok(()),
        }
    }

    /// `OK` or `NOK - <error>`.
    pub fn health(&self) -> String {
        self.engine.health().status()
    }
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut set = JoinSet::new();
    for (i, f) in futs.enumerate() {
        set.spawn(async move { (i, f.await) });
    }
    let mut out: Vec<(usize, F::Output)> = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(v) = r {
            out.push(v);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, v)| v).collect()
}

pub(crate) fn tcp_config(o: &NsqdOptions, tls_available: bool) -> TcpConfig {
    let ms = |d: Duration| d.as_millis() as i64;
    TcpConfig {
        limits: Limits {
            max_body_size: o.max_body_size,
            max_msg_size: o.max_msg_size,
            max_rdy_count: o.max_rdy_count,
            max_req_timeout_ms: ms(o.max_req_timeout),
        },
        identify_limits: IdentifyLimits {
            default_heartbeat_ms: 30_000,
            max_heartbeat_ms: ms(o.max_heartbeat_interval),
            default_output_buffer_size: 16_384,
            max_output_buffer_size: o.max_output_buffer_size,
            default_output_buffer_timeout_ms: ms(o.output_buffer_timeout),
            min_output_buffer_timeout_ms: ms(o.min_output_buffer_timeout),
            max_output_buffer_timeout_ms: ms(o.max_output_buffer_timeout),
            default_msg_timeout_ms: ms(o.msg_timeout),
            max_msg_timeout_ms: ms(o.max_msg_timeout),
        },
        features: ServerFeatures {
            tls_available,
            deflate_enabled: o.deflate,
            snappy_enabled: o.snappy,
            max_deflate_level: o.max_deflate_level,
        },
        auth_required: !o.auth_http_addresses.is_empty(),
        tls_required: o.effective_tls_required() != crate::options::TlsRequired::False,
        parked_reads: o.parked_reads,
    }
}
