//! `DiskQueue`: nsqd's persistent FIFO in the go-diskqueue v1.1.0 file format
//! (`spec/diskqueue.md`), behind [`BackendQueue`].
//!
//! Files: `<name>.diskqueue.%06d.dat` data files of `[int32 BE size][payload]` records and the
//! text metadata `<name>.diskqueue.meta.dat` (see `meta.rs`). Unlike the reference there is no
//! I/O goroutine and no read-ahead: callers do their own I/O under short locks.
//!
//! Locks, always taken in this order (each is optional):
//! 1. `meta` — serialises metadata writes (held while fsyncing; never taken on the hot path);
//! 2. `reader` — the read file and its buffer; held across read I/O so the state lock is not;
//! 3. `state` — positions, depth, the write file. A writer holds it across its single
//!    `pwrite` so published positions always describe written bytes;
//! 4. `pending` — the job waiting for the background syncer (`syncer.rs`).

mod meta;
mod syncer;

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;

use crate::backend::{BackendError, BackendQueue};
use meta::Meta;
use syncer::SyncJob;

/// Reads from data files are done in chunks of at least this size.
const READ_CHUNK: usize = 256 * 1024;
/// A thread's encode buffer larger than this is released after use.
const ENCODE_BUF_KEEP: usize = 8 * 1024 * 1024;

/// Parameters of one queue (diskqueue.md §4).
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
    /// Number of operations (records written + records read) between syncs.
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
    /// `Arc` so a sync job can fsync it after the lock is released, without a `dup`.
    write_file: Option<Arc<File>>,
    exiting: bool,
    ops_since_sync: i64,
    /// When the first operation after the last sync happened (for `sync_timeout`).
    dirty_since: Option<Instant>,
    /// Sequence number of the latest sync snapshot.
    seq: u64,
}

impl State {
    fn meta(&self) -> Meta {
        Meta {
            depth: self.depth,
            read_file_num: self.read_file_num,
            read_pos: self.read_pos,
            write_file_num: self.write_file_num,
            write_pos: self.write_pos,
        }
    }
}

/// The open read file and the bytes read from it but not yet consumed.
struct ReadSide {
    file: Option<File>,
    file_num: i64,
    /// File bytes starting at `buf_pos` (= the read position once positions are committed).
    /// Records are handed out as `split_to` slices of it, so they share its allocation.
    buf: BytesMut,
    buf_pos: i64,
    /// Size of `file` once it is known to be complete (the writer moved past it).
    completed_len: Option<i64>,
}

impl ReadSide {
    fn close(&mut self) {
        self.file = None;
        self.buf.clear();
        self.completed_len = None;
    }

