//! One replica backlog on disk: `<data-path>/replica/<origin>.<epoch>/`, segment files
//! `<16-digit number>.seg` of [`record`](super::record)s, appended in order.
//!
//! * Appends are one `write` per batch to the last segment; a new segment starts once the
//!   last one reaches [`StoreOptions::segment_bytes`]. [`ReplicaStore::sync`] is the
//!   fdatasync a replica does before acknowledging when its origin asks for it.
//! * Segments are deleted from the front as soon as none of them holds the first record of
//!   a live message ([`Index::trimmable`]); [`ReplicaStore::compact`] rewrites the live state
//!   into one new segment when dead records dominate.
//! * Records holding message bodies (PUB, STATE) are refused when they would take the
//!   origin's stores — all its epochs together, counted in one shared [`OriginBytes`] —
//!   beyond [`StoreOptions::max_bytes`] ([`StoreError::Full`]); settlements never are.
//! * Open replays the segments. A record cut short or damaged in the last segment is a torn
//!   write: the file is cut there. Damage in an older segment ends that segment's replay and
//!   is reported ([`OpenReport::damaged`]); it costs copies, never an acknowledged message,
//!   since the origin still has them.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::replication::{Frame, FrameError, Item, MessageItem};

use super::index::{Index, IndexError, Loc};
use super::record::{self, Parsed, Record};

/// Bounds of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// The most the segment files of one origin's stores (all its epochs) may hold
    /// (`--replication-max-backlog-bytes`).
    pub max_bytes: u64,
    /// A new segment starts once the last one holds this much.
    pub segment_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_bytes: 10 << 30,
            segment_bytes: 64 << 20,
        }
    }
}

/// Why an append or a compaction failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Storing these messages would take the backlog above its bound.
    #[error(
        "replica backlog full: {used} bytes used, {needed} more would pass the limit of {max}"
    )]
    Full { used: u64, needed: u64, max: u64 },
    /// The records do not follow the backlog (sequence, catch-up markers, kind).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A name too long for the record format.
    #[error(transparent)]
    Encode(#[from] FrameError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The bytes of every open store of one origin, its epochs together: the bound
/// ([`StoreOptions::max_bytes`]) applies to this sum. Each store adds its own bytes when they
/// change and takes them out when it is dropped.
#[derive(Debug, Default)]
pub struct OriginBytes(AtomicU64);

impl OriginBytes {
    /// The bytes of the origin's open stores.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// A damaged stretch found when opening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub segment: u64,
    pub offset: u64,
    /// Bytes of the segment not replayed.
    pub skipped: u64,
}

/// What opening a store found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Records replayed.
    pub records: u64,
    /// A torn tail cut off the last segment: `(segment, offset, bytes cut)`.
    pub truncated: Option<(u64, u64, u64)>,
    /// Damage in older segments.
    pub damaged: Vec<Damage>,
    /// Segments deleted because nothing live was left in them.
    pub trimmed: usize,
}

/// The directory of the backlog of `origin`'s `epoch` under `data_path`.
pub fn backlog_dir(data_path: &Path, origin: u64, epoch: u64) -> PathBuf {
    data_path
        .join("replica")
        .join(format!("{origin:016x}.{epoch}"))
}

fn segment_name(n: u64) -> String {
    format!("{n:016}.seg")
}

/// One backlog on disk (see the module comment). Not shared: the caller serialises access.
#[derive(Debug)]
pub struct ReplicaStore {
    dir: PathBuf,
    opts: StoreOptions,
    index: Index,
    /// Segment number → bytes.
    segments: BTreeMap<u64, u64>,
    head: File,
    /// After a failed write the head may end in a partial record: cut it before the next.
    torn: bool,
    /// The origin's stores' bytes, this one's included as `accounted`.
    origin_bytes: Arc<OriginBytes>,
    accounted: u64,
}

impl Drop for ReplicaStore {
    fn drop(&mut self) {
        self.origin_bytes
            .0
            .fetch_sub(self.accounted, Ordering::AcqRel);
    }
}

impl ReplicaStore {
    /// Opens (creating if needed) the backlog in `dir` and replays it; the bound counts this
    /// store alone.
    pub fn open(dir: &Path, opts: StoreOptions) -> Result<(Self, OpenReport), StoreError> {
        Self::open_shared(dir, opts, Arc::default())
    }

