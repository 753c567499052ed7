//! Drain mode (the RFC of nsqio/nsq #1302, also #1254): for a node that is going away
//! (autoscaling, Kubernetes, Fargate), stop taking work but finish what is queued.
//!
//! A draining nsqd
//! * refuses new messages: TCP `PUB`/`MPUB`/`DPUB` fail with `E_PUB_FAILED`/`E_MPUB_FAILED`/
//!   `E_DPUB_FAILED` `... failed nsqd is draining: publish to another nsqd`, HTTP `/pub` and
//!   `/mpub` (`/pub?defer=` included) answer `503 {"message":"DRAINING"}`;
//! * refuses to create topics and channels: `SUB` to a topic or channel that does not exist
//!   fails with `E_SUB_FAILED SUB failed nsqd is draining: no new topics or channels`,
//!   `/topic/create` and `/channel/create` answer `503 {"message":"DRAINING"}`;
//! * unregisters every topic and channel from nsqlookupd and then disconnects from it, so
//!   lookupd stops listing the node and discovery moves on (`PUT
//!   /config/nsqlookupd_tcp_addresses` is refused with the 503 from then on);
//! * keeps delivering to its consumers (SUB to existing channels, RDY, FIN, REQ, TOUCH work as
//!   before) until every topic and channel is empty with nothing in flight or deferred, then
//!   shuts down cleanly (exit status 0).
//!
//! It starts with SIGTERM under `--sigterm=drain` (the default, `--sigterm=shutdown`, keeps
//! SIGTERM a clean shutdown), or with `PUT /config/drain`; `GET /config/drain` tells whether
//! the node is draining, and so do `/info` and `/stats` (`"draining"`, the last key).
//! `PUT /config/shutdown` shuts down cleanly at once. During a drain a second SIGTERM, or a
//! SIGINT, shuts down cleanly at once: what is left is persisted to disk, as in any clean
//! shutdown, and served after a restart.
//!
//! A drain waits as long as it takes: a channel without consumers, a paused topic or channel,
//! or a topic with messages and no channel keeps it waiting (the log names what is left every
//! few seconds) until consumers come, it is unpaused, emptied or deleted, or a second signal
//! arrives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use nsq_protocol::command::Command;
use nsq_protocol::error::{ErrorCode, NsqError};
use tokio::sync::Notify;

use nsq_http::reply::{raw, set, set_nsq, v1_error, CT_JSON};

use crate::nsqd::Nsqd;
use crate::server::NsqdHandle;

/// Why a publish is refused (after the reference's `PUB failed ` prefix).
const REFUSED_PUB: &str = "nsqd is draining: publish to another nsqd";
/// Why a SUB that would create a topic or channel is refused.
const REFUSED_SUB: &str = "SUB failed nsqd is draining: no new topics or channels";
/// The `message` of the HTTP 503.
const REFUSED_HTTP: &str = "DRAINING";
/// How often a drain checks whether everything is delivered.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often a drain logs what it is waiting for.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// `--sigterm`: what SIGTERM does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigtermMode {
    /// A clean shutdown (the reference's behaviour).
    Shutdown,
    /// Start draining.
    Drain,
}

impl SigtermMode {
    /// Parses a `--sigterm` value; the error follows `invalid value "x" for flag -sigterm: `.
    pub fn parse(s: &str) -> Result<SigtermMode, BadSigtermMode> {
        match s {
            "shutdown" => Ok(SigtermMode::Shutdown),
            "drain" => Ok(SigtermMode::Drain),
            _ => Err(BadSigtermMode),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SigtermMode::Shutdown => "shutdown",
            SigtermMode::Drain => "drain",
        }
    }
}

/// A `--sigterm` value other than `shutdown` or `drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 'shutdown' or 'drain'")]
pub struct BadSigtermMode;

/// `--sigterm` on the command line and as `sigterm` in the config file.
impl nsq_go::flag::Value for SigtermMode {
    fn set(&mut self, text: &str) -> Result<(), nsq_go::flag::ValueError> {
        *self = SigtermMode::parse(text)?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        Some(self.as_str().to_string())
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::from(self.as_str())
    }
}

/// The daemon's drain state: set once, never cleared (a drain ends with the process).
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    shutdown: AtomicBool,
    /// Wakes [`run`]: a drain started, or a shutdown was requested over HTTP.
    wake: Notify,
}

