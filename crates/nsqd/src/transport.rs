//! A connection's byte streams and the IDENTIFY upgrades between them: plain TCP halves at
//! first, then (as negotiated) TLS, and snappy or deflate on top — each confirmed by one extra
//! `OK` frame sent through the new layer (nsqd/client_v2.go, `UpgradeTLS`, `UpgradeDeflate`, `UpgradeSnappy`).
//!
//! The plain TCP halves ([`FdReader`], [`FdWriter`]) share the connection's one descriptor
//! ([`Socket`]), registered with the reactor for both directions — except while the reader
//! has *parked* it: then it is out of the reactor altogether, so that bytes arriving while a
//! saturated consumer's FINs are collected on a timer wake nobody (when to park is
//! `park.rs`, `ParkPolicy`). The writer writes to a parked socket directly; only when the
//! send buffer is full does it put the socket back in the reactor to wait for writability,
//! and the reader does not park it again until a write has gone through. One descriptor per
//! client, as NSQ (nsqd/client_v2.go keeps one `net.Conn`); an earlier version registered a
//! second descriptor of the socket for writing and held two per client.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::frame;
use nsq_protocol::identify::Negotiated;
use parking_lot::RwLock;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

use nsq_compress::{DeflateReader, DeflateWriter, SnappyReader, SnappyWriter};

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

impl ReadSide {
    /// A read side at end of stream: what a reader holds while its real one is being
    /// upgraded (no allocation: `io::Empty` has no size).
    pub(crate) fn closed() -> ReadSide {
        ReadSide::Boxed(Box::new(tokio::io::empty()))
    }
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

/// Where the connection's one descriptor is.
enum Reg {
    /// In the reactor, for both directions (edge-triggered).
    Registered(TcpStream),
    /// Out of the reactor (parked by the reader): arriving bytes wake nobody.
    Parked(std::net::TcpStream),
    /// Handed on to the TLS layer, or lost because re-registering it failed.
    Gone,
}

fn gone() -> io::Error {
    io::Error::from(io::ErrorKind::NotConnected)
}

/// A plain TCP connection's one descriptor, shared by its two halves. The lock is taken
/// shared for every read and write (they run concurrently) and exclusively only to move the
/// descriptor in or out of the reactor; it is never held across an `.await`.
struct Socket {
    reg: RwLock<Reg>,
    /// The writer is waiting for writability: the socket must stay in the reactor (its waker
    /// would be lost with the registration).
    write_waiting: AtomicBool,
}

impl Socket {
    /// Puts a parked socket back in the reactor.
    fn register(&self) -> io::Result<()> {
        if !matches!(*self.reg.read(), Reg::Parked(_)) {
            return Ok(());
        }
        let mut reg = self.reg.write();
        match std::mem::replace(&mut *reg, Reg::Gone) {
            Reg::Parked(s) => *reg = Reg::Registered(TcpStream::from_std(s)?),
            other => *reg = other,
        }
        Ok(())
    }

    /// Takes the socket out of the reactor, unless the writer is waiting on it.
    fn park(&self) {
        let mut reg = self.reg.write();
        if self.write_waiting.load(Ordering::Acquire) || !matches!(*reg, Reg::Registered(_)) {
            return;
        }
        if let Reg::Registered(s) = std::mem::replace(&mut *reg, Reg::Gone) {
            match s.into_std() {
                Ok(s) => *reg = Reg::Parked(s),
                Err(e) => tracing::debug!("parking a socket: {e}"),
            }
        }
    }

