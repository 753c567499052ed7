//! Carrying out a takeover the core decided (docs/replication.md, "Takeover"; the decision —
//! the origin gone on its link and on every nsqlookupd for `--replication-takeover-timeout`,
//! and this node the chooser's first candidate — is `nsq_core::replication`'s, `driver.rs`
//! runs it): the manifest is written (fsynced), every topic and channel of the backlog
//! created (pause flags kept), every unsettled message put with its original ID, timestamp,
//! attempts and remaining deferral (`Topic::adopt`, replicated like a publish, `deliver.rs`);
//! the core hears `TakeoverEnded { ok }` only once the messages are stored as a publish's must
//! be before its OK (synced in durable mode, acknowledged by this node's own replica set),
//! and then drops the backlog (`DropBacklog`). Until then the backlog stays and STATUS says
//! `taking over`, so the other holders keep their copies.
//!
//! Also what the core asks of nsqlookupd (`PollLookupds`: each lookupd's `/debug`,
//! nsqlookupd/http.go `doDebug`, whose `last_update` the origin's PINGs refresh, nsqd/lookup.go
//! `lookupLoop`), and deleting copies and manifests. NSQ has no counterpart.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nsq_core::receipt::PutReceipt;
use nsq_core::replica::manifest;
use nsq_core::replication::Event;
use nsq_protocol::message::MessageId;

use super::deliver::{deliver, Taken};
use super::lookupd_debug::poll_debug;
use super::Replication;

/// How soon a takeover whose messages are not yet synced or replicated tries again.
const CONFIRM_RETRY: Duration = Duration::from_secs(1);
/// How long an applied manifest is kept (the core announces its epoch `taken over` as long).
pub(super) const RETIRE_AFTER: Duration = Duration::from_secs(600);

impl Replication {
    /// Polls every nsqlookupd's `/debug` (one poll at a time) and tells the core what each
    /// lists: its clock and every producer at `broadcast_address:tcp_port`.
    pub(super) fn poll_lookupds(
        self: &Arc<Self>,
        lookup: &crate::lookup::Lookup,
        client: &nsq_http::client::HttpClient,
    ) {
        if self.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (r, lookupds, client) = (self.clone(), lookup.lookupds(), client.clone());
        tokio::spawn(async move {
            for (i, (_, http)) in lookupds.iter().enumerate() {
                // A lookupd not identified yet gives no answer: the core's gone rule waits
                // for every one (fail closed).
                let Some(http) = http else { continue };
                let Some(answer) = poll_debug(&client, http).await else {
                    continue;
                };
                let producers = answer
                    .producers
                    .iter()
                    .map(|p| {
                        let at = u64::try_from(p.last_update).unwrap_or(0);
                        (
                            format!("{}:{}", p.broadcast_address, p.tcp_port),
                            Duration::from_nanos(at),
                        )
                    })
                    .collect();
                r.core_event(Event::LookupdAnswer {
                    lookupd: i,
                    clock: answer.clock,
                    producers,
                });
            }
            r.polling.store(false, Ordering::Release);
        });
    }

    /// Starts the takeover of `(origin, epoch)` the core asked for, unless one runs.
    pub(super) fn start_takeover(self: &Arc<Self>, origin: u64, epoch: u64) {
        if !self.running.lock().insert((origin, epoch)) {
            return;
        }
        let r = self.clone();
        tokio::spawn(async move {
            let ok = r.take_over(origin, epoch).await;
            r.running.lock().remove(&(origin, epoch));
            if let Some(ok) = ok {
                r.core_event(Event::TakeoverEnded { origin, epoch, ok });
            }
        });
    }

    /// Whether a takeover of `(origin, epoch)` runs here.
    pub(super) fn taking_over(&self, origin: u64, epoch: u64) -> bool {
        self.running.lock().contains(&(origin, epoch))
    }

