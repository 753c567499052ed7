//! The origin's side of Return (docs/replication.md, "Return"): a peer answers HELLO with
//! TAKEN_OVER and the manifest of what it took over of one of this node's epochs; this node
//! stores the manifest (`<data-path>/replica/taken/<taker>.<epoch>.manifest`, synced), applies
//! it to the engine (`Engine::apply_manifest`: none of the listed messages is delivered here
//! afterwards), answers MANIFEST_APPLIED, and moves on to the next epoch (persisted in
//! `replication.dat`), ending every link session so that each starts again, with a catch-up,
//! in the new epoch. Stored manifests are applied again at startup, before anything is
//! delivered, and deleted once nothing of them is left to skip.
//!
//! After an unclean stop, channels deliver nothing until every peer answered HELLO (WELCOME,
//! or TAKEN_OVER with its manifest applied) or proved unreachable, at most 5 s; with members
//! found through nsqlookupd, the peers are those known once an nsqlookupd answered
//! (`discover.rs`) and any found while delivery is still held.
//!
//! NSQ has no counterpart.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use nsq_core::replica::manifest;
use nsq_protocol::replication::{self, Frame, Manifest};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::identity::{self, Identity};
use super::link::read_frame;
use super::Replication;

/// The longest an origin holds delivery at startup for its peers' answers.
pub const STARTUP_HOLD: Duration = Duration::from_secs(5);
/// How often stored manifests are checked for being used up.
const RETIRE_EVERY: Duration = Duration::from_secs(1);
/// How often a skip set of topic entries only is applied again.
const REAPPLY_EVERY: Duration = Duration::from_secs(60);

/// Return's state in [`Replication`].
pub(crate) struct State {
    /// This node's epoch as an origin now (HELLO carries it); starts at the identity's.
    epoch: watch::Sender<u64>,
    /// While delivery is held at startup: the peers that have not answered yet.
    waiting: Mutex<Option<HashSet<usize>>>,
    answered: tokio::sync::Notify,
    /// Storing and applying a manifest, against deleting used-up ones.
    files: Mutex<()>,
    /// The newest of this node's epochs a peer took over (its manifest applied here): later
    /// HELLOs do not call it unclean, and every new session tells the peer to DROP its copies
    /// of it, so that a holder that was not the taker does not take it over again.
    taken: AtomicU64,
    /// The taker whose manifest of `taken` was applied (DROP names it: a copy of that epoch
    /// goes to it as a handoff, never to a second takeover); 0 when not known.
    taken_by: AtomicU64,
}

impl State {
    pub(crate) fn new(epoch: u64) -> Self {
        State {
            epoch: watch::channel(epoch).0,
            waiting: Mutex::new(None),
            answered: tokio::sync::Notify::new(),
            files: Mutex::new(()),
            taken: AtomicU64::new(0),
            taken_by: AtomicU64::new(0),
        }
    }
}

/// Where received manifests are kept until used up.
pub fn taken_dir(data_path: &Path) -> PathBuf {
    data_path.join("replica").join("taken")
}

fn manifest_file(data_path: &Path, by_node: u64, epoch: u64) -> PathBuf {
    taken_dir(data_path).join(format!("{by_node:016x}.{epoch}.manifest"))
}

/// The taker named by a stored manifest's file name (`<taker>.<epoch>.manifest`).
fn taker_of(path: &Path) -> u64 {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once('.'))
        .and_then(|(t, _)| u64::from_str_radix(t, 16).ok())
        .unwrap_or(0)
}

/// The stored manifests: `(path, epoch)`.
fn stored(data_path: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(rd) = std::fs::read_dir(taken_dir(data_path)) else {
        return Vec::new();
    };
    let mut v: Vec<(PathBuf, u64)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let epoch = name
                .strip_suffix(".manifest")?
                .split_once('.')?
                .1
                .parse()
                .ok()?;
            Some((e.path(), epoch))
        })
        .collect();
    v.sort();
    v
}

impl Replication {
    /// This node's epoch as an origin now.
    pub fn epoch(&self) -> u64 {
        *self.ret.epoch.borrow()
    }

