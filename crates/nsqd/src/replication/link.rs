//! The link's byte stream (docs/replication.md, "Membership"): plain TCP, or TLS when nsqd
//! has `--tls-cert`. The origin starts TLS right after the `"  R1"` magic; the replica, with
//! a certificate, requires it. The origin verifies the replica's certificate when
//! `--tls-root-ca-file` is given; the membership proofs cover the TLS session's exported
//! keying material ([`LinkStream::binding`]), so a proof made on one TLS session is worthless
//! on another (a man in the middle that terminates TLS on both sides cannot relay it).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use nsq_protocol::replication::{self as wire, Frame};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The label of the keying material the proofs cover (RFC 5705 exporter).
const EXPORTER_LABEL: &[u8] = b"EXPORTER-nsq-replication-link";

/// TLS for links: built from `--tls-cert`, `--tls-key`, `--tls-root-ca-file`.
#[derive(Debug, Clone)]
pub(crate) struct LinkTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl LinkTls {
    /// `None` without `--tls-cert`; errors in nsqd's TLS words.
    pub(crate) fn build(
        cert: &str,
        key: &str,
        root_ca_file: &str,
    ) -> Result<Option<LinkTls>, String> {
        if cert.is_empty() && key.is_empty() {
            return Ok(None);
        }
        let err = |e: crate::tls::TlsError| format!("failed to build the link's TLS config - {e}");
        let provider = Arc::new(crate::tls::provider());
        let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
        let certs = crate::tls::load_certs(cert).map_err(err)?;
        let key = crate::tls::load_key(key).map_err(err)?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| err(e.into()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| err(e.into()))?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| err(e.into()))?;
        let client = if root_ca_file.is_empty() {
            builder
                .dangerous()
                .with_custom_certificate_verifier(nsq_tls::SkipServerVerify::new(&provider))
                .with_no_client_auth()
        } else {
            let (roots, _) = crate::tls::load_roots(root_ca_file).map_err(err)?;
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        Ok(Some(LinkTls {
            server: Arc::new(server),
            client: Arc::new(client),
        }))
    }

    /// The origin's side: TLS over `tcp` to `addr` (`host:port`; the host is the name the
    /// replica's certificate is checked against).
    pub(crate) async fn connect(&self, tcp: TcpStream, addr: &str) -> io::Result<LinkStream> {
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let c = TlsConnector::from(self.client.clone());
        let s = tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, c.connect(name, tcp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(LinkStream::Client(Box::new(s)))
    }

    /// The replica's side.
    pub(crate) async fn accept(&self, tcp: TcpStream) -> io::Result<LinkStream> {
        let a = TlsAcceptor::from(self.server.clone());
        let s = tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, a.accept(tcp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(LinkStream::Server(Box::new(s)))
    }
}

/// A link's connection.
pub(crate) enum LinkStream {
    Plain(TcpStream),
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl LinkStream {
    /// What the membership proofs are bound to: 32 bytes of the TLS session's exported
    /// keying material, or nothing on plain TCP.
    pub(crate) fn binding(&self) -> Vec<u8> {
        let out = [0u8; 32];
        let r = match self {
            LinkStream::Plain(_) => return Vec::new(),
            LinkStream::Server(s) => {
                s.get_ref()
                    .1
                    .export_keying_material(out, EXPORTER_LABEL, None)
            }
            LinkStream::Client(s) => {
                s.get_ref()
                    .1
                    .export_keying_material(out, EXPORTER_LABEL, None)
            }
        };
        // Only fails before the handshake ends, which it has: no binding then fails the proof.
        r.map(|b| b.to_vec()).unwrap_or_default()
    }

    /// Whether the link is TLS.
    pub(crate) fn is_tls(&self) -> bool {
        !matches!(self, LinkStream::Plain(_))
    }

    /// Read and write halves (a plain stream splits without a lock).
    pub(crate) fn split(self) -> (LinkRead, LinkWrite) {
        match self {
            LinkStream::Plain(s) => {
                let (r, w) = s.into_split();
                (LinkRead::Plain(r), LinkWrite::Plain(w))
            }
            tls => {
                let (r, w) = tokio::io::split(tls);
                (LinkRead::Tls(r), LinkWrite::Tls(w))
            }
        }
    }
}

impl AsyncRead for LinkStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            LinkStream::Server(s) => Pin::new(s).poll_read(cx, buf),
            LinkStream::Client(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            LinkStream::Server(s) => Pin::new(s).poll_write(cx, buf),
            LinkStream::Client(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_flush(cx),
            LinkStream::Server(s) => Pin::new(s).poll_flush(cx),
            LinkStream::Client(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            LinkStream::Server(s) => Pin::new(s).poll_shutdown(cx),
            LinkStream::Client(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The read half of a link.
pub(crate) enum LinkRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<LinkStream>),
}

/// The write half of a link.
pub(crate) enum LinkWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<LinkStream>),
}

impl AsyncRead for LinkRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkRead::Plain(s) => Pin::new(s).poll_read(cx, buf),
            LinkRead::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkWrite::Plain(s) => Pin::new(s).poll_write(cx, buf),
            LinkWrite::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkWrite::Plain(s) => Pin::new(s).poll_flush(cx),
            LinkWrite::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkWrite::Plain(s) => Pin::new(s).poll_shutdown(cx),
            LinkWrite::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Reads one frame with a deadline (5 s: the dead-link rule).
pub(super) async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    max_frame: u32,
) -> Result<Frame, String> {
    loop {
        match wire::decode(buf, max_frame) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(format!("bad frame - {e}")),
        }
        buf.reserve(8 << 10);
        match tokio::time::timeout(super::LINK_TIMEOUT, rd.read_buf(buf)).await {
            Err(_) => return Err(format!("no frame for {:?}", super::LINK_TIMEOUT)),
            Ok(Ok(0)) => return Err("connection closed".into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
        }
    }
}
