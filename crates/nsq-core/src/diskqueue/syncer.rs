//! Syncing a diskqueue: snapshots of its positions ([`SyncJob`]), performing them (fdatasync
//! of the data files, then the atomic metadata rewrite), group commit for `wait_durable`, and
//! the process-wide background threads (a few workers performing queued jobs, one timer
//! running every open queue's `sync_timeout`), so `put_batch`/`read_batch` never wait for
//! the disk.
//!
//! What counts as "a sync" follows go-diskqueue (diskqueue.go, ioLoop and sync): one after
//! every `sync_every` operations, when `sync_timeout` passes with unsynced operations, on
//! rotation, after the reader leaves a file or hits corruption, and on close. A queue hands a
//! job over by storing it in its single pending slot and notifying this thread only when the
//! slot goes from empty to full, so a busy queue costs at most one queued message and one job
//! (newer jobs absorb older ones; the newest positions win).
//!
//! Group commit: a `wait_durable` caller attaches to the job being performed if it covers its
//! ticket, else to the pending job (creating a data-only one if there is none). Every writer
//! that arrives while an fdatasync runs is then served by the next one.

use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::meta::{self, Meta};
use super::{DiskQueue, MetaWriter, State};
use crate::backend::{BackendError, DurableWait};

/// How often the timer looks for queues that have been dirty for `sync_timeout`.
const TICK: Duration = Duration::from_millis(100);
/// How many failed ticket ranges a queue remembers for late waiters.
const FAILED_KEEP: usize = 64;

/// The outcome of a sync as seen by waiters (`io::Error` is not `Clone`).
type SyncOutcome = Result<(), (io::ErrorKind, String)>;

/// Completion of one sync job, shared by its waiters. Dropped without completing (the queue
/// was deleted) means `exiting`.
pub(crate) struct SyncDone(watch::Sender<Option<SyncOutcome>>);

impl SyncDone {
    fn new() -> Arc<SyncDone> {
        Arc::new(SyncDone(watch::Sender::new(None)))
    }

    fn complete(&self, outcome: &SyncOutcome) {
        self.0.send_replace(Some(outcome.clone()));
    }

    fn wait(&self) -> DurableWait {
        let mut rx = self.0.subscribe();
        Box::pin(async move {
            let outcome = match rx.wait_for(Option::is_some).await {
                Ok(v) => v.clone().unwrap_or(Ok(())),
                Err(_) => return Err(BackendError::Exiting),
            };
            outcome.map_err(|(kind, msg)| BackendError::Io(io::Error::new(kind, msg)))
        })
    }
}

fn ready(r: Result<(), BackendError>) -> DurableWait {
    Box::pin(std::future::ready(r))
}

/// A consistent snapshot taken under the queue's state lock: the data files to fsync and the
/// metadata describing only bytes already written to them.
pub(crate) struct SyncJob {
    /// Monotonic per queue; metadata of an older job is never written after a newer one.
    pub(crate) seq: u64,
    pub(crate) meta: Meta,
    /// Data files to fsync before the metadata is written: the current write file and any
    /// file the writer rotated away from since the last sync.
    pub(crate) files: Vec<(i64, Arc<File>)>,
    /// The latest write ticket whose bytes are in `files` (or were synced before).
    ticket: u64,
    /// Only `wait_durable` asked for it: fdatasync the data, leave the metadata (and the
    /// `sync_every` count) to the next regular sync.
    data_only: bool,
    /// Completions of this job and of the older jobs it absorbed; the first is its own.
    done: Vec<Arc<SyncDone>>,
}

impl SyncJob {
    /// Merges an older, not yet performed job into this one: its files still need an fsync,
    /// its metadata is superseded, its waiters are served by this job.
    pub(crate) fn absorb(&mut self, older: SyncJob) {
        for (num, file) in older.files {
            if !self.files.iter().any(|(n, _)| *n == num) {
                self.files.push((num, file));
            }
        }
        self.data_only &= older.data_only;
        self.ticket = self.ticket.max(older.ticket);
        self.done.extend(older.done);
    }

    /// Releases every waiter of this job with `outcome`.
    pub(crate) fn complete(&self, outcome: &SyncOutcome) {
        for d in &self.done {
            d.complete(outcome);
        }
    }
}