    /// The newest of this node's epochs a peer took over (0: none), see `State::taken`.
    pub(super) fn taken_epoch(&self) -> u64 {
        self.ret.taken.load(Ordering::Acquire)
    }

    /// The taker of [`Replication::taken_epoch`] (0: not known).
    pub(super) fn taken_by(&self) -> u64 {
        self.ret.taken_by.load(Ordering::Acquire)
    }

    /// The stored manifests as the core starts with them: (this node's epoch, the taker).
    pub(super) fn applied_manifests(&self) -> Vec<(u64, u64)> {
        stored(&self.data_path)
            .into_iter()
            .map(|(path, epoch)| (epoch, taker_of(&path)))
            .collect()
    }

    /// A manifest of `epoch` from `by_node` is applied: the newest such epoch and its taker.
    fn note_taken(&self, epoch: u64, by_node: u64) {
        if self.ret.taken.fetch_max(epoch, Ordering::AcqRel) <= epoch {
            self.ret.taken_by.store(by_node, Ordering::Release);
        }
    }

    pub(super) fn epoch_watch(&self) -> watch::Receiver<u64> {
        self.ret.epoch.subscribe()
    }

    /// Peer `i` was found through nsqlookupd: while delivery is held at startup, it is waited
    /// for too.
    pub(super) fn wait_for_peer(&self, i: usize) {
        if let Some(set) = self.ret.waiting.lock().as_mut() {
            set.insert(i);
        }
    }

    /// Peer `i` answered HELLO (or proved unreachable): one less to wait for at startup.
    pub(super) fn peer_answered(&self, i: usize) {
        let mut w = self.ret.waiting.lock();
        if let Some(set) = w.as_mut() {
            if set.remove(&i) && set.is_empty() {
                self.ret.answered.notify_waiters();
            }
        }
    }

    /// At start of the links: holds delivery after an unclean stop (or with manifests stored
    /// and not used up), applies the stored manifests, and releases the hold once every peer
    /// answered or after [`STARTUP_HOLD`]; then deletes used-up manifests now and then.
    pub(super) fn start_return(self: &Arc<Self>, peers: usize) {
        let Some(engine) = self.engine().cloned() else {
            return;
        };
        let kept = stored(&self.data_path);
        let have_stored = !kept.is_empty();
        if let Some((path, newest)) = kept.iter().max_by_key(|(_, e)| *e) {
            self.note_taken(*newest, taker_of(path));
        }
        let unclean = self.identity.previous_unclean.is_some();
        if unclean || have_stored {
            engine.hold_delivery();
        }
        if unclean {
            *self.ret.waiting.lock() = Some((0..peers).collect());
        }
        let repl = self.clone();
        let task = tokio::spawn(async move {
            // The peers are asked once this node's sessions run, after the replay of its
            // replica backlogs; delivery stays held meanwhile (and for good if it fails).
            if !repl.replayed().await {
                return;
            }
            let deadline = tokio::time::Instant::now() + STARTUP_HOLD;
            if have_stored {
                let r = repl.clone();
                let _ = tokio::task::spawn_blocking(move || r.apply_stored()).await;
            }
            if unclean {
                // The members nsqlookupd lists are peers too (found at its first answer).
                let mut stop = repl.stopping();
                tokio::select! {
                    _ = repl.first_round() => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
                loop {
                    let answered = repl.ret.answered.notified();
                    tokio::pin!(answered);
                    answered.as_mut().enable();
                    if repl
                        .ret
                        .waiting
                        .lock()
                        .as_ref()
                        .is_none_or(|w| w.is_empty())
                    {
                        break;
                    }
                    let mut stop = repl.stopping();
                    tokio::select! {
                        _ = answered => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            tracing::warn!(
                                "REPLICATION: not every peer answered within {STARTUP_HOLD:?}, delivering"
                            );
                            break;
                        }
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
                *repl.ret.waiting.lock() = None;
            }
            engine.release_delivery();
            let mut stop = repl.stopping();
            let mut last_reapply = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(RETIRE_EVERY) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                // Only topic entries left (pending on a paused or channel-less topic when
                // applied): look again now and then whether they were fanned out since.
                let reapply = last_reapply.elapsed() >= REAPPLY_EVERY
                    && engine.returning().only_topic_entries();
                if reapply {
                    last_reapply = tokio::time::Instant::now();
                }
                let r = repl.clone();
                let _ = tokio::task::spawn_blocking(move || r.retire_used_up(reapply)).await;
            }
        });
        self.tasks.lock().push(task);
    }

    /// Applies every stored manifest (startup). Blocking.
    fn apply_stored(&self) {
        let Some(engine) = self.engine() else { return };
        let _files = self.ret.files.lock();
        for (path, epoch) in stored(&self.data_path) {
            match manifest::read(&path, epoch) {
                Ok(m) => {
                    let settled = engine.apply_manifest(&m);
                    tracing::info!(
                        "REPLICATION: re-applied {} ({} IDs, {settled} settled)",
                        path.display(),
                        manifest::count(&m)
                    );
                }
                Err(e) => {
                    // Written whole or not at all; a damaged file cannot be trusted either.
                    tracing::error!("REPLICATION: ignoring {} - {e}", path.display());
                }
            }
        }
    }

    /// Deletes the stored manifests once nothing of them is left to skip (`reapply`: after
    /// applying the skip set again). Blocking.
    fn retire_used_up(&self, reapply: bool) {
        let Some(engine) = self.engine() else { return };
        let _files = self.ret.files.lock();
        if reapply {
            engine.reapply_skips();
        }
        if engine.returning().pending() > 0 {
            return;
        }
        for (path, _) in stored(&self.data_path) {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!("REPLICATION: {} used up, deleted", path.display()),
                Err(e) => {
                    tracing::error!("REPLICATION: failed to delete {} - {e}", path.display())
                }
            }
        }
    }