    /// The descriptor for a system call that needs no readiness (non-blocking read, shutdown).
    fn with_fd<R>(&self, f: impl FnOnce(SockRef<'_>) -> io::Result<R>) -> io::Result<R> {
        match &*self.reg.read() {
            Reg::Registered(s) => f(SockRef::from(s)),
            Reg::Parked(s) => f(SockRef::from(s)),
            Reg::Gone => Err(gone()),
        }
    }

    /// The socket as one tokio stream (TLS upgrade); the halves are done with it.
    fn take(&self) -> io::Result<TcpStream> {
        match std::mem::replace(&mut *self.reg.write(), Reg::Gone) {
            Reg::Registered(s) => Ok(s),
            Reg::Parked(s) => TcpStream::from_std(s),
            Reg::Gone => Err(gone()),
        }
    }
}

/// Splits an accepted stream into the two halves of its one descriptor (see the module
/// comment).
pub(crate) fn split(stream: TcpStream) -> io::Result<(ReadSide, WriteSide)> {
    let sock = Arc::new(Socket {
        reg: RwLock::new(Reg::Registered(stream)),
        write_waiting: AtomicBool::new(false),
    });
    Ok((
        ReadSide::Tcp(FdReader {
            sock: sock.clone(),
            chunk: CHUNK_MIN,
        }),
        WriteSide::Tcp(FdWriter {
            sock,
            shutdown_on_drop: true,
        }),
    ))
}

/// The read half of a plain TCP connection.
pub(crate) struct FdReader {
    sock: Arc<Socket>,
    /// Bytes to zero-initialize and read at most next time.
    chunk: usize,
}

impl FdReader {
    /// Leaves the reactor until the next [`FdReader::readable`] or read through `AsyncRead`
    /// (not while the writer waits for writability).
    pub(crate) fn park(&mut self) {
        self.sock.park();
    }

    /// One non-blocking read into `buf`'s spare capacity (not zeroed first). `WouldBlock`
    /// (readiness was stale) and a read that did not fill the spare capacity (the receive
    /// queue is empty) clear the readiness, so the next [`FdReader::readable`] waits for new
    /// bytes instead of paying a read that returns EAGAIN (see [`transfer`]).
    pub(crate) fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match &*self.sock.reg.read() {
            Reg::Registered(s) => {
                let want = buf.capacity() - buf.len();
                transfer(s, Interest::READABLE, want, |_| s.try_read_buf(buf))
            }
            Reg::Parked(_) | Reg::Gone => Err(gone()),
        }
    }

    /// Waits until bytes (or EOF) can be read, re-registering a parked socket.
    pub(crate) async fn readable(&mut self) -> io::Result<()> {
        self.sock.register()?;
        std::future::poll_fn(|cx| match &*self.sock.reg.read() {
            Reg::Registered(s) => s.poll_read_ready(cx),
            // Only the reader parks or takes the socket, and it is here.
            Reg::Parked(_) | Reg::Gone => Poll::Ready(Err(gone())),
        })
        .await
    }

