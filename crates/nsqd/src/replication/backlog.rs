//! The replica backlogs this node holds: [`Backlog`] and its link state, the origin's address
//! (`origin.json`), and opening, dropping and looking them up.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nsq_core::replica::{backlog_dir, ReplicaStore};
use parking_lot::Mutex;

use super::{Replication, ReplicationError};

/// One replica backlog this node holds (docs/replication.md, "The replica store").
pub(crate) struct Backlog {
    pub origin: u64,
    pub epoch: u64,
    pub store: Mutex<ReplicaStore>,
    /// The link session writing to it; a newer session ends an older one.
    pub session: AtomicU64,
    /// The origin's link as the takeover watch sees it.
    pub(crate) link: Mutex<LinkState>,
    /// The origin's broadcast address and TCP port from its HELLO (how nsqlookupd lists it),
    /// kept in `origin.json` in the backlog directory so a restarted replica knows them.
    pub(crate) address: Mutex<Option<(String, u16)>>,
    /// A takeover of this backlog is running.
    pub(crate) taking_over: AtomicBool,
}

/// Whether a session of the origin is live, and since when none is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkState {
    pub live: Option<u64>,
    pub down_since: Option<Instant>,
}

impl Backlog {
    /// Session `session` is up (WELCOME sent, or a frame came).
    pub(crate) fn link_up(&self, session: u64) {
        let mut l = self.link.lock();
        l.live = Some(session);
        l.down_since = None;
    }

    /// Session `session` ended; the link is down unless a newer session is up.
    pub(crate) fn link_down(&self, session: u64) {
        let mut l = self.link.lock();
        if l.live.is_none_or(|s| s == session) {
            l.live = None;
            l.down_since.get_or_insert_with(Instant::now);
        }
    }

    /// `replicating`, `detached` (the origin's link is down) or `taking over`.
    pub(crate) fn state(&self) -> &'static str {
        if self.taking_over.load(Ordering::Acquire) {
            "taking over"
        } else if self.link.lock().live.is_some() {
            "replicating"
        } else {
            "detached"
        }
    }

    /// Records the origin's address (HELLO) in memory and, when it changed, in
    /// `origin.json`. Blocking.
    pub(crate) fn set_address(&self, addr: &str, tcp_port: u16) {
        let new = Some((addr.to_string(), tcp_port));
        if *self.address.lock() == new {
            return;
        }
        *self.address.lock() = new;
        let dir = self.store.lock().dir().to_path_buf();
        let json = serde_json::json!({"broadcast_address": addr, "tcp_port": tcp_port});
        if let Err(e) = std::fs::write(dir.join(ORIGIN_FILE), json.to_string()) {
            tracing::warn!(
                "REPLICATION: failed to record the origin's address in {} - {e}",
                dir.display()
            );
        }
    }
}

/// The file in a backlog directory naming the origin's broadcast address and TCP port.
const ORIGIN_FILE: &str = "origin.json";

fn read_address(dir: &Path) -> Option<(String, u16)> {
    let text = std::fs::read_to_string(dir.join(ORIGIN_FILE)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((
        v["broadcast_address"].as_str()?.to_string(),
        u16::try_from(v["tcp_port"].as_u64()?).ok()?,
    ))
}

/// Where the replay of the replica backlogs stands ([`Replication::replay`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replay {
    Pending,
    Done,
    Failed,
}

impl Replication {
    /// Replays every replica backlog under `<data-path>/replica/`. Blocking; run after the
    /// listeners serve, so a node holding a large backlog answers `/ping`, publishes and
    /// consumers at once, not after seconds of replay. Everything that reads or writes
    /// backlogs — served links, this node's sessions, the takeover watch, the return's hold —
    /// waits for it ([`Replication::replayed`]); on failure none of that runs (nsqd stops:
    /// `server.rs`).
    pub fn replay(&self) -> Result<(), ReplicationError> {
        let began = Instant::now();
        let r = self.open_backlogs();
        let state = if r.is_ok() {
            Replay::Done
        } else {
            Replay::Failed
        };
        self.replay.send_replace(state);
        if r.is_ok() {
            tracing::info!(
                "REPLICATION: {} replica backlogs replayed in {:.3}s",
                self.backlogs.lock().len(),
                began.elapsed().as_secs_f64()
            );
        }
        r
    }

    /// Waits for [`Replication::replay`]: `true` once the backlogs are open, `false` when
    /// the replay failed or the daemon stops first.
    pub async fn replayed(&self) -> bool {
        let mut rx = self.replay.subscribe();
        let mut stop = self.stopping();
        tokio::select! {
            r = rx.wait_for(|s| *s != Replay::Pending) => r.is_ok_and(|s| *s == Replay::Done),
            _ = stop.wait_for(|s| *s) => false,
        }
    }