    /// Stores a received manifest (synced) and applies it. Blocking. A listed message this
    /// node adopted again after the taker's copy (up to `last_seq`) was taken stays (its take
    /// point is later: [`Replication::adopted_after`]).
    fn store_and_apply(
        &self,
        by_node: u64,
        epoch: u64,
        last_seq: u64,
        m: &[Manifest],
    ) -> Result<usize, String> {
        let engine = self.engine().ok_or("no engine")?.clone();
        let back = self.adopted_after(epoch, last_seq);
        let kept: Vec<Manifest>;
        let m = if back.is_empty() {
            m
        } else {
            kept = m
                .iter()
                .map(|x| Manifest {
                    ids: x
                        .ids
                        .iter()
                        .filter(|id| !back.contains(id))
                        .copied()
                        .collect(),
                    ..x.clone()
                })
                .collect();
            let n = manifest::count(m) - manifest::count(&kept);
            if n > 0 {
                tracing::info!(
                    "REPLICATION: {n} IDs of the manifest of epoch {epoch} came back here after its copy was taken; kept"
                );
            }
            &kept
        };
        let _files = self.ret.files.lock();
        let dir = taken_dir(&self.data_path);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{} - {e}", dir.display()))?;
        let path = manifest_file(&self.data_path, by_node, epoch);
        let entries = m
            .iter()
            .map(|x| (x.topic.clone(), x.channel.clone(), x.ids.clone()));
        manifest::write(&path, epoch, entries).map_err(|e| format!("{} - {e}", path.display()))?;
        let settled = engine.apply_manifest(m);
        self.note_taken(epoch, by_node);
        Ok(settled)
    }

    /// Moves this node past `taken` (the epoch a peer took over): to `taken + 1` unless it is
    /// there already; persisted before any new session uses it. Returns whether it moved.
    pub(super) fn advance_epoch(&self, taken: u64) -> Result<bool, String> {
        let next = taken + 1;
        let _files = self.ret.files.lock();
        if self.epoch() >= next {
            return Ok(false);
        }
        let id = Identity {
            epoch: next,
            ..self.identity
        };
        identity::write(&self.data_path, &id, None).map_err(|e| e.to_string())?;
        self.ret.epoch.send_replace(next);
        Ok(true)
    }
}

