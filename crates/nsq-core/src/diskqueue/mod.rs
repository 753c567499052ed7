//! `DiskQueue`: nsqd's persistent FIFO in go-diskqueue v1.1.0's file format
//! (`<name>.diskqueue.%06d.dat` data files of `[int32 BE size][payload]` records plus the text
//! metadata `<name>.diskqueue.meta.dat`), behind [`BackendQueue`].
//!
//! Unlike go-diskqueue (diskqueue.go, ioLoop) there is no I/O goroutine and no read-ahead:
//! callers do their own I/O under short locks, and the slow half of a sync (fsync + metadata
//! rewrite) runs on a background thread. The pieces:
//! - `recovery.rs`: opening a queue, validating or rebuilding its positions;
//! - `write.rs`: `put_batch` (one `pwrite` per batch, rotation, write-error rollback);
//! - `read.rs`: `read_batch` (chunked reads, corruption handling, tail check, watermark);
//! - `syncer.rs`: sync snapshots, group commit for `wait_durable`, the background thread;
//! - `meta.rs`: the metadata file format.
//!
//! Locks, always taken in this order (each is optional):
//! 1. `meta` — serialises metadata writes and sync jobs (held while fsyncing; never taken on
//!    the put/read hot path);
//! 2. `reader` — the read file and its buffer; held across read I/O so the state lock is not;
//! 3. `state` — positions, depth, the write file, durability tickets. A writer holds it
//!    across its single `pwrite` so published positions always describe written bytes;
//! 4. `pending` — the job waiting for the background syncer.

mod meta;
mod read;
mod recovery;
mod syncer;
mod watermark;
mod write;

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::backend::{BackendError, BackendQueue, DurableWait, RecordPos, ScanStep, WriteTicket};
use meta::Meta;
use read::ReadSide;
use syncer::{SyncDone, SyncJob};
use watermark::Watermark;

/// Parameters of one queue (nsqd's `--max-bytes-per-file`, `--max-msg-size`,
/// `--sync-every`, `--sync-timeout`; go-diskqueue's `New` arguments).
#[derive(Debug, Clone)]
pub struct DiskQueueOptions {
    /// Directory holding the files; must exist.
    pub data_path: PathBuf,
    /// Write-rotation threshold in bytes.
    pub max_bytes_per_file: i64,
    /// Smallest valid record payload (26 for nsqd: the message header).
    pub min_msg_size: i32,
    /// Largest valid record payload (`--max-msg-size` + 26 for nsqd).
    pub max_msg_size: i32,
    /// A sync after this many operations (records written + records read), as go-diskqueue.
    pub sync_every: i64,
    /// A queue with activity is synced at the latest this long after its first unsynced op.
    pub sync_timeout: Duration,
}

impl DiskQueueOptions {
    /// nsqd's defaults (`--max-bytes-per-file=100MiB`, `--max-msg-size=1MiB`,
    /// `--sync-every=2500`, `--sync-timeout=2s`) in `data_path`.
    pub fn new(data_path: impl Into<PathBuf>) -> Self {
        DiskQueueOptions {
            data_path: data_path.into(),
            max_bytes_per_file: 100 * 1024 * 1024,
            min_msg_size: 26,
            max_msg_size: 1024 * 1024 + 26,
            sync_every: 2500,
            sync_timeout: Duration::from_secs(2),
        }
    }
}

/// A persistent FIFO of byte records, shareable between threads (`&self` everywhere).
pub struct DiskQueue {
    name: String,
    opts: DiskQueueOptions,
    meta_path: PathBuf,
    /// Fast-path copy of `State::exiting` so rejected puts do not encode.
    exiting: AtomicBool,
    /// Handed to the syncer; it must not keep a closed queue alive.
    self_weak: Weak<DiskQueue>,
    /// Number of data-file fdatasync calls made (see [`DiskQueue::data_syncs`]).
    data_syncs: AtomicU64,
    meta: Mutex<MetaWriter>,
    reader: Mutex<ReadSide>,
    state: Mutex<State>,
    pending: Mutex<Option<SyncJob>>,
}