    /// The replay as `/stats` shows it: `replaying`, `done` or `failed`.
    pub fn replay_state(&self) -> &'static str {
        match *self.replay.borrow() {
            Replay::Pending => "replaying",
            Replay::Done => "done",
            Replay::Failed => "failed",
        }
    }

    /// Whether the replay failed (nsqd then exits with status 1).
    pub fn replay_failed(&self) -> bool {
        *self.replay.borrow() == Replay::Failed
    }

    fn open_backlogs(&self) -> Result<(), ReplicationError> {
        let dir = self.data_path.join("replica");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(ReplicationError::List { dir, source }),
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_suffix(".manifest") {
                // A takeover's manifest, kept until the origin applied it.
                if let Some((o, ep)) = key.split_once('.') {
                    if let (Ok(origin), Ok(epoch)) = (u64::from_str_radix(o, 16), ep.parse()) {
                        match nsq_core::replica::manifest::read(&e.path(), epoch) {
                            Ok(m) => {
                                let n = nsq_core::replica::manifest::count(&m);
                                self.taken.lock().insert((origin, epoch), n);
                                if let Some(t) = super::deliver::Taken::read(&e.path()) {
                                    self.taken_seq.lock().insert((origin, epoch), t);
                                }
                            }
                            Err(err) => tracing::error!(
                                "REPLICATION: manifest {} refused - {err}",
                                e.path().display()
                            ),
                        }
                    }
                }
                continue;
            }
            let Some((o, ep)) = name.split_once('.') else {
                continue;
            };
            let (Ok(origin), Ok(epoch)) = (u64::from_str_radix(o, 16), ep.parse::<u64>()) else {
                continue;
            };
            if !e.path().is_dir() {
                continue;
            }
            self.open_backlog(origin, epoch)?;
        }
        Ok(())
    }

    /// Deletes `b`, the copy a session wrote until its origin said STANDBY (docs/replication.md,
    /// "Who holds which origin's messages"): gone from the map and the disk before the
    /// session reads on, so that a catch-up on the same session opens a new one. No takeover
    /// runs on it (its origin's session is live). Blocking.
    pub(crate) fn release_copy(&self, b: &Arc<Backlog>) {
        {
            let mut m = self.backlogs.lock();
            if m.get(&(b.origin, b.epoch))
                .is_some_and(|x| Arc::ptr_eq(x, b))
            {
                m.remove(&(b.origin, b.epoch));
            }
        }
        b.session.fetch_add(1, Ordering::AcqRel);
        let dir = b.store.lock().dir().to_path_buf();
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!(
                "REPLICATION: copy of {:016x} epoch {} deleted: outside its replica set",
                b.origin,
                b.epoch
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!("REPLICATION: failed to delete a backlog - {e}"),
        }
    }

    /// The backlog of `(origin, epoch)`, opened (recovered) or created. Blocking.
    pub(crate) fn open_backlog(
        &self,
        origin: u64,
        epoch: u64,
    ) -> Result<Arc<Backlog>, ReplicationError> {
        if let Some(b) = self.backlogs.lock().get(&(origin, epoch)) {
            return Ok(b.clone());
        }
        let dir = backlog_dir(&self.data_path, origin, epoch);
        let shared = {
            let mut m = self.origin_bytes.lock();
            // An origin none of whose stores is open any more is forgotten.
            m.retain(|_, c| Arc::strong_count(c) > 1);
            m.entry(origin).or_default().clone()
        };
        let (store, report) = ReplicaStore::open_shared(&dir, self.settings.store, shared)
            .map_err(|source| ReplicationError::Backlog {
                dir: dir.clone(),
                source,
            })?;
        tracing::info!(
            "REPLICATION: backlog of {origin:016x} epoch {epoch}: {} records replayed, {} messages, last seq {}{}{}",
            report.records,
            store.index().messages(),
            store.last_seq(),
            report
                .truncated
                .map(|(s, o, n)| format!(", torn tail of {n} bytes cut at {s}:{o}"))
                .unwrap_or_default(),
            if report.damaged.is_empty() {
                String::new()
            } else {
                format!(", {} damaged stretches skipped", report.damaged.len())
            }
        );
        let address = read_address(&dir);
        let b = Arc::new(Backlog {
            origin,
            epoch,
            store: Mutex::new(store),
            session: AtomicU64::new(0),
            // No session yet: down from now (a replica restarted while its origin was gone
            // counts the absence from its own start).
            link: Mutex::new(LinkState {
                live: None,
                down_since: Some(Instant::now()),
            }),
            address: Mutex::new(address),
            taking_over: AtomicBool::new(false),
        });
        Ok(self
            .backlogs
            .lock()
            .entry((origin, epoch))
            .or_insert(b)
            .clone())
    }
}