impl Drain {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// `PUT /config/shutdown`: [`run`] shuts the daemon down cleanly.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

/// Starts draining; `false` if the node was draining already.
pub fn start(nsqd: &Nsqd) -> bool {
    if nsqd.drain.draining.swap(true, Ordering::SeqCst) {
        return false;
    }
    tracing::info!(
        "DRAIN: draining started: refusing new messages, topics and channels; delivering what is queued, then exiting"
    );
    // Channels first, then their topic (the reference's REGISTER order reversed), then drop
    // the connections: lookupd forgets a producer whose connection closes, and a reconnect
    // would re-register everything.
    for t in nsqd.engine.topics() {
        for c in t.channels() {
            nsqd.lookup.unregister(t.name(), Some(c.name()));
        }
        nsqd.lookup.unregister(t.name(), None);
    }
    nsqd.lookup.set_addresses(Vec::new());
    nsqd.drain.wake.notify_one();
    true
}

/// The TCP commands a draining node refuses (called only while draining).
pub(crate) fn check_tcp(nsqd: &Nsqd, cmd: &Command) -> Result<(), NsqError> {
    match cmd {
        Command::Pub { .. } => Err(NsqError::pub_failed(REFUSED_PUB)),
        Command::Mpub { .. } => Err(NsqError::mpub_failed(REFUSED_PUB)),
        Command::Dpub { .. } => Err(NsqError::dpub_failed(REFUSED_PUB)),
        Command::Sub { topic, channel } => {
            let exists = nsqd
                .engine
                .get_topic(topic)
                .is_some_and(|t| t.get_channel(channel).is_some());
            if exists {
                Ok(())
            } else {
                Err(NsqError::new(ErrorCode::SubFailed, REFUSED_SUB))
            }
        }
        _ => Ok(()),
    }
}

/// The answer to a refused HTTP publish or create.
pub(crate) fn http_refused() -> Response {
    v1_error(StatusCode::SERVICE_UNAVAILABLE, REFUSED_HTTP)
}

/// `GET /config/drain` (whether draining), `PUT /config/drain` (start; answers `true`) and
/// `PUT /config/shutdown` (answers `true`, then the daemon shuts down). The request body is
/// ignored.
pub(crate) fn http_config(nsqd: &Nsqd, method: &Method, opt: &str) -> Response {
    if *method == Method::PUT {
        match opt {
            "drain" => {
                start(nsqd);
            }
            _ => {
                tracing::info!("shutdown requested (PUT /config/shutdown)");
                nsqd.drain.request_shutdown();
            }
        }
    }
    let value = if opt == "drain" {
        nsqd.drain.is_draining()
    } else {
        true
    };
    let mut r = raw(StatusCode::OK, value.to_string());
    set(&mut r, header::CONTENT_TYPE, CT_JSON);
    set_nsq(&mut r);
    r
}

/// What a drain still waits for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Remaining {
    queued: i64,
    in_flight: usize,
    deferred: usize,
    /// `topic` or `topic:channel` of everything not yet empty.
    places: Vec<String>,
}

impl Remaining {
    fn is_empty(&self) -> bool {
        self.queued == 0 && self.in_flight == 0 && self.deferred == 0
    }
}

fn remaining(nsqd: &Nsqd) -> Remaining {
    let mut r = Remaining::default();
    for t in nsqd.engine.topics() {
        let ts = t.stats();
        if ts.depth != 0 {
            r.queued += ts.depth;
            r.places.push(ts.name.clone());
        }
        for c in &ts.channels {
            let cs = c.stats();
            if cs.depth != 0 || cs.in_flight_count != 0 || cs.deferred_count != 0 {
                r.queued += cs.depth;
                r.in_flight += cs.in_flight_count;
                r.deferred += cs.deferred_count;
                r.places.push(format!("{}:{}", ts.name, cs.name));
            }
        }
    }
    r
}

/// Runs the daemon until it should exit, then shuts it down cleanly: on SIGINT, on SIGTERM
/// (which starts a drain instead under `--sigterm=drain`), on `PUT /config/shutdown`, at the
/// end of a drain, or on a second signal during a drain.
pub async fn run(handle: NsqdHandle) {
    use tokio::signal::unix::{signal, SignalKind};
    let nsqd = handle.nsqd.clone();
    let mode = nsqd.opts.sigterm;
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_draining = false;
    let mut last_log = tokio::time::Instant::now();
    // Two empty readings in a row: a message moving between queues is never counted twice
    // nor missed by both.
    let mut empty_once = false;
    loop {
        let draining = nsqd.drain.is_draining();
        if draining && !was_draining {
            // The checks start a full period after the drain does, one period apart.
            was_draining = true;
            tick.reset();
        }
        tokio::select! {
            _ = term.recv() => {
                if mode == SigtermMode::Drain && !draining {
                    start(&nsqd);
                    continue;
                }
                if draining {
                    tracing::info!("DRAIN: second signal (SIGTERM): shutting down now, persisting what is left");
                }
                break;
            }
            _ = int.recv() => {
                if draining {
                    tracing::info!("DRAIN: second signal (SIGINT): shutting down now, persisting what is left");
                }
                break;
            }
            _ = nsqd.drain.wake.notified() => {
                if nsqd.drain.shutdown.load(Ordering::SeqCst) {
                    break;
                }
            }
            _ = tick.tick(), if draining => {
                let left = remaining(&nsqd);
                if left.is_empty() {
                    if empty_once {
                        tracing::info!("DRAIN: every topic and channel is empty: shutting down");
                        break;
                    }
                    empty_once = true;
                } else {
                    empty_once = false;
                    if last_log.elapsed() >= LOG_EVERY {
                        last_log = tokio::time::Instant::now();
                        tracing::info!(
                            "DRAIN: waiting for {} queued, {} in flight, {} deferred messages in {}",
                            left.queued,
                            left.in_flight,
                            left.deferred,
                            left.places.join(", ")
                        );
                    }
                }
            }
        }
    }
    handle.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_values() {
        assert_eq!(SigtermMode::parse("drain"), Ok(SigtermMode::Drain));
        assert_eq!(SigtermMode::parse("shutdown"), Ok(SigtermMode::Shutdown));
        assert_eq!(
            SigtermMode::parse("Drain").unwrap_err().to_string(),
            "must be 'shutdown' or 'drain'"
        );
    }
}