/// Everything the metadata describes plus the write file and the sync bookkeeping.
struct State {
    depth: i64,
    read_file_num: i64,
    read_pos: i64,
    write_file_num: i64,
    write_pos: i64,
    /// The sizes of the data files from the read file up to (not including) the write file:
    /// with `read_pos` and `write_pos`, the unread bytes ([`DiskQueue::unread_bytes`]).
    /// Grows when a write rolls to a new file, shrinks when a read finishes one; recounted
    /// from the files when a read skips a missing or corrupt one.
    sealed: i64,
    /// `Arc` so a sync job can fsync it after the lock is released, without a `dup`.
    write_file: Option<Arc<File>>,
    /// A failed write could not be cut back off the write file: retry before the next put.
    torn_tail: bool,
    exiting: bool,
    ops_since_sync: i64,
    /// When the first operation after the last sync happened (for `sync_timeout`).
    dirty_since: Option<Instant>,
    /// Sequence number of the latest sync snapshot.
    seq: u64,
    /// Ticket of the latest successful put (see [`WriteTicket`]).
    ticket: u64,
    /// Every ticket up to this one is on stable storage, except those in `failed`.
    synced_ticket: u64,
    /// Ticket ranges `(after, upto]` whose fsync failed; their waiters get the error.
    /// Bounded: only the most recent failures are remembered.
    failed: Vec<(u64, u64, io::ErrorKind)>,
    /// The job the syncer is performing now: the ticket it covers and its completion.
    inflight: Option<(u64, Arc<SyncDone>)>,
    /// The durable-read watermark and what it needs (see `read.rs`).
    watermark: Watermark,
}

impl State {
    fn unread_bytes(&self) -> u64 {
        u64::try_from(self.sealed - self.read_pos + self.write_pos).unwrap_or(0)
    }

    /// The positions as go-diskqueue would persist them, pulled back to the read watermark.
    fn meta(&self) -> Meta {
        let (read_file_num, read_pos, unsettled) = self.watermark.persisted_read(self);
        Meta {
            depth: self.depth.saturating_add(unsettled),
            read_file_num,
            read_pos,
            write_file_num: self.write_file_num,
            write_pos: self.write_pos,
        }
    }
}

/// Serialises metadata writes and remembers which snapshot is on disk.
struct MetaWriter {
    written_seq: u64,
    /// Set by close/delete: no metadata may be written any more.
    closed: bool,
}

