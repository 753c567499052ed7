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
//!
//! Files: `record.rs`, the record format (encode, parse; no I/O); `replay.rs`, reading a
//! journal back and finding its damage; `journal.rs`, rewriting the file whole; the store
//! itself here.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nsq_protocol::MessageId;
use parking_lot::Mutex;

use crate::message::Message;

mod journal;
mod record;
mod replay;

use journal::{set_aside_and_rewrite, write_journal};
use record::{encode_add, encode_del};
use replay::{describe_spans, replay};

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

#[cfg(test)]
mod tests;
