//! Starting and stopping nsqlookupd (nsqlookupd/nsqlookupd.go, `New`, `Main`, `Exit`): binds
//! both listeners, runs the TCP accept loop and the HTTP server, and shuts both down (closing
//! every nsqd connection) on request. The shared state is [`Nsqlookupd`] (`nsqlookupd.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use nsq_http::listen::{tcp_listener, ListenError};

use crate::db::RegistrationDb;
use crate::nsqlookupd::Nsqlookupd;
use crate::options::NsqlookupdOptions;

/// Why nsqlookupd could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The bound socket's address could not be read.
    #[error(transparent)]
    LocalAddr(std::io::Error),
}

/// A running nsqlookupd: its addresses, its state, and how to stop it.
pub struct NsqlookupdHandle {
    pub lookupd: Arc<Nsqlookupd>,
    stop: Arc<Notify>,
    done: tokio::task::JoinHandle<()>,
}

impl NsqlookupdHandle {
    pub fn tcp_addr(&self) -> SocketAddr {
        self.lookupd.tcp_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.lookupd.http_addr
    }

    /// Closes both listeners and every TCP connection; returns when all are gone.
    pub async fn shutdown(self) {
        self.stop.notify_one();
        let _ = self.done.await;
    }
}

/// Binds `--tcp-address` then `--http-address` and starts serving. The error is
/// `listen (<addr>) failed - <os error>`.
pub async fn start(opts: NsqlookupdOptions) -> Result<NsqlookupdHandle, StartError> {
    let tcp = listen(&opts.tcp_address).await?;
    let http = listen(&opts.http_address).await?;
    let tcp_addr = tcp.local_addr().map_err(StartError::LocalAddr)?;
    let http_addr = http.local_addr().map_err(StartError::LocalAddr)?;
    tracing::info!("{}", crate::options::version_string());
    tracing::info!("TCP: listening on {tcp_addr}");
    tracing::info!("HTTP: listening on {http_addr}");

    let lookupd = Arc::new(Nsqlookupd {
        opts,
        db: RegistrationDb::new(),
        tcp_addr,
        http_addr,
        hostname: crate::options::hostname(),
    });
    let stop = Arc::new(Notify::new());
    let done = tokio::spawn(run(lookupd.clone(), tcp, http, stop.clone()));
    Ok(NsqlookupdHandle {
        lookupd,
        stop,
        done,
    })
}

/// Go's `net.Listen("tcp", addr)`: an empty host (`:4160`) or `0.0.0.0` listens on every
/// address, IPv6 included (a dual-stack `[::]` socket, as Go does when the system supports
/// it; otherwise plain `0.0.0.0`), with Go's backlog (`nsq_http::listen::backlog`).
async fn listen(addr: &str) -> Result<TcpListener, ListenError> {
    let fail = |e: std::io::Error| ListenError::new(addr, e);
    if let Some((host, port)) = addr.rsplit_once(':') {
        if host.is_empty() || host == "0.0.0.0" {
            if let Ok(l) = tcp_listener(&format!("[::]:{port}")).await {
                return Ok(l);
            }
            return tcp_listener(&format!("0.0.0.0:{port}")).await.map_err(fail);
        }
    }
    tcp_listener(addr).await.map_err(fail)
}

async fn run(lookupd: Arc<Nsqlookupd>, tcp: TcpListener, http: TcpListener, stop: Arc<Notify>) {
    let http_stop = Arc::new(Notify::new());
    let http_task = {
        let router = crate::http::router(lookupd.clone());
        let s = http_stop.clone();
        tokio::spawn(nsq_http::serve::serve(http, router, async move {
            s.notified().await
        }))
    };

    let (close_tx, close_rx) = watch::channel(false);
    let mut conns = nsq_http::listen::accept_until(&tcp, &stop, |stream, peer| {
        crate::tcp::serve(lookupd.clone(), stream, peer, close_rx.clone())
    })
    .await;

    tracing::info!("TCP: closing {}", lookupd.tcp_addr);
    drop(tcp);
    let _ = close_tx.send(true);
    while conns.join_next().await.is_some() {}
    tracing::info!("HTTP: closing {}", lookupd.http_addr);
    http_stop.notify_one();
    // Idle keep-alive connections are dropped with the task after a grace period.
    let mut http_task = http_task;
    if tokio::time::timeout(Duration::from_secs(2), &mut http_task)
        .await
        .is_err()
    {
        http_task.abort();
    }
}

nsq_http::impl_daemon!(
    NsqlookupdHandle,
    NsqlookupdOptions,
    StartError,
    "nsqlookupd"
);
