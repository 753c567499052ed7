//! Serving an axum router over HTTP/1.1 the way Go's `net/http` server does where a client can
//! tell (net/http/server.go, `conn.serve`, `readRequest`), for every HTTP(S) listener of the
//! three daemons:
//!
//! * a request head (request line and headers) of up to `MaxHeaderBytes` (1 MiB) plus Go's
//!   4096 bytes of slack is read ([`MAX_HEAD_BYTES`]); a longer one gets `431`. hyper's default
//!   is about 400 KB and 100 headers; Go limits only the bytes, hyper needs a header count
//!   too, so up to [`MAX_HEADERS`] are taken (a 1 MiB head of 10,000 headers passes);
//! * a request hyper cannot parse gets Go's exact bytes: `400 Bad Request` (or `431 Request
//!   Header Fields Too Large`) as a plain-text body with `Connection: close`, not hyper's
//!   empty body ([`GoErrors`]);
//! * a `Host` Go refuses is refused before any handler sees it ([`host_error`]): two of them
//!   (`400 Bad Request`), none on HTTP/1.1 other than `CONNECT` (`400 Bad Request: missing
//!   required Host header`; HTTP/1.0 without `Host` is served, as by Go), or one with a byte
//!   outside Go's host bytes (`400 Bad Request: malformed Host header`);
//! * Go's error answers say `HTTP/1.1` also to an HTTP/1.0 request;
//! * the status line's reason phrase is Go's where Go's differs from hyper's
//!   ([`go_reason`]: `413 Request Entity Too Large`, `414 Request URI Too Long`, `416
//!   Requested Range Not Satisfiable`; net/http/status.go);
//! * `TCP_NODELAY` on every connection, as Go sets it;
//! * the `ConnectInfo<SocketAddr>` extension on every request (nsqlookupd and nsqadmin log and
//!   check the peer address).
//!
//! Where it still differs: a request target longer than 65,534 bytes is refused with `414
//! Request URI Too Long` in Go's error format (Go reads it if the head fits in 1 MiB). That
//! limit cannot be raised: hyper checks a fixed `MAX_URI_LEN` (hyper/src/proto/h1/role.rs,
//! `Server::parse`) and `http::Uri`, which every request carries, cannot hold more
//! (http/src/uri/mod.rs, `MAX_LEN`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower_service::Service;

/// Go's `http.DefaultMaxHeaderBytes` (1 MiB) plus the 4096 bytes of bufio slack its server
/// adds (net/http/server.go, `initialReadLimitSize`): the longest request head read.
pub const MAX_HEAD_BYTES: usize = (1 << 20) + 4096;

/// Headers per request (Go has no count limit, only [`MAX_HEAD_BYTES`]). hyper sizes its
/// parse arrays by this for every request, so it is not unbounded: 16 Ki entries are about
/// 1 MiB of address space that is allocated but touched only as far as headers arrive.
pub const MAX_HEADERS: usize = 16 * 1024;

/// hyper's HTTP/1.1 connection settings for every listener (see the module comment).
pub fn http1_builder() -> http1::Builder {
    let mut b = http1::Builder::new();
    // The buffer limit stops a head that never ends; the parsed-size limit makes the bound
    // exact (a read can carry the buffer past its limit while completing the head).
    b.max_buf_size(MAX_HEAD_BYTES)
        .max_header_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    b
}

