//! One TCP client connection's shared state: identity, counters for `/stats`, the RDY window,
//! and the wake-ups between its reader task, its writer (delivery) task and the channel.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
pub use nsq_core::client_stats::{ClientMeta, ClientStats};
use nsq_core::{Channel, Consumer};
use nsq_protocol::identify::ClientSettings;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use crate::auth::AuthState;
use crate::transport::Layer;

/// A connection's protocol state (nsqd/protocol_v2.go: stateInit, stateSubscribed,
/// stateClosing). The discriminants are the numbers `/stats` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    Init = 0,
    Subscribed = 3,
    Closing = 4,
}

impl ConnState {
    /// The number `/stats` reports for this state.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// A [`ConnState`] read lock-free by the delivery task and `/stats` while the reader task
/// changes it.
struct AtomicConnState(AtomicU8);

impl AtomicConnState {
    fn new(s: ConnState) -> Self {
        Self(AtomicU8::new(s.code()))
    }

    fn load(&self) -> ConnState {
        match self.0.load(Ordering::Acquire) {
            0 => ConnState::Init,
            3 => ConnState::Subscribed,
            // Only `store` writes, and it writes one of the three codes.
            _ => ConnState::Closing,
        }
    }

    fn store(&self, s: ConnState) {
        self.0.store(s.code(), Ordering::Release);
    }
}

/// What the reader records about a client as its commands succeed: who it is (IDENTIFY and
/// the upgrades), its authorization (AUTH) and what it published (PUB, MPUB, DPUB).
#[derive(Debug, Default)]
pub struct ClientRecord {
    pub meta: ClientMeta,
    /// The authorization from the auth server (AUTH), with the secret to refresh it.
    pub auth: Option<(AuthState, Bytes)>,
    /// Messages published per topic.
    pub pub_counts: BTreeMap<String, u64>,
}

/// Shared state of one connection. The reader task owns command handling, the writer task
/// owns the socket's write half; they meet here.
///
/// Counters and the protocol state are atomics. The three locks guard state that changes at
/// different times for different readers, and each is held for a few instructions, never
/// across an `.await` and never with another (docs/architecture.md, "Locks and their order"):
/// * `record`: written only by the reader (IDENTIFY, the upgrades, AUTH, each publish), read
///   by `/stats` and the AUTH checks. One lock, because `/stats` takes all of it at once and
///   AUTH sets the authorization together with the identity it names.
/// * `settings`: written by IDENTIFY, read by the writer at every wake-up and by the reader
///   after every batch of commands. Apart from `record` so that the writer never waits for the
///   reader's bookkeeping or for a `/stats` copy of the record.
/// * `out`: the queue of frames from the reader to the writer, taken once per response and per
///   writer wake-up: the hottest of the three, so it guards nothing else.
pub struct Client {
    pub id: u64,
    pub remote_addr: SocketAddr,
    pub connect_ts: i64,
    pub record: Mutex<ClientRecord>,
    /// Per-connection settings (IDENTIFY); the writer reads them at each wake-up.
    pub settings: Mutex<ClientSettings>,
    state: AtomicConnState,
    ready_count: AtomicI64,
    in_flight_count: AtomicI64,
    message_count: AtomicU64,
    finish_count: AtomicU64,
    requeue_count: AtomicU64,
    /// The channel after a successful SUB.
    pub channel: OnceLock<Arc<Channel>>,
    /// Frames the reader produced (responses, errors) for the writer to send, in order.
    pub out: Mutex<BytesMut>,
    /// Close the connection once `out` is flushed (fatal error, CLS finished, shutdown).
    close_after_flush: AtomicBool,
    /// Wakes the writer: responses queued, RDY / in-flight changed, settings changed, close.
    pub wake: Notify,
    /// Flips to true when the connection must end now; the reader selects on it.
    closed_tx: watch::Sender<bool>,
    /// The reader asks for the write side (an IDENTIFY upgrade): the writer task flushes what
    /// is queued and ends, returning it (see `protocol_v2::upgrade`).
    handover: AtomicBool,
}

impl Client {
    pub fn new(id: u64, remote_addr: SocketAddr, settings: ClientSettings) -> Arc<Self> {
        let ip = remote_addr.ip().to_string();
        Arc::new(Client {
            id,
            remote_addr,
            connect_ts: unix_secs(),
            record: Mutex::new(ClientRecord {
                meta: ClientMeta {
                    client_id: ip.clone(),
                    hostname: ip,
                    ..Default::default()
                },
                ..Default::default()
            }),
            settings: Mutex::new(settings),
            state: AtomicConnState::new(ConnState::Init),
            ready_count: AtomicI64::new(0),
            in_flight_count: AtomicI64::new(0),
            message_count: AtomicU64::new(0),
            finish_count: AtomicU64::new(0),
            requeue_count: AtomicU64::new(0),
            channel: OnceLock::new(),
            out: Mutex::new(BytesMut::new()),
            close_after_flush: AtomicBool::new(false),
            wake: Notify::new(),
            closed_tx: watch::channel(false).0,
            handover: AtomicBool::new(false),
        })
    }

    pub fn state(&self) -> ConnState {
        self.state.load()
    }

    pub fn set_state(&self, s: ConnState) {
        self.state.store(s);
        self.wake.notify_one();
    }