    /// Takes the backlog of `(origin, epoch)` over: `Some(true)` once its messages are put
    /// and confirmed stored ([`Replication::confirmed`], tried again every
    /// [`CONFIRM_RETRY`] while it is not), `Some(false)` when they could not be put (the core
    /// tries again), `None` at shutdown (the restarted node takes the epoch over again:
    /// duplicates, never loss).
    async fn take_over(self: &Arc<Self>, origin: u64, epoch: u64) -> Option<bool> {
        let g = self.takeover_lock.lock().await;
        let Some(engine) = self.engine().cloned() else {
            tracing::error!("REPLICATION: cannot take over {origin:016x} epoch {epoch}: no engine");
            return Some(false);
        };
        // A backlog the core knows of but nsqd never opened (its session ended before the
        // store was) holds nothing: its takeover is an empty manifest.
        let r = self.clone();
        let b = match tokio::task::spawn_blocking(move || r.open_backlog(origin, epoch)).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::error!("REPLICATION: cannot take over {origin:016x} epoch {epoch} - {e}");
                return Some(false);
            }
            Err(e) => {
                tracing::error!("REPLICATION: cannot take over {origin:016x} epoch {epoch} - {e}");
                return Some(false);
            }
        };
        b.taking_over.store(true, Ordering::Release);
        // A session still writing to it stores nothing more.
        b.session.fetch_add(1, Ordering::AcqRel);
        // The copy taken ends here (TAKEN_OVER tells the origin how far it went, STATUS the
        // other holders, with whether it was complete).
        let (last_seq, complete) = {
            let s = b.store.lock();
            (s.last_seq(), !s.index().catching_up())
        };
        let began = std::time::Instant::now();
        tracing::info!(
            "REPLICATION: taking over {origin:016x} epoch {epoch} (copy up to seq {last_seq}, {})",
            if complete { "complete" } else { "incomplete" }
        );
        let path = manifest::manifest_path(&self.data_path, origin, epoch);
        let (bb, p) = (b.clone(), path.clone());
        let taken = Taken {
            last_seq,
            complete,
            at: (0, 0),
        };
        let delivered = tokio::task::spawn_blocking(move || deliver(&engine, &bb, &p, taken)).await;
        let done = match delivered {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::error!(
                    "REPLICATION: taking over {origin:016x} epoch {epoch} failed - {e}"
                );
                b.taking_over.store(false, Ordering::Release);
                return Some(false);
            }
            Err(e) => {
                tracing::error!(
                    "REPLICATION: taking over {origin:016x} epoch {epoch} failed - {e}"
                );
                b.taking_over.store(false, Ordering::Release);
                return Some(false);
            }
        };
        // The take point of what was put (see `Taken::at`), beside the manifest.
        let taken = Taken {
            at: (self.epoch(), done.receipt.replication_seq()),
            ..taken
        };
        if let Err(e) = taken.write(&path) {
            tracing::warn!(
                "REPLICATION: failed to record the take point of {origin:016x} epoch {epoch} - {e}"
            );
        }
        self.taken.lock().insert((origin, epoch), done.ids);
        self.taken_seq.lock().insert((origin, epoch), taken);
        drop(g);
        let summary = format!(
            "{} messages ({} puts) in {} topics, {} unreadable",
            done.messages, done.ids, done.topics, done.unreadable
        );
        let seq = done.receipt.replication_seq();
        let mut stop = self.stopping();
        let mut last_error = String::new();
        loop {
            let r = tokio::select! {
                r = self.confirmed(&done.receipt, seq) => r,
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => return None,
            };
            match r {
                Ok(()) => break,
                Err(e) => {
                    if e != last_error {
                        tracing::warn!(
                            "REPLICATION: taken-over messages of {origin:016x} epoch {epoch} {e}; the backlog is kept, trying again"
                        );
                        last_error = e;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(CONFIRM_RETRY) => {}
                        _ = async { stop.wait_for(|s| *s).await.is_ok() } => return None,
                    }
                }
            }
        }
        self.takeovers.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "REPLICATION: took over {origin:016x} epoch {epoch}: {summary}, in {:?}",
            began.elapsed()
        );
        Some(true)
    }

    /// Whether the messages a takeover or a handoff put (`receipt`, up to log seq `seq`) are
    /// stored as a publish's must be before its OK: synced in durable mode, and acknowledged
    /// by this node's own replica set (`--replication-ack-timeout`); `Err` says which is not.
    pub(super) async fn confirmed(&self, receipt: &PutReceipt, seq: u64) -> Result<(), String> {
        receipt
            .clone()
            .durable()
            .await
            .map_err(|e| format!("not synced - {e}"))?;
        self.wait_replicated(seq)
            .await
            .map_err(|e| format!("not replicated - {e}"))
    }

    /// Deletes this node's copy of `(origin, epoch)` (the core's `DropBacklog`: taken over
    /// here and confirmed, handed off, or held entirely by the member that took it over).
    pub(super) async fn drop_copy(self: &Arc<Self>, origin: u64, epoch: u64) {
        let _g = self.takeover_lock.lock().await;
        let Some(b) = self.backlogs.lock().remove(&(origin, epoch)) else {
            return;
        };
        b.session.fetch_add(1, Ordering::AcqRel);
        let dir = b.store.lock().dir().to_path_buf();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await;
        if let Ok(Err(e)) = removed {
            tracing::error!("REPLICATION: failed to delete a backlog - {e}");
        }
        tracing::info!("REPLICATION: copy of {origin:016x} epoch {epoch} deleted");
    }

    /// The manifest of `(origin, epoch)` taken over here is applied by its origin (the
    /// core's `DeleteManifest`): it is kept as `<origin>.<epoch>.applied`, with its take point,
    /// for the retire period ([`RETIRE_AFTER`]) — a manifest of one of this node's own epochs
    /// that lists a message adopted here must not take it back ([`Replication::adopted_after`])
    /// — then deleted by [`Replication::retire_applied`].
    pub(super) async fn delete_manifest(self: &Arc<Self>, origin: u64, epoch: u64) {
        let _g = self.takeover_lock.lock().await;
        let path = manifest::manifest_path(&self.data_path, origin, epoch);
        let r = tokio::task::spawn_blocking(move || {
            std::fs::rename(&path, path.with_extension("applied"))
        })
        .await;
        match r {
            Ok(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::error!("REPLICATION: failed to retire the manifest - {e}");
            }
            _ => tracing::info!(
                "REPLICATION: {origin:016x} applied the manifest of epoch {epoch}; retired"
            ),
        }
    }

    /// Deletes the applied manifests (and their take points) older than [`RETIRE_AFTER`].
    /// Blocking.
    pub(super) fn retire_applied(&self) {
        let Ok(rd) = std::fs::read_dir(self.data_path.join("replica")) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "applied") {
                continue;
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= RETIRE_AFTER);
            if old {
                Taken::remove(&p);
                if let Err(e) = std::fs::remove_file(&p) {
                    tracing::error!("REPLICATION: failed to delete {} - {e}", p.display());
                }
            }
        }
    }

    /// The IDs this node adopted (takeovers, handoffs) after its own epoch `epoch`'s copy
    /// up to `last_seq` was taken: those of its kept and recently applied manifests whose
    /// take point is after `(epoch, last_seq)`. Blocking.
    pub(super) fn adopted_after(&self, epoch: u64, last_seq: u64) -> HashSet<MessageId> {
        let mut ids = HashSet::new();
        let Ok(rd) = std::fs::read_dir(self.data_path.join("replica")) else {
            return ids;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Some(ext) = p.extension().and_then(|x| x.to_str()) else {
                continue;
            };
            if ext != "manifest" && ext != "applied" {
                continue;
            }
            let Some(file_epoch) = p
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.split_once('.'))
                .and_then(|(_, e)| e.parse::<u64>().ok())
            else {
                continue;
            };
            let Some(t) = Taken::read(&p) else { continue };
            if t.at <= (epoch, last_seq) {
                continue;
            }
            if let Ok(m) = manifest::read(&p, file_epoch) {
                ids.extend(m.into_iter().flat_map(|x| x.ids));
            }
        }
        ids
    }
}