    /// Makes `buf` hold at least `need` bytes, reading at most up to `limit` (file offset) but
    /// in chunks of `READ_CHUNK` where possible. The caller checked that `limit` allows it.
    fn fill(&mut self, need: usize, limit: i64) -> io::Result<()> {
        if self.buf.len() >= need {
            return Ok(());
        }
        let end = self.buf_pos + self.buf.len() as i64;
        let avail = usize::try_from(limit - end).unwrap_or(0);
        let missing = need - self.buf.len();
        let want = missing.max(READ_CHUNK.min(avail)).min(avail);
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| io::Error::other("read file not open"))?;
        let old = self.buf.len();
        let spare = self.buf.capacity() - old;
        // Use up the current allocation before starting a new one.
        let want = if spare >= missing && spare >= 4096 {
            want.min(spare)
        } else {
            want
        };
        if spare < want {
            // Grow by whole chunks: small tail reads then reuse the spare capacity instead of
            // each pinning a fresh allocation (records handed out share the buffer).
            self.buf.reserve(want.max(READ_CHUNK));
        }
        self.buf.resize(old + want, 0);
        if let Err(e) = file.read_exact_at(&mut self.buf[old..], end as u64) {
            self.buf.truncate(old);
            return Err(e);
        }
        if self.buf.len() < need {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

/// Serialises metadata writes and remembers which snapshot is on disk.
struct MetaWriter {
    written_seq: u64,
    /// Set by close/delete: no metadata may be written any more.
    closed: bool,
}

/// The result of reading records from one file without the state lock.
struct ReadStep {
    file_num: i64,
    end_pos: i64,
    records: usize,
    outcome: ReadOutcome,
}

enum ReadOutcome {
    /// Stopped because enough records were taken or the writer was reached.
    Stopped,
    /// A completed file was read to its end: delete it, go to the next.
    FileDone,
    /// Corruption or I/O error at `end_pos` (diskqueue.md §8.1).
    Error(String),
}

/// Per-thread reusable buffer for encoding a batch (records with their length prefixes).
#[derive(Default)]
struct EncodeBuf {
    bytes: Vec<u8>,
    /// End offset of each record in `bytes`.
    ends: Vec<usize>,
}

thread_local! {
    static ENCODE_BUF: RefCell<EncodeBuf> = RefCell::new(EncodeBuf::default());
}

impl DiskQueue {
    /// Opens (or creates, lazily on first write) the queue `name` in `opts.data_path`,
    /// resuming from its metadata file. An unparsable metadata file is an error.
    pub fn open(name: &str, opts: DiskQueueOptions) -> Result<Arc<DiskQueue>, BackendError> {
        if !opts.data_path.is_dir() {
            return Err(BackendError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("data path {} is not a directory", opts.data_path.display()),
            )));
        }
        let meta_path = opts.data_path.join(format!("{name}.diskqueue.meta.dat"));
        let loaded = meta::read(&meta_path).map_err(|e| {
            tracing::error!(
                "DISKQUEUE({name}) failed to retrieveMetaData - {} - {e}",
                meta_path.display()
            );
            BackendError::Io(e)
        })?;
        let had_meta = loaded.is_some();
        let mut m = loaded.unwrap_or_default();

        // §8.2: never overwrite bytes written after the last metadata sync. We also skip any
        // later non-empty file (a rotation whose metadata sync was lost in a crash).
        loop {
            let path = data_file_path(&opts.data_path, name, m.write_file_num);
            match fs::metadata(&path) {
                Ok(md) if md.len() as i64 > m.write_pos => {
                    tracing::warn!(
                        "DISKQUEUE({name}) metadata writePos {} < file size of {}, skipping to new file",
                        m.write_pos,
                        md.len()
                    );
                    m.write_file_num += 1;
                    m.write_pos = 0;
                }
                Ok(_) => break,
                Err(e) => {
                    if had_meta && m.write_pos > 0 {
                        tracing::error!("DISKQUEUE({name}) failed to retrieveMetaData - {e}");
                    }
                    break;
                }
            }
        }

        // A reader beyond the writer means corrupt metadata: start both on a fresh file.
        if m.read_file_num > m.write_file_num
            || (m.read_file_num == m.write_file_num && m.read_pos > m.write_pos)
        {
            tracing::error!(
                "DISKQUEUE({name}) readFileNum,readPos {},{} beyond writeFileNum,writePos {},{} - skipping to new file",
                m.read_file_num,
                m.read_pos,
                m.write_file_num,
                m.write_pos
            );
            let next = m.read_file_num.max(m.write_file_num) + 1;
            m = Meta {
                depth: 0,
                read_file_num: next,
                read_pos: 0,
                write_file_num: next,
                write_pos: 0,
            };
        }

        let queue = Arc::new_cyclic(|weak| DiskQueue {
            name: name.to_string(),
            meta_path,
            exiting: AtomicBool::new(false),
            self_weak: weak.clone(),
            meta: Mutex::new(MetaWriter {
                written_seq: 0,
                closed: false,
            }),
            reader: Mutex::new(ReadSide {
                file: None,
                file_num: m.read_file_num,
                buf: BytesMut::new(),
                buf_pos: m.read_pos,
                completed_len: None,
            }),
            state: Mutex::new(State {
                depth: m.depth,
                read_file_num: m.read_file_num,
                read_pos: m.read_pos,
                write_file_num: m.write_file_num,
                write_pos: m.write_pos,
                write_file: None,
                exiting: false,
                ops_since_sync: 0,
                dirty_since: None,
                seq: 0,
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

    // ----- sync plumbing -----

    /// Takes a snapshot of the positions (resetting the sync counters).
    fn snapshot(&self, st: &mut State, mut files: Vec<(i64, Arc<File>)>) -> SyncJob {
        st.seq += 1;
        st.ops_since_sync = 0;
        st.dirty_since = None;
        if let Some(f) = &st.write_file {
            files.push((st.write_file_num, Arc::clone(f)));
        }
        SyncJob {
            seq: st.seq,
            meta: st.meta(),
            files,
        }
    }

    /// A snapshot that also takes over whatever the syncer has not done yet.
    fn snapshot_with_pending(&self, st: &mut State) -> SyncJob {
        let mut job = self.snapshot(st, Vec::new());
        if let Some(older) = self.pending.lock().take() {
            job.absorb(older);
        }
        job
    }

    /// Hands a snapshot to the background syncer (never blocks on the disk).
    fn schedule_sync(&self, st: &mut State, files: Vec<(i64, Arc<File>)>) {
        let mut job = self.snapshot(st, files);
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
            syncer::notify(self.self_weak.clone());
        }
    }

    /// Counts `n` operations and syncs when `sync_every` is reached or `force` is set.
    fn count_ops(&self, st: &mut State, n: usize, force: bool, files: Vec<(i64, Arc<File>)>) {
        if n > 0 {
            st.ops_since_sync += n as i64;
            if st.dirty_since.is_none() {
                st.dirty_since = Some(Instant::now());
            }
        }
        if force || !files.is_empty() || st.ops_since_sync >= self.opts.sync_every {
            self.schedule_sync(st, files);
        }
    }

    /// fsyncs the job's files, then writes its metadata unless a newer one is already on
    /// disk. Caller holds the `meta` lock. As in the reference, a failed fsync skips the
    /// metadata write (the next sync retries).
    fn perform(&self, mw: &mut MetaWriter, job: SyncJob) -> io::Result<()> {
        for (num, file) in &job.files {
            if let Err(e) = file.sync_data() {
                tracing::error!(
                    "DISKQUEUE({}) failed to sync {} - {e}",
                    self.name,
                    self.data_file(*num).display()
                );
                return Err(e);
            }
        }
        if mw.closed || job.seq <= mw.written_seq {
            return Ok(());
        }
        match meta::write_atomic(&self.meta_path, &job.meta) {
            Ok(()) => {
                mw.written_seq = job.seq;
                Ok(())
            }
            Err(e) => {
                tracing::error!("DISKQUEUE({}) failed to persist metadata - {e}", self.name);
                Err(e)
            }
        }
    }

    /// Syncer: perform the pending job, if any.
    fn flush_pending(&self) {
        let mut mw = self.meta.lock();
        let job = self.pending.lock().take();
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

    // ----- write path -----

    /// Writes the encoded batch, rotating before any record that would push the file past
    /// `max_bytes_per_file` (diskqueue.md §5). Positions are published only once every byte
    /// is written, so on error nothing of the batch counts.
    fn write_locked(&self, st: &mut State, eb: &EncodeBuf) -> Result<(), BackendError> {
        let max_bytes = self.opts.max_bytes_per_file;
        let mut file_num = st.write_file_num;
        let mut file = st.write_file.clone();
        let mut chunk_pos = st.write_pos; // file offset where the current chunk goes
        let mut chunk_start = 0usize; // buffer offset of the current chunk
        let mut retired: Vec<(i64, Arc<File>)> = Vec::new();
        let mut off = 0usize;
        let mut rotated = false;
        for &end in &eb.ends {
            let len = (end - off) as i64;
            let cur = chunk_pos + (off - chunk_start) as i64;
            if cur > 0 && cur + len > max_bytes {
                self.write_chunk(
                    st,
                    &mut file,
                    file_num,
                    chunk_pos,
                    &eb.bytes[chunk_start..off],
                )?;
                if let Some(f) = file.take() {
                    retired.push((file_num, f));
                }
                file_num += 1;
                chunk_pos = 0;
                chunk_start = off;
                rotated = true;
            }
            off = end;
        }
        self.write_chunk(
            st,
            &mut file,
            file_num,
            chunk_pos,
            &eb.bytes[chunk_start..off],
        )?;

        st.write_file_num = file_num;
        st.write_pos = chunk_pos + (off - chunk_start) as i64;
        st.write_file = file;
        st.depth += eb.ends.len() as i64;
        // A rotation forces a sync (fsync of the old files + metadata), in the background.
        self.count_ops(st, eb.ends.len(), rotated, retired);
        Ok(())
    }

    fn write_chunk(
        &self,
        st: &mut State,
        file: &mut Option<Arc<File>>,
        file_num: i64,
        pos: i64,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let result = (|| {
            if file.is_none() {
                *file = Some(Arc::new(self.open_write_file(file_num, pos)?));
            }
            file.as_ref()
                .expect("opened above")
                .write_all_at(bytes, pos as u64)
        })();
        if let Err(e) = result {
            tracing::error!(
                "DISKQUEUE({}) writing to {} at {pos} - {e}",
                self.name,
                self.data_file(file_num).display()
            );
            // As the reference: close the write file; it is reopened at writePos next time.
            if file_num == st.write_file_num {
                st.write_file = None;
            }
            return Err(BackendError::Io(e));
        }
        Ok(())
    }

    fn open_write_file(&self, num: i64, pos: i64) -> io::Result<File> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.data_file(num))?;
        if pos == 0 {
            // Anything here is left over from a failed batch (open() already skipped past
            // non-empty files): never let it be read as a completed file's tail.
            f.set_len(0)?;
        }
        Ok(f)
    }

    // ----- read path -----

    /// Reads up to `want` records of file `rfn` starting at `rpos`, without the state lock.
    /// `wfn`/`wpos` is a snapshot of the writer (it only moves forward meanwhile).
    fn read_step(
        &self,
        rs: &mut ReadSide,
        (rfn, rpos, wfn, wpos): (i64, i64, i64, i64),
        want: usize,
        out: &mut Vec<Bytes>,
    ) -> ReadStep {
        let mut step = ReadStep {
            file_num: rfn,
            end_pos: rpos,
            records: 0,
            outcome: ReadOutcome::Stopped,
        };
        if rs.file.is_none() || rs.file_num != rfn || rs.buf_pos != rpos {
            rs.close();
            rs.file_num = rfn;
            rs.buf_pos = rpos;
            match File::open(self.data_file(rfn)) {
                Ok(f) => rs.file = Some(f),
                Err(e) => {
                    step.outcome = ReadOutcome::Error(e.to_string());
                    return step;
                }
            }
        }
        let limit = if rfn < wfn {
            match rs.completed_len {
                Some(len) => len,
                None => match rs.file.as_ref().map(File::metadata) {
                    Some(Ok(md)) => {
                        rs.completed_len = Some(md.len() as i64);
                        md.len() as i64
                    }
                    Some(Err(e)) => {
                        step.outcome = ReadOutcome::Error(e.to_string());
                        return step;
                    }
                    None => unreachable!("read file opened above"),
                },
            }
        } else {
            wpos
        };
        let min = self.opts.min_msg_size as i64;
        let max = self.opts.max_msg_size as i64;
        let mut pos = rpos;
        loop {
            if pos >= limit {
                if rfn < wfn {
                    step.outcome = ReadOutcome::FileDone;
                }
                break;
            }
            if step.records == want {
                break;
            }
            if limit - pos < 4 {
                step.outcome = ReadOutcome::Error("unexpected EOF".into());
                break;
            }
            if let Err(e) = rs.fill(4, limit) {
                step.outcome = ReadOutcome::Error(e.to_string());
                break;
            }
            let size = i32::from_be_bytes([rs.buf[0], rs.buf[1], rs.buf[2], rs.buf[3]]) as i64;
            if size < min || size > max {
                step.outcome = ReadOutcome::Error(format!("invalid message read size ({size})"));
                break;
            }
            let total = 4 + size;
            if pos + total > limit {
                step.outcome = ReadOutcome::Error("unexpected EOF".into());
                break;
            }
            if let Err(e) = rs.fill(total as usize, limit) {
                step.outcome = ReadOutcome::Error(e.to_string());
                break;
            }
            rs.buf.advance(4);
            out.push(rs.buf.split_to(size as usize).freeze());
            pos += total;
            rs.buf_pos = pos;
            step.records += 1;
        }
        step.end_pos = pos;
        step
    }

    /// Publishes a read step: consumption, file deletion, corruption handling, tail check.
    fn commit_read(&self, rs: &mut ReadSide, step: ReadStep) {
        let mut delete: Vec<PathBuf> = Vec::new();
        let mut quarantine: Option<PathBuf> = None;
        {
            let mut st = self.state.lock();
            debug_assert_eq!(st.read_file_num, step.file_num);
            st.read_pos = step.end_pos;
            st.depth -= step.records as i64;
            let mut force = false;
            match step.outcome {
                ReadOutcome::Stopped => {}
                ReadOutcome::FileDone => {
                    rs.close();
                    delete.push(self.data_file(st.read_file_num));
                    st.read_file_num += 1;
                    st.read_pos = 0;
                    force = true;
                }
                ReadOutcome::Error(err) => {
                    let path = self.data_file(st.read_file_num);
                    tracing::error!(
                        "DISKQUEUE({}) reading at {} of {} - {err}",
                        self.name,
                        step.end_pos,
                        path.display()
                    );
                    if st.read_file_num == st.write_file_num {
                        st.write_file = None;
                        st.write_file_num += 1;
                        st.write_pos = 0;
                    }
                    tracing::warn!(
                        "DISKQUEUE({}) jump to next file and saving bad file as {}.bad",
                        self.name,
                        path.display()
                    );
                    quarantine = Some(path);
                    rs.close();
                    st.read_file_num += 1;
                    st.read_pos = 0;
                    force = true;
                }
            }
            force |= self.check_tail(&mut st, rs, &mut delete);
            self.count_ops(&mut st, step.records, force, Vec::new());
        }
        // File-system work outside the state lock (the reader lock keeps these files ours).
        if let Some(path) = quarantine {
            let mut bad = path.clone().into_os_string();
            bad.push(".bad");
            if let Err(e) = fs::rename(&path, &bad) {
                tracing::error!(
                    "DISKQUEUE({}) failed to rename bad diskqueue file {} to {} - {e}",
                    self.name,
                    path.display(),
                    Path::new(&bad).display()
                );
            }
        }
        for path in delete {
            self.remove_data_file(&path);
        }
    }

    /// diskqueue.md §8.3. Returns true if it changed anything (a sync is due).
    fn check_tail(&self, st: &mut State, rs: &mut ReadSide, delete: &mut Vec<PathBuf>) -> bool {
        if st.read_file_num < st.write_file_num || st.read_pos < st.write_pos {
            return false;
        }
        let mut changed = false;
        if st.depth != 0 {
            if st.depth < 0 {
                tracing::error!(
                    "DISKQUEUE({}) negative depth at tail ({}), metadata corruption, resetting 0...",
                    self.name,
                    st.depth
                );
            } else {
                tracing::error!(
                    "DISKQUEUE({}) positive depth at tail ({}), data loss, resetting 0...",
                    self.name,
                    st.depth
                );
            }
            st.depth = 0;
            changed = true;
        }
        if st.read_file_num != st.write_file_num || st.read_pos != st.write_pos {
            tracing::error!(
                "DISKQUEUE({}) read position {},{} beyond write position {},{}, skipping both to next file",
                self.name,
                st.read_file_num,
                st.read_pos,
                st.write_file_num,
                st.write_pos
            );
            rs.close();
            st.write_file = None;
            for num in st.read_file_num..=st.write_file_num {
                delete.push(self.data_file(num));
            }
            st.write_file_num += 1;
            st.write_pos = 0;
            st.read_file_num = st.write_file_num;
            st.read_pos = 0;
            st.depth = 0;
            changed = true;
        }
        changed
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

    /// Marks the queue exiting and closes its files; returns the final snapshot.
    fn shut(&self, rs: &mut ReadSide, st: &mut State) -> SyncJob {
        st.exiting = true;
        self.exiting.store(true, Ordering::Release);
        let job = self.snapshot_with_pending(st);
        st.write_file = None;
        rs.close();
        job
    }
}

impl BackendQueue for DiskQueue {
    fn put_batch(
        &self,
        count: usize,
        encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<(), BackendError> {
        if self.exiting.load(Ordering::Acquire) {
            return Err(BackendError::Exiting);
        }
        if count == 0 {
            return Ok(());
        }
        // Take the thread's buffer (re-entrancy safe: a nested call just gets a fresh one).
        let mut eb = ENCODE_BUF.with(|cell| cell.take());
        eb.bytes.clear();
        eb.ends.clear();
        let min = self.opts.min_msg_size.max(0) as usize;
        let max = self.opts.max_msg_size.max(0) as usize;
        let mut result = Ok(());
        for i in 0..count {
            let start = eb.bytes.len();
            eb.bytes.extend_from_slice(&[0; 4]);
            encode(i, &mut eb.bytes);
            let len = eb.bytes.len() - start - 4;
            if len < min || len > max {
                result = Err(BackendError::InvalidSize {
                    size: len,
                    min,
                    max,
                });
                break;
            }
            eb.bytes[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
            eb.ends.push(eb.bytes.len());
        }
        if result.is_ok() {
            let mut st = self.state.lock();
            result = if st.exiting {
                Err(BackendError::Exiting)
            } else {
                self.write_locked(&mut st, &eb)
            };
        }
        if eb.bytes.capacity() <= ENCODE_BUF_KEEP {
            ENCODE_BUF.with(|cell| cell.replace(eb));
        }
        result
    }

    fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) -> usize {
        let mut rs = self.reader.lock();
        let mut taken = 0;
        while taken < max {
            let positions = {
                let st = self.state.lock();
                if st.exiting {
                    break;
                }
                (
                    st.read_file_num,
                    st.read_pos,
                    st.write_file_num,
                    st.write_pos,
                )
            };
            let (rfn, rpos, wfn, wpos) = positions;
            if !(rfn < wfn || (rfn == wfn && rpos < wpos)) {
                break;
            }
            let step = self.read_step(&mut rs, positions, max - taken, out);
            taken += step.records;
            self.commit_read(&mut rs, step);
        }
        taken
    }

    fn depth(&self) -> i64 {
        self.state.lock().depth
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
        // Older snapshots describe deleted files: they must never be written.
        self.pending.lock().take();
        mw.written_seq = st.seq;
        let mut first_err = None;
        for num in st.read_file_num..=st.write_file_num {
            if let Err(e) = fs::remove_file(self.data_file(num)) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::error!("DISKQUEUE({}) failed to remove data file - {e}", self.name);
                    first_err.get_or_insert(e);
                }
            }
        }
        st.write_file_num += 1;
        st.write_pos = 0;
        st.read_file_num = st.write_file_num;
        st.read_pos = 0;
        st.depth = 0;
        st.ops_since_sync = 0;
        st.dirty_since = None;
        rs.file_num = st.read_file_num;
        rs.buf_pos = 0;
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
        let result = self.perform(&mut mw, job);
        mw.closed = true;
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
        drop(self.shut(&mut rs, &mut st));
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

/// `<data_path>/<name>.diskqueue.%06d.dat`
fn data_file_path(data_path: &Path, name: &str, num: i64) -> PathBuf {
    data_path.join(format!("{name}.diskqueue.{num:06}.dat"))
}