/// Reads the MANIFEST frames of `epoch` up to MANIFEST_END.
async fn read_manifest<R: AsyncRead + Unpin>(
    repl: &Replication,
    rd: &mut R,
    buf: &mut BytesMut,
    epoch: u64,
) -> Result<Vec<Manifest>, String> {
    let mut m: Vec<Manifest> = Vec::new();
    loop {
        match read_frame(rd, buf, repl.settings.max_frame).await? {
            Frame::Manifest(x) if x.epoch == epoch => m.push(x),
            Frame::ManifestEnd { epoch: e } if e == epoch => return Ok(m),
            Frame::Heartbeat | Frame::Status(_) | Frame::Pong { .. } | Frame::Ack { .. } => {}
            other => {
                return Err(format!(
                    "unexpected frame type 0x{:02x} in the manifest of epoch {epoch}",
                    other.frame_type()
                ))
            }
        }
    }
}

/// Stores and applies a received manifest, answers MANIFEST_APPLIED (`answer`, before this
/// node moves on: the answer must go out on this session, which the move ends), and moves
/// this node to the next epoch. `Ok` is what to log.
async fn apply_received<F>(
    repl: &Arc<Replication>,
    (epoch, by_node, entries, last_seq): (u64, u64, u64, u64),
    m: Vec<Manifest>,
    answer: F,
) -> Result<String, String>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let got = manifest::count(&m);
    if got != entries {
        tracing::warn!(
            "REPLICATION: manifest of epoch {epoch} from {by_node:016x} lists {got} IDs, TAKEN_OVER said {entries}"
        );
    }
    let r = repl.clone();
    let settled =
        tokio::task::spawn_blocking(move || r.store_and_apply(by_node, epoch, last_seq, &m))
            .await
            .map_err(|e| e.to_string())??;
    // The manifest is stored and applied: if this answer is lost, the peer sends it again and
    // applying it twice changes nothing.
    answer.await?;
    let r = repl.clone();
    let moved = tokio::task::spawn_blocking(move || r.advance_epoch(epoch))
        .await
        .map_err(|e| e.to_string())??;
    // The core moves to the next epoch with it and lifts the fence TAKEN_OVER set.
    repl.core_event(nsq_core::replication::Event::ManifestApplied {
        taker: by_node,
        epoch,
    });
    Ok(format!(
        "epoch {epoch} taken over by {by_node:016x}: manifest of {got} IDs applied ({settled} settled at once), now epoch {}{}",
        repl.epoch(),
        if moved { ", every link starts again" } else { "" }
    ))
}

/// The peer answered HELLO with TAKEN_OVER `{epoch, by_node, entries}`: reads its MANIFEST
/// frames up to MANIFEST_END, stores and applies them, answers MANIFEST_APPLIED and moves
/// this node to the next epoch. `Ok` is what to log.
pub(super) async fn taken_over<R, W>(
    repl: &Arc<Replication>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    taken: (u64, u64, u64, u64),
) -> Result<String, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let epoch = taken.0;
    let m = read_manifest(repl, rd, buf, epoch).await?;
    apply_received(repl, taken, m, async {
        let mut out = BytesMut::new();
        replication::encode(&Frame::ManifestApplied { epoch }, &mut out);
        wr.write_all(&out).await.map_err(|e| e.to_string())?;
        let _ = wr.flush().await;
        Ok(())
    })
    .await
}

/// TAKEN_OVER on a welcomed session (the taker welcomed this node's next epoch while it took
/// an earlier one over, and says so once done): as [`taken_over`], MANIFEST_APPLIED queued
/// through the session's writer (`to_writer`), which sends it before the move to the next
/// epoch (if any) ends the session.
pub(super) async fn taken_over_live<R: AsyncRead + Unpin>(
    repl: &Arc<Replication>,
    rd: &mut R,
    buf: &mut BytesMut,
    taken: (u64, u64, u64, u64),
    to_writer: &tokio::sync::mpsc::UnboundedSender<super::driver::SessionCmd>,
) -> Result<String, String> {
    let epoch = taken.0;
    let m = read_manifest(repl, rd, buf, epoch).await?;
    apply_received(repl, taken, m, async {
        to_writer
            .send(super::driver::SessionCmd::Frame(Frame::ManifestApplied {
                epoch,
            }))
            .map_err(|_| "the session's writer ended".to_string())
    })
    .await
}
