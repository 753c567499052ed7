//! Carrying out the replication core's commands (`driver.rs` owns the core): the sessions
//! each command goes to, and what the driver does for each — frames routed to the link
//! sessions, takeovers, handoffs, polls, deletions, epochs, the delivery fence.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use nsq_core::replication::{self as core, Command, Event, Link, Msg};
use nsq_protocol::replication::{self as wire, Frame};
use tokio::sync::mpsc;

use super::driver::{Input, SessionCmd};
use super::Replication;

impl Replication {
    /// What `/metrics` and STATUS add to an entry: the messages and bytes of the backlog.
    fn wire_status(&self, entries: &[core::StatusEntry]) -> Vec<wire::StatusEntry> {
        let sizes: HashMap<(u64, u64), (u64, u64)> = self
            .backlogs
            .lock()
            .iter()
            .map(|(&k, b)| {
                let n = b
                    .store
                    .try_lock()
                    .map_or((0, 0), |s| (s.index().messages(), s.bytes()));
                (k, n)
            })
            .collect();
        entries
            .iter()
            .map(|e| {
                let (messages, bytes) = sizes.get(&(e.origin, e.epoch)).copied().unwrap_or((0, 0));
                wire::StatusEntry {
                    origin: e.origin,
                    epoch: e.epoch,
                    state: match e.state {
                        core::BacklogState::Replicating => wire::BacklogState::Replicating,
                        core::BacklogState::Detached => wire::BacklogState::Detached,
                        core::BacklogState::Gone => wire::BacklogState::Gone,
                        core::BacklogState::TakingOver => wire::BacklogState::TakingOver,
                        core::BacklogState::TakenOver => wire::BacklogState::TakenOver,
                    },
                    last_seq: e.last_seq,
                    messages,
                    bytes,
                    complete: e.complete,
                    echo: u64::try_from(e.echo.as_nanos()).unwrap_or(u64::MAX),
                }
            })
            .collect()
    }
}

/// The sessions the core's commands go to.
#[derive(Default)]
pub(super) struct Sessions {
    ins: HashMap<u64, (u64, mpsc::UnboundedSender<SessionCmd>)>,
    outs: HashMap<u64, (u64, mpsc::UnboundedSender<SessionCmd>, mpsc::Sender<Bytes>)>,
    /// TAKEN_OVER's `last_seq` until its SendManifest (they come together).
    taken: HashMap<(u64, u64), u64>,
}

impl Sessions {
    fn tx(&self, peer: u64, link: Link) -> Option<&mpsc::UnboundedSender<SessionCmd>> {
        match link {
            Link::In => self.ins.get(&peer).map(|(_, tx)| tx),
            Link::Out => self.outs.get(&peer).map(|(_, tx, _)| tx),
        }
    }

    fn send(&self, peer: u64, link: Link, c: SessionCmd) {
        if let Some(tx) = self.tx(peer, link) {
            let _ = tx.send(c);
        }
    }