impl DiskQueue {
    /// Takes a snapshot of the positions; a full one resets the sync counters.
    fn snapshot(
        &self,
        st: &mut State,
        mut files: Vec<(i64, Arc<File>)>,
        data_only: bool,
    ) -> SyncJob {
        st.seq += 1;
        if !data_only {
            st.ops_since_sync = 0;
            st.dirty_since = None;
        }
        if let Some(f) = &st.write_file {
            files.push((st.write_file_num, Arc::clone(f)));
        }
        SyncJob {
            seq: st.seq,
            meta: st.meta(),
            files,
            ticket: st.ticket,
            data_only,
            done: vec![SyncDone::new()],
        }
    }

    /// A full snapshot that also takes over whatever the syncer has not done yet.
    pub(super) fn snapshot_with_pending(&self, st: &mut State) -> SyncJob {
        let mut job = self.snapshot(st, Vec::new(), false);
        if let Some(older) = self.pending.lock().take() {
            job.absorb(older);
        }
        job
    }

    /// Hands a snapshot to the background syncer (never blocks on the disk). Returns the
    /// completion of the job now pending.
    fn schedule(
        &self,
        st: &mut State,
        files: Vec<(i64, Arc<File>)>,
        data_only: bool,
    ) -> Arc<SyncDone> {
        let mut job = self.snapshot(st, files, data_only);
        let done = Arc::clone(&job.done[0]);
        let was_empty = {
            let mut pending = self.pending.lock();
            let older = pending.take();
            let was_empty = older.is_none();
            if let Some(older) = older {
                job.absorb(older);
            }
            *pending = Some(job);
            was_empty
        };
        if was_empty {
            notify(self.self_weak.clone());
        }
        done
    }

    /// Counts `n` operations and schedules a sync when `sync_every` is reached or `force` is
    /// set (diskqueue.go, ioLoop: `count == d.syncEvery`).
    pub(super) fn count_ops(
        &self,
        st: &mut State,
        n: usize,
        force: bool,
        files: Vec<(i64, Arc<File>)>,
    ) {
        if n > 0 {
            st.ops_since_sync += n as i64;
            if st.dirty_since.is_none() {
                st.dirty_since = Some(Instant::now());
            }
        }
        if force || !files.is_empty() || st.ops_since_sync >= self.opts.sync_every {
            self.schedule(st, files, false);
        }
    }

    /// `BackendQueue::wait_durable`.
    pub(super) fn wait_durable_impl(&self, ticket: u64) -> DurableWait {
        let mut st = self.state.lock();
        // A ticket from the future (another queue's) is treated as "everything so far".
        let ticket = ticket.min(st.ticket);
        if let Some((_, _, kind)) = st
            .failed
            .iter()
            .find(|(a, b, _)| *a < ticket && ticket <= *b)
        {
            return ready(Err(BackendError::Io(io::Error::new(
                *kind,
                "diskqueue sync failed",
            ))));
        }
        if ticket <= st.synced_ticket {
            return ready(Ok(()));
        }
        if let Some((covers, done)) = &st.inflight {
            if *covers >= ticket {
                return done.wait();
            }
        }
        if let Some(job) = self.pending.lock().as_ref() {
            if job.ticket >= ticket {
                return job.done[0].wait();
            }
        }
        if st.exiting {
            return ready(Err(BackendError::Exiting));
        }
        self.schedule(&mut st, Vec::new(), true).wait()
    }

