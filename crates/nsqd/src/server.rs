//! Starting, running and stopping nsqd (nsqd/nsqd.go, `New`, `Main`, `Exit`): binds the
//! listeners, loads metadata, runs the TCP accept loop (each connection is served by
//! `protocol_v2.rs`), the HTTP(S) servers, the queue scanner, the statsd pusher and the
//! metadata writer, and performs the loss-free graceful shutdown; [`run_until_exit`] waits for
//! the signal, HTTP request or finished drain that ends it. The shared state they all
//! hold is [`Nsqd`] (`nsqd.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use nsq_core::Engine;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::client::unix_secs;
use crate::lookup::{self, Lookup};
use crate::metadata;
use crate::nsqd::{tcp_config, DaemonHooks, Nsqd};
use crate::options::{NsqdOptions, OptionsError};
use nsq_http::listen::{self as listen, ListenError};

/// Why nsqd could not start; each Display is the reference's text (nsqd/nsqd.go, New and
/// LoadMetadata).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error("failed to lock data-path: cannot flock directory {} - {source}", dir.display())]
    OpenDataPath {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to lock data-path: cannot flock directory {} - {source} (possibly in use by another instance of nsqd)", dir.display())]
    LockDataPath {
        dir: PathBuf,
        #[source]
        source: std::fs::TryLockError,
    },
    /// Building the TLS server config (tls.rs, in the reference's words).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsConfigError),
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// A bound socket's address could not be read.
    #[error(transparent)]
    LocalAddr(std::io::Error),
    #[error("failed to build TLS config - {0}")]
    HttpClient(#[from] nsq_http::client::BuildError),
    #[error("failed to load metadata - {0}")]
    Metadata(#[from] metadata::MetadataError),
    #[error("failed to start replication - {0}")]
    Replication(#[from] crate::replication::ReplicationError),
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

/// Starts the daemon: lock the data dir, bind, load metadata, serve.
pub async fn start(mut opts: NsqdOptions) -> Result<NsqdHandle, StartError> {
    opts.validate()?;
    let data_path = if opts.data_path.is_empty() {
        PathBuf::from(".")
    } else {
        PathBuf::from(&opts.data_path)
    };
    let lock = lock_data_path(&data_path)?;
    let tls = crate::tls::server_config(&opts).map_err(StartError::Tls)?;

    let tcp_listener = listen::bind(&opts.tcp_address).await?;
    let tcp_addr = tcp_listener.local_addr().map_err(StartError::LocalAddr)?;
    tracing::info!("TCP: listening on {tcp_addr}");
    let http_listener = if opts.http_address.is_empty() {
        None
    } else {
        let l = listen::bind(&opts.http_address).await?;
        tracing::info!(
            "HTTP: listening on {}",
            l.local_addr().map_err(StartError::LocalAddr)?
        );
        Some(l)
    };
    let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
    let https_listener = if tls.is_some() && !opts.https_address.is_empty() {
        let l = listen::bind(&opts.https_address).await?;
        tracing::info!(
            "HTTPS: listening on {}",
            l.local_addr().map_err(StartError::LocalAddr)?
        );
        Some(l)
    } else {
        None
    };
    let https_addr = https_listener.as_ref().and_then(|l| l.local_addr().ok());
    opts.apply_listeners(Some(tcp_addr.port()), http_addr.map(|a| a.port()));

    // Replication (docs/replication.md): replication.dat before the engine exists so that
    // every topic it creates reports to the origin's log; the replica backlogs are replayed
    // in the background once nsqd serves (below).
    let replication = if opts.replication_enabled() {
        let settings = crate::replication::Settings::from_options(&opts);
        let dp = data_path.clone();
        let r = tokio::task::spawn_blocking(move || {
            crate::replication::Replication::open(&dp, settings)
        })
        .await
        .expect("replication open task")?;
        Some(r)
    } else {
        None
    };

    let metadata_dirty = Arc::new(Notify::new());
    let (lookup, lookup_rx) = Lookup::new(opts.lookupd_tcp_addresses.clone());
    let mut engine_opts = opts.engine_options();
    engine_opts.data_path = data_path.clone();
    let engine = Engine::new(
        engine_opts,
        Arc::new(DaemonHooks {
            metadata_dirty: metadata_dirty.clone(),
            lookup: lookup.clone(),
        }),
    );

    // With --replicas=1 this node's own publishes are not replicated (it only hosts its
    // peers' backlogs): no replicator, no origin links.
    if let Some(r) = replication.as_ref().filter(|r| r.replicates_own()) {
        engine.set_replicator(r.log.clone());
    }
    // Catch-ups read the engine; takeovers put into it (also with --replicas=1).
    if let Some(r) = &replication {
        r.set_engine(engine.clone());
    }

    let http_client = nsq_http::client::HttpClient::new(&nsq_http::client::ClientOptions {
        connect_timeout: opts.http_client_connect_timeout,
        request_timeout: opts.http_client_request_timeout,
        user_agent: format!("nsqd/{}", nsq_protocol::VERSION),
        tls: nsq_http::client::TlsOptions {
            root_ca_file: opts.tls_root_ca_file.clone(),
            ..Default::default()
        },
        follow_redirects: true,
    })?;
    let nsqd = Arc::new(Nsqd {
        http_client,
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
        drain: crate::drain::Drain::default(),
        replication,
    });

    engine.begin_loading();
    match metadata::load(&data_path) {
        Ok(Some(md)) => metadata::apply(&engine, &md),
        Ok(None) => {}
        Err(e) => return Err(StartError::Metadata(e)),
    }
    engine.finish_loading();
    // Not fatal (unlike the reference's nsqd.go, Main): on a full disk nsqd must still start so
    // consumers can drain; the metadata is written again at the next topic/channel change.
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!("failed to persist metadata - {e}");
    }
    // Creations during loading need no second write.
    let _ = tokio::time::timeout(Duration::ZERO, metadata_dirty.notified()).await;

    if let Some(r) = &nsqd.replication {
        // A replay that fails is fatal, as at startup: nsqd shuts down cleanly and exits 1
        // (`run_until_exit`).
        let (r2, n) = (r.clone(), Arc::downgrade(&nsqd));
        tokio::spawn(async move {
            let replayed = tokio::task::spawn_blocking(move || r2.replay()).await;
            let failure = match replayed {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("replay task failed - {e}"),
            };
            tracing::error!("FATAL: failed to start replication - {failure}");
            if let Some(n) = n.upgrade() {
                n.drain.request_shutdown();
            }
        });
        r.start_links(tcp_addr.port(), http_addr.map(|a| a.port()));
        r.start_takeover_watch(nsqd.lookup.clone(), nsqd.http_client.clone());
    }

    let stop = Arc::new(Notify::new());
    let info = nsq_protocol::lookup::PeerInfo {
        broadcast_address: nsqd.opts.broadcast_address.clone(),
        hostname: crate::options::hostname(),
        http_port: nsqd.opts.broadcast_http_port,
        // Ours: a replicating nsqd names its group, so that the members of the group find
        // each other (replication/discover.rs). NSQ's nsqlookupd ignores the extra key
        // (nsqlookupd/lookup_protocol_v1.go, `IDENTIFY`: `json.Unmarshal` into `PeerInfo`).
        replication: nsqd
            .replication
            .as_ref()
            .and_then(|r| r.lookupd_group())
            .map(|group| nsq_protocol::lookup::ReplicationInfo { group }),
        tcp_port: nsqd.opts.broadcast_tcp_port,
        version: nsq_protocol::VERSION.to_string(),
    };
    let lookup_task = tokio::spawn(lookup::run(
        engine.clone(),
        info,
        nsqd.opts.lookupd_tcp_addresses.clone(),
        nsqd.tcp.limits.max_body_size.max(0) as usize,
        lookup_rx,
        nsqd.replication.as_ref().and_then(|r| r.lookup_proof()),
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

fn lock_data_path(dir: &std::path::Path) -> Result<std::fs::File, StartError> {
    let f = std::fs::File::open(dir).map_err(|source| StartError::OpenDataPath {
        dir: dir.to_path_buf(),
        source,
    })?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(e) => Err(StartError::LockDataPath {
            dir: dir.to_path_buf(),
            source: e,
        }),
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

    // Health follows the disk: re-checked while unhealthy (health.rs).
    let health_task = tokio::spawn(crate::health::recheck(nsqd.clone()));

    let (http_router, https_router) = crate::http::routers(nsqd.clone());
    let http_stop = Arc::new(Notify::new());
    let http_task = http.map(|l| {
        let router = http_router;
        let s = http_stop.clone();
        tokio::spawn(async move {
            nsq_http::serve::serve(l, router, async move { s.notified().await }).await;
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

    let mut conns = nsq_http::listen::accept_until(&tcp, &stop, |stream, peer| {
        crate::protocol_v2::serve(nsqd.clone(), stream, peer)
    })
    .await;

    // 1. Stop accepting, close every client and wait for their tasks.
    drop(tcp);
    for c in nsqd.clients() {
        c.close_now();
    }
    // Replication: the replicas get what is queued (at most 5 s), then every link ends
    // (replica links are among `conns`) and the clean stop is recorded.
    if let Some(r) = &nsqd.replication {
        r.shutdown().await;
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
    health_task.abort();
    // No UNREGISTERs at shutdown: lookupd drops our registrations when the connection closes.
    lookup_task.abort();
    if let Err(e) = nsqd.persist_metadata() {
        tracing::error!("failed to persist metadata - {e}");
    }
    // 4. Flush every topic and channel to disk.
    let engine = nsqd.engine.clone();
    let _ = tokio::task::spawn_blocking(move || engine.close()).await;
}

/// How often a drain checks whether everything is delivered.
const DRAIN_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often a drain logs what it is waiting for.
const DRAIN_LOG_EVERY: Duration = Duration::from_secs(5);

/// Runs the daemon until it should exit, then shuts it down cleanly: on SIGINT, on SIGTERM
/// (which starts a drain instead under `--sigterm=drain`), on `PUT /config/shutdown`, at the
/// end of a drain, or on a second signal during a drain.
pub async fn run_until_exit(handle: NsqdHandle, signals: nsq_http::daemon::Signals) {
    let nsqd = handle.nsqd.clone();
    let mode = nsqd.opts.sigterm;
    let nsq_http::daemon::Signals { mut term, mut int } = signals;
    let mut tick = tokio::time::interval(DRAIN_CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_draining = false;
    let mut last_log = tokio::time::Instant::now();
    // Two empty readings in a row: a message moving between queues is never counted twice
    // nor missed by both.
    let mut empty_once = false;
    loop {
        let draining = nsqd.drain.is_draining();
        if draining && !was_draining {
            // The checks start a full period after the drain does, one period apart.
            was_draining = true;
            tick.reset();
        }
        tokio::select! {
            _ = term.recv() => {
                if mode == crate::options::SigtermMode::Drain && !draining {
                    nsqd.start_drain();
                    continue;
                }
                if draining {
                    tracing::info!("DRAIN: second signal (SIGTERM): shutting down now, persisting what is left");
                }
                break;
            }
            _ = int.recv() => {
                if draining {
                    tracing::info!("DRAIN: second signal (SIGINT): shutting down now, persisting what is left");
                }
                break;
            }
            _ = nsqd.drain.notified() => {
                if nsqd.drain.shutdown_requested() {
                    break;
                }
            }
            _ = tick.tick(), if draining => {
                let left = crate::drain::remaining(&nsqd.engine);
                if left.is_empty() {
                    if empty_once {
                        tracing::info!("DRAIN: every topic and channel is empty: shutting down");
                        break;
                    }
                    empty_once = true;
                } else {
                    empty_once = false;
                    if last_log.elapsed() >= DRAIN_LOG_EVERY {
                        last_log = tokio::time::Instant::now();
                        tracing::info!("DRAIN: waiting for {left}");
                    }
                }
            }
        }
    }
    let failed = nsqd.replication.as_ref().is_some_and(|r| r.replay_failed());
    handle.shutdown().await;
    if failed {
        std::process::exit(1);
    }
}

// Signals, drain mode and `PUT /config/shutdown` (crate::drain) replace the default serve.
nsq_http::impl_daemon!(
    NsqdHandle,
    NsqdOptions,
    StartError,
    "nsqd",
    serve = run_until_exit
);
