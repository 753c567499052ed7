//! The daemon: binds listeners, loads metadata, runs the accept loops, the queue scanner and the
//! metadata writer, and performs the loss-free graceful shutdown.

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
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::client::{unix_secs, Client};
use crate::lookup::{self, Lookup};
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
}

/// Engine hooks: tell nsqlookupd (ephemeral names too, as the reference) and schedule a
/// metadata write on every non-ephemeral create/delete.
struct DaemonHooks {
    metadata_dirty: Arc<Notify>,
    lookup: Lookup,
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
    clients: Mutex<FxHashMap<u64, Arc<Client>>>,
    next_client_id: AtomicU64,
    metadata_dirty: Arc<Notify>,
    /// The nsqlookupd connections (registration and channel pre-creation).
    pub lookup: Lookup,
    /// Serialises metadata writes (async scheduled ones and synchronous pause writes).
    metadata_lock: Mutex<()>,
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

    /// Every connected TCP client.
    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.clients.lock().values().cloned().collect()
    }

    /// Gets or creates a topic for a publish or SUB. A new topic first gets every
    /// non-ephemeral channel that any nsqlookupd knows for it (internals §2.1), so messages
    /// published to a brand-new topic on this node are not lost for existing consumers.
    pub async fn topic(&self, name: &str) -> Result<Arc<Topic>, BackendError> {
        if let Some(t) = self.engine.get_topic(name) {
            return Ok(t);
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
            for ch in self.lookupd_channels(&lookupds, name).await {
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
        let path = format!("/channels?topic={}", crate::httpclient::query_escape(topic));
        let (connect, total) = (
            self.opts.http_client_connect_timeout,
            self.opts.http_client_request_timeout,
        );
        let queries = lookupds.iter().cloned().map(|addr| {
            let path = path.clone();
            async move {
                let r = crate::httpclient::get(&addr, &path, connect, total).await;
                (addr, r)
            }
        });
        let mut channels: Vec<String> = Vec::new();
        let mut ok = 0;
        for (addr, r) in futures_join_all(queries).await {
            match r {
                Ok(resp) if resp.status == 200 => {
                    ok += 1;
                    #[derive(serde::Deserialize)]
                    struct Channels {
                        channels: Vec<String>,
                    }
                    match serde_json::from_slice::<Channels>(&resp.body) {
                        Ok(c) => channels.extend(c.channels),
                        Err(e) => tracing::warn!("bad /channels answer from {addr} - {e}"),
                    }
                }
                Ok(resp) => {
                    tracing::warn!("lookupd {addr} answered /channels with {}", resp.status)
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

/// A running daemon: its addresses and how to stop it.
pub struct NsqdHandle {
    pub nsqd: Arc<Nsqd>,
    stop: Arc<Notify>,
    done: tokio::task::JoinHandle<()>,
    _lock: std::fs::File,
}

impl NsqdHandle {
    pub fn tcp_addr(&self) -> SocketAddr {
        self.nsqd.tcp_addr
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.nsqd.http_addr
    }

    /// Graceful shutdown; returns when every message is on disk.
    pub async fn shutdown(self) {
        self.stop.notify_one();
        let _ = self.done.await;
    }
}

fn tcp_config(o: &NsqdOptions, tls_available: bool) -> TcpConfig {
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
    }
}

/// Starts the daemon: lock the data dir, bind, load metadata, serve.
pub async fn start(mut opts: NsqdOptions) -> Result<NsqdHandle, String> {
    opts.validate()?;
    let data_path = if opts.data_path.is_empty() {
        PathBuf::from(".")
    } else {
        PathBuf::from(&opts.data_path)
    };
    let lock = lock_data_path(&data_path)?;
    let tls = crate::tls::server_config(&opts)?;

    let tcp_listener = TcpListener::bind(&opts.tcp_address)
        .await
        .map_err(|e| format!("listen ({}) failed - {e}", opts.tcp_address))?;
    let tcp_addr = tcp_listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!("TCP: listening on {tcp_addr}");
    let http_listener = if opts.http_address.is_empty() {
        None
    } else {
        let l = TcpListener::bind(&opts.http_address)
            .await
            .map_err(|e| format!("listen ({}) failed - {e}", opts.http_address))?;
        tracing::info!(
            "HTTP: listening on {}",
            l.local_addr().map_err(|e| e.to_string())?
        );
        Some(l)
    };
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    let https_listener = if tls.is_some() && !opts.https_address.is_empty() {
        let l = TcpListener::bind(&opts.https_address)
            .await
            .map_err(|e| format!("listen ({}) failed - {e}", opts.https_address))?;
        tracing::info!(
            "HTTPS: listening on {}",
            l.local_addr().map_err(|e| e.to_string())?
        );
        Some(l)
    } else {
        None
    };
    let https_addr = https_listener.as_ref().and_then(|l| l.local_addr().ok());
    opts.apply_listeners(Some(tcp_addr.port()), http_addr.map(|a| a.port()));

    let metadata_dirty = Arc::new(Notify::new());
    let (lookup, lookup_rx) = Lookup::new();
    let mut engine_opts = opts.engine_options();
    engine_opts.data_path = data_path.clone();
    let engine = Engine::new(
        engine_opts,
        Arc::new(DaemonHooks {
            metadata_dirty: metadata_dirty.clone(),
            lookup: lookup.clone(),
        }),
    );

    let nsqd = Arc::new(Nsqd {
        tcp: tcp_config(&opts, tls.is_some()),
        tls: tls.clone(),
        opts,
        engine: engine.clone(),
        start_time: unix_secs(),
        data_path: data_path.clone(),
        tcp_addr,
        http_addr,
        https_addr,
        clients: Mutex::new(FxHashMap::default()),
        next_client_id: AtomicU64::new(0),
        metadata_dirty: metadata_dirty.clone(),
        lookup,
        metadata_lock: Mutex::new(()),
    });

    engine.begin_loading();
    match metadata::load(&data_path) {
        Ok(Some(md)) => metadata::apply(&engine, &md),
        Ok(None) => {}
        Err(e) => return Err(format!("failed to load metadata - {e}")),
    }
    engine.finish_loading();
    // Not fatal (unlike the reference's nsqd.go, Main): on a full disk nsqd must still start so
    // consumers can drain; the metadata is written again at the next topic/channel change.
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!("failed to persist metadata - {e}");
    }
    // Creations during loading need no second write.
    let _ = tokio::time::timeout(Duration::ZERO, metadata_dirty.notified()).await;

    let stop = Arc::new(Notify::new());
    let info = nsq_protocol::lookup::PeerInfo {
        broadcast_address: nsqd.opts.broadcast_address.clone(),
        hostname: crate::options::hostname(),
        http_port: nsqd.opts.broadcast_http_port,
        tcp_port: nsqd.opts.broadcast_tcp_port,
        version: nsq_protocol::VERSION.to_string(),
    };
    let lookup_task = tokio::spawn(lookup::run(
        engine.clone(),
        info,
        nsqd.opts.lookupd_tcp_addresses.clone(),
        nsqd.tcp.limits.max_body_size.max(0) as usize,
        lookup_rx,
    ));
    let done = tokio::spawn(run(
        nsqd.clone(),
        tcp_listener,
        http_listener,
        https_listener,
        stop.clone(),
        lookup_task,
    ));
    Ok(NsqdHandle {
        nsqd,
        stop,
        done,
        _lock: lock,
    })
}

fn lock_data_path(dir: &std::path::Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::open(dir).map_err(|e| {
        format!(
            "failed to lock data-path: cannot flock directory {} - {e}",
            dir.display()
        )
    })?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(e) => Err(format!(
            "failed to lock data-path: cannot flock directory {} - {e} (possibly in use by another instance of nsqd)",
            dir.display()
        )),
    }
}

async fn run(
    nsqd: Arc<Nsqd>,
    tcp: TcpListener,
    http: Option<TcpListener>,
    https: Option<TcpListener>,
    stop: Arc<Notify>,
    lookup_task: tokio::task::JoinHandle<()>,
) {
    let scanner = nsq_core::scanner::spawn(
        nsqd.engine.clone(),
        nsqd.engine.options().queue_scan.clone(),
    );

    // Metadata writer: coalesces bursts of creations/deletions into one write.
    let md_nsqd = nsqd.clone();
    let md_task = tokio::spawn(async move {
        loop {
            md_nsqd.metadata_dirty.notified().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            let n = md_nsqd.clone();
            let r = tokio::task::spawn_blocking(move || n.persist_metadata()).await;
            if let Ok(Err(e)) = r {
                // E.g. a full disk: not fatal, try again in a while.
                tracing::error!("failed to persist metadata - {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                md_nsqd.metadata_dirty.notify_one();
            }
        }
    });

    let (http_router, https_router) = crate::http::routers(nsqd.clone());
    let http_stop = Arc::new(Notify::new());
    let http_task = http.map(|l| {
        let router = http_router;
        let s = http_stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(l, router)
                .with_graceful_shutdown(async move { s.notified().await })
                .await;
        })
    });

    let https_stop = Arc::new(Notify::new());
    let https_task = match (https, nsqd.tls.clone()) {
        (Some(l), Some(cfg)) => Some(tokio::spawn(crate::tls::serve_https(
            l,
            cfg,
            https_router,
            https_stop.clone(),
        ))),
        _ => None,
    };

    let statsd_stop = Arc::new(Notify::new());
    let statsd_task = (!nsqd.opts.statsd_address.is_empty())
        .then(|| tokio::spawn(crate::statsd::run(nsqd.clone(), statsd_stop.clone())));

    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.notified() => break,
            accepted = tcp.accept() => match accepted {
                Ok((stream, peer)) => {
                    conns.spawn(crate::tcp::serve(nsqd.clone(), stream, peer));
                }
                Err(e) => {
                    tracing::error!("TCP accept error - {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }

    // 1. Stop accepting, close every client and wait for their tasks.
    drop(tcp);
    for c in nsqd.clients() {
        c.close_now();
    }
    while conns.join_next().await.is_some() {}
    // 2. Close HTTP.
    http_stop.notify_one();
    https_stop.notify_one();
    for t in [http_task, https_task].into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    statsd_stop.notify_one();
    if let Some(t) = statsd_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    // 3. Stop the scanner so nothing moves while queues flush; write metadata.
    scanner.stop().await;
    md_task.abort();
    // No UNREGISTERs at shutdown: lookupd drops our registrations when the connection closes.
    lookup_task.abort();
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!("failed to persist metadata - {e}");
    }
    // 4. Flush every topic and channel to disk.
    let engine = nsqd.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.close()).await;
}
