//! Opening a V2 connection to nsqd: dial, magic, IDENTIFY, then the upgrades IDENTIFY
//! negotiated (TLS, then deflate or snappy, each confirmed by one `OK` read through the new
//! layer) and AUTH — in go-nsq's order (conn.go, Connect/identify/upgradeTLS/upgradeDeflate/
//! upgradeSnappy/auth). The result is a [`FrameReader`] and a boxed writer that the producer
//! and consumer connection tasks own.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_compress::{DeflateReader, DeflateWriter, SnappyReader, SnappyWriter};
use nsq_protocol::command;
use nsq_protocol::frame::{self, Frame, FrameType};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::config::Config;
use crate::error::{Error, ServerError};
use crate::golog::{GoLog, LogLevel};
use crate::tls;

/// The read side after the upgrades.
pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The write side after the upgrades; every write is followed by a flush (a compressing
/// writer emits its sync-flushed output then).
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// What nsqd answered to IDENTIFY (its `feature_negotiation` JSON); defaults when it answered
/// a bare `OK`. The same type nsqd serializes.
pub use nsq_protocol::identify::IdentifyResponse;

/// What nsqd answered to AUTH.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct AuthResponse {
    pub identity: String,
    pub identity_url: String,
    pub permission_count: i64,
}

/// An open, identified connection.
pub(crate) struct Connected {
    pub(crate) reader: FrameReader,
    pub(crate) writer: BoxWrite,
    pub(crate) identify: IdentifyResponse,
}

/// Reads whole frames from a byte stream into one reused buffer; a frame's data is a
/// zero-copy slice of it.
pub(crate) struct FrameReader {
    inner: BoxRead,
    buf: BytesMut,
    read_timeout: Duration,
}

/// Room kept free in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;

impl FrameReader {
    fn new(inner: BoxRead, read_timeout: Duration) -> Self {
        FrameReader {
            inner,
            buf: BytesMut::with_capacity(READ_CHUNK),
            read_timeout,
        }
    }

    /// The next frame; `Ok(None)` at a clean end of stream. A read that waits longer than
    /// the read timeout (no heartbeat either) is `TimedOut`.
    pub(crate) async fn next(&mut self) -> Result<Option<Frame>, Error> {
        loop {
            if let Some(f) =
                frame::take_frame(&mut self.buf).map_err(|e| Error::Protocol(e.to_string()))?
            {
                return Ok(Some(f));
            }
            self.buf.reserve(READ_CHUNK);
            let n = tokio::time::timeout(self.read_timeout, self.inner.read_buf(&mut self.buf))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "read timeout"))??;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
        }
    }
}

/// Reads exactly one frame without reading past it (before an upgrade, the bytes after the
/// frame belong to the next layer), as go-nsq's `ReadUnpackedResponse` does.
async fn read_one_frame<R: AsyncRead + Unpin + ?Sized>(r: &mut R) -> Result<Frame, Error> {
    let size = r.read_u32().await? as usize;
    if size < 4 {
        return Err(Error::Protocol(
            frame::FrameError::InvalidSize(size).to_string(),
        ));
    }
    let frame_type = r.read_i32().await?;
    let mut data = vec![0; size - 4];
    r.read_exact(&mut data).await?;
    Ok(Frame {
        frame_type,
        data: Bytes::from(data),
    })
}

/// Expects the `OK` that confirms an upgrade.
async fn expect_ok<R: AsyncRead + Unpin + ?Sized>(r: &mut R, what: &str) -> Result<(), Error> {
    let f = read_one_frame(r).await?;
    if f.frame_type != FrameType::Response as i32 || &f.data[..] != frame::OK {
        return Err(Error::Identify(format!(
            "invalid response from {what} upgrade"
        )));
    }
    Ok(())
}

async fn write_flush<W: AsyncWrite + Unpin + ?Sized>(w: &mut W, data: &[u8]) -> io::Result<()> {
    w.write_all(data).await?;
    w.flush().await
}

/// Dials `addr` (host:port) and bootstraps the connection. The whole handshake is bounded by
/// the dial timeout plus the read timeout.
///
/// `golog` gets go-nsq's lines of these steps (conn.go, `identify` and `auth`).
pub(crate) async fn connect(
    addr: &str,
    config: &Config,
    golog: &GoLog,
) -> Result<Connected, Error> {
    let budget = config.dial_timeout + config.read_timeout;
    tokio::time::timeout(budget, connect_inner(addr, config, golog))
        .await
        .map_err(|_| Error::Io(io::Error::new(io::ErrorKind::TimedOut, "handshake timeout")))?
}

