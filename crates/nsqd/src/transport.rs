//! A connection's byte streams and the IDENTIFY upgrades between them: plain TCP halves at
//! first, then (as negotiated) TLS, and snappy or deflate on top — each confirmed by one extra
//! `OK` frame sent through the new layer (nsqd/client_v2.go, `UpgradeTLS`, `UpgradeDeflate`, `UpgradeSnappy`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::frame;
use nsq_protocol::identify::Negotiated;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::client::Client;
use crate::compress::{DeflateReader, DeflateWriter, SnappyReader, SnappyWriter};

/// The TLS handshake deadline.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The read side of a connection: the plain TCP half until an upgrade wraps it.
pub(crate) enum ReadSide {
    Tcp(OwnedReadHalf),
    Boxed(Box<dyn AsyncRead + Unpin + Send>),
}

/// The write side of a connection, owned by the writer task except during an upgrade.
pub(crate) enum WriteSide {
    Tcp(OwnedWriteHalf),
    Boxed(Box<dyn AsyncWrite + Unpin + Send>),
}

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadSide::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ReadSide::Boxed(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteSide {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteSide::Boxed(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteSide::Boxed(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteSide::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteSide::Boxed(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

async fn send_ok(wr: &mut WriteSide) -> io::Result<()> {
    let mut b = BytesMut::new();
    frame::put_response(&mut b, frame::OK);
    wr.write_all(&b).await?;
    wr.flush().await
}

/// Why a negotiated upgrade failed (logged; the connection is closed).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("TLS negotiated without a TLS config")]
    NoTlsConfig,
    #[error("TLS requested on an already upgraded connection")]
    AlreadyUpgraded,
    #[error(transparent)]
    Reunite(#[from] tokio::net::tcp::ReuniteError),
    #[error("TLS handshake timeout")]
    HandshakeTimeout,
    /// The handshake failed, or writing the `OK` did.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Performs the negotiated upgrades in the reference's order (TLS, then snappy or deflate),
/// recording them in the client's metadata for `/stats`.
pub(crate) async fn upgrade(
    mut rd: ReadSide,
    mut wr: WriteSide,
    negotiated: &Negotiated,
    tls: Option<&Arc<rustls::ServerConfig>>,
    client: &Client,
) -> Result<(ReadSide, WriteSide), UpgradeError> {
    if negotiated.tls_v1 {
        let config = tls.ok_or(UpgradeError::NoTlsConfig)?;
        let (ReadSide::Tcp(r), WriteSide::Tcp(w)) = (rd, wr) else {
            return Err(UpgradeError::AlreadyUpgraded);
        };
        let stream = r.reunite(w)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
        let tls_stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
            .await
            .map_err(|_| UpgradeError::HandshakeTimeout)??;
        {
            let (_, conn) = tls_stream.get_ref();
            let mut meta = client.meta.lock();
            meta.tls = true;
            meta.tls_version = conn
                .protocol_version()
                .map(crate::tls::version_name)
                .unwrap_or_default()
                .to_string();
            meta.tls_cipher_suite = conn
                .negotiated_cipher_suite()
                .map(crate::tls::cipher_suite_name)
                .unwrap_or_default();
            meta.tls_common_name = crate::tls::peer_common_name(conn);
        }
        let (r, w) = tokio::io::split(tls_stream);
        rd = ReadSide::Boxed(Box::new(r));
        wr = WriteSide::Boxed(Box::new(w));
        send_ok(&mut wr).await?;
    }
    if negotiated.snappy {
        rd = ReadSide::Boxed(Box::new(SnappyReader::new(rd)));
        wr = WriteSide::Boxed(Box::new(SnappyWriter::new(wr)));
        client.meta.lock().snappy = true;
        send_ok(&mut wr).await?;
    } else if negotiated.deflate {
        rd = ReadSide::Boxed(Box::new(DeflateReader::new(rd)));
        let level = negotiated.deflate_level.clamp(1, 9) as u32;
        wr = WriteSide::Boxed(Box::new(DeflateWriter::new(wr, level)));
        client.meta.lock().deflate = true;
        // The reference's first deflate bytes are an empty sync block (its pump flushes the
        // idle client) and then the OK: send the same bytes (client_v2.go, `UpgradeDeflate`).
        wr.flush().await?;
        send_ok(&mut wr).await?;
    }
    Ok((rd, wr))
}
