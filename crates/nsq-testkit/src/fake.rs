//! A fake upstream HTTP server for tests of the HTTP clients in the daemons (auth servers,
//! nsqlookupd's `/channels`, …): it answers every request with one status and body and records
//! each request's head, over plain TCP or over any stream a test wraps the connection in (a
//! TLS handshake).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running fake server on `127.0.0.1:0` (it stops with the test's runtime).
pub struct FakeHttp {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeHttp {
    /// Answers every request with `status` and `body` (as JSON).
    pub async fn start(status: u16, body: &str) -> FakeHttp {
        FakeHttp::start_with(status, body, |tcp| async move { Some(tcp) }).await
    }

    /// [`FakeHttp::start`] over the stream `wrap` makes of each accepted connection (`None`
    /// drops the connection, as a failed TLS handshake does).
    pub async fn start_with<S, F, Fut>(status: u16, body: &str, wrap: F) -> FakeHttp
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<S>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let response = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (recorded, response, s) = (recorded.clone(), response.clone(), wrap(tcp));
                tokio::spawn(async move {
                    let Some(mut s) = s.await else { return };
                    let Some(head) = read_head(&mut s).await else {
                        return;
                    };
                    recorded.lock().expect("requests lock").push(head);
                    let _ = s.write_all(response.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        FakeHttp { addr, requests }
    }

    /// The heads of the requests received so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("requests lock").clone()
    }
}

/// Reads up to the end of the request head; `None` if the client went away first.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}