/// Dials `addr`, trying each address it resolves to (as Go's dialer does); a failure is
/// [`Error::Dial`], named after the last address tried.
async fn dial(addr: &str, config: &Config) -> Result<TcpStream, Error> {
    // A deadline that has passed before the dial starts (a negative `dial_timeout`, kept as
    // 1 ns by `Config::set`): Go's dialer fails with `i/o timeout` without connecting, where a
    // loopback connect here could complete within the first poll.
    if !config.dial_timeout.is_zero() && config.dial_timeout < Duration::from_micros(1) {
        return Err(Error::Dial {
            addr: addr.to_string(),
            source: io::Error::new(io::ErrorKind::TimedOut, "dial timeout"),
        });
    }
    let mut last_addr = addr.to_string();
    let dial = async {
        let remotes = tokio::net::lookup_host(addr).await?;
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address");
        for remote in remotes {
            last_addr = remote.to_string();
            let sock = if remote.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            if let Some(local) = config.local_addr {
                sock.bind(local)?;
            }
            match sock.connect(remote).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    let result = tokio::time::timeout(config.dial_timeout, dial).await;
    let stream = match result {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => {
            return Err(Error::Dial {
                addr: last_addr,
                source,
            })
        }
        Err(_) => {
            return Err(Error::Dial {
                addr: last_addr,
                source: io::Error::new(io::ErrorKind::TimedOut, "dial timeout"),
            })
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn connect_inner(addr: &str, config: &Config, golog: &GoLog) -> Result<Connected, Error> {
    let mut tcp = dial(addr, config).await?;

    let mut hello = BytesMut::with_capacity(512);
    hello.extend_from_slice(nsq_protocol::MAGIC_V2);
    command::put_identify(&mut hello, &config.identify_json());
    write_flush(&mut tcp, &hello).await?;

    let f = read_one_frame(&mut tcp)
        .await
        .map_err(|e| Error::Identify(e.to_string()))?;
    if f.frame_type == FrameType::Error as i32 {
        return Err(Error::Identify(ServerError::from_frame(&f.data).text));
    }
    let identify: IdentifyResponse = if f.data.first() == Some(&b'{') {
        serde_json::from_slice(&f.data).map_err(|e| Error::Identify(e.to_string()))?
    } else {
        IdentifyResponse {
            max_rdy_count: 2500,
            ..Default::default()
        }
    };

    let (mut reader, mut writer): (BoxRead, BoxWrite) = if identify.tls_v1 {
        golog.conn(LogLevel::Info, addr, "upgrading to TLS");
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let connector = tokio_rustls::TlsConnector::from(tls::client_config(&config.tls)?);
        let name = tls::server_name(host)?;
        let mut stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| Error::Tls(e.to_string()))?;
        expect_ok(&mut stream, "TLS").await?;
        let (r, w) = tokio::io::split(stream);
        (Box::new(r), Box::new(w))
    } else {
        let (r, w) = tcp.into_split();
        (Box::new(r), Box::new(w))
    };

    if identify.deflate {
        golog.conn(LogLevel::Info, addr, "upgrading to Deflate");
        reader = Box::new(DeflateReader::new(reader));
        writer = Box::new(DeflateWriter::new(writer, config.deflate_level));
        expect_ok(&mut reader, "Deflate").await?;
    } else if identify.snappy {
        golog.conn(LogLevel::Info, addr, "upgrading to Snappy");
        reader = Box::new(SnappyReader::new(reader));
        writer = Box::new(SnappyWriter::new(writer));
        expect_ok(&mut reader, "Snappy").await?;
    }

    if identify.auth_required {
        let Some(secret) = &config.auth_secret else {
            return Err(Error::AuthRequired);
        };
        let mut buf = BytesMut::new();
        command::put_auth(&mut buf, secret.as_bytes());
        write_flush(&mut writer, &buf).await?;
        let f = read_one_frame(&mut reader).await?;
        if f.frame_type == FrameType::Error as i32 {
            return Err(Error::Auth(String::from_utf8_lossy(&f.data).into_owned()));
        }
        let resp: AuthResponse =
            serde_json::from_slice(&f.data).map_err(|e| Error::Auth(e.to_string()))?;
        tracing::info!(
            "({addr}) Auth accepted. Identity: {:?} {} Permissions: {}",
            resp.identity,
            resp.identity_url,
            resp.permission_count
        );
        golog.log(LogLevel::Info, || {
            format!(
                "({addr}) Auth accepted. Identity: {:?} {} Permissions: {}",
                resp.identity, resp.identity_url, resp.permission_count
            )
        });
    }

    Ok(Connected {
        reader: FrameReader::new(reader, config.read_timeout),
        writer,
        identify,
    })
}

/// Writes `buf` and flushes, bounded by the write timeout.
pub(crate) async fn write_all_timeout(
    w: &mut BoxWrite,
    buf: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    tokio::time::timeout(timeout, write_flush(w, buf))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timeout"))?
}