/// Serves `router` on `listener` until `stop` resolves; then stops accepting, lets requests in
/// progress finish (idle keep-alive connections close at once) and returns when every
/// connection has ended. This is what `axum::serve(..).with_graceful_shutdown(stop)` did,
/// with hyper set up as Go's server (see the module comment).
pub async fn serve(listener: TcpListener, router: Router, stop: impl Future<Output = ()>) {
    let mut make = router.into_make_service_with_connect_info::<SocketAddr>();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Adds ConnectInfo(peer); never fails.
                    let Ok(service) = make.call(peer).await;
                    conns.spawn(connection(stream, service, shutdown_rx.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::error!("http: Accept error: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = shutdown_tx.send(true);
    while conns.join_next().await.is_some() {}
}

/// One plain HTTP connection, until the client leaves or the listener stops.
async fn connection<S>(stream: TcpStream, service: S, shutdown: watch::Receiver<bool>)
where
    S: Service<axum::http::Request<hyper::body::Incoming>, Response = axum::response::Response>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = stream.set_nodelay(true);
    serve_connection(stream, service, shutdown).await;
}

/// HTTP/1.1 on an accepted (and, for HTTPS, handshaken) stream with [`http1_builder`] and
/// [`GoErrors`], until the client leaves or `shutdown` turns true (then the request in
/// progress is finished and the connection closed).
pub async fn serve_connection<IO, S>(io: IO, service: S, mut shutdown: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<axum::http::Request<hyper::body::Incoming>, Response = axum::response::Response>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = TowerToHyperService::new(service);
    let service = hyper::service::service_fn(move |req: axum::http::Request<_>| {
        let refused = host_error(&req);
        let answer = refused
            .is_none()
            .then(|| hyper::service::Service::call(&service, req));
        async move {
            match (answer, refused) {
                (Some(answer), _) => answer.await.map(go_reason),
                (None, reason) => Ok(host_error_response(reason.flatten())),
            }
        }
    });
    let conn = http1_builder().serve_connection(TokioIo::new(GoErrors::new(io)), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stopping(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Gives a response Go's reason phrase where Go's status text differs from hyper's
/// (net/http/status.go `statusText`; hyper writes `http::StatusCode::canonical_reason`).
pub fn go_reason<B>(mut r: axum::http::Response<B>) -> axum::http::Response<B> {
    let phrase: &'static [u8] = match r.status().as_u16() {
        413 => b"Request Entity Too Large",
        414 => b"Request URI Too Long",
        416 => b"Requested Range Not Satisfiable",
        _ => return r,
    };
    r.extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(phrase));
    r
}

/// Whether Go refuses `req` for its `Host` header, and with which reason phrase (`None`: a
/// plain `400 Bad Request`), in Go's order:
/// * more than one `Host` (net/http/request.go, `readRequest`: `too many Host headers`, an
///   error that `conn.serve` answers with a plain `400 Bad Request`);
/// * none on HTTP/1.1 (net/http/server.go, `conn.readRequest`: `req.ProtoAtLeast(1, 1) &&
///   (!haveHost || len(hosts) == 0) && !isH2Upgrade && req.Method != "CONNECT"`; HTTP/2
///   never reaches this server);
/// * one with a byte Go does not accept in a host (`conn.readRequest`:
///   `!httpguts.ValidHostHeader(hosts[0])`, which allows letters, digits and
///   `!$%&'()*+,-.:;=[]_~`).
fn host_error<B>(req: &axum::http::Request<B>) -> Option<Option<&'static [u8]>> {
    let mut hosts = req.headers().get_all(axum::http::header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Some(None);
    }
    match first {
        None if req.version() == axum::http::Version::HTTP_11
            && req.method() != axum::http::Method::CONNECT =>
        {
            Some(Some(MISSING_HOST_REASON))
        }
        Some(h) if !h.as_bytes().iter().all(|&b| valid_host_byte(b)) => {
            Some(Some(MALFORMED_HOST_REASON))
        }
        _ => None,
    }
}

/// golang.org/x/net/http/httpguts, `validHostByte`.
fn valid_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!$%&'()*+,-.:;=[]_~".contains(&b)
}

/// The reason phrases Go's `badRequestError(…)` puts in the status line (net/http/server.go,
/// `conn.serve`: `"HTTP/1.1 %d %s: %s"`).
const MISSING_HOST_REASON: &[u8] = b"Bad Request: missing required Host header";
const MALFORMED_HOST_REASON: &[u8] = b"Bad Request: malformed Host header";

/// The response for [`host_error`]: an empty `400` (with `reason` as its reason phrase) and
/// `connection: close`, whose head [`GoErrors`] replaces by Go's bytes (hyper adds
/// `content-length` and `date`, which Go's error answer does not have).
fn host_error_response(reason: Option<&'static [u8]>) -> axum::response::Response {
    let mut r = axum::response::Response::new(axum::body::Body::empty());
    *r.status_mut() = axum::http::StatusCode::BAD_REQUEST;
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    if let Some(reason) = reason {
        r.extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(reason));
    }
    r
}

