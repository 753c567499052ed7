//! A connection's byte streams and the IDENTIFY upgrades between them: plain TCP halves at
//! first, then (as negotiated) TLS, and snappy or deflate on top — each confirmed by one extra
//! `OK` frame sent through the new layer (nsqd/client_v2.go, `UpgradeTLS`, `UpgradeDeflate`, `UpgradeSnappy`).
//!
//! The plain TCP halves are two descriptors of the one socket ([`FdReader`], [`FdWriter`]),
//! registered with the reactor separately: the writer for writability only, the reader for
//! readability — and the reader can *park* (leave the reactor), so that bytes arriving while a
//! saturated consumer's FINs are collected on a timer wake nobody (see
//! `protocol_v2::read_loop`). A single tokio `TcpStream` is registered for both directions, so
//! every FIN segment would wake the daemon.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::frame;
use nsq_protocol::identify::Negotiated;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::client::Client;
use crate::compress::{DeflateReader, DeflateWriter, SnappyReader, SnappyWriter};

/// The TLS handshake deadline.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The read side of a connection: the plain TCP half until an upgrade wraps it.
pub(crate) enum ReadSide {
    Tcp(FdReader),
    Boxed(Box<dyn AsyncRead + Unpin + Send>),
}

/// The write side of a connection, owned by the writer task except during an upgrade.
pub(crate) enum WriteSide {
    Tcp(FdWriter),
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

/// Smallest and largest reads (the buffer space zeroed before each read grows after full
/// reads and shrinks after short ones, so FIN-sized reads do not clear 64 KiB each time).
const CHUNK_MIN: usize = 4 * 1024;
const CHUNK_MAX: usize = 64 * 1024;
/// At most this much is read from a parked socket at once (see `FdReader::read_parked`).
const PARKED_READ_MAX: usize = 1024 * 1024;

/// Registers a socket descriptor this process owns for the given readiness.
// `AsyncFd::with_interest` is deprecated since tokio 1.54 because a `T` that does not own its
// descriptor (a bare `RawFd`) could be closed while registered; here `T` is the owning
// `std::net::TcpStream`, moved into the `AsyncFd`, so that cannot happen (and the workspace
// forbids the `unsafe` successor).
#[allow(deprecated)]
fn register(
    s: std::net::TcpStream,
    interest: Interest,
) -> io::Result<AsyncFd<std::net::TcpStream>> {
    AsyncFd::with_interest(s, interest)
}

/// Splits an accepted stream into the two halves (see the module comment).
pub(crate) fn split(stream: TcpStream) -> io::Result<(ReadSide, WriteSide)> {
    let s = stream.into_std()?;
    let w = s.try_clone()?;
    Ok((
        ReadSide::Tcp(FdReader {
            fd: Some(register(s, Interest::READABLE)?),
            parked: None,
            chunk: CHUNK_MIN,
        }),
        WriteSide::Tcp(FdWriter {
            fd: register(w, Interest::WRITABLE)?,
            shutdown_on_drop: true,
        }),
    ))
}

/// The read half of a plain TCP connection.
pub(crate) struct FdReader {
    /// Registered for readability (`None` while parked).
    fd: Option<AsyncFd<std::net::TcpStream>>,
    /// The socket while parked: not registered, so arriving bytes wake nobody.
    parked: Option<std::net::TcpStream>,
    /// Bytes to zero-initialize and read at most next time.
    chunk: usize,
}

impl FdReader {
    fn unpark(&mut self) -> io::Result<()> {
        if let Some(s) = self.parked.take() {
            self.fd = Some(register(s, Interest::READABLE)?);
        }
        Ok(())
    }

    /// Leaves the reactor until the next [`FdReader::readable`] or read through `AsyncRead`.
    pub(crate) fn park(&mut self) {
        if let Some(f) = self.fd.take() {
            self.parked = Some(f.into_inner());
        }
    }

    /// Waits until bytes (or EOF) can be read, re-registering a parked socket.
    pub(crate) async fn readable(&mut self) -> io::Result<()> {
        self.unpark()?;
        let fd = self.fd.as_ref().expect("unparked");
        // Dropping the guard keeps the readiness for the read that follows.
        fd.readable().await.map(|_| ())
    }