    /// Non-blocking reads on a parked socket until it is empty (or at least `max` bytes were
    /// read; `ParkPolicy::MAX_READ`): everything that arrived during the parked period, in one
    /// go. `None` when nothing is there; `Some(0)` at end of stream.
    ///
    /// One chunk per period is not enough: a fast consumer FINs its whole window while the
    /// reader sleeps, and a window of 2,500 FINs is 52 KiB; reading it a few KiB per period
    /// left the client waiting for a refill with all its work done.
    pub(crate) fn read_parked(
        &mut self,
        buf: &mut BytesMut,
        max: usize,
    ) -> io::Result<Option<usize>> {
        let mut total = 0;
        loop {
            let old = buf.len();
            buf.resize(old + self.chunk, 0);
            let r = self.sock.with_fd(|s| (&*s).read(&mut buf[old..]));
            let n = *r.as_ref().unwrap_or(&0);
            buf.truncate(old + n);
            match r {
                Ok(n) => {
                    let full = n == self.chunk;
                    self.chunk = next_chunk(self.chunk, n);
                    total += n;
                    if !full || total >= max {
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
    fn into_stream(self) -> io::Result<TcpStream> {
        self.sock.take()
    }
}

fn next_chunk(chunk: usize, got: usize) -> usize {
    if got == chunk {
        (chunk * 2).min(CHUNK_MAX)
    } else {
        (got * 2).clamp(CHUNK_MIN, CHUNK_MAX)
    }
}

/// One system call on a registered socket (`io` reads or writes at most `want` bytes). A
/// call that moves fewer bytes than asked emptied the receive queue (or filled the send
/// buffer): with epoll's edge-triggered readiness the next edge is awaited instead of paying
/// a call that returns EAGAIN (as tokio's own `TcpStream::poll_read` does). The closure
/// reports a short transfer to `try_io` as `WouldBlock`, which clears the readiness with the
/// tick it saw *before* the call, so an edge that arrived meanwhile is kept. One syscall less
/// per request for a PUB-per-round-trip publisher.
fn transfer(
    s: &TcpStream,
    interest: Interest,
    want: usize,
    io: impl FnOnce(SockRef<'_>) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut done = None;
    let r = s.try_io(interest, || {
        let n = io(SockRef::from(s))?;
        done = Some(n);
        if n > 0 && n < want {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match done {
        Some(n) => Ok(n),
        None => r,
    }
}

impl AsyncRead for FdReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.sock.register()?;
        let reg = this.sock.reg.read();
        let Reg::Registered(s) = &*reg else {
            return Poll::Ready(Err(gone()));
        };
        loop {
            std::task::ready!(s.poll_read_ready(cx))?;
            let want = this.chunk.min(buf.remaining());
            let dst = buf.initialize_unfilled_to(want);
            match transfer(s, Interest::READABLE, want, |fd| (&*fd).read(dst)) {
                Ok(n) => {
                    buf.advance(n);
                    this.chunk = next_chunk(this.chunk, n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// The write half of a plain TCP connection.
pub(crate) struct FdWriter {
    sock: Arc<Socket>,
    /// False once the socket is handed on (TLS upgrade): dropping this half then must not
    /// shut the connection's write direction down.
    shutdown_on_drop: bool,
}

impl AsyncWrite for FdWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let sock = &self.sock;
        loop {
            let reg = sock.reg.read();
            match &*reg {
                Reg::Registered(s) => {
                    if s.poll_write_ready(cx)?.is_pending() {
                        // Set under the shared lock, which `park` takes exclusively.
                        sock.write_waiting.store(true, Ordering::Release);
                        return Poll::Pending;
                    }
                    match transfer(s, Interest::WRITABLE, buf.len(), |fd| (&*fd).write(buf)) {
                        Ok(n) => {
                            sock.write_waiting.store(false, Ordering::Release);
                            return Poll::Ready(Ok(n));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Reg::Parked(s) => match (&*s).write(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // The send buffer is full: back into the reactor to wait for room.
                        sock.write_waiting.store(true, Ordering::Release);
                        drop(reg);
                        sock.register()?;
                    }
                    r => return Poll::Ready(r),
                },
                Reg::Gone => return Poll::Ready(Err(gone())),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.sock.with_fd(|s| s.shutdown(Shutdown::Write)))
    }
}

impl Drop for FdWriter {
    fn drop(&mut self) {
        // As tokio's write half does on drop: the peer sees EOF even while the read half
        // is still open.
        if self.shutdown_on_drop {
            let _ = self.sock.with_fd(|s| s.shutdown(Shutdown::Write));
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

/// A layer an upgrade put in place, reported as soon as it is (before its `OK` goes out), for
/// `/stats` and the auth server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layer {
    Tls {
        version: String,
        cipher_suite: String,
        /// The client certificate's subject CN (`""` without one).
        common_name: String,
    },
    Snappy,
    Deflate,
}

/// Performs the negotiated upgrades in the reference's order (TLS, then snappy or deflate),
/// telling `record` about each as soon as it is in place.
pub(crate) async fn upgrade(
    mut rd: ReadSide,
    mut wr: WriteSide,
    negotiated: &Negotiated,
    tls: Option<&Arc<rustls::ServerConfig>>,
    record: &mut (dyn FnMut(Layer) + Send),
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
        let (_, conn) = tls_stream.get_ref();
        record(Layer::Tls {
            version: conn
                .protocol_version()
                .map(crate::tls::version_name)
                .unwrap_or_default()
                .to_string(),
            cipher_suite: conn
                .negotiated_cipher_suite()
                .map(crate::tls::cipher_suite_name)
                .unwrap_or_default(),
            common_name: crate::tls::peer_common_name(conn),
        });
        let (r, w) = tokio::io::split(tls_stream);
        rd = ReadSide::Boxed(Box::new(r));
        wr = WriteSide::Boxed(Box::new(w));
        send_ok(&mut wr).await?;
    }
    if negotiated.snappy {
        rd = ReadSide::Boxed(Box::new(SnappyReader::new(rd)));
        wr = WriteSide::Boxed(Box::new(SnappyWriter::new(wr)));
        record(Layer::Snappy);
        send_ok(&mut wr).await?;
    } else if negotiated.deflate {
        rd = ReadSide::Boxed(Box::new(DeflateReader::new(rd)));
        let level = negotiated.deflate_level.clamp(1, 9) as u32;
        wr = WriteSide::Boxed(Box::new(DeflateWriter::new(wr, level)));
        record(Layer::Deflate);
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

    /// A read that leaves spare capacity emptied the receive queue: the readiness is cleared,
    /// so waiting for the next bytes costs no read that returns EAGAIN (one `recvfrom` per
    /// request for a PUB-per-round-trip publisher, not two), and the next bytes still wake it.
    #[tokio::test]
    async fn a_short_read_clears_readiness_and_new_bytes_set_it() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (ReadSide::Tcp(mut rd), _wr) = split(server).unwrap() else {
            panic!("plain TCP splits into descriptors");
        };
        let mut buf = BytesMut::new();
        for round in 0..3u8 {
            client.write_all(&[round; 100]).await.unwrap();
            rd.readable().await.unwrap();
            buf.reserve(4096);
            assert_eq!(rd.try_read_buf(&mut buf).unwrap(), 100, "round {round}");
            let wait = tokio::time::timeout(Duration::from_millis(50), rd.readable()).await;
            assert!(
                wait.is_err(),
                "round {round}: readiness cleared by the short read"
            );
        }
        assert_eq!(buf.len(), 300);
        assert!(buf[200..].iter().all(|b| *b == 2));
    }

    /// The writer of a parked socket writes to it directly; when the send buffer fills, it
    /// puts the socket back in the reactor and waits for room, and the reader cannot park it
    /// again meanwhile (the wait would be lost). Everything arrives once the peer reads.
    #[tokio::test]
    async fn writer_fills_a_parked_socket_and_waits_for_room() {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (ReadSide::Tcp(mut rd), WriteSide::Tcp(mut wr)) = split(server).unwrap() else {
            panic!("plain TCP splits into descriptors");
        };
        rd.park();
        assert!(matches!(*rd.sock.reg.read(), Reg::Parked(_)));
        // Far more than the socket buffers hold on loopback.
        let data: Vec<u8> = (0..32 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let writer = tokio::spawn(async move {
            wr.write_all(&data).await.unwrap();
            wr.shutdown().await.unwrap();
            data
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished(), "the send buffer filled");
        assert!(
            matches!(*rd.sock.reg.read(), Reg::Registered(_)),
            "back in the reactor"
        );
        rd.park();
        assert!(
            matches!(*rd.sock.reg.read(), Reg::Registered(_)),
            "not parked while the writer waits"
        );
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut got))
            .await
            .expect("everything within 30 s")
            .unwrap();
        let data = writer.await.unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data);
        rd.park();
        assert!(matches!(*rd.sock.reg.read(), Reg::Parked(_)), "parks again");
    }

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
        assert_eq!(
            rd.read_parked(&mut buf, 1024 * 1024).unwrap(),
            None,
            "nothing there yet"
        );
        // 2,500 FINs: far more than one read chunk.
        let fins = b"FIN 0123456789abcdef\n".repeat(2500);
        client.write_all(&fins).await.unwrap();
        client.flush().await.unwrap();
        // Loopback queues the bytes at the receiver during the write; the pause is margin.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let n = rd.read_parked(&mut buf, 1024 * 1024).unwrap();
        assert_eq!(
            n,
            Some(fins.len()),
            "one call takes everything that arrived"
        );
        assert_eq!(&buf[..], &fins[..]);
        drop(client);
        let mut eof = None;
        for _ in 0..200 {
            eof = rd.read_parked(&mut buf, 1024 * 1024).unwrap();
            if eof.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(eof, Some(0), "end of stream");
    }
}
