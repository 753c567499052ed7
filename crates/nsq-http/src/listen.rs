//! Binding a daemon's listeners with the reference's error text: `listen (<addr>) failed -
//! <os error>` (nsqd/nsqd.go, New; nsqlookupd/nsqlookupd.go, Main; nsqadmin/nsqadmin.go, New),
//! with Go's listen backlog, and the TCP accept loop (internal/protocol/tcp_server.go,
//! `TCPServer`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
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
    tcp_listener(addr)
        .await
        .map_err(|e| ListenError::new(addr, e))
}

/// Used when `/proc/sys/net/core/somaxconn` cannot be read (Linux's default since 5.4).
const FALLBACK_BACKLOG: u32 = 4096;

/// The listen backlog of every listener: the system's `net.core.somaxconn`, as Go's
/// `net.Listen` uses (go/src/net/sock_linux.go, `maxListenerBacklog`), so that a burst of
/// connects waits in the kernel's accept queue instead of overflowing it (an overflowed SYN
/// is retried by the client only after a second or more). Tokio's `TcpListener::bind` asked
/// for 128 (`ss -ltn` showed it); the kernel caps any value at somaxconn.
pub fn backlog() -> u32 {
    static BACKLOG: OnceLock<u32> = OnceLock::new();
    *BACKLOG.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| parse_somaxconn(&s))
            .unwrap_or(FALLBACK_BACKLOG)
    })
}

/// The first field of the somaxconn file; `None` for 0 or anything unreadable (Go then falls
/// back too). Values above `i32::MAX` (which `listen` cannot take) are capped.
fn parse_somaxconn(s: &str) -> Option<u32> {
    let n: u64 = s.split_whitespace().next()?.parse().ok()?;
    (n > 0).then(|| n.min(i32::MAX as u64) as u32)
}

/// `TcpListener::bind` with [`backlog`]: resolves `addr` and listens on the first address
/// that binds (the last error if none does), with `SO_REUSEADDR` as Go and Tokio set it.
pub async fn tcp_listener(addr: &str) -> io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        match listen_on(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        )
    }))
}

fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(backlog())
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

    #[test]
    fn somaxconn_parsing() {
        assert_eq!(parse_somaxconn("4096\n"), Some(4096));
        assert_eq!(parse_somaxconn(" 65535 "), Some(65535));
        assert_eq!(parse_somaxconn("0\n"), None);
        assert_eq!(parse_somaxconn("x\n"), None);
        assert_eq!(parse_somaxconn(""), None);
        assert_eq!(parse_somaxconn("99999999999"), Some(i32::MAX as u32));
    }

    /// The listener's accept queue is as long as the system allows: `ss` reports a listening
    /// socket's backlog in its Send-Q column.
    #[tokio::test]
    async fn listeners_get_the_system_backlog() {
        let want = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| parse_somaxconn(&s))
            .unwrap_or(FALLBACK_BACKLOG);
        assert_eq!(backlog(), want);
        let l = bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(ss_backlog(port), Some(want));
    }

    /// The backlog `ss -ltn` shows for the listening socket on `port`, if `ss` is there.
    fn ss_backlog(port: u16) -> Option<u32> {
        let out = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next()?;
        // State Recv-Q Send-Q Local Peer
        line.split_whitespace().nth(2)?.parse().ok()
    }

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