    /// Non-blocking reads on a parked socket until it is empty (or `PARKED_READ_MAX` bytes
    /// were read): everything that arrived during the parked period, in one go. `None` when
    /// nothing is there; `Some(0)` at end of stream.
    ///
    /// One chunk per period is not enough: a fast consumer FINs its whole window while the
    /// reader sleeps, and a window of 2,500 FINs is 52 KiB; reading it a few KiB per period
    /// left the client waiting for a refill with all its work done.
    pub(crate) fn read_parked(&mut self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        let s = match (&self.parked, &self.fd) {
            (Some(s), _) => s,
            (None, Some(f)) => f.get_ref(),
            (None, None) => unreachable!("a reader always holds its socket"),
        };
        let mut total = 0;
        loop {
            let old = buf.len();
            buf.resize(old + self.chunk, 0);
            let r = (&*s).read(&mut buf[old..]);
            let n = *r.as_ref().unwrap_or(&0);
            buf.truncate(old + n);
            match r {
                Ok(n) => {
                    let full = n == self.chunk;
                    self.chunk = next_chunk(self.chunk, n);
                    total += n;
                    if !full || total >= PARKED_READ_MAX {
                        return Ok(Some(total));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok((total > 0).then_some(total));
                }
                Err(e) if total > 0 => {
                    // Hand over what was read; the error comes back on the next read.
                    tracing::debug!("parked read: {e}");
                    return Ok(Some(total));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The socket as one tokio stream again (TLS upgrade), registered for both directions.
    fn into_stream(mut self) -> io::Result<TcpStream> {
        let s = match (self.parked.take(), self.fd.take()) {
            (Some(s), _) => s,
            (None, Some(f)) => f.into_inner(),
            (None, None) => unreachable!("a reader always holds its socket"),
        };
        TcpStream::from_std(s)
    }
}

fn next_chunk(chunk: usize, got: usize) -> usize {
    if got == chunk {
        (chunk * 2).min(CHUNK_MAX)
    } else {
        (got * 2).clamp(CHUNK_MIN, CHUNK_MAX)
    }
}

impl AsyncRead for FdReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.unpark()?;
        let fd = this.fd.as_ref().expect("unparked");
        loop {
            let mut guard = std::task::ready!(fd.poll_read_ready(cx))?;
            let want = this.chunk.min(buf.remaining());
            let dst = buf.initialize_unfilled_to(want);
            match guard.try_io(|inner| {
                let mut s: &std::net::TcpStream = inner.get_ref();
                s.read(dst)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    this.chunk = next_chunk(this.chunk, n);
                    // A short read emptied the socket: with epoll's edge-triggered readiness,
                    // wait for the next edge instead of paying a read that returns EAGAIN (as
                    // tokio's own TcpStream does; the guard's tick keeps an edge that arrived
                    // meanwhile). One syscall less per request for a PUB-per-round-trip
                    // publisher.
                    if n > 0 && n < want {
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The write half of a plain TCP connection (registered for writability only).
pub(crate) struct FdWriter {
    fd: AsyncFd<std::net::TcpStream>,
    /// False once the socket is handed on (TLS upgrade): dropping this descriptor then must
    /// not shut the connection's write direction down.
    shutdown_on_drop: bool,
}

impl AsyncWrite for FdWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = std::task::ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|inner| {
                let mut s: &std::net::TcpStream = inner.get_ref();
                s.write(buf)
            }) {
                Ok(Ok(n)) => {
                    // A short write filled the send buffer: wait for the next edge (see
                    // `FdReader::poll_read`).
                    if n > 0 && n < buf.len() {
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(n));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.fd.get_ref().shutdown(Shutdown::Write))
    }
}

impl Drop for FdWriter {
    fn drop(&mut self) {
        // As tokio's write half does on drop: the peer sees EOF even while the read half
        // (the other descriptor) is still open.
        if self.shutdown_on_drop {
            let _ = self.fd.get_ref().shutdown(Shutdown::Write);
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
        let mut w = w;
        w.shutdown_on_drop = false;
        drop(w);
        let stream = r.into_stream()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A parked socket is read until it is empty: a window's worth of FINs that arrived while
    /// the reader slept comes back from one `read_parked`, not a chunk per period.
    #[tokio::test]
    async fn parked_read_takes_everything_that_arrived() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (ReadSide::Tcp(mut rd), _wr) = split(server).unwrap() else {
            panic!("plain TCP splits into descriptors");
        };
        rd.park();
        let mut buf = BytesMut::new();
        assert_eq!(rd.read_parked(&mut buf).unwrap(), None, "nothing there yet");
        // 2,500 FINs: far more than one read chunk.
        let fins = b"FIN 0123456789abcdef\n".repeat(2500);
        client.write_all(&fins).await.unwrap();
        client.flush().await.unwrap();
        // Loopback queues the bytes at the receiver during the write; the pause is margin.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let n = rd.read_parked(&mut buf).unwrap();
        assert_eq!(
            n,
            Some(fins.len()),
            "one call takes everything that arrived"
        );
        assert_eq!(&buf[..], &fins[..]);
        drop(client);
        let mut eof = None;
        for _ in 0..200 {
            eof = rd.read_parked(&mut buf).unwrap();
            if eof.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(eof, Some(0), "end of stream");
    }
}
