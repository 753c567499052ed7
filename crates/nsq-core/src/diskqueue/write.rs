//! The write path: `put_batch` encodes a batch into one buffer (length prefixes included),
//! then, under the state lock, writes it with one `pwrite` per data file it lands in, rotating
//! before any record that would push a file past `max_bytes_per_file` (go-diskqueue
//! diskqueue.go, writeOne). Positions are published only once every byte is written; on a
//! write error every byte of the batch is taken back (truncated away) so neither a later read
//! nor a restart can deliver a record that was never acknowledged, and a full disk only
//! fails the puts that do not fit.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{DiskQueue, State};
use crate::backend::BackendError;

/// A thread's encode buffer larger than this is released after use.
const ENCODE_BUF_KEEP: usize = 8 * 1024 * 1024;

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
    /// `BackendQueue::put_batch`; returns the new write ticket.
    pub(super) fn put_batch_impl(
        &self,
        count: usize,
        encode: &mut dyn FnMut(usize, &mut Vec<u8>),
    ) -> Result<u64, BackendError> {
        if self.exiting.load(Ordering::Acquire) {
            return Err(BackendError::Exiting);
        }
        if count == 0 {
            return Ok(self.state.lock().ticket);
        }
        // Take the thread's buffer (re-entrancy safe: a nested call just gets a fresh one).
        let mut eb = ENCODE_BUF.with(|cell| cell.take());
        eb.bytes.clear();
        eb.ends.clear();
        let min = self.opts.min_msg_size.max(0) as usize;
        let max = self.opts.max_msg_size.max(0) as usize;
        let mut result = Ok(0);
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

    /// Writes the encoded batch, rotating before any record that would push the file past
    /// `max_bytes_per_file`. Positions are published only once every byte is written; on
    /// error the batch is rolled back and nothing of it counts.
    fn write_locked(&self, st: &mut State, eb: &EncodeBuf) -> Result<u64, BackendError> {
        if st.torn_tail {
            // A previous rollback could not truncate: nothing may be appended after bytes
            // that a reader or a restart would take for records.
            self.truncate_tail(st).map_err(BackendError::Io)?;
        }
        let max_bytes = self.opts.max_bytes_per_file;
        let mut file_num = st.write_file_num;
        let mut file = st.write_file.clone();
        let mut chunk_pos = st.write_pos; // file offset where the current chunk goes
        let mut chunk_start = 0usize; // buffer offset of the current chunk
        let mut retired: Vec<(i64, Arc<File>)> = Vec::new();
        let mut off = 0usize;
        let mut rotated = false;
        let mut sealed = 0i64; // sizes of the files this batch finishes
        let mut result = Ok(());
        for &end in &eb.ends {
            let len = (end - off) as i64;
            let cur = chunk_pos + (off - chunk_start) as i64;
            if cur > 0 && cur.saturating_add(len) > max_bytes {
                result =
                    self.write_chunk(&mut file, file_num, chunk_pos, &eb.bytes[chunk_start..off]);
                if result.is_err() {
                    break;
                }
                if let Some(f) = file.take() {
                    retired.push((file_num, f));
                }
                sealed += cur;
                file_num += 1;
                chunk_pos = 0;
                chunk_start = off;
                rotated = true;
            }
            off = end;
        }
        if result.is_ok() {
            result = self.write_chunk(&mut file, file_num, chunk_pos, &eb.bytes[chunk_start..off]);
        }
        if let Err(e) = result {
            self.roll_back(st, file_num);
            return Err(BackendError::Io(e));
        }

        st.write_file_num = file_num;
        st.write_pos = chunk_pos + (off - chunk_start) as i64;
        st.sealed += sealed;
        st.write_file = file;
        st.depth = st.depth.saturating_add(eb.ends.len() as i64);
        st.ticket += 1;
        // A rotation forces a sync (fsync of the old files + metadata), in the background.
        self.count_ops(st, eb.ends.len(), rotated, retired);
        Ok(st.ticket)
    }

    fn write_chunk(
        &self,
        file: &mut Option<Arc<File>>,
        file_num: i64,
        pos: i64,
        bytes: &[u8],
    ) -> io::Result<()> {
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
        if let Err(e) = &result {
            tracing::error!(
                "DISKQUEUE({}) writing to {} at {pos} - {e}",
                self.name,
                self.data_file(file_num).display()
            );
        }
        result
    }

    /// Undoes a failed batch (e.g. ENOSPC after a partial write): the write file is cut back
    /// to `writePos` and files the batch rotated into are removed, so no byte of it can be
    /// read later or after a restart. Unlike go-diskqueue's writeOne the write file stays
    /// open: records written before the failure still need their fdatasync from it.
    fn roll_back(&self, st: &mut State, reached: i64) {
        for num in st.write_file_num + 1..=reached {
            self.remove_data_file(&self.data_file(num));
        }
        if let Err(e) = self.truncate_tail(st) {
            tracing::error!(
                "DISKQUEUE({}) failed to cut {} back to {} after a failed write - {e}; puts fail until it can be",
                self.name,
                self.data_file(st.write_file_num).display(),
                st.write_pos
            );
        }
    }

    /// Cuts the write file back to `writePos`; records success in `torn_tail`.
    fn truncate_tail(&self, st: &mut State) -> io::Result<()> {
        let result = match OpenOptions::new()
            .write(true)
            .open(self.data_file(st.write_file_num))
        {
            Ok(f) => match f.metadata() {
                Ok(md) if md.len() as i64 > st.write_pos => f.set_len(st.write_pos as u64),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        st.torn_tail = result.is_err();
        result
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
}