/// Resolves once `rx` turns true (or its sender is gone).
pub async fn stopping(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The response heads hyper writes by itself when it cannot parse a request
/// (hyper/src/proto/h1/role.rs, `Server::on_error`) or that [`host_error_response`] makes,
/// and Go's bytes for the same cases (net/http/server.go, `conn.serve`: the status text, with
/// a `statusError`'s text after a colon, as a plain-text body, then close). Go never answers
/// `414` itself (it reads any request target that fits in the head); ours gets the shape of
/// Go's other error answers and Go's status text (net/http/status.go).
const GO_ERRORS: &[(&[u8], &[u8])] = &[
    (
        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n",
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
          Connection: close\r\n\r\n400 Bad Request",
    ),
    (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n",
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; \
          charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large",
    ),
    (
        b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n",
        b"HTTP/1.1 414 Request URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\n\
          Connection: close\r\n\r\n414 Request URI Too Long",
    ),
    (
        b"HTTP/1.1 400 Bad Request: missing required Host header\r\nconnection: close\r\n\
          content-length: 0\r\n",
        b"HTTP/1.1 400 Bad Request: missing required Host header\r\nContent-Type: text/plain; \
          charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: missing required Host \
          header",
    ),
    (
        b"HTTP/1.1 400 Bad Request: malformed Host header\r\nconnection: close\r\n\
          content-length: 0\r\n",
        b"HTTP/1.1 400 Bad Request: malformed Host header\r\nContent-Type: text/plain; \
          charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: malformed Host header",
    ),
];

/// A connection's stream that replaces hyper's automatic parse-error responses (an empty
/// `400`/`414`/`431` with `connection: close`) and [`host_error_response`] by Go's (see
/// [`GO_ERRORS`]). The application's own `400` replies always have a body and a content type,
/// so they never match.
pub struct GoErrors<T> {
    inner: T,
    /// Go's bytes still to be written, and how many of them are.
    pending: Option<(&'static [u8], usize)>,
}

impl<T> GoErrors<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

impl<T: AsyncWrite + Unpin> GoErrors<T> {
    /// Writes what is left of a replacement.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = self.pending {
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending = (done + n < bytes.len()).then_some((bytes, done + n));
        }
        Poll::Ready(Ok(()))
    }
}

/// Go's bytes for `head` if it is one of hyper's automatic error responses (written whole).
fn go_error(head: &[u8]) -> Option<&'static [u8]> {
    // hyper answers an HTTP/1.0 request in HTTP/1.0; Go writes `HTTP/1.1` whatever the
    // request said (net/http/server.go, `conn.serve`).
    let rest = head
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| head.strip_prefix(b"HTTP/1.0 "))?;
    GO_ERRORS
        .iter()
        .find(|(hyper, _)| {
            rest.starts_with(&hyper[b"HTTP/1.1 ".len()..]) && head.ends_with(b"\r\n\r\n")
        })
        .map(|(_, go)| *go)
}

impl<T: AsyncRead + Unpin> AsyncRead for GoErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GoErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        if let Some(go) = go_error(buf) {
            this.pending = Some((go, 0));
            // hyper's head counts as written; Go's goes out now or at the flush.
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes each response head in one `poll_write`, which is what
    // `go_error` looks at.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_own_error_heads_are_replaced() {
        let hyper400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\
                         date: Tue, 01 Dec 2026 13:30:16 GMT\r\n\r\n";
        assert_eq!(go_error(hyper400), Some(GO_ERRORS[0].1));
        let hyper431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                         content-length: 0\r\ndate: Tue, 01 Dec 2026 13:30:16 GMT\r\n\r\n";
        assert_eq!(go_error(hyper431), Some(GO_ERRORS[1].1));
        let hyper414 = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n\
                         date: Tue, 01 Dec 2026 13:30:16 GMT\r\n\r\n";
        assert_eq!(go_error(hyper414), Some(GO_ERRORS[2].1));
        // The application's 400s have a content type and a body.
        let app = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json; charset=utf-8\r\n\
                    content-length: 29\r\n\r\n{\"message\":\"INVALID_REQUEST\"}";
        assert_eq!(go_error(app), None);
        assert_eq!(go_error(b"HTTP/1.1 200 OK\r\n\r\n"), None);
    }
}

