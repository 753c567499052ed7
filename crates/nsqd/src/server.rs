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

/// Engine hooks: schedule a metadata write on every non-ephemeral create/delete.
struct DaemonHooks {
    metadata_dirty: Arc<Notify>,
}

impl Hooks for DaemonHooks {
    fn topic_created(&self, topic: &str) {
        if !is_ephemeral(topic) {
            self.metadata_dirty.notify_one();
        }
    }
    fn topic_deleted(&self, topic: &str) {
        if !is_ephemeral(topic) {
            self.metadata_dirty.notify_one();
        }
    }
    fn channel_created(&self, topic: &str, channel: &str) {
        if !is_ephemeral(topic) && !is_ephemeral(channel) {
            self.metadata_dirty.notify_one();
        }
    }
    fn channel_deleted(&self, topic: &str, channel: &str) {
        if !is_ephemeral(topic) && !is_ephemeral(channel) {
            self.metadata_dirty.notify_one();
        }
    }
}

/// Shared daemon state, handed to every connection and HTTP handler.
pub struct Nsqd {
    pub opts: NsqdOptions,
    pub tcp: TcpConfig,
    pub engine: Arc<Engine>,
    /// Unix seconds at startup (`/stats` `start_time`).
    pub start_time: i64,
    pub data_path: PathBuf,
    pub tcp_addr: SocketAddr,
    pub http_addr: Option<SocketAddr>,
    clients: Mutex<FxHashMap<u64, Arc<Client>>>,
    next_client_id: AtomicU64,
    metadata_dirty: Arc<Notify>,
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

    /// Gets or creates a topic for a publish or SUB.
    pub async fn topic(&self, name: &str) -> Result<Arc<Topic>, BackendError> {
        let (t, _created) = self.engine.get_or_create_topic(name)?;
        Ok(t)
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

fn tcp_config(o: &NsqdOptions) -> TcpConfig {
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
        // TLS, snappy and deflate are negotiated off until they are implemented.
        features: ServerFeatures {
            tls_available: false,
            deflate_enabled: false,
            snappy_enabled: false,
            max_deflate_level: o.max_deflate_level,
        },
        auth_required: !o.auth_http_addresses.is_empty(),
        tls_required: false,
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
    opts.apply_listeners(Some(tcp_addr.port()), http_addr.map(|a| a.port()));

    let metadata_dirty = Arc::new(Notify::new());
    let mut engine_opts = opts.engine_options();
    engine_opts.data_path = data_path.clone();
    let engine = Engine::new(
        engine_opts,
        Arc::new(DaemonHooks {
            metadata_dirty: metadata_dirty.clone(),
        }),
    );

    let nsqd = Arc::new(Nsqd {
        tcp: tcp_config(&opts),
        opts,
        engine: engine.clone(),
        start_time: unix_secs(),
        data_path: data_path.clone(),
        tcp_addr,
        http_addr,
        clients: Mutex::new(FxHashMap::default()),
        next_client_id: AtomicU64::new(0),
        metadata_dirty: metadata_dirty.clone(),
        metadata_lock: Mutex::new(()),
    });

    engine.begin_loading();
    match metadata::load(&data_path) {
        Ok(Some(md)) => metadata::apply(&engine, &md),
        Ok(None) => {}
        Err(e) => return Err(format!("failed to load metadata - {e}")),
    }
    engine.finish_loading();
    nsqd.persist_metadata()
        .map_err(|e| format!("failed to persist metadata - {e}"))?;
    // Creations during loading need no second write.
    let _ = tokio::time::timeout(Duration::ZERO, metadata_dirty.notified()).await;

    let stop = Arc::new(Notify::new());
    let done = tokio::spawn(run(nsqd.clone(), tcp_listener, http_listener, stop.clone()));
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

async fn run(nsqd: Arc<Nsqd>, tcp: TcpListener, http: Option<TcpListener>, stop: Arc<Notify>) {
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
                tracing::error!("failed to persist metadata - {e}");
            }
        }
    });

    let http_stop = Arc::new(Notify::new());
    let http_task = http.map(|l| {
        let router = crate::http::router(nsqd.clone());
        let s = http_stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(l, router)
                .with_graceful_shutdown(async move { s.notified().await })
                .await;
        })
    });

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
    if let Some(t) = http_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    // 3. Stop the scanner so nothing moves while queues flush; write metadata.
    scanner.stop().await;
    md_task.abort();
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!("failed to persist metadata - {e}");
    }
    // 4. Flush every topic and channel to disk.
    let engine = nsqd.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.close()).await;
}
