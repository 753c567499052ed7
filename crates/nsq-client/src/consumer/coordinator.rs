//! The consumer's coordinator: the one task that owns RDY and backoff state and the set of
//! connections (go-nsq consumer.go: `maybeUpdateRDY`, `updateRDY`,
//! `startStopContinueBackoff`, `resume`, `redistributeRDY`, `queryLookupd`, reconnects).
//! Connections and verdicts reach it as [`Event`]s on one queue.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::Error;
use crate::golog::LogLevel;

use super::connection::dial;
use super::discovery;
use super::{BackoffSignal, ConnCmd, ConnShared, ConsumerShared, Event, MsgTx};

/// go-nsq's delay before retrying a RDY that did not fit under max_in_flight (updateRDY).
const RDY_RETRY: Duration = Duration::from_secs(5);

struct ConnState {
    id: u64,
    conn: Arc<ConnShared>,
    rdy: i64,
    max_rdy: i64,
    last_rdy_time: Instant,
    last_msg_time: Instant,
    last_received: u64,
    /// A RDY that did not fit, retried at this time with this count.
    retry: Option<(Instant, i64)>,
    closing: bool,
}

pub(super) struct Coordinator {
    shared: Arc<ConsumerShared>,
    msg_tx: Option<MsgTx>,
    conns: HashMap<String, ConnState>,
    /// Addresses being dialed.
    pending: HashSet<String>,
    /// Addresses given with `connect_to_nsqd` (reconnected when they drop).
    nsqd_addrs: Vec<String>,
    /// Direct addresses waiting to be redialed, and when.
    reconnect_at: HashMap<String, Instant>,
    lookupd_addrs: Vec<String>,
    lookupd_index: usize,
    next_lookup: Option<Instant>,
    lookup_running: bool,
    max_in_flight: i64,
    total_rdy: i64,
    backoff_counter: i32,
    /// When the current backoff timeout ends (go-nsq's backoffDuration > 0).
    backoff_until: Option<Instant>,
    need_redistribute: bool,
    next_redistribute: Instant,
    stopping: bool,
    stop_deadline: Option<Instant>,
    next_id: u64,
    /// Callers of `connect_to_nsqd` waiting for the first dial's result.
    waiting: HashMap<String, oneshot::Sender<Result<(), Error>>>,
    rng: rand::rngs::StdRng,
}

impl Coordinator {
    pub(super) fn new(shared: Arc<ConsumerShared>, msg_tx: MsgTx) -> Coordinator {
        use rand::SeedableRng;
        let now = Instant::now();
        let max_in_flight = shared.config.max_in_flight as i64;
        let next_redistribute = now + shared.config.rdy_redistribute_interval;
        Coordinator {
            shared,
            msg_tx: Some(msg_tx),
            conns: HashMap::new(),
            pending: HashSet::new(),
            nsqd_addrs: Vec::new(),
            reconnect_at: HashMap::new(),
            lookupd_addrs: Vec::new(),
            lookupd_index: 0,
            next_lookup: None,
            lookup_running: false,
            max_in_flight,
            total_rdy: 0,
            backoff_counter: 0,
            backoff_until: None,
            need_redistribute: false,
            next_redistribute,
            stopping: false,
            stop_deadline: None,
            next_id: 0,
            waiting: HashMap::new(),
            rng: rand::rngs::StdRng::from_entropy(),
        }
    }