    /// The core's events for one input.
    pub(super) fn events(&mut self, i: Input) -> Vec<Event> {
        match i {
            Input::Core(ev) => vec![ev],
            Input::InUp {
                origin,
                addr,
                session,
                tx,
            } => {
                let mut v = Vec::new();
                if let Some((_, old)) = self.ins.insert(origin, (session, tx)) {
                    let _ = old.send(SessionCmd::Close);
                    v.push(Event::LinkDown {
                        peer: origin,
                        link: Link::In,
                    });
                }
                v.push(Event::LinkUp {
                    peer: origin,
                    addr,
                    link: Link::In,
                });
                v
            }
            Input::OutUp {
                peer,
                addr,
                session,
                tx,
                bulk,
            } => {
                let mut v = Vec::new();
                if let Some((_, old, _)) = self.outs.insert(peer, (session, tx, bulk)) {
                    let _ = old.send(SessionCmd::Close);
                    v.push(Event::LinkDown {
                        peer,
                        link: Link::Out,
                    });
                }
                v.push(Event::LinkUp {
                    peer,
                    addr,
                    link: Link::Out,
                });
                v
            }
            Input::InDown { origin, session } => {
                if self.ins.get(&origin).is_some_and(|(s, _)| *s == session) {
                    self.ins.remove(&origin);
                    vec![Event::LinkDown {
                        peer: origin,
                        link: Link::In,
                    }]
                } else {
                    Vec::new()
                }
            }
            Input::OutDown { peer, session } => {
                if self.outs.get(&peer).is_some_and(|(s, _, _)| *s == session) {
                    self.outs.remove(&peer);
                    vec![Event::LinkDown {
                        peer,
                        link: Link::Out,
                    }]
                } else {
                    Vec::new()
                }
            }
            Input::Frame {
                peer,
                link,
                session,
                msg,
            } => {
                let current = match link {
                    Link::In => self.ins.get(&peer).map(|(s, _)| *s),
                    Link::Out => self.outs.get(&peer).map(|(s, _, _)| *s),
                };
                if current == Some(session) {
                    vec![Event::Received {
                        from: peer,
                        link,
                        msg,
                    }]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// Carries out the core's commands.
pub(super) struct Exec {
    pub(super) repl: Arc<Replication>,
    pub(super) lookup: crate::lookup::Lookup,
    pub(super) client: nsq_http::client::HttpClient,
}

impl Exec {
    pub(super) fn run(&self, sessions: &mut Sessions, c: Command) {
        let repl = &self.repl;
        match c {
            Command::Send { to, link, msg } => match msg {
                Msg::Welcome { epoch, .. } => sessions.send(to, link, SessionCmd::Welcome { epoch }),
                Msg::TakenOver { epoch, last_seq } => {
                    sessions.taken.insert((to, epoch), last_seq);
                }
                Msg::Pong { stamp } => {
                    let stamp = u64::try_from(stamp.as_nanos()).unwrap_or(u64::MAX);
                    sessions.send(to, link, SessionCmd::Frame(Frame::Pong { stamp }));
                }
                Msg::Status(entries) => {
                    let f = Frame::Status(repl.wire_status(&entries));
                    sessions.send(to, link, SessionCmd::Frame(f));
                }
                Msg::Standby { epoch } => {
                    tracing::info!(
                        "REPLICATION: {to:016x} is outside the replica set of epoch {epoch}: it keeps no copy"
                    );
                    sessions.send(to, link, SessionCmd::Frame(Frame::Standby { epoch }))
                }
                Msg::HandoffDone { origin, epoch } => {
                    sessions.send(to, link, SessionCmd::Frame(Frame::HandoffDone { origin, epoch }))
                }
                // The session appends and acknowledges by the core's rule itself (see the
                // module docs); the origin's session sends its HELLO, PING, DROP and
                // MANIFEST_APPLIED itself.
                Msg::Ack { .. }
                | Msg::Hello { .. }
                | Msg::Ping { .. }
                | Msg::Drop { .. }
                | Msg::ManifestApplied { .. } => {}
            },
            Command::SendManifest { origin, epoch } => {
                let last_seq = sessions.taken.remove(&(origin, epoch)).unwrap_or(0);
                sessions.send(origin, Link::In, SessionCmd::Manifest { epoch, last_seq });
            }
            Command::Refuse { peer, link } => {
                tracing::warn!("REPLICATION: {peer:016x} refused: not in the group (an ended identity, or this node)");
                sessions.send(peer, link, SessionCmd::Refuse);
            }
            Command::Close { peer, link } => sessions.send(peer, link, SessionCmd::Close),
            Command::PollLookupds => repl.poll_lookupds(&self.lookup, &self.client),
            Command::StartTakeover { origin, epoch } => repl.start_takeover(origin, epoch),
            Command::SendHandoff { to, origin, epoch } => {
                match sessions.outs.get(&to) {
                    Some((_, _, bulk)) => repl.send_handoff(to, origin, epoch, bulk.clone()),
                    None => tracing::info!(
                        "REPLICATION: no link to {to:016x}, which takes {origin:016x} epoch {epoch} over: handoff later"
                    ),
                }
            }
            Command::AdoptHandoff {
                from,
                origin,
                epoch,
            } => repl.adopt_handoff(from, origin, epoch),
            Command::DropBacklog { origin, epoch } => {
                let r = repl.clone();
                tokio::spawn(async move { r.drop_copy(origin, epoch).await });
            }
            Command::DeleteManifest { origin, epoch } => {
                // Not `taken over` in the views from now (the file goes after).
                repl.taken.lock().remove(&(origin, epoch));
                repl.taken_seq.lock().remove(&(origin, epoch));
                let r = repl.clone();
                tokio::spawn(async move { r.delete_manifest(origin, epoch).await });
            }
            Command::NewEpoch { epoch } => {
                // The core moved on to `epoch` (it left an epoch a member claims, or applied a
                // manifest): persisted as Return persists it, and every session starts again
                // in it. After a manifest Return applied the epoch is there already.
                let r = repl.clone();
                tokio::task::spawn_blocking(move || match r.advance_epoch(epoch - 1) {
                    Ok(true) => tracing::warn!(
                        "REPLICATION: epoch {} claimed by a member: now epoch {epoch}, every link starts again",
                        epoch - 1
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        "REPLICATION: failed to move to epoch {epoch} - {e}"
                    ),
                });
            }
            Command::Left => {
                let r = repl.clone();
                tokio::task::spawn_blocking(move || r.left());
            }
            Command::Fence => {
                if let Some(e) = repl.engine() {
                    e.fence_delivery();
                }
                tracing::warn!(
                    "REPLICATION: delivery of replicated messages fenced: no member heard this node within {:?}, or one claims its epoch {}",
                    repl.settings.takeover_timeout / 2,
                    repl.epoch()
                );
            }
            Command::Unfence => {
                if let Some(e) = repl.engine() {
                    e.unfence_delivery();
                }
                tracing::info!("REPLICATION: delivery of replicated messages unfenced");
            }
            // Only the replica set gets the log (`origin.rs` streams once told).
            Command::StartCatchup { peer } => {
                sessions.send(peer, Link::Out, SessionCmd::Stream { from: None })
            }
            Command::Resume { peer, from } => {
                sessions.send(peer, Link::Out, SessionCmd::Stream { from: Some(from) })
            }
            // Return applies the manifest as TAKEN_OVER arrives (`returning.rs`).
            Command::ApplyManifest { .. }
            // Published by `run`.
            | Command::AckPublish { .. }
            | Command::FailPublish { .. } => {}
        }
    }
}
