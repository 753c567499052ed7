//! The process-wide diskqueue syncer: one background thread that performs the slow half of a
//! "sync" (fsync of data files + atomic metadata rewrite) so that `put_batch`/`read_batch`
//! never wait for the disk, and that runs the `sync_timeout` timer of every open queue.
//!
//! A queue hands work over by storing a [`SyncJob`] in its single pending slot and notifying
//! this thread only when the slot goes from empty to full, so a busy queue costs at most one
//! queued message and one job (newer jobs absorb older ones; the newest positions win).

use std::fs::File;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::meta::Meta;
use super::DiskQueue;

/// How often the timer looks for queues that have been dirty for `sync_timeout`.
const TICK: Duration = Duration::from_millis(100);

/// A consistent snapshot taken under the queue's state lock: the data files to fsync and the
/// metadata describing only bytes already written to them.
pub(crate) struct SyncJob {
    /// Monotonic per queue; metadata of an older job is never written after a newer one.
    pub(crate) seq: u64,
    pub(crate) meta: Meta,
    /// Data files to fsync before the metadata is written: the current write file and any
    /// file the writer rotated away from since the last sync.
    pub(crate) files: Vec<(i64, Arc<File>)>,
}

impl SyncJob {
    /// Merges an older, not yet performed job into this one: its files still need an fsync,
    /// its metadata is superseded.
    pub(crate) fn absorb(&mut self, older: SyncJob) {
        for (num, file) in older.files {
            if !self.files.iter().any(|(n, _)| *n == num) {
                self.files.push((num, file));
            }
        }
    }
}

enum Msg {
    /// A new queue for the timer.
    Register(Weak<DiskQueue>),
    /// The queue's pending slot was filled.
    Flush(Weak<DiskQueue>),
}

fn sender() -> &'static Sender<Msg> {
    static SYNCER: OnceLock<Sender<Msg>> = OnceLock::new();
    SYNCER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("diskqueue-sync".into())
            .spawn(move || run(rx))
            .expect("spawn diskqueue syncer thread");
        tx
    })
}

pub(crate) fn register(queue: Weak<DiskQueue>) {
    // The receiver lives for the whole process; a send cannot fail.
    let _ = sender().send(Msg::Register(queue));
}

pub(crate) fn notify(queue: Weak<DiskQueue>) {
    let _ = sender().send(Msg::Flush(queue));
}

fn run(rx: Receiver<Msg>) {
    let mut queues: Vec<Weak<DiskQueue>> = Vec::new();
    let mut next_tick = Instant::now() + TICK;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Msg::Register(q)) => queues.push(q),
            Ok(Msg::Flush(q)) => {
                if let Some(q) = q.upgrade() {
                    q.flush_pending();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        if now >= next_tick {
            queues.retain(|w| match w.upgrade() {
                Some(q) => q.sync_if_stale(now),
                None => false,
            });
            next_tick = now + TICK;
        }
    }
}