    pub(super) async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<Event>,
        done: watch::Sender<bool>,
    ) {
        loop {
            let wake = self.next_wake();
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = tokio::time::sleep_until(wake) => None,
            };
            if let Some(ev) = ev {
                self.on_event(ev);
            }
            self.on_timers();
            if self.finished() {
                break;
            }
        }
        // go-nsq consumer.go: the last connection closed while stopping (or none was open)
        // runs stopHandlers; then exit stops rdyLoop and lookupdLoop. (Logged before the
        // message stream ends: its owner may drop the consumer then, which mutes it.)
        let golog = &self.shared.golog;
        if self.conns.is_empty() {
            golog.log(LogLevel::Info, || "stopping handlers".into());
        }
        golog.log(LogLevel::Info, || "rdyLoop exiting".into());
        if !self.lookupd_addrs.is_empty() {
            golog.log(LogLevel::Info, || "exiting lookupdLoop".into());
        }
        // Force-close what is left (stop timeout): nsqd requeues their in-flight messages.
        for c in self.conns.values() {
            let _ = c.conn.cmd_tx.send(ConnCmd::Close);
        }
        self.msg_tx = None;
        self.shared.stats.connections.store(0, Ordering::Relaxed);
        let _ = done.send(true);
    }

    fn finished(&self) -> bool {
        self.stopping
            && (self.conns.is_empty() && self.pending.is_empty()
                || self.stop_deadline.is_some_and(|d| Instant::now() >= d))
    }

    fn next_wake(&self) -> Instant {
        let mut t = self.next_redistribute;
        let mut consider = |x: Option<Instant>| {
            if let Some(x) = x {
                t = t.min(x);
            }
        };
        consider(self.backoff_until);
        consider(self.next_lookup);
        consider(self.stop_deadline);
        for at in self.reconnect_at.values() {
            consider(Some(*at));
        }
        for c in self.conns.values() {
            consider(c.retry.map(|(at, _)| at));
        }
        t
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::AddNsqd(addr, reply) => {
                if self.stopping {
                    if let Some(r) = reply {
                        let _ = r.send(Err(Error::Stopped));
                    }
                    return;
                }
                if !self.nsqd_addrs.contains(&addr) {
                    self.nsqd_addrs.push(addr.clone());
                }
                if self.conns.contains_key(&addr) || self.pending.contains(&addr) {
                    if let Some(r) = reply {
                        let _ = r.send(Ok(()));
                    }
                    return;
                }
                if let Some(r) = reply {
                    self.waiting.insert(addr.clone(), r);
                }
                self.dial(addr);
            }
            Event::AddLookupd(addr) => {
                if self.stopping || self.lookupd_addrs.contains(&addr) {
                    return;
                }
                self.lookupd_addrs.push(addr);
                if self.lookupd_addrs.len() == 1 {
                    self.query_lookupd();
                }
            }
            Event::Connected {
                addr,
                id,
                conn,
                max_rdy,
            } => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    let _ = r.send(Ok(()));
                }
                let now = Instant::now();
                self.conns.insert(
                    addr.clone(),
                    ConnState {
                        id,
                        conn,
                        rdy: 0,
                        max_rdy,
                        last_rdy_time: now,
                        last_msg_time: now,
                        last_received: 0,
                        retry: None,
                        closing: false,
                    },
                );
                self.publish_conn_count();
                if self.stopping {
                    self.close_conn(&addr);
                    return;
                }
                // Pre-emptively lower the others' RDY, then give the new one its share
                // (go-nsq consumer.go, ConnectToNSQD).
                let others: Vec<String> =
                    self.conns.keys().filter(|a| **a != addr).cloned().collect();
                for a in others {
                    self.maybe_update_rdy(&a);
                }
                self.maybe_update_rdy(&addr);
            }
            Event::ConnectFailed(addr, e) => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    // A first connect that fails is the caller's error, not retried
                    // (go-nsq consumer.go, ConnectToNSQD); a failed reconnect is retried.
                    self.nsqd_addrs.retain(|a| *a != addr);
                    let _ = r.send(Err(e));
                } else {
                    // go-nsq consumer.go, queryLookupd / the reconnect loop.
                    self.shared.golog.log(LogLevel::Error, || {
                        format!("({addr}) error connecting to nsqd - {e}")
                    });
                    self.schedule_reconnect(&addr);
                }
            }
            Event::SubscribeRefused(addr) => {
                self.pending.remove(&addr);
                if let Some(r) = self.waiting.remove(&addr) {
                    let _ = r.send(Ok(()));
                }
                // onConnClose for a connection that never had RDY.
                let left = self.conns.len();
                tracing::warn!("there are {left} connections left alive");
                self.shared.golog.log(LogLevel::Warning, || {
                    format!("there are {left} connections left alive")
                });
                self.schedule_reconnect(&addr);
            }
            Event::Closed { addr, id } => self.on_closed(addr, id),
            Event::Verdict { conn, cmd, signal } => {
                self.backoff_signal(signal);
                let _ = conn.cmd_tx.send(cmd);
            }
            Event::Lookup(addrs) => {
                self.lookup_running = false;
                self.on_lookup(addrs);
            }
            Event::LookupFailed => self.lookup_running = false,
            Event::ChangeMaxInFlight(n) => {
                if self.max_in_flight == n as i64 {
                    return;
                }
                self.max_in_flight = n as i64;
                let addrs: Vec<String> = self.conns.keys().cloned().collect();
                for a in addrs {
                    self.maybe_update_rdy(&a);
                }
            }
            Event::Stop => {
                if self.stopping {
                    return;
                }
                tracing::info!("stopping...");
                self.shared
                    .golog
                    .log(LogLevel::Info, || "stopping...".into());
                self.stopping = true;
                self.stop_deadline = Some(Instant::now() + self.shared.config.stop_timeout);
                self.reconnect_at.clear();
                self.next_lookup = None;
                for c in self.conns.values_mut() {
                    c.closing = true;
                    let _ = c.conn.cmd_tx.send(ConnCmd::Cls);
                }
            }
        }
    }

    fn on_timers(&mut self) {
        let now = Instant::now();
        if self.backoff_until.is_some_and(|t| t <= now) {
            self.resume();
        }
        if self.next_redistribute <= now {
            self.next_redistribute = now + self.shared.config.rdy_redistribute_interval;
            self.redistribute_rdy();
        }
        if self.next_lookup.is_some_and(|t| t <= now) {
            self.next_lookup = Some(now + self.shared.config.lookupd_poll_interval);
            self.query_lookupd();
        }
        let due: Vec<String> = self
            .reconnect_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(a, _)| a.clone())
            .collect();
        for a in due {
            self.reconnect_at.remove(&a);
            if !self.stopping
                && self.nsqd_addrs.contains(&a)
                && !self.conns.contains_key(&a)
                && !self.pending.contains(&a)
            {
                tracing::info!("({a}) re-connecting");
                self.dial(a);
            }
        }
        let retries: Vec<(String, i64)> = self
            .conns
            .iter()
            .filter_map(|(a, c)| match c.retry {
                Some((at, n)) if at <= now => Some((a.clone(), n)),
                _ => None,
            })
            .collect();
        for (a, n) in retries {
            if let Some(c) = self.conns.get_mut(&a) {
                c.retry = None;
            }
            self.update_rdy(&a, n);
        }
    }

    fn dial(&mut self, addr: String) {
        let Some(msg_tx) = self.msg_tx.clone() else {
            return;
        };
        self.pending.insert(addr.clone());
        self.next_id += 1;
        tracing::info!("({addr}) connecting to nsqd");
        self.shared
            .golog
            .conn(LogLevel::Info, &addr, "connecting to nsqd");
        tokio::spawn(dial(self.shared.clone(), addr, self.next_id, msg_tx));
    }

    fn schedule_reconnect(&mut self, addr: &str) {
        if self.stopping {
            return;
        }
        if !self.lookupd_addrs.is_empty() {
            // Let lookupd decide (go-nsq consumer.go, onConnClose: trigger a lookupd query).
            self.query_lookupd();
        } else if self.nsqd_addrs.iter().any(|a| a == addr) {
            let at = Instant::now() + self.shared.config.lookupd_poll_interval;
            tracing::info!(
                "({addr}) re-connecting in {:?}",
                self.shared.config.lookupd_poll_interval
            );
            self.shared.golog.log(LogLevel::Info, || {
                format!(
                    "({addr}) re-connecting in {}",
                    nsq_go::duration::format(self.shared.config.lookupd_poll_interval)
                )
            });
            self.reconnect_at.insert(addr.to_string(), at);
        }
    }

    fn publish_conn_count(&self) {
        self.shared
            .stats
            .connections
            .store(self.conns.len(), Ordering::Relaxed);
    }

    fn close_conn(&mut self, addr: &str) {
        if let Some(c) = self.conns.get_mut(addr) {
            c.closing = true;
            let _ = c.conn.cmd_tx.send(ConnCmd::Cls);
        }
    }

    fn on_closed(&mut self, addr: String, id: u64) {
        let Some(c) = self.conns.get(&addr) else {
            return;
        };
        if c.id != id {
            return;
        }
        let c = self.conns.remove(&addr).expect("present");
        self.total_rdy -= c.rdy;
        self.publish_conn_count();
        let left = self.conns.len() as i64;
        tracing::warn!("there are {left} connections left alive");
        self.shared.golog.log(LogLevel::Warning, || {
            format!("there are {left} connections left alive")
        });
        if (c.retry.is_some() || c.rdy > 0)
            && (left == self.max_in_flight || self.backoff_counter > 0)
        {
            self.need_redistribute = true;
        }
        if !self.stopping {
            self.schedule_reconnect(&addr);
        }
    }

    // --- RDY (go-nsq consumer.go) ---

    /// `min(max(1, max_in_flight / connections), max_in_flight)` (perConnMaxInFlight).
    fn per_conn_max_in_flight(&self) -> i64 {
        let b = self.max_in_flight as f64;
        let s = b / self.conns.len().max(1) as f64;
        s.max(1.0).min(b) as i64
    }

    fn maybe_update_rdy(&mut self, addr: &str) {
        if self.backoff_counter > 0 || self.backoff_until.is_some() {
            return;
        }
        let count = self.per_conn_max_in_flight();
        self.update_rdy(addr, count);
    }

    /// Returns whether the RDY was applied.
    fn update_rdy(&mut self, addr: &str, count: i64) -> bool {
        let max_in_flight = self.max_in_flight;
        let total = self.total_rdy;
        let Some(c) = self.conns.get_mut(addr) else {
            return false;
        };
        if c.closing {
            return false;
        }
        let mut count = count.min(c.max_rdy);
        c.retry = None;
        // Never exceed the global max_in_flight; truncate if possible.
        let max_possible = max_in_flight - total + c.rdy;
        if max_possible > 0 && max_possible < count {
            count = max_possible;
        }
        if max_possible <= 0 && count > 0 {
            if c.rdy == 0 {
                // Retry later so this connection is not starved forever.
                c.retry = Some((Instant::now() + RDY_RETRY, count));
            }
            return false;
        }
        self.send_rdy(addr, count);
        true
    }

    fn send_rdy(&mut self, addr: &str, count: i64) {
        let Some(c) = self.conns.get_mut(addr) else {
            return;
        };
        if count == 0 && c.rdy == 0 {
            return;
        }
        self.total_rdy += count - c.rdy;
        let last = c.rdy;
        c.rdy = count;
        if count > 0 {
            c.last_rdy_time = Instant::now();
        }
        if count == last {
            return;
        }
        let _ = c.conn.cmd_tx.send(ConnCmd::Rdy(count));
    }

    fn calc_backoff(&self, level: i32) -> Duration {
        // ExponentialStrategy: multiplier × 2^level.
        let factor = 2u32.saturating_pow(level.clamp(0, 31) as u32);
        self.shared
            .config
            .backoff_multiplier
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
    }

    fn set_backoff_counter(&mut self, n: i32) {
        self.backoff_counter = n;
        self.shared.backoff_counter.store(n, Ordering::Relaxed);
    }

    fn backoff_signal(&mut self, signal: BackoffSignal) {
        if self.backoff_until.is_some() {
            return;
        }
        let max = self.shared.config.max_backoff_duration;
        let mut counter = self.backoff_counter;
        let mut updated = false;
        match signal {
            BackoffSignal::Resume => {
                if counter > 0 {
                    counter -= 1;
                    updated = true;
                }
            }
            BackoffSignal::Backoff => {
                if self.calc_backoff(counter + 1) <= max {
                    counter += 1;
                    updated = true;
                }
            }
            BackoffSignal::Continue => {}
        }
        self.set_backoff_counter(counter);
        if counter == 0 && updated {
            let count = self.per_conn_max_in_flight();
            tracing::warn!("exiting backoff, returning all to RDY {count}");
            self.shared.golog.log(LogLevel::Warning, || {
                format!("exiting backoff, returning all to RDY {count}")
            });
            let addrs: Vec<String> = self.conns.keys().cloned().collect();
            for a in addrs {
                self.update_rdy(&a, count);
            }
        } else if counter > 0 {
            let d = self.calc_backoff(counter).min(max);
            tracing::warn!("backing off for {d:?} (backoff level {counter}), setting all to RDY 0");
            self.shared.golog.log(LogLevel::Warning, || {
                format!(
                    "backing off for {} (backoff level {counter}), setting all to RDY 0",
                    nsq_go::duration::format(d)
                )
            });
            let addrs: Vec<String> = self.conns.keys().cloned().collect();
            for a in addrs {
                self.update_rdy(&a, 0);
            }
            self.backoff_until = Some(Instant::now() + d);
        }
    }

    /// The backoff timeout ended: let one message through on a random connection.
    fn resume(&mut self) {
        if self.stopping {
            self.backoff_until = None;
            return;
        }
        let addrs: Vec<String> = self.conns.keys().cloned().collect();
        if addrs.is_empty() {
            tracing::warn!("no connection available to resume; backing off for 1s");
            self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        let choice = &addrs[self.rng.gen_range(0..addrs.len())];
        tracing::warn!("({choice}) backoff timeout expired, sending RDY 1");
        self.shared.golog.log(LogLevel::Warning, || {
            format!("({choice}) backoff timeout expired, sending RDY 1")
        });
        self.backoff_until = None;
        if !self.update_rdy(choice, 1) {
            self.backoff_until = Some(Instant::now() + Duration::from_secs(1));
        }
    }

    fn redistribute_rdy(&mut self) {
        if self.backoff_until.is_some() || self.conns.is_empty() {
            return;
        }
        let now = Instant::now();
        // Idle detection from the per-connection receive counters.
        for c in self.conns.values_mut() {
            let r = c.conn.received.load(Ordering::Relaxed);
            if r != c.last_received {
                c.last_received = r;
                c.last_msg_time = now;
            }
        }
        let n = self.conns.len() as i64;
        if n > self.max_in_flight || (self.backoff_counter > 0 && n > 1) {
            self.need_redistribute = true;
        }
        if !std::mem::take(&mut self.need_redistribute) {
            return;
        }
        let cfg = &self.shared.config;
        let (idle, low) = (cfg.low_rdy_idle_timeout, cfg.low_rdy_timeout);
        let mut possible: Vec<String> = Vec::with_capacity(self.conns.len());
        let addrs: Vec<String> = self.conns.keys().cloned().collect();
        for a in addrs {
            let c = &self.conns[&a];
            if c.rdy > 0 {
                if now - c.last_msg_time > idle {
                    tracing::debug!("({a}) idle connection, giving up RDY");
                    self.update_rdy(&a, 0);
                } else if now - c.last_rdy_time > low {
                    tracing::debug!("({a}) RDY timeout, giving up RDY");
                    self.update_rdy(&a, 0);
                }
            }
            possible.push(a);
        }
        let mut available = if self.backoff_counter > 0 {
            1 - self.total_rdy
        } else {
            self.max_in_flight - self.total_rdy
        };
        while !possible.is_empty() && available > 0 {
            available -= 1;
            let i = self.rng.gen_range(0..possible.len());
            let a = possible.swap_remove(i);
            tracing::debug!("({a}) redistributing RDY");
            self.update_rdy(&a, 1);
        }
    }

    // --- discovery ---

    fn query_lookupd(&mut self) {
        if self.lookupd_addrs.is_empty() || self.stopping {
            return;
        }
        if self.next_lookup.is_none() {
            // First query: poll again after a random jitter plus the interval
            // (go-nsq consumer.go, lookupdLoop).
            let cfg = &self.shared.config;
            let jitter = cfg
                .lookupd_poll_interval
                .mul_f64(self.rng.gen::<f64>() * cfg.lookupd_poll_jitter);
            self.next_lookup = Some(Instant::now() + jitter + cfg.lookupd_poll_interval);
        }
        if self.lookup_running {
            return;
        }
        self.lookup_running = true;
        let n = self.lookupd_addrs.len();
        let start = self.lookupd_index % n;
        self.lookupd_index = (start + 1) % n;
        let order: Vec<String> = (0..n)
            .map(|i| self.lookupd_addrs[(start + i) % n].clone())
            .collect();
        let shared = self.shared.clone();
        tokio::spawn(discovery::query(shared, order));
    }

    fn on_lookup(&mut self, addrs: Vec<String>) {
        if self.stopping {
            return;
        }
        for a in &addrs {
            if !self.conns.contains_key(a) && !self.pending.contains(a) {
                self.dial(a.clone());
            }
        }
        // Producers that left: close connections found only through lookupd.
        let gone: Vec<String> = self
            .conns
            .keys()
            .filter(|a| !addrs.contains(a) && !self.nsqd_addrs.contains(a))
            .cloned()
            .collect();
        for a in gone {
            tracing::info!("({a}) no longer in lookupd, closing");
            self.close_conn(&a);
        }
    }
}
