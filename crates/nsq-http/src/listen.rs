//! Binding a daemon's listeners with the reference's error text: `listen (<addr>) failed -
//! <os error>` (nsqd/nsqd.go, New; nsqlookupd/nsqlookupd.go, Main; nsqadmin/nsqadmin.go, New),
//! and the TCP accept loop (internal/protocol/tcp_server.go, `TCPServer`).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// A listener could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("listen ({addr}) failed - {source}")]
pub struct ListenError {
    pub addr: String,
    #[source]
    pub source: std::io::Error,
}

impl ListenError {
    pub fn new(addr: &str, source: std::io::Error) -> Self {
        Self {
            addr: addr.to_string(),
            source,
        }
    }
}

/// Binds `addr` as given (Tokio's address resolution, no dual-stack widening).
pub async fn bind(addr: &str) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| ListenError::new(addr, e))
}

/// Accepts TCP connections until `stop` is notified, running `serve(stream, peer)` for each
/// one as a task of the returned set (finished tasks are reaped as it goes). An accept error is
/// logged and retried after a short pause, as `TCPServer` does for temporary errors.
pub async fn accept_until<F, Fut>(tcp: &TcpListener, stop: &Notify, mut serve: F) -> JoinSet<()>
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.notified() => break,
            accepted = tcp.accept() => match accepted {
                Ok((stream, peer)) => {
                    conns.spawn(serve(stream, peer));
                }
                Err(e) => {
                    tracing::error!("TCP accept error - {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn busy_address_gives_go_text() {
        let first = bind("127.0.0.1:0").await.unwrap();
        let addr = first.local_addr().unwrap().to_string();
        let e = bind(&addr).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::AddrInUse);
        assert_eq!(
            e.to_string(),
            format!("listen ({addr}) failed - {}", e.source)
        );
    }
}
