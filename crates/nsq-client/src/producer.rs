//! The producer: publishes to one nsqd over one connection (go-nsq producer.go).
//!
//! Every call encodes its command and hands it to the connection's writer task together with
//! a one-shot reply slot; the writer appends everything that is queued into one buffer, queues
//! the reply slots in the same order and writes once. nsqd answers commands in order, so the
//! reader task completes the oldest slot with each `OK` or error frame (go-nsq's
//! PublishAsync/transactions). Many tasks can share one `Producer` (it is `Clone`), and their
//! commands go out together. A dropped connection fails the calls in flight with
//! [`Error::NotConnected`]; the next call dials again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nsq_protocol::command;
use nsq_protocol::frame::FrameType;
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::conn::{self, BoxWrite, FrameReader};
use crate::error::{Error, ServerError};
use crate::golog::{GoLog, LogLevel};

/// Queued commands per connection before `publish` waits for the writer.
const QUEUE: usize = 4096;
/// Commands the writer takes per write.
const BATCH: usize = 256;

type Reply = oneshot::Sender<Result<(), Error>>;

/// One encoded command; `reply` is `None` for NOP (no answer comes).
struct Request {
    bytes: Bytes,
    reply: Option<Reply>,
}

/// The current connection: its command queue, and a flag its reader sets before answering
/// with a fatal error (nsqd closes the connection after one), so the next call dials a new
/// connection instead of queueing onto the closing one.
struct Live {
    tx: mpsc::Sender<Request>,
    dead: Arc<AtomicBool>,
}

/// A publisher to one nsqd. Cheap to clone; clones share the connection.
///
/// ```no_run
/// # async fn demo() -> Result<(), nsq_client::Error> {
/// let producer = nsq_client::Producer::new("127.0.0.1:4150", nsq_client::Config::default())?;
/// producer.publish("events", "hello").await?;
/// producer.multi_publish("events", vec!["a", "b"]).await?;
/// producer.deferred_publish("events", std::time::Duration::from_secs(5), "later").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

struct Inner {
    addr: String,
    config: Config,
    /// The live connection's command queue. A short lock: it is only held to clone or replace
    /// the sender, never across an await.
    conn: parking_lot::Mutex<Option<Live>>,
    /// Serialises dialing so that concurrent callers after a drop open one connection.
    connecting: tokio::sync::Mutex<()>,
    /// Shared with the connection's reader, which logs an unexpected close only.
    stopped: Arc<AtomicBool>,
    /// go-nsq's log lines, when `config.logger` asks for them.
    golog: GoLog,
}

impl Drop for Inner {
    /// Every handle is gone: the connection closes without go-nsq lines, as a Go producer
    /// that is never stopped logs nothing when its process ends.
    fn drop(&mut self) {
        self.golog.mute();
    }
}

impl Producer {
    /// A producer for nsqd at `addr` (`host:port`). Nothing is dialed until the first call
    /// (or [`Producer::connect`]).
    pub fn new(addr: impl Into<String>, config: Config) -> Result<Producer, Error> {
        config.validate()?;
        let golog = GoLog::producer(config.logger.clone(), crate::golog::next_instance());
        Ok(Producer {
            inner: Arc::new(Inner {
                addr: addr.into(),
                config,
                conn: parking_lot::Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
                stopped: Arc::new(AtomicBool::new(false)),
                golog,
            }),
        })
    }

    /// The nsqd address.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Dials now if not connected (go-nsq's `Ping`).
    pub async fn connect(&self) -> Result<(), Error> {
        self.sender().await.map(drop)
    }