impl DiskQueue {
    /// Opens (or creates, lazily on first write) the queue `name` in `opts.data_path`,
    /// resuming from its metadata file. Metadata that is unreadable or does not match the
    /// data files is logged and rebuilt from the data files (see `recovery.rs`).
    pub fn open(name: &str, opts: DiskQueueOptions) -> Result<Arc<DiskQueue>, BackendError> {
        if !opts.data_path.is_dir() {
            return Err(BackendError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("data path {} is not a directory", opts.data_path.display()),
            )));
        }
        let meta_path = opts.data_path.join(format!("{name}.diskqueue.meta.dat"));
        let m = recovery::recover(name, &opts, &meta_path);
        let sealed = sealed_len(&opts, name, m.read_file_num, m.write_file_num);

        let queue = Arc::new_cyclic(|weak| DiskQueue {
            name: name.to_string(),
            meta_path,
            exiting: AtomicBool::new(false),
            self_weak: weak.clone(),
            data_syncs: AtomicU64::new(0),
            meta: Mutex::new(MetaWriter {
                written_seq: 0,
                closed: false,
            }),
            reader: Mutex::new(ReadSide::new(m.read_file_num, m.read_pos)),
            state: Mutex::new(State {
                depth: m.depth,
                read_file_num: m.read_file_num,
                read_pos: m.read_pos,
                write_file_num: m.write_file_num,
                write_pos: m.write_pos,
                sealed,
                write_file: None,
                torn_tail: false,
                exiting: false,
                ops_since_sync: 0,
                dirty_since: None,
                seq: 0,
                ticket: 0,
                synced_ticket: 0,
                failed: Vec::new(),
                inflight: None,
                watermark: Watermark::default(),
            }),
            pending: Mutex::new(None),
            opts,
        });
        syncer::register(Arc::downgrade(&queue));
        Ok(queue)
    }

    /// The queue name (`topic` or `topic:channel`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bytes written and not yet read: the distance from the read position to the write
    /// position across the data files (each record's 4-byte size prefix included; a record
    /// being read counts until its read is committed). O(1): one lock, no I/O. The read
    /// watermark does not hold bytes here: what is read is not unread.
    pub fn unread_bytes(&self) -> u64 {
        let st = self.state.lock();
        st.unread_bytes()
    }

    /// How many data-file fdatasync calls this queue has made (metadata fsyncs not counted).
    /// For tests and statistics.
    pub fn data_syncs(&self) -> u64 {
        self.data_syncs.load(Ordering::Relaxed)
    }

    /// Synchronously fsyncs the write file (and any file rotated away from since the last
    /// sync) and persists the current positions.
    pub fn sync(&self) -> Result<(), BackendError> {
        let mut mw = self.meta.lock();
        let job = {
            let mut st = self.state.lock();
            if st.exiting {
                return Err(BackendError::Exiting);
            }
            self.snapshot_with_pending(&mut st)
        };
        self.perform(&mut mw, job).map_err(BackendError::Io)
    }

    fn data_file(&self, num: i64) -> PathBuf {
        data_file_path(&self.opts.data_path, &self.name, num)
    }

    fn remove_data_file(&self, path: &Path) -> bool {
        match fs::remove_file(path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => {
                tracing::error!(
                    "DISKQUEUE({}) failed to remove {} - {e}",
                    self.name,
                    path.display()
                );
                false
            }
        }
    }

    /// Marks the queue exiting and closes its files; returns the final snapshot and the held
    /// data files the watermark no longer needs.
    fn shut(&self, rs: &mut ReadSide, st: &mut State) -> (SyncJob, Vec<i64>) {
        st.exiting = true;
        self.exiting.store(true, Ordering::Release);
        let job = self.snapshot_with_pending(st);
        st.write_file = None;
        rs.close();
        (job, st.watermark.released())
    }
}

impl BackendQueue for DiskQueue {
    fn put_batch(
        &self,
        count: usize,
        encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<WriteTicket, BackendError> {
        self.put_batch_impl(count, encode).map(WriteTicket)
    }

    fn wait_durable(&self, ticket: WriteTicket) -> DurableWait {
        self.wait_durable_impl(ticket.0)
    }

    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) -> usize {
        self.read_into(max, false, &mut |b, _| out.push(b))
    }

    fn read_batch_pos(&self, max: usize, out: &mut Vec<(Bytes, RecordPos)>) -> usize {
        self.read_into(max, true, &mut |b, pos| out.push((b, pos)))
    }

    fn set_read_watermark(&self, pos: Option<RecordPos>) {
        let mut st = self.state.lock();
        if st.dirty_since.is_some() {
            // A sync is already due within `sync_timeout`; it will persist the new position.
            st.watermark.set(pos);
            return;
        }
        let before = st.watermark.persisted_read(&st);
        st.watermark.set(pos);
        // The read position on disk must follow within `sync_timeout` (the syncer's timer
        // looks at `dirty_since`), or a crash re-delivers what was settled since.
        if st.watermark.persisted_read(&st) != before {
            st.dirty_since = Some(Instant::now());
        }
    }

    fn depth(&self) -> i64 {
        self.state.lock().depth
    }

    fn unread_bytes(&self) -> u64 {
        DiskQueue::unread_bytes(self)
    }

