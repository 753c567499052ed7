//! The durable deferred store of a channel: an append-only journal of the channel's deferred
//! messages, so that DPUB and REQ-with-delay messages survive a crash (NSQ keeps them only in
//! memory, see nsqd/channel.go, `pushDeferredMessage`; a SIGKILL loses them).
//!
//! One file per channel, `<data-path>/<topic>:<channel>.deferred.dat`, next to the channel's
//! diskqueue files (the Go nsqd ignores it; a clean shutdown flushes the deferred messages into
//! the diskqueue and removes it). Records, all integers big-endian:
//!
//! ```text
//! [u32 len][u32 crc32 of body][body]
//! body = 1 [16-byte id][i64 due, Unix ns][message: i64 timestamp, u16 attempts, id, payload]  ADD
//!      | 2 [16-byte id]                                                                     DEL
//! ```
//!
//! Replay applies ADD/DEL in order. A record whose length, checksum or body does not hold is
//! damage: replay scans forward byte by byte for the next offset where a whole valid record
//! starts and resumes there, so the records after a damaged span are kept (see `replay` for
//! how a false match is ruled out). What is left at the end with no valid record after it is
//! either a torn tail — the incomplete last record of a write cut short by a crash — which is
//! simply cut off, or damage. When there was damage, the file as found is kept as
//! `<name>.deferred.dat.bad` (a hard link, or a copy where links are not supported; `.N.bad` if
//! that name is taken), mirroring the diskqueue's renaming of a bad data file to `.bad`, an
//! error names the damaged offsets, and the journal is rewritten with the live entries so the
//! next open is clean. Damage can only lose what it overlaps: the ADDs it destroyed, and — when
//! it destroyed a DEL — bring back a message already delivered (a duplicate, never a loss).
//!
//! When dead records outnumber live ones the channel rewrites the file with only the live ADDs
//! ([`DeferredStore::compact`]: written to a temporary file, synced, renamed over the old one).
//!
//! Writes are plain `write` syscalls; [`DeferredStore::wait_durable`] is the group commit: one
//! `fdatasync` (run on the blocking pool) covers every record written before it started.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::MessageId;
use parking_lot::Mutex;

use crate::message::Message;

const ADD: u8 = 1;
const DEL: u8 = 2;
/// Largest record body accepted on replay (a corrupt length must not allocate gigabytes).
const MAX_RECORD: usize = 1 << 30;
/// Record header: `[u32 len][u32 crc32]`.
const HEADER: usize = 8;
/// Body of a DEL: kind and ID.
const DEL_LEN: usize = 1 + 16;
/// Smallest ADD body: kind, ID, due time and a message with an empty payload.
const MIN_ADD_LEN: usize = 1 + 16 + 8 + nsq_protocol::MESSAGE_HEADER_LEN;
/// Damaged spans named one by one in the error log; more are summarised.
const SPANS_LOGGED: usize = 16;

/// Identifies how far the store's writer got, for [`DeferredStore::wait_durable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct StoreTicket(pub(crate) u64);

/// The file and what is known about it; held briefly (one `write` syscall at most).
struct Inner {
    file: Arc<File>,
    /// Records appended since open (the ticket sequence).
    written: u64,
    /// ADD records in the file whose message is still deferred (as far as the store knows).
    live: usize,
    /// Records in the file that no longer matter (DELs and the ADDs they cancel).
    dead: usize,
    /// Set after a failed write: the file may end in a torn record, so the next write first
    /// truncates back to `len`.
    len: u64,
    torn: bool,
}

/// A channel's deferred journal (see the module comment).
pub struct DeferredStore {
    path: PathBuf,
    inner: Mutex<Inner>,
    /// Serialises `fdatasync` calls so one sync serves every waiter queued behind it.
    sync_lock: Mutex<()>,
    /// Highest ticket known to be on stable storage.
    synced: AtomicU64,
}

impl std::fmt::Debug for DeferredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredStore")
            .field("path", &self.path)
            .finish()
    }
}

/// One deferred message as replayed: when it is due (Unix ns) and the message.
pub type Replayed = (i64, Message);