    /// `PUB`: returns when nsqd has answered this message.
    pub async fn publish(&self, topic: &str, body: impl AsRef<[u8]>) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        command::put_pub(&mut buf, topic, body.as_ref());
        self.request(buf.freeze()).await
    }

    /// `MPUB`: several messages in one command, atomically.
    pub async fn multi_publish<B: AsRef<[u8]>>(
        &self,
        topic: &str,
        bodies: impl IntoIterator<Item = B>,
    ) -> Result<(), Error> {
        let bodies: Vec<B> = bodies.into_iter().collect();
        let mut buf = BytesMut::new();
        command::put_mpub(&mut buf, topic, &bodies);
        self.request(buf.freeze()).await
    }

    /// `DPUB`: the message is delivered after `delay` (whole milliseconds).
    pub async fn deferred_publish(
        &self,
        topic: &str,
        delay: Duration,
        body: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let ms = i64::try_from(delay.as_millis()).map_err(|_| Error::InvalidDelay(delay))?;
        let mut buf = BytesMut::new();
        command::put_dpub(&mut buf, topic, ms, body.as_ref());
        self.request(buf.freeze()).await
    }

    /// Closes the connection after the queued commands are written; later calls fail with
    /// [`Error::Stopped`].
    pub fn stop(&self) {
        if self.inner.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let live = self.inner.conn.lock().take();
        // go-nsq producer.go, Stop: `stopping`, then closing a live connection (conn.go's
        // lines) ends the router.
        let golog = &self.inner.golog;
        // producer.go, Stop: `w.log(LogLevelInfo, "(%s) stopping", w.addr)` (go-nsq v1.1).
        golog.conn(LogLevel::Info, &self.inner.addr, "stopping");
        if live.is_some_and(|l| !l.tx.is_closed() && !l.dead.load(Ordering::Acquire)) {
            golog.conn_closed(&self.inner.addr, false);
            // producer.go, router: `w.log(LogLevelInfo, "(%s) exiting router", w.conn.String())`.
            golog.conn(LogLevel::Info, &self.inner.addr, "exiting router");
        }
    }

    async fn request(&self, bytes: Bytes) -> Result<(), Error> {
        let tx = self.sender().await?;
        let (reply, answer) = oneshot::channel();
        if tx
            .send(Request {
                bytes,
                reply: Some(reply),
            })
            .await
            .is_err()
        {
            self.forget(&tx);
            return Err(Error::NotConnected);
        }
        answer.await.unwrap_or(Err(Error::NotConnected))
    }

    /// Drops `tx` as the current connection (if it still is).
    fn forget(&self, tx: &mpsc::Sender<Request>) {
        let mut conn = self.inner.conn.lock();
        if conn.as_ref().is_some_and(|c| c.tx.same_channel(tx)) {
            *conn = None;
        }
    }

    /// The live connection's queue, dialing if there is none.
    async fn sender(&self) -> Result<mpsc::Sender<Request>, Error> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        if let Some(tx) = self.live() {
            return Ok(tx);
        }
        let _dialing = self.inner.connecting.lock().await;
        if let Some(tx) = self.live() {
            return Ok(tx);
        }
        let addr = &self.inner.addr;
        let golog = &self.inner.golog;
        golog.conn(LogLevel::Info, addr, "connecting to nsqd");
        let c = match conn::connect(addr, &self.inner.config, golog).await {
            Ok(c) => c,
            Err(e) => {
                golog.log(LogLevel::Error, || {
                    format!("({addr}) error connecting to nsqd - {e}")
                });
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let write_timeout = self.inner.config.write_timeout;
        let dead = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn(write_loop(c.writer, rx, pending_tx, write_timeout));
        tokio::spawn(read_loop(
            c.reader,
            pending_rx,
            tx.downgrade(),
            writer.abort_handle(),
            dead.clone(),
            Unexpected {
                addr: addr.clone(),
                stopped: self.inner.stopped.clone(),
                golog: golog.clone(),
            },
        ));
        *self.inner.conn.lock() = Some(Live {
            tx: tx.clone(),
            dead,
        });
        if self.inner.stopped.load(Ordering::Acquire) {
            self.inner.conn.lock().take();
            return Err(Error::Stopped);
        }
        Ok(tx)
    }

    fn live(&self) -> Option<mpsc::Sender<Request>> {
        let mut conn = self.inner.conn.lock();
        match conn.as_ref() {
            Some(l) if !l.tx.is_closed() && !l.dead.load(Ordering::Acquire) => Some(l.tx.clone()),
            Some(_) => {
                *conn = None;
                None
            }
            None => None,
        }
    }
}