    /// fdatasyncs the job's files, then writes its metadata unless it is data-only or a newer
    /// one is already on disk, then releases its waiters. Caller holds the `meta` lock and not
    /// the state lock. As in go-diskqueue (diskqueue.go, sync) a failed fsync skips the
    /// metadata write; a failed metadata write is only logged and retried by a later sync.
    pub(super) fn perform(&self, mw: &mut MetaWriter, job: SyncJob) -> io::Result<()> {
        let mut data_result = Ok(());
        for (num, file) in &job.files {
            self.data_syncs.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = file.sync_data() {
                tracing::error!(
                    "DISKQUEUE({}) failed to sync {} - {e}",
                    self.name,
                    self.data_file(*num).display()
                );
                data_result = Err(e);
                break;
            }
        }
        let mut meta_result = Ok(());
        if data_result.is_ok() && !job.data_only && !mw.closed && job.seq > mw.written_seq {
            match meta::write_atomic(&self.meta_path, &job.meta) {
                Ok(()) => mw.written_seq = job.seq,
                Err(e) => {
                    tracing::error!("DISKQUEUE({}) failed to persist metadata - {e}", self.name);
                    meta_result = Err(e);
                }
            }
        }
        let outcome: SyncOutcome = match &data_result {
            Ok(()) => Ok(()),
            Err(e) => Err((e.kind(), e.to_string())),
        };
        {
            let mut st = self.state.lock();
            match &data_result {
                Ok(()) => st.synced_ticket = st.synced_ticket.max(job.ticket),
                Err(e) => {
                    if job.ticket > st.synced_ticket {
                        let after = st.synced_ticket;
                        if st.failed.len() >= FAILED_KEEP {
                            st.failed.remove(0);
                        }
                        st.failed.push((after, job.ticket, e.kind()));
                        // Nothing up to here can be promised any more; later writes can.
                        st.synced_ticket = job.ticket;
                    }
                    // As the reference: close the write file after a failed sync; it is
                    // reopened at writePos by the next write.
                    if let Some(cur) = &st.write_file {
                        if job.files.iter().any(|(_, f)| Arc::ptr_eq(f, cur)) {
                            st.write_file = None;
                        }
                    }
                }
            }
            if data_result.is_err() || meta_result.is_err() {
                // Retried by the timer after sync_timeout.
                if st.dirty_since.is_none() {
                    st.dirty_since = Some(Instant::now());
                }
            }
            if matches!(&st.inflight, Some((_, d)) if Arc::ptr_eq(d, &job.done[0])) {
                st.inflight = None;
            }
        }
        job.complete(&outcome);
        data_result.and(meta_result)
    }

    /// Syncer: perform the pending job, if any.
    fn flush_pending(&self) {
        let mut mw = self.meta.lock();
        let job = {
            let mut st = self.state.lock();
            let job = self.pending.lock().take();
            if let Some(job) = &job {
                st.inflight = Some((job.ticket, Arc::clone(&job.done[0])));
            }
            job
        };
        if let Some(job) = job {
            let _ = self.perform(&mut mw, job);
        }
    }

    /// Syncer timer: sync if there was activity at least `sync_timeout` ago. Returns false
    /// once the queue is closed (the syncer forgets it).
    fn sync_if_stale(&self, now: Instant) -> bool {
        let mut mw = self.meta.lock();
        let job = {
            let mut st = self.state.lock();
            if st.exiting {
                return false;
            }
            match st.dirty_since {
                Some(t) if now.saturating_duration_since(t) >= self.opts.sync_timeout => {
                    self.snapshot_with_pending(&mut st)
                }
                _ => return true,
            }
        };
        let _ = self.perform(&mut mw, job);
        true
    }
}

/// Threads performing queued sync jobs. Several, so the fsyncs of different queues (a topic
/// and its channels) overlap and the filesystem can commit them together; jobs of one queue
/// are serialised by its `meta` lock.
const FLUSH_WORKERS: usize = 4;

enum Msg {
    /// A new queue for the timer.
    Register(Weak<DiskQueue>),
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

fn flusher() -> &'static Sender<Weak<DiskQueue>> {
    static FLUSH: OnceLock<Sender<Weak<DiskQueue>>> = OnceLock::new();
    FLUSH.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Weak<DiskQueue>>();
        // Shared receiver: an idle worker holds the lock while it waits; that is the whole
        // job of the lock.
        let rx = Arc::new(parking_lot::Mutex::new(rx));
        for i in 0..FLUSH_WORKERS {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("diskqueue-flush-{i}"))
                .spawn(move || loop {
                    let next = rx.lock().recv();
                    match next {
                        Ok(q) => {
                            if let Some(q) = q.upgrade() {
                                q.flush_pending();
                            }
                        }
                        Err(_) => return,
                    }
                })
                .expect("spawn diskqueue flush thread");
        }
        tx
    })
}

pub(crate) fn register(queue: Weak<DiskQueue>) {
    // The receiver lives for the whole process; a send cannot fail.
    let _ = sender().send(Msg::Register(queue));
}

fn notify(queue: Weak<DiskQueue>) {
    let _ = flusher().send(queue);
}

fn run(rx: Receiver<Msg>) {
    let mut queues: Vec<Weak<DiskQueue>> = Vec::new();
    let mut next_tick = Instant::now() + TICK;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Msg::Register(q)) => queues.push(q),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        if now >= next_tick {
            queues.retain(|w| match w.upgrade() {
                Some(q) => {
                    q.reap_held_files();
                    q.sync_if_stale(now)
                }
                None => false,
            });
            next_tick = now + TICK;
        }
    }
}