#[cfg(test)]
mod served {
    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// `/ping` answers `OK`, `/peer` the peer address it was given.
    async fn server() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let router = Router::new()
            .route("/ping", get(|| async { "OK" }))
            .route(
                "/peer",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
            )
            .route(
                "/big",
                get(|| async {
                    (
                        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                        r#"{"message":"MSG_TOO_BIG"}"#,
                    )
                }),
            );
        let l = crate::listen::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(serve(l, router, async move {
            let _ = rx.await;
        }));
        (addr, tx)
    }

    /// Sends `req` and reads until the server closes (or 1 s of quiet on a kept-alive
    /// connection).
    async fn exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A refused head may be cut short by the server's close: the answer is what counts.
        let _ = s.write_all(req).await;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn ok(resp: &str) -> bool {
        resp.starts_with("HTTP/1.1 200 OK\r\n") && resp.ends_with("\r\n\r\nOK")
    }

    const GO_400: &str = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
                          Connection: close\r\n\r\n400 Bad Request";
    const GO_431: &str = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: \
                          text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request \
                          Header Fields Too Large";

    /// A 413 says Go's `Request Entity Too Large`, not hyper's `Payload Too Large`.
    #[tokio::test]
    async fn a_413_has_gos_reason_phrase() {
        let (addr, _stop) = server().await;
        let r = exchange(
            addr,
            b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(
            r.starts_with("HTTP/1.1 413 Request Entity Too Large\r\n"),
            "{r}"
        );
        assert!(r.ends_with("{\"message\":\"MSG_TOO_BIG\"}"), "{r}");
    }

    /// Requests hyper cannot parse get Go's exact `400` bytes, then the connection closes.
    #[tokio::test]
    async fn unparsable_requests_get_gos_400() {
        let (addr, _stop) = server().await;
        for req in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET /ping HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            b"GET /ping\r\n\r\n",
        ] {
            assert_eq!(
                exchange(addr, req).await,
                GO_400,
                "{}",
                String::from_utf8_lossy(req)
            );
        }
    }

    /// Go reads a request head of up to 1 MiB + 4096 bytes (`DefaultMaxHeaderBytes` and its
    /// slack) with any number of headers; a longer head gets Go's `431` bytes.
    #[tokio::test]
    async fn heads_up_to_go_max_header_bytes_are_read() {
        let (addr, _stop) = server().await;
        let head = |filler: usize| {
            let start = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ";
            let mut r = start.to_vec();
            r.resize(start.len() + filler, b'a');
            r.extend_from_slice(b"\r\n\r\n");
            r
        };
        let fixed = head(0).len();
        let exact = head(MAX_HEAD_BYTES - fixed);
        assert_eq!(exact.len(), MAX_HEAD_BYTES);
        let resp = exchange(addr, &exact).await;
        assert!(ok(&resp), "{}", &resp[..resp.len().min(200)]);
        let over = head(MAX_HEAD_BYTES - fixed + 1);
        assert_eq!(exchange(addr, &over).await, GO_431);

        let mut many = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".to_vec();
        for i in 0..10_000 {
            many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let resp = exchange(addr, &many).await;
        assert!(ok(&resp), "{}", &resp[..resp.len().min(200)]);
    }

    /// HTTP/1.0 without `Host` is served, as by Go. Every request knows its peer.
    #[tokio::test]
    async fn http10_without_host_and_connect_info() {
        let (addr, _stop) = server().await;
        let resp = exchange(addr, b"GET /ping HTTP/1.0\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.0 200 OK\r\n") && resp.ends_with("\r\n\r\nOK"));
        let resp = exchange(
            addr,
            b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(resp.contains("\r\n\r\n127.0.0.1:"), "{resp}");
    }

    /// An HTTP/1.1 request without `Host` gets Go's exact `400` bytes (net/http/server.go,
    /// `conn.readRequest` and `conn.serve`) and the connection closes, also when it was
    /// preceded by a good request on the same connection; an empty `Host` is a `Host`.
    #[tokio::test]
    async fn http11_without_host_gets_gos_400() {
        const GO_NO_HOST: &str = "HTTP/1.1 400 Bad Request: missing required Host header\r\n\
                                  Content-Type: text/plain; charset=utf-8\r\nConnection: \
                                  close\r\n\r\n400 Bad Request: missing required Host header";
        let (addr, _stop) = server().await;
        for req in [
            &b"GET /ping HTTP/1.1\r\n\r\n"[..],
            b"GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"POST /ping HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
            b"GET /nowhere HTTP/1.1\r\nX-Host: x\r\n\r\n",
        ] {
            assert_eq!(
                exchange(addr, req).await,
                GO_NO_HOST,
                "{}",
                String::from_utf8_lossy(req)
            );
        }
        // Kept alive after a good request, refused (and closed) at the next.
        let resp = exchange(
            addr,
            b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\nGET /ping HTTP/1.1\r\n\r\n",
        )
        .await;
        let first = resp.find("\r\n\r\nOK").expect(&resp) + 6;
        assert!(ok(&resp[..first]), "{resp}");
        assert_eq!(&resp[first..], GO_NO_HOST);
        let resp = exchange(
            addr,
            b"GET /ping HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(ok(&resp), "{resp}");
    }

    /// A `Host` with a byte Go's `httpguts.ValidHostHeader` refuses gets Go's `malformed Host
    /// header`; two `Host` headers get Go's plain `400` (`too many Host headers`); the bytes Go
    /// allows (an IPv6 literal with a zone, sub-delims) are served.
    #[tokio::test]
    async fn a_malformed_or_repeated_host_gets_gos_400() {
        const GO_MALFORMED: &str = "HTTP/1.1 400 Bad Request: malformed Host header\r\n\
                                    Content-Type: text/plain; charset=utf-8\r\nConnection: \
                                    close\r\n\r\n400 Bad Request: malformed Host header";
        let (addr, _stop) = server().await;
        for req in [
            &b"GET /ping HTTP/1.1\r\nHost: a b\r\n\r\n"[..],
            b"GET /ping HTTP/1.1\r\nHost: a/b\r\n\r\n",
            b"GET /ping HTTP/1.0\r\nHost: a\"b\r\n\r\n",
        ] {
            assert_eq!(
                exchange(addr, req).await,
                GO_MALFORMED,
                "{}",
                String::from_utf8_lossy(req)
            );
        }
        let two = b"GET /ping HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
        assert_eq!(exchange(addr, two).await, GO_400);
        let fine = b"GET /ping HTTP/1.1\r\nHost: [fe80::1%25eth0]:80\r\nConnection: close\r\n\r\n";
        let resp = exchange(addr, fine).await;
        assert!(ok(&resp), "{resp}");
        let fine = b"GET /ping HTTP/1.1\r\nHost: a_b~c!$&'()*+,;=\r\nConnection: close\r\n\r\n";
        let resp = exchange(addr, fine).await;
        assert!(ok(&resp), "{resp}");
    }

    /// A request target over `http::Uri`'s 65,534 bytes cannot be served (see the module
    /// comment); the refusal has Go's status text and error format. One that fits is served.
    #[tokio::test]
    async fn overlong_request_target_gets_a_go_shaped_414() {
        let (addr, _stop) = server().await;
        let req = |len: usize| {
            let mut target = b"/ping?".to_vec();
            target.resize(len, b'a');
            let mut r = b"GET ".to_vec();
            r.extend_from_slice(&target);
            r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            r
        };
        let resp = exchange(addr, &req(65_534)).await;
        assert!(ok(&resp), "{resp}");
        assert_eq!(
            exchange(addr, &req(100_000)).await,
            "HTTP/1.1 414 Request URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Connection: close\r\n\r\n414 Request URI Too Long"
        );
    }
}