    fn scan_unread(&self, f: &mut dyn FnMut(Bytes)) -> Result<(), BackendError> {
        self.scan_unread_impl(f)
    }

    fn scan_step(
        &self,
        from: Option<RecordPos>,
        max_bytes: usize,
        f: &mut dyn FnMut(Bytes),
    ) -> Result<ScanStep, BackendError> {
        self.scan_step_impl(from, max_bytes, f)
    }

    fn empty(&self) -> Result<(), BackendError> {
        let mut mw = self.meta.lock();
        let mut rs = self.reader.lock();
        let mut st = self.state.lock();
        if st.exiting {
            return Err(BackendError::Exiting);
        }
        tracing::info!("DISKQUEUE({}): emptying", self.name);
        rs.close();
        st.write_file = None;
        // Older snapshots describe deleted files: they must never be written. Their waiters
        // are released: what they waited for was discarded on purpose.
        if let Some(job) = self.pending.lock().take() {
            job.complete(&Ok(()));
        }
        st.synced_ticket = st.ticket;
        mw.written_seq = st.seq;
        let mut first_err = None;
        let first = st.watermark.oldest_kept_file(st.read_file_num);
        for num in first..=st.write_file_num {
            if let Err(e) = fs::remove_file(self.data_file(num)) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::error!("DISKQUEUE({}) failed to remove data file - {e}", self.name);
                    first_err.get_or_insert(e);
                }
            }
        }
        st.watermark.reset();
        st.torn_tail = false;
        st.write_file_num += 1;
        st.write_pos = 0;
        st.read_file_num = st.write_file_num;
        st.read_pos = 0;
        st.sealed = 0;
        st.depth = 0;
        st.ops_since_sync = 0;
        st.dirty_since = None;
        rs.reset(st.read_file_num, 0);
        if let Err(e) = fs::remove_file(&self.meta_path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::error!(
                    "DISKQUEUE({}) failed to remove metadata file - {e}",
                    self.name
                );
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), |e| Err(BackendError::Io(e)))
    }

    fn close(&self) -> Result<(), BackendError> {
        let mut mw = self.meta.lock();
        let job = {
            let mut rs = self.reader.lock();
            let mut st = self.state.lock();
            if st.exiting {
                return Ok(());
            }
            tracing::info!("DISKQUEUE({}): closing", self.name);
            self.shut(&mut rs, &mut st)
        };
        let (job, released) = job;
        let result = self.perform(&mut mw, job);
        mw.closed = true;
        for num in released {
            self.remove_data_file(&self.data_file(num));
        }
        result.map_err(BackendError::Io)
    }

    fn delete(&self) -> Result<(), BackendError> {
        let mut mw = self.meta.lock();
        let mut rs = self.reader.lock();
        let mut st = self.state.lock();
        if st.exiting {
            return Ok(());
        }
        tracing::info!("DISKQUEUE({}): deleting", self.name);
        mw.closed = true;
        // Dropping the job without performing it fails its waiters with `exiting`.
        drop(self.shut(&mut rs, &mut st).0);
        Ok(())
    }
}

impl std::fmt::Debug for DiskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskQueue")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The summed sizes of data files `from..to` (a missing one counts 0): `State::sealed`. A
/// wide range (metadata pointing far ahead) lists the directory instead of trying each number.
fn sealed_len(opts: &DiskQueueOptions, name: &str, from: i64, to: i64) -> i64 {
    let len =
        |n| fs::metadata(data_file_path(&opts.data_path, name, n)).map_or(0, |md| md.len() as i64);
    if to.saturating_sub(from) <= 1024 {
        return (from..to).map(len).sum();
    }
    recovery::data_file_nums(name, opts)
        .into_iter()
        .filter(|n| (from..to).contains(n))
        .map(len)
        .sum()
}

/// `<data_path>/<name>.diskqueue.%06d.dat`
fn data_file_path(data_path: &Path, name: &str, num: i64) -> PathBuf {
    data_path.join(format!("{name}.diskqueue.{num:06}.dat"))
}