    /// [`ReplicaStore::open`] for one of an origin's stores: the bound counts `origin_bytes`,
    /// the bytes of all of them.
    pub fn open_shared(
        dir: &Path,
        opts: StoreOptions,
        origin_bytes: Arc<OriginBytes>,
    ) -> Result<(Self, OpenReport), StoreError> {
        fs::create_dir_all(dir)?;
        let mut numbers = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".seg.tmp") {
                // A compaction that did not finish; the segments before it are intact.
                fs::remove_file(entry.path())?;
            } else if let Some(n) = name.strip_suffix(".seg").and_then(|n| {
                (n.len() == 16 && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse::<u64>().ok())
                    .flatten()
            }) {
                numbers.push(n);
            }
        }
        numbers.sort_unstable();
        if numbers.is_empty() {
            File::create(dir.join(segment_name(1)))?;
            sync_dir(dir);
            numbers.push(1);
        }

        let mut index = Index::new();
        let mut report = OpenReport::default();
        let mut segments = BTreeMap::new();
        let last = *numbers.last().expect("at least one segment");
        for &n in &numbers {
            let path = dir.join(segment_name(n));
            let data = Bytes::from(fs::read(&path)?);
            let mut pos = 0usize;
            loop {
                let bad = match record::parse(&data, pos) {
                    Parsed::End => break,
                    Parsed::Record(rec, len) => {
                        if index.check(std::iter::once(&rec)).is_ok() {
                            let loc = Loc {
                                segment: n,
                                offset: pos as u64,
                                len: len as u32,
                            };
                            index.apply(&rec, loc);
                            report.records += 1;
                            pos += len;
                            continue;
                        }
                        true
                    }
                    Parsed::Incomplete | Parsed::Damaged => true,
                };
                debug_assert!(bad);
                let skipped = (data.len() - pos) as u64;
                if n == last {
                    let f = OpenOptions::new().write(true).open(&path)?;
                    f.set_len(pos as u64)?;
                    f.sync_all()?;
                    report.truncated = Some((n, pos as u64, skipped));
                    tracing::warn!(
                        "REPLICA({}): cut {skipped} bytes of torn tail at offset {pos} of {}",
                        dir.display(),
                        segment_name(n)
                    );
                } else {
                    report.damaged.push(Damage {
                        segment: n,
                        offset: pos as u64,
                        skipped,
                    });
                    tracing::error!(
                        "REPLICA({}): {} damaged at offset {pos}, {skipped} bytes not replayed",
                        dir.display(),
                        segment_name(n)
                    );
                }
                break;
            }
            segments.insert(n, pos as u64);
        }
        let head = OpenOptions::new()
            .append(true)
            .open(dir.join(segment_name(last)))?;
        let mut store = ReplicaStore {
            dir: dir.to_path_buf(),
            opts,
            index,
            segments,
            head,
            torn: false,
            origin_bytes,
            accounted: 0,
        };
        report.trimmed = store.trim();
        store.account();
        Ok((store, report))
    }

    /// The backlog's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index (queries: last seq, live messages, catch-up state).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The last log seq stored.
    pub fn last_seq(&self) -> u64 {
        self.index.last_seq()
    }

    /// Bytes in the segment files.
    pub fn bytes(&self) -> u64 {
        self.segments.values().sum()
    }

    /// Brings the origin's shared count up to date with this store's bytes.
    fn account(&mut self) {
        let now = self.bytes();
        if now >= self.accounted {
            self.origin_bytes
                .0
                .fetch_add(now - self.accounted, Ordering::AcqRel);
        } else {
            self.origin_bytes
                .0
                .fetch_sub(self.accounted - now, Ordering::AcqRel);
        }
        self.accounted = now;
    }

    /// Segment files.
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    fn head_no(&self) -> u64 {
        *self.segments.keys().next_back().expect("a head segment")
    }

    /// Stores `records` in one write and applies them. Refused as a whole — nothing written
    /// — when they do not follow the backlog ([`StoreError::Index`]) or when they hold
    /// messages and would take the origin's stores past the bound ([`StoreError::Full`]).
    pub fn append(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let r = self.append_records(records);
        self.account();
        r
    }

    fn append_records(&mut self, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.index.check(records)?;
        if let Some(r) = records.iter().find(|r| !matches!(r, Record::Frame(_))) {
            // RESET and BASE are the store's own.
            return Err(IndexError::NotARecord(r.kind()).into());
        }
        let mut buf = Vec::new();
        let mut spans = Vec::with_capacity(records.len());
        for r in records {
            let start = buf.len();
            let len = record::encode(r, &mut buf)?;
            spans.push((start as u64, len as u32));
        }
        let used = self.origin_bytes.get();
        if records.iter().any(Record::holds_messages)
            && used + buf.len() as u64 > self.opts.max_bytes
        {
            return Err(StoreError::Full {
                used,
                needed: buf.len() as u64,
                max: self.opts.max_bytes,
            });
        }
        if self.segments[&self.head_no()] >= self.opts.segment_bytes {
            self.rotate()?;
        }
        self.write(records, &buf, &spans)?;
        self.trim();
        Ok(())
    }

    /// Writes encoded `records` (`buf`, with each record's span in it) to the head in one
    /// write and applies them; on failure nothing is applied and the head is cut back.
    fn write(&mut self, records: &[Record], buf: &[u8], spans: &[(u64, u32)]) -> io::Result<()> {
        let head_no = self.head_no();
        let head_len = self.segments[&head_no];
        if self.torn {
            self.head.set_len(head_len)?;
            self.torn = false;
        }
        if let Err(e) = self.head.write_all(buf) {
            if self.head.set_len(head_len).is_err() {
                self.torn = true;
            }
            return Err(e);
        }
        for (r, (start, len)) in records.iter().zip(spans) {
            let loc = Loc {
                segment: head_no,
                offset: head_len + start,
                len: *len,
            };
            self.index.apply(r, loc);
        }
        *self.segments.get_mut(&head_no).expect("head") += buf.len() as u64;
        Ok(())
    }

    fn encode_and_write(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let mut buf = Vec::new();
        let mut spans = Vec::with_capacity(records.len());
        for r in records {
            let start = buf.len();
            let len = record::encode(r, &mut buf)?;
            spans.push((start as u64, len as u32));
        }
        Ok(self.write(records, &buf, &spans)?)
    }

    /// Starts a new head segment (the old one synced first, so [`ReplicaStore::sync`] only
    /// ever needs the head), beginning with the log's seq (BASE).
    fn rotate(&mut self) -> Result<(), StoreError> {
        self.head.sync_data()?;
        let n = self.head_no() + 1;
        let path = self.dir.join(segment_name(n));
        let f = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)?;
        sync_dir(&self.dir);
        self.head = f;
        self.segments.insert(n, 0);
        self.torn = false;
        let base = Record::Base {
            last_seq: self.index.last_seq(),
        };
        self.encode_and_write(&[base])
    }

    /// fdatasync of what was appended.
    pub fn sync(&self) -> io::Result<()> {
        self.head.sync_data()
    }

    /// Deletes the segments nothing live needs any more; returns how many. A front segment
    /// kept only by topics' metadata is freed by appending a full STATE TOPIC for them.
    fn trim(&mut self) -> usize {
        let mut done = 0;
        for _ in 0..=self.segments.len() {
            let numbers: Vec<u64> = self.segments.keys().copied().collect();
            let n = self.index.trimmable(&numbers);
            for seg in &numbers[..n] {
                match fs::remove_file(self.dir.join(segment_name(*seg))) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::error!(
                            "REPLICA({}): failed to delete {} - {e}",
                            self.dir.display(),
                            segment_name(*seg)
                        );
                        return done;
                    }
                }
                self.segments.remove(seg);
                done += 1;
            }
            if self.segments.len() < 2 {
                break;
            }
            let front = *self.segments.keys().next().expect("a segment");
            let refresh: Vec<Record> = self
                .index
                .pinned_only_by_metadata(front)
                .into_iter()
                .map(|t| Record::Frame(Frame::State(Item::Topic(t))))
                .collect();
            if refresh.is_empty() || self.encode_and_write(&refresh).is_err() {
                break;
            }
        }
        done
    }

    /// True when a compaction would pay: no catch-up in progress, two segments or more, at
    /// least a segment's worth of bytes, and the live part below a quarter of the files.
    pub fn wants_compaction(&self) -> bool {
        let bytes = self.bytes();
        !self.index.catching_up()
            && self.segments.len() >= 2
            && bytes >= self.opts.segment_bytes
            && self.index.live_bytes() < bytes / 4
    }

    /// Rewrites the live state (a RESET, one STATE per topic and per live message) into a
    /// new segment — temporary file, fsync, rename — and deletes every older segment. Does
    /// nothing during a catch-up (its tombstones and confirmations are not in STATE items).
    /// Returns whether it compacted.
    pub fn compact(&mut self) -> Result<bool, StoreError> {
        let r = self.compact_segments();
        self.account();
        r
    }

    fn compact_segments(&mut self) -> Result<bool, StoreError> {
        if self.index.catching_up() {
            return Ok(false);
        }
        let n = self.head_no() + 1;
        let tmp = self.dir.join(format!("{}.tmp", segment_name(n)));
        let path = self.dir.join(segment_name(n));
        let result = self.write_compacted(n, &tmp);
        let (index, len) = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        fs::rename(&tmp, &path)?;
        sync_dir(&self.dir);
        let head = OpenOptions::new().append(true).open(&path)?;
        let old: Vec<u64> = self.segments.keys().copied().collect();
        self.segments.clear();
        self.segments.insert(n, len);
        self.head = head;
        self.index = index;
        self.torn = false;
        for seg in old {
            if let Err(e) = fs::remove_file(self.dir.join(segment_name(seg))) {
                if e.kind() != io::ErrorKind::NotFound {
                    // Replaying it before the RESET is harmless; retried at the next open.
                    tracing::error!(
                        "REPLICA({}): failed to delete {} - {e}",
                        self.dir.display(),
                        segment_name(seg)
                    );
                }
            }
        }
        Ok(true)
    }

    fn write_compacted(&self, n: u64, tmp: &Path) -> Result<(Index, u64), StoreError> {
        let file = File::create(tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut index = Index::new();
        let mut offset = 0u64;
        let mut buf = Vec::new();
        let mut put = |rec: Record, out: &mut BufWriter<File>| -> Result<(), StoreError> {
            buf.clear();
            let len = record::encode(&rec, &mut buf)?;
            out.write_all(&buf)?;
            index.apply(
                &rec,
                Loc {
                    segment: n,
                    offset,
                    len: len as u32,
                },
            );
            offset += len as u64;
            Ok(())
        };
        put(
            Record::Reset {
                last_seq: self.index.last_seq(),
            },
            &mut out,
        )?;
        for t in self.index.topics() {
            put(Record::Frame(Frame::State(Item::Topic(t))), &mut out)?;
        }
        let mut failed = None;
        self.for_each_unsettled(|m| {
            if failed.is_none() {
                if let Err(e) = put(Record::Frame(Frame::State(Item::Message(m))), &mut out) {
                    failed = Some(e);
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((index, offset))
    }

    /// The topics of the backlog with their pause flags and channels (takeover).
    pub fn topics(&self) -> Vec<nsq_protocol::replication::TopicItem> {
        self.index.topics()
    }

    /// Calls `f` with every unsettled message, body and timestamp included, in file order
    /// (each record is read once): pending on the topic (with its due time) and/or per
    /// channel with due time and attempts. Returns how many live messages could not be read
    /// back (their record damaged since it was written); an I/O error stops the walk.
    pub fn for_each_unsettled(&self, mut f: impl FnMut(MessageItem)) -> Result<u64, StoreError> {
        let mut unreadable = 0;
        let mut open: Option<(u64, File)> = None;
        let mut current: Option<(Loc, Record)> = None;
        for (loc, mut item) in self.index.unsettled() {
            if current.as_ref().map(|(l, _)| *l) != Some(loc) {
                if open.as_ref().map(|(s, _)| *s) != Some(loc.segment) {
                    let file = File::open(self.dir.join(segment_name(loc.segment)))?;
                    open = Some((loc.segment, file));
                }
                let (_, file) = open.as_ref().expect("opened");
                current = read_record(file, loc.offset)?.map(|rec| (loc, rec));
            }
            let found = match current.as_ref() {
                Some((_, Record::Frame(Frame::Pub(p)))) => p
                    .messages
                    .iter()
                    .find(|m| m.id == item.id)
                    .map(|m| (m.timestamp, m.body.clone())),
                Some((_, Record::Frame(Frame::State(Item::Message(m))))) if m.id == item.id => {
                    Some((m.timestamp, m.body.clone()))
                }
                _ => None,
            };
            match found {
                Some((timestamp, body)) => {
                    item.timestamp = timestamp;
                    item.body = body;
                    f(item);
                }
                None => unreadable += 1,
            }
        }
        Ok(unreadable)
    }

    /// Deletes the whole backlog (after a takeover, a DROP, or a newer epoch).
    pub fn drop_all(self) -> io::Result<()> {
        let dir = self.dir.clone();
        drop(self);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The record at `offset` of a segment (its length from its header, as the index does not
/// keep it); `None` when it is damaged or cut short.
fn read_record(file: &File, offset: u64) -> io::Result<Option<Record>> {
    let mut header = [0u8; record::HEADER];
    let len = match file.read_exact_at(&mut header, offset) {
        Ok(()) => u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if len == 0 || len > record::MAX_RECORD {
        return Ok(None);
    }
    let mut data = vec![0u8; record::HEADER + len];
    match file.read_exact_at(&mut data, offset) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    Ok(match record::parse(&Bytes::from(data), 0) {
        Parsed::Record(rec, _) => Some(rec),
        _ => None,
    })
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests;