/// Takes every queued command, writes them with one write + flush, and queues their reply
/// slots for the reader in the same order. Ends when every sender is gone or a write fails.
async fn write_loop(
    mut w: BoxWrite,
    mut rx: mpsc::Receiver<Request>,
    pending: mpsc::UnboundedSender<Reply>,
    write_timeout: Duration,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        if batch.len() < BATCH {
            // Let the callers that are runnable right now (typically woken together by one
            // read of answers) queue their next command, so it shares this write.
            tokio::task::yield_now().await;
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
        }
        for r in batch.drain(..) {
            buf.extend_from_slice(&r.bytes);
            if let Some(reply) = r.reply {
                if pending.send(reply).is_err() {
                    return;
                }
            }
        }
        if let Err(e) = conn::write_all_timeout(&mut w, &buf, write_timeout).await {
            tracing::error!("producer write failed: {e}");
            return;
        }
        buf.clear();
    }
}

/// Completes reply slots in order; answers heartbeats with NOP (through a weak sender, so a
/// producer whose handles are all dropped closes its connection). On a read error or EOF it
/// stops the writer, and the slots still queued fail with `NotConnected` when dropped.
async fn read_loop(
    mut r: FrameReader,
    mut pending: mpsc::UnboundedReceiver<Reply>,
    tx: mpsc::WeakSender<Request>,
    writer: tokio::task::AbortHandle,
    dead: Arc<AtomicBool>,
    unexpected: Unexpected,
) {
    loop {
        let frame = match r.next().await {
            Ok(Some(f)) => f,
            Ok(None) => {
                unexpected.closed("EOF");
                break;
            }
            Err(e) => {
                tracing::error!("producer read failed: {e}");
                unexpected.closed(&e.to_string());
                break;
            }
        };
        let result = match FrameType::from_i32(frame.frame_type) {
            Some(FrameType::Response) if &frame.data[..] == nsq_protocol::frame::HEARTBEAT => {
                let nop = Request {
                    bytes: Bytes::from_static(b"NOP\n"),
                    reply: None,
                };
                match tx.upgrade() {
                    Some(tx) if tx.send(nop).await.is_ok() => {}
                    _ => break,
                }
                continue;
            }
            Some(FrameType::Response) => Ok(()),
            Some(FrameType::Error) => {
                let e = ServerError::from_frame(&frame.data);
                if e.code.is_none_or(|c| c.is_fatal()) {
                    dead.store(true, Ordering::Release);
                }
                Err(Error::Server(e))
            }
            _ => {
                tracing::error!("producer: unexpected frame type {}", frame.frame_type);
                break;
            }
        };
        let fatal = result.is_err() && dead.load(Ordering::Acquire);
        match pending.recv().await {
            Some(reply) => {
                let _ = reply.send(result);
            }
            None => break,
        }
        if fatal {
            break;
        }
    }
    dead.store(true, Ordering::Release);
    writer.abort();
}

/// What the reader needs to log a connection lost while the producer runs (go-nsq conn.go,
/// readLoop: `IO error - EOF`, then the close lines; producer.go, router: `(<addr>) exiting router`).
struct Unexpected {
    addr: String,
    stopped: Arc<AtomicBool>,
    golog: GoLog,
}

impl Unexpected {
    fn closed(&self, err: &str) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.golog
            .conn(LogLevel::Error, &self.addr, &format!("IO error - {err}"));
        self.golog.conn_closed(&self.addr, true);
        self.golog
            .conn(LogLevel::Info, &self.addr, "exiting router");
    }
}