impl DeferredStore {
    /// The journal's path for queue `<topic>:<channel>` in `data_path`.
    pub fn path_for(data_path: &Path, queue_name: &str) -> PathBuf {
        data_path.join(format!("{queue_name}.deferred.dat"))
    }

    /// Opens (creating if needed) the journal and replays it: returns the store and the
    /// messages it holds, in file order.
    ///
    /// A torn tail is cut off. Damage (see the module comment) is skipped, the file as found is
    /// kept as `.bad` and the journal rewritten with the live entries; if that fails (no space
    /// for the new journal, say) the error is logged and the damaged file stays in use as it
    /// is: its replay skips the same damage next time (and tries the rewrite again), and
    /// appending after it is safe.
    pub fn open(path: PathBuf) -> io::Result<(Arc<Self>, Vec<Replayed>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        let r = replay(&data);
        let mut len = data.len() as u64;
        let mut dead = r.records - r.entries.len();
        if !r.damaged.is_empty() {
            let skipped: usize = r.damaged.iter().map(|s| s.len()).sum();
            let spans = describe_spans(&r.damaged);
            match set_aside_and_rewrite(&path, &r.entries) {
                Ok((bad, new_len)) => {
                    tracing::error!(
                        "DEFERRED STORE({}) skipped {skipped} unreadable bytes at {spans}; kept the \
                         damaged file as {} and rewrote the journal with its {} live entries",
                        path.display(),
                        bad.display(),
                        r.entries.len()
                    );
                    // The old handle is the `.bad` file now.
                    file = OpenOptions::new().read(true).append(true).open(&path)?;
                    len = new_len;
                    dead = 0;
                }
                Err(e) => {
                    // A torn tail is not cut either: the file keeps every byte until a rewrite
                    // has set it aside, and replay skips a torn record followed by appended
                    // ones like any other damage.
                    tracing::error!(
                        "DEFERRED STORE({}) skipped {skipped} unreadable bytes at {spans}; failed to \
                         set the damaged file aside and rewrite it, using it as it is - {e}",
                        path.display()
                    );
                }
            }
        } else if r.torn_at < data.len() {
            tracing::warn!(
                path = %path.display(),
                "deferred store: cutting {} bytes of torn tail at offset {}",
                data.len() - r.torn_at,
                r.torn_at
            );
            file.set_len(r.torn_at as u64)?;
            len = r.torn_at as u64;
        }
        let live = r.entries.len();
        let store = DeferredStore {
            path,
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                written: 0,
                live,
                dead,
                len,
                torn: false,
            }),
            sync_lock: Mutex::new(()),
            synced: AtomicU64::new(0),
        };
        Ok((Arc::new(store), r.entries))
    }

    /// Appends an ADD for each `(due_unix_ns, message)` in one write.
    pub fn add<'a>(
        &self,
        entries: impl IntoIterator<Item = (i64, &'a Message)>,
    ) -> io::Result<StoreTicket> {
        let mut buf = Vec::new();
        let mut n = 0;
        for (due, m) in entries {
            encode_add(&mut buf, due, m);
            n += 1;
        }
        self.append(&buf, n, 0)
    }

    /// Appends a DEL for each ID in one write.
    pub fn del(&self, ids: impl IntoIterator<Item = MessageId>) -> io::Result<StoreTicket> {
        let mut buf = Vec::new();
        let mut n = 0;
        for id in ids {
            encode_del(&mut buf, id);
            n += 1;
        }
        self.append(&buf, 0, n)
    }

    fn append(&self, buf: &[u8], adds: usize, dels: usize) -> io::Result<StoreTicket> {
        let mut inner = self.inner.lock();
        if buf.is_empty() {
            return Ok(StoreTicket(inner.written));
        }
        if inner.torn {
            inner.file.set_len(inner.len)?;
            inner.torn = false;
        }
        if let Err(e) = (&*inner.file).write_all(buf) {
            inner.torn = true;
            return Err(e);
        }
        inner.len += buf.len() as u64;
        inner.written += 1;
        inner.live += adds;
        // A DEL kills itself and one ADD.
        inner.live = inner.live.saturating_sub(dels);
        inner.dead += 2 * dels;
        Ok(StoreTicket(inner.written))
    }

    /// Everything written is on stable storage (the current ticket, if any, included).
    pub fn ticket(&self) -> StoreTicket {
        StoreTicket(self.inner.lock().written)
    }

    /// Completes once every record up to `ticket` is fdatasync'd (group commit).
    pub async fn wait_durable(self: Arc<Self>, ticket: StoreTicket) -> io::Result<()> {
        if self.synced.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        match tokio::task::spawn_blocking(move || self.sync_upto(ticket)).await {
            Ok(r) => r,
            Err(e) => Err(io::Error::other(e)),
        }
    }

    /// Blocking: fdatasyncs unless a sync that started after `ticket` was written already ran.
    pub fn sync_upto(&self, ticket: StoreTicket) -> io::Result<()> {
        let _one_at_a_time = self.sync_lock.lock();
        if self.synced.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        let (file, upto) = {
            let inner = self.inner.lock();
            (inner.file.clone(), inner.written)
        };
        file.sync_data()?;
        self.synced.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// True when dead records outnumber live ones enough that a rewrite pays.
    pub fn wants_compaction(&self) -> bool {
        let inner = self.inner.lock();
        inner.dead > 1024 && inner.dead > 2 * inner.live
    }

    /// Rewrites the journal with exactly `live` (the channel's current deferred set) and
    /// syncs it; afterwards every earlier ticket counts as durable.
    pub fn compact<'a>(
        &self,
        live: impl IntoIterator<Item = (i64, &'a Message)>,
    ) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut n = 0;
        for (due, m) in live {
            encode_add(&mut buf, due, m);
            n += 1;
        }
        let _one_at_a_time = self.sync_lock.lock();
        let mut inner = self.inner.lock();
        write_journal(&self.path, &buf)?;
        let file = OpenOptions::new().append(true).open(&self.path)?;
        inner.file = Arc::new(file);
        inner.len = buf.len() as u64;
        inner.live = n;
        inner.dead = 0;
        inner.torn = false;
        self.synced.fetch_max(inner.written, Ordering::AcqRel);
        Ok(())
    }

    /// Removes the journal file (clean shutdown after its messages were flushed to the
    /// diskqueue, or channel deletion).
    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn begin_record(buf: &mut Vec<u8>) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0; 8]);
    start
}