    pub fn ready_count(&self) -> i64 {
        self.ready_count.load(Ordering::Acquire)
    }

    pub fn set_ready_count(&self, n: i64) {
        self.ready_count.store(n, Ordering::Release);
        self.wake.notify_one();
    }

    pub fn in_flight(&self) -> i64 {
        self.in_flight_count.load(Ordering::Acquire)
    }

    /// The writer delivered `n` messages.
    pub fn delivered(&self, n: usize) {
        self.in_flight_count.fetch_add(n as i64, Ordering::AcqRel);
        self.message_count.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `n` FINs succeeded. The reader wakes the writer once per batch of commands (see
    /// `protocol_v2::read_loop`), not once per FIN.
    pub fn finished(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.finish_count.fetch_add(n as u64, Ordering::Relaxed);
        self.dec_in_flight_quiet(n as i64);
    }

    /// REQ succeeded (the writer is woken as for FIN).
    pub fn requeued(&self) {
        self.requeue_count.fetch_add(1, Ordering::Relaxed);
        self.dec_in_flight_quiet(1);
    }

    fn dec_in_flight_quiet(&self, n: i64) {
        // Never below zero (an empty() may have reset it meanwhile).
        let _ = self
            .in_flight_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v - n).max(0))
            });
    }

    fn dec_in_flight(&self) {
        self.dec_in_flight_quiet(1);
        self.wake.notify_one();
    }

    /// How many more messages this connection may receive now (the RDY window), or 0.
    pub fn window(&self) -> usize {
        if self.state() != ConnState::Subscribed {
            return 0;
        }
        let rdy = self.ready_count();
        let inf = self.in_flight();
        if rdy <= 0 || inf >= rdy {
            0
        } else {
            (rdy - inf) as usize
        }
    }

    /// After FINs/REQs freed window space: wakes the writer if it can send now.
    pub fn window_freed(&self) {
        // With the window still 0 nothing can be sent; whatever opens it (RDY, FIN,
        // timeout, empty) wakes the writer then.
        if self.window() > 0 {
            self.wake.notify_one();
        }
    }

    /// Queues a frame for the writer and wakes it.
    pub fn send_frame(&self, f: impl FnOnce(&mut BytesMut)) {
        f(&mut self.out.lock());
        self.wake.notify_one();
    }

    /// Asks the writer task to flush what is queued and then end, handing its write side over.
    pub(crate) fn request_handover(&self) {
        self.handover.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether the reader asked for the write side (the request is taken).
    pub(crate) fn handover_requested(&self) -> bool {
        self.handover.swap(false, Ordering::AcqRel)
    }

    /// Asks the writer to flush what is queued and then close the connection.
    pub fn close_after_flush(&self) {
        self.close_after_flush.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub fn closing_after_flush(&self) -> bool {
        self.close_after_flush.load(Ordering::Acquire)
    }

    /// Ends the connection now (no further frames): channel deleted, daemon shutting down.
    pub fn close_now(&self) {
        self.closed_tx.send_replace(true);
        self.close_after_flush();
    }

    pub fn is_closed(&self) -> bool {
        *self.closed_tx.borrow()
    }

    pub fn closed_rx(&self) -> watch::Receiver<bool> {
        self.closed_tx.subscribe()
    }

    /// An upgrade put `layer` in place.
    pub(crate) fn upgraded(&self, layer: Layer) {
        let meta = &mut self.record.lock().meta;
        match layer {
            Layer::Tls {
                version,
                cipher_suite,
                common_name,
            } => {
                meta.tls = true;
                meta.tls_version = version;
                meta.tls_cipher_suite = cipher_suite;
                meta.tls_common_name = common_name;
            }
            Layer::Snappy => meta.snappy = true,
            Layer::Deflate => meta.deflate = true,
        }
    }

    pub fn add_pub_count(&self, topic: &str, n: u64) {
        let pc = &mut self.record.lock().pub_counts;
        match pc.get_mut(topic) {
            Some(c) => *c += n,
            None => {
                pc.insert(topic.to_string(), n);
            }
        }
    }

    pub fn is_producer(&self) -> bool {
        !self.record.lock().pub_counts.is_empty()
    }

    pub fn stats(&self) -> ClientStats {
        let (meta, pub_counts) = {
            let r = self.record.lock();
            (r.meta.clone(), r.pub_counts.clone())
        };
        ClientStats {
            meta,
            remote_address: self.remote_addr.to_string(),
            state: self.state().code(),
            ready_count: self.ready_count(),
            in_flight_count: self.in_flight(),
            message_count: self.message_count.load(Ordering::Relaxed),
            finish_count: self.finish_count.load(Ordering::Relaxed),
            requeue_count: self.requeue_count.load(Ordering::Relaxed),
            connect_ts: self.connect_ts,
            sample_rate: self.settings.lock().sample_rate,
            pub_counts,
        }
    }
}

impl Consumer for Client {
    fn id(&self) -> u64 {
        self.id
    }

    fn on_timeout(&self) {
        self.dec_in_flight();
    }

    fn on_empty(&self) {
        self.in_flight_count.store(0, Ordering::Release);
        self.wake.notify_one();
    }

    fn close(&self) {
        self.close_now();
    }

    fn stats(&self) -> ClientStats {
        Client::stats(self)
    }
}

/// Unix time in seconds.
pub fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
