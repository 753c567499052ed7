//! Binding a daemon's listeners with the reference's error text: `listen (<addr>) failed -
//! <os error>` (nsqd/nsqd.go, New; nsqlookupd/nsqlookupd.go, Main; nsqadmin/nsqadmin.go, New).

use tokio::net::TcpListener;

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