fn end_record(buf: &mut [u8], start: usize) {
    let body = &buf[start + 8..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

fn encode_add(buf: &mut Vec<u8>, due: i64, m: &Message) {
    let start = begin_record(buf);
    buf.push(ADD);
    buf.extend_from_slice(&m.id.0);
    buf.extend_from_slice(&due.to_be_bytes());
    m.encode_into(buf);
    end_record(buf, start);
}

fn encode_del(buf: &mut Vec<u8>, id: MessageId) {
    let start = begin_record(buf);
    buf.push(DEL);
    buf.extend_from_slice(&id.0);
    end_record(buf, start);
}

/// Writes `buf` as the whole journal at `path`: a temporary file, synced, renamed over `path`,
/// the directory synced. On error `path` is untouched (and the temporary file removed).
fn write_journal(path: &Path, buf: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("dat.tmp");
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Keeps the damaged journal at `path` as `<path>.bad` (`<path>.N.bad` if taken) and rewrites
/// `path` with `entries`. Returns the `.bad` path and the new journal's length; on error the
/// journal at `path` is still the damaged file and nothing is set aside.
///
/// The `.bad` name is a hard link to the damaged file (no copy; a copy where the file system
/// has no links), made before the rewrite renames the new journal over `path`: a crash in
/// between leaves the damaged file in place, replayed the same way at the next open.
fn set_aside_and_rewrite(path: &Path, entries: &[Replayed]) -> io::Result<(PathBuf, u64)> {
    let bad = (0u32..)
        .map(|n| {
            let mut name = path.as_os_str().to_owned();
            if n > 0 {
                name.push(format!(".{n}"));
            }
            name.push(".bad");
            PathBuf::from(name)
        })
        .find(|p| !p.exists())
        .expect("a free .bad name");
    if let Err(e) = std::fs::hard_link(path, &bad) {
        if e.kind() == io::ErrorKind::AlreadyExists {
            return Err(e);
        }
        if let Err(e) = std::fs::copy(path, &bad) {
            let _ = std::fs::remove_file(&bad);
            return Err(e);
        }
    }
    let mut buf = Vec::new();
    for (due, m) in entries {
        encode_add(&mut buf, *due, m);
    }
    if let Err(e) = write_journal(path, &buf) {
        // The damaged file stays the journal, so it keeps its own evidence; a link left behind
        // would share its inode and grow with every append. The next open tries again.
        let _ = std::fs::remove_file(&bad);
        return Err(e);
    }
    Ok((bad, buf.len() as u64))
}

/// `offsets a..b, c..d, …` for the log, the first [`SPANS_LOGGED`] spans.
fn describe_spans(spans: &[Range<usize>]) -> String {
    let mut out: Vec<String> = spans
        .iter()
        .take(SPANS_LOGGED)
        .map(|s| format!("{}..{}", s.start, s.end))
        .collect();
    if spans.len() > SPANS_LOGGED {
        out.push(format!("and {} more spans", spans.len() - SPANS_LOGGED));
    }
    format!("offsets {}", out.join(", "))
}

/// One record as decoded.
enum Record {
    Add(i64, Message),
    Del(MessageId),
}

/// The whole record starting at `pos`, and its size with the header, if one is there: the
/// length fits its kind (a DEL exactly [`DEL_LEN`], an ADD between [`MIN_ADD_LEN`] and
/// [`MAX_RECORD`]) and the file, the ADD's ID equals the ID inside its message, and the body's
/// CRC-32 matches. The cheap checks come first, so scanning a damaged stretch byte by byte
/// computes a checksum only where a record plausibly starts.
fn parse_at(data: &[u8], pos: usize) -> Option<(Record, usize)> {
    let rest = data.get(pos..)?;
    let header = rest.get(..HEADER)?;
    let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(header[4..].try_into().expect("4 bytes"));
    if !(len == DEL_LEN || (MIN_ADD_LEN..=MAX_RECORD).contains(&len)) {
        return None;
    }
    let body = rest.get(HEADER..HEADER + len)?;
    let record = match body[0] {
        DEL if len == DEL_LEN => Record::Del(MessageId(body[1..17].try_into().expect("16 bytes"))),
        ADD if len >= MIN_ADD_LEN => {
            // The message's own ID sits after its timestamp (8) and attempts (2).
            if body[1..17] != body[25 + 10..25 + 26] || crc32fast::hash(body) != crc {
                return None;
            }
            let due = i64::from_be_bytes(body[17..25].try_into().expect("8 bytes"));
            let m = Message::decode(Bytes::copy_from_slice(&body[25..])).ok()?;
            return Some((Record::Add(due, m), HEADER + len));
        }
        _ => return None,
    };
    (crc32fast::hash(body) == crc).then_some((record, HEADER + len))
}

/// True if `tail` (bytes with no valid record after them) reads as the start of one record
/// cut short — what a crash leaves after a torn write — rather than damage: shorter than a
/// header, or a header whose length fits the kind byte (if present) and runs past the end.
fn is_torn_tail(tail: &[u8]) -> bool {
    let Some(header) = tail.get(..HEADER) else {
        return true;
    };
    let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let sane = match tail.get(HEADER) {
        None => len == DEL_LEN || (MIN_ADD_LEN..=MAX_RECORD).contains(&len),
        Some(&DEL) => len == DEL_LEN,
        Some(&ADD) => (MIN_ADD_LEN..=MAX_RECORD).contains(&len),
        Some(_) => false,
    };
    sane && HEADER + len > tail.len()
}

/// What [`replay`] found.
#[derive(Debug)]
struct Replay {
    /// The live entries, in order of their ADD.
    entries: Vec<Replayed>,
    /// Valid records applied.
    records: usize,
    /// Spans of damage skipped, in file order (the last may run to the end of the file).
    damaged: Vec<Range<usize>>,
    /// Where a torn tail starts (the file's length if there is none).
    torn_at: usize,
}

/// Replays `data`, resynchronising after damage.
///
/// Where no valid record starts, the scan tries every following offset until one does (see
/// [`parse_at`] for what "valid" takes). False resynchronisation — taking bytes that are not a
/// record for one — needs, at one offset, a length that fits its kind byte and the file, for an
/// ADD the same 16-byte ID twice, and a matching CRC-32. For random garbage that is well under
/// 2^-40 per offset (one in 2^32 for the checksum times the odds of the length and kind bytes),
/// so scanning even a megabyte of garbage has odds below 10^-6 of inventing a record. Inside
/// the intact body of a record whose header was destroyed the bytes are not random, but a false
/// match there still needs its own matching checksum: at most 2^-32 per offset, so about 10^-7
/// for scanning across a 500-byte record. The case it cannot tell apart is a message whose
/// payload itself holds a whole valid journal record (a journal file published as a message):
/// if damage destroys that message's own header, the record inside is replayed as if real.
fn replay(data: &[u8]) -> Replay {
    use std::collections::HashMap;
    let mut live: HashMap<MessageId, (usize, i64, Message)> = HashMap::new();
    let mut pos = 0;
    let mut records = 0;
    let mut seq = 0;
    let mut damaged = Vec::new();
    let mut torn_at = data.len();
    while pos < data.len() {
        let (at, (record, size)) = match parse_at(data, pos) {
            Some(found) => (pos, found),
            None => match (pos + 1..data.len()).find_map(|p| parse_at(data, p).map(|f| (p, f))) {
                Some(found) => {
                    damaged.push(pos..found.0);
                    found
                }
                None => {
                    if is_torn_tail(&data[pos..]) {
                        torn_at = pos;
                    } else {
                        damaged.push(pos..data.len());
                    }
                    break;
                }
            },
        };
        match record {
            Record::Add(due, m) => {
                live.insert(m.id, (seq, due, m));
                seq += 1;
            }
            Record::Del(id) => {
                live.remove(&id);
            }
        }
        records += 1;
        pos = at + size;
    }
    let mut entries: Vec<_> = live.into_values().collect();
    entries.sort_by_key(|(seq, _, _)| *seq);
    Replay {
        entries: entries.into_iter().map(|(_, due, m)| (due, m)).collect(),
        records,
        damaged,
        torn_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: u8) -> Message {
        let mut id = [b'0'; 16];
        id[15] = n;
        let mut m = Message::new(MessageId(id), Bytes::from(vec![n; 3]));
        m.attempts = u16::from(n);
        m.timestamp = 1_000 + i64::from(n);
        m
    }

    fn open(dir: &Path) -> (Arc<DeferredStore>, Vec<Replayed>) {
        DeferredStore::open(DeferredStore::path_for(dir, "t:c")).unwrap()
    }

    #[test]
    fn add_del_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (s, got) = open(dir.path());
        assert!(got.is_empty());
        s.add([(10, &msg(1)), (20, &msg(2))]).unwrap();
        s.add([(30, &msg(3))]).unwrap();
        s.del([msg(2).id]).unwrap();
        drop(s);
        let (_, got) = open(dir.path());
        assert_eq!(got, vec![(10, msg(1)), (30, msg(3))]);
    }

    /// The `.bad` files in `dir`, sorted.
    fn bad_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".bad"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn torn_tail_is_cut_and_later_writes_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        s.add([(10, &msg(1))]).unwrap();
        s.add([(20, &msg(2))]).unwrap();
        drop(s);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 3).unwrap();
        let (s, got) = open(dir.path());
        assert_eq!(got, vec![(10, msg(1))]);
        assert!(bad_files(dir.path()).is_empty(), "a torn tail is no damage");
        s.add([(30, &msg(3))]).unwrap();
        drop(s);
        let (_, got) = open(dir.path());
        assert_eq!(got, vec![(10, msg(1)), (30, msg(3))]);
    }

    #[test]
    fn torn_header_is_cut_without_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        s.add([(10, &msg(1))]).unwrap();
        drop(s);
        let one = std::fs::metadata(&path).unwrap().len();
        let mut data = std::fs::read(&path).unwrap();
        // The first 5 bytes of a second record's header, then a header and kind byte alone.
        let mut second = Vec::new();
        encode_add(&mut second, 20, &msg(2));
        for cut in [5, 9] {
            data.truncate(one as usize);
            data.extend_from_slice(&second[..cut]);
            std::fs::write(&path, &data).unwrap();
            let (_, got) = open(dir.path());
            assert_eq!(got, vec![(10, msg(1))]);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), one);
        }
        assert!(bad_files(dir.path()).is_empty());
    }

    #[test]
    fn damaged_last_record_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        s.add([(10, &msg(1))]).unwrap();
        s.add([(20, &msg(2))]).unwrap();
        drop(s);
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let (_, got) = open(dir.path());
        assert_eq!(got, vec![(10, msg(1))]);
        // Whole but with a bad checksum: damage, not a torn write.
        assert_eq!(
            bad_files(dir.path()),
            vec![dir.path().join("t:c.deferred.dat.bad")]
        );
        assert_eq!(
            std::fs::read(dir.path().join("t:c.deferred.dat.bad")).unwrap(),
            data
        );
    }

    /// A message with a 16-digit decimal ID `i` and a 40-byte body.
    fn msg_n(i: u32) -> Message {
        let id: [u8; 16] = format!("{i:016}").into_bytes().try_into().unwrap();
        let mut m = Message::new(MessageId(id), Bytes::from(format!("{i:040}")));
        m.attempts = 1;
        m.timestamp = 1_000_000 + i64::from(i);
        m
    }

    #[test]
    fn garbage_in_the_middle_loses_only_what_it_overlaps() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        let msgs: Vec<Message> = (0..1000).map(msg_n).collect();
        for (i, m) in msgs.iter().enumerate() {
            s.add([(i as i64, m)]).unwrap();
        }
        drop(s);
        let mut data = std::fs::read(&path).unwrap();
        let size = data.len() / 1000;
        assert_eq!(size * 1000, data.len(), "records of one size");
        // 64 bytes over the middle, every byte changed.
        let g = data.len() / 2 - 32;
        for (k, b) in data[g..g + 64].iter_mut().enumerate() {
            *b ^= 0x5a ^ (k as u8 | 1);
        }
        std::fs::write(&path, &data).unwrap();
        let hit = |i: usize| i * size < g + 64 && g < (i + 1) * size;
        let want: Vec<Replayed> = msgs
            .iter()
            .enumerate()
            .filter(|(i, _)| !hit(*i))
            .map(|(i, m)| (i as i64, m.clone()))
            .collect();
        assert!(want.len() >= 998, "64 bytes overlap at most 2 records");

        let (s, got) = open(dir.path());
        assert_eq!(got, want);
        // The file as found is kept, damaged bytes included.
        let bad = dir.path().join("t:c.deferred.dat.bad");
        assert_eq!(bad_files(dir.path()), vec![bad.clone()]);
        assert_eq!(std::fs::read(&bad).unwrap(), data);
        // The journal was rewritten with the live entries: the next open is clean.
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (want.len() * size) as u64
        );
        assert!(!s.wants_compaction());
        s.add([(5000, &msg_n(5000))]).unwrap();
        drop(s);
        let (_, again) = open(dir.path());
        assert_eq!(again.len(), want.len() + 1);
        assert_eq!(again[..want.len()], want[..]);
        assert_eq!(bad_files(dir.path()).len(), 1, "nothing new set aside");
    }

    #[test]
    fn second_damage_gets_its_own_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        for round in 0..2u8 {
            let (s, _) = open(dir.path());
            for n in 0..3 {
                s.add([(1, &msg(10 * round + n))]).unwrap();
            }
            drop(s);
            let mut data = std::fs::read(&path).unwrap();
            data[0] ^= 0xff; // the first record's length
            std::fs::write(&path, &data).unwrap();
            open(dir.path());
        }
        assert_eq!(
            bad_files(dir.path()),
            vec![
                dir.path().join("t:c.deferred.dat.1.bad"),
                dir.path().join("t:c.deferred.dat.bad"),
            ]
        );
        let (_, got) = open(dir.path());
        let ids: Vec<u8> = got.iter().map(|(_, m)| m.id.0[15]).collect();
        // Round 0 lost record 0; round 1's damage hit the first record, 1, again.
        assert_eq!(ids, vec![2, 10, 11, 12]);
    }

    #[test]
    fn failed_rewrite_keeps_using_the_damaged_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        for n in 1..=3 {
            s.add([(i64::from(n), &msg(n))]).unwrap();
        }
        drop(s);
        let mut data = std::fs::read(&path).unwrap();
        data[0] ^= 0xff; // record 1 lost
        std::fs::write(&path, &data).unwrap();
        // The rewrite's temporary file cannot be created.
        let tmp = path.with_extension("dat.tmp");
        std::fs::create_dir(&tmp).unwrap();
        let (s, got) = open(dir.path());
        assert_eq!(got, vec![(2, msg(2)), (3, msg(3))]);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            data,
            "the damaged file is used as it is"
        );
        assert!(bad_files(dir.path()).is_empty(), "nothing set aside");
        // Appending after the damage is safe: the next replay skips it again.
        s.add([(4, &msg(4))]).unwrap();
        drop(s);
        std::fs::remove_dir(&tmp).unwrap();
        let (_, got) = open(dir.path());
        assert_eq!(got, vec![(2, msg(2)), (3, msg(3)), (4, msg(4))]);
        let bad = bad_files(dir.path());
        assert_eq!(bad.len(), 1);
        let mut as_found = data;
        encode_add(&mut as_found, 4, &msg(4));
        assert_eq!(std::fs::read(&bad[0]).unwrap(), as_found);
        let (_, again) = open(dir.path());
        assert_eq!(again, got);
        assert!(!tmp.exists());
    }

    mod damage {
        use super::*;
        use proptest::prelude::*;

        /// One journal operation: ADD of message `id` (a payload of `len` bytes) or DEL of it.
        #[derive(Debug, Clone)]
        enum Op {
            Add(u8, usize),
            Del(u8),
        }

        fn ops() -> impl Strategy<Value = Vec<Op>> {
            proptest::collection::vec(
                prop_oneof![
                    3 => (0u8..40, 0usize..300).prop_map(|(id, len)| Op::Add(id, len)),
                    1 => (0u8..40).prop_map(Op::Del),
                ],
                1..80,
            )
        }

        fn message(id: u8, len: usize, seed: usize) -> Message {
            let mut m = msg(id);
            m.body = Bytes::from(
                (0..len)
                    .map(|k| (k * 31 + seed * 7) as u8)
                    .collect::<Vec<u8>>(),
            );
            m
        }

        /// The journal's bytes, each record's byte range, and the record itself.
        fn journal(ops: &[Op]) -> (Vec<u8>, Vec<(Range<usize>, Record)>) {
            let mut buf = Vec::new();
            let mut recs = Vec::new();
            for (seed, op) in ops.iter().enumerate() {
                let start = buf.len();
                let rec = match *op {
                    Op::Add(id, len) => {
                        let m = message(id, len, seed);
                        encode_add(&mut buf, seed as i64, &m);
                        Record::Add(seed as i64, m)
                    }
                    Op::Del(id) => {
                        encode_del(&mut buf, msg(id).id);
                        Record::Del(msg(id).id)
                    }
                };
                recs.push((start..buf.len(), rec));
            }
            (buf, recs)
        }

        /// What replaying exactly the records for which `keep` holds yields.
        fn model<'a>(recs: impl IntoIterator<Item = &'a Record>) -> Vec<Replayed> {
            let mut live: Vec<Replayed> = Vec::new();
            for rec in recs {
                match rec {
                    Record::Add(due, m) => {
                        live.retain(|(_, l)| l.id != m.id);
                        live.push((*due, m.clone()));
                    }
                    Record::Del(id) => live.retain(|(_, l)| l.id != *id),
                }
            }
            live
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            /// Damage anywhere (every byte of a random span changed) loses exactly the
            /// records it overlaps: every record wholly outside it is replayed, nothing is
            /// invented, and the file as found is kept as `.bad` unless the damage reads as a
            /// torn tail.
            #[test]
            fn random_damage_loses_only_what_it_overlaps(
                ops in ops(),
                start in 0.0f64..1.0,
                span in 1usize..400,
                xor in proptest::collection::vec(1u8..=255, 400),
            ) {
                let (mut data, recs) = journal(&ops);
                let a = ((data.len() as f64 * start) as usize).min(data.len() - 1);
                let b = (a + span).min(data.len());
                for (byte, x) in data[a..b].iter_mut().zip(&xor) {
                    *byte ^= x;
                }
                let want = model(
                    recs.iter()
                        .filter(|(r, _)| r.end <= a || b <= r.start)
                        .map(|(_, rec)| rec),
                );

                let dir = tempfile::tempdir().unwrap();
                let path = DeferredStore::path_for(dir.path(), "t:c");
                std::fs::write(&path, &data).unwrap();
                let (_, got) = open(dir.path());
                prop_assert_eq!(&got, &want);
                let bad = bad_files(dir.path());
                let last_start = recs.last().unwrap().0.start;
                if b <= last_start {
                    // A valid record follows the damage: never a torn tail.
                    prop_assert_eq!(bad.len(), 1);
                }
                if let Some(bad) = bad.first() {
                    prop_assert_eq!(std::fs::read(bad).unwrap(), data);
                }
                // Whatever happened, the next open replays the same and sets nothing aside.
                let n_bad = bad.len();
                let (_, again) = open(dir.path());
                prop_assert_eq!(&again, &want);
                prop_assert_eq!(bad_files(dir.path()).len(), n_bad);
            }

            /// A cut anywhere keeps every record before it and sets nothing aside.
            #[test]
            fn random_cut_is_a_torn_tail(ops in ops(), at in 0.0f64..1.0) {
                let (data, recs) = journal(&ops);
                let cut = (data.len() as f64 * at) as usize;
                let want = model(recs.iter().filter(|(r, _)| r.end <= cut).map(|(_, rec)| rec));
                let dir = tempfile::tempdir().unwrap();
                let path = DeferredStore::path_for(dir.path(), "t:c");
                std::fs::write(&path, &data[..cut]).unwrap();
                let (_, got) = open(dir.path());
                prop_assert_eq!(got, want);
                prop_assert!(bad_files(dir.path()).is_empty());
                let kept = recs.iter().map(|(r, _)| r.end).filter(|&e| e <= cut).max().unwrap_or(0);
                prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), kept as u64);
            }
        }
    }

    #[test]
    fn compaction_keeps_only_live_and_remove_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let path = DeferredStore::path_for(dir.path(), "t:c");
        let (s, _) = open(dir.path());
        for i in 0..200u8 {
            s.add([(i64::from(i), &msg(i))]).unwrap();
        }
        let before = std::fs::metadata(&path).unwrap().len();
        s.compact([(7, &msg(7))]).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < before / 100);
        s.add([(8, &msg(8))]).unwrap();
        s.sync_upto(s.ticket()).unwrap();
        drop(s);
        let (s, got) = open(dir.path());
        assert_eq!(got, vec![(7, msg(7)), (8, msg(8))]);
        s.remove().unwrap();
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn wait_durable_completes() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = open(dir.path());
        let t = s.add([(1, &msg(1))]).unwrap();
        s.clone().wait_durable(t).await.unwrap();
        assert!(s.synced.load(Ordering::Acquire) >= t.0);
        // Already covered: no sync needed.
        s.clone().wait_durable(t).await.unwrap();
    }
}
