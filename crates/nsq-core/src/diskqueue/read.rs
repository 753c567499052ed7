//! The read path: `read_batch` takes records from the front of the queue. Reading happens
//! under the `reader` lock only (chunked reads into one buffer, records handed out as slices
//! of it); the result is then published under the state lock: consumption, deletion of a
//! finished file, corruption handling and the tail check, as go-diskqueue does in
//! diskqueue.go (readOne, moveForward, handleReadError, checkTailCorruption).
//! The durable-read watermark the reads report to is in `watermark.rs`.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{Buf, Bytes, BytesMut};

use super::{DiskQueue, State};
use crate::backend::RecordPos;

/// Reads from data files are done in chunks of at least this size.
const READ_CHUNK: usize = 256 * 1024;

/// The open read file and the bytes read from it but not yet consumed.
pub(super) struct ReadSide {
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
    pub(super) fn new(file_num: i64, pos: i64) -> ReadSide {
        ReadSide {
            file: None,
            file_num,
            buf: BytesMut::new(),
            buf_pos: pos,
            completed_len: None,
        }
    }

    pub(super) fn close(&mut self) {
        self.file = None;
        self.buf.clear();
        self.completed_len = None;
    }

    pub(super) fn reset(&mut self, file_num: i64, pos: i64) {
        self.close();
        self.file_num = file_num;
        self.buf_pos = pos;
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
        // Keep whatever a short read returns (the file may be shorter than the metadata
        // says): the complete records in it are still served before the EOF is reported.
        let mut got = 0;
        while got < want {
            match file.read_at(&mut self.buf[old + got..], (end + got as i64) as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(old + got);
                    return Err(e);
                }
            }
        }
        self.buf.truncate(old + got);
        if self.buf.len() < need {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

/// Up to `len` bytes of `file` from `offset` (fewer only at its end).
fn read_block(file: &File, offset: i64, len: usize) -> io::Result<Bytes> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset as u64 + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(Bytes::from(buf))
}

/// The result of reading records from one file without the state lock.
struct ReadStep {
    file_num: i64,
    end_pos: i64,
    records: usize,
    /// Start of each record taken, when the caller tracks positions (`read_batch_pos`).
    positions: Vec<RecordPos>,
    outcome: ReadOutcome,
}

enum ReadOutcome {
    /// Stopped because enough records were taken or the writer was reached.
    Stopped,
    /// A completed file was read to its end: delete it, go to the next.
    FileDone,
    /// Corruption or I/O error at `end_pos` (diskqueue.go, handleReadError).
    Error(String),
    /// The data file does not exist: go on with the next one that does.
    Missing(String),
}

impl DiskQueue {
    /// [`BackendQueue::scan_unread`](crate::backend::BackendQueue::scan_unread): reads the
    /// data files from the read position to the write position with files of its own, under
    /// the reader lock (no read moves meanwhile), each file read whole once. A file gone or
    /// damaged ends the scan there (the records before are handed over; a damaged record is
    /// what a read would skip too).
    pub(super) fn scan_unread_impl(
        &self,
        f: &mut dyn FnMut(Bytes),
    ) -> Result<(), crate::backend::BackendError> {
        let _rs = self.reader.lock();
        let (rfn, rpos, wfn, wpos) = {
            let st = self.state.lock();
            (
                st.read_file_num,
                st.read_pos,
                st.write_file_num,
                st.write_pos,
            )
        };
        let (min, max) = (
            self.opts.min_msg_size as usize,
            self.opts.max_msg_size as usize,
        );
        for num in rfn..=wfn {
            let data = match std::fs::read(self.data_file(num)) {
                Ok(d) => Bytes::from(d),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            let mut pos = if num == rfn { rpos.max(0) as usize } else { 0 };
            let limit = if num == wfn {
                (wpos.max(0) as usize).min(data.len())
            } else {
                data.len()
            };
            while pos + 4 <= limit {
                let size =
                    i32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]);
                let size = usize::try_from(size).unwrap_or(0);
                if size < min || size > max || pos + 4 + size > limit {
                    break;
                }
                f(data.slice(pos + 4..pos + 4 + size));
                pos += 4 + size;
            }
        }
        Ok(())
    }

    /// [`BackendQueue::scan_step`](crate::backend::BackendQueue::scan_step): reads from
    /// `max(from, read position)` with a file handle of its own, under the reader lock (no
    /// read moves meanwhile), in blocks of about `max_bytes` (a record larger than the block
    /// is read on its own), so memory is what is handed over. Records are slices of the
    /// block. A damaged record ends the scan of its file and a missing data file is passed
    /// over, as the reader does (`commit_read`: the origin skips them too); any other I/O
    /// error is returned.
    pub(super) fn scan_step_impl(
        &self,
        from: Option<RecordPos>,
        max_bytes: usize,
        f: &mut dyn FnMut(Bytes),
    ) -> Result<crate::backend::ScanStep, crate::backend::BackendError> {
        let _rs = self.reader.lock();
        let (read, wfn, wpos) = {
            let st = self.state.lock();
            if st.exiting {
                return Err(crate::backend::BackendError::Exiting);
            }
            let read = RecordPos {
                file_num: st.read_file_num,
                offset: st.read_pos,
            };
            (read, st.write_file_num, st.write_pos)
        };
        let (min, max) = (
            i64::from(self.opts.min_msg_size),
            i64::from(self.opts.max_msg_size),
        );
        let mut at = from.map_or(read, |p| p.max(read));
        let mut handed = 0usize;
        let budget = max_bytes.max(1);
        let step = |at: RecordPos, done: bool| crate::backend::ScanStep { next: at, done };
        loop {
            if at.file_num > wfn || (at.file_num == wfn && at.offset >= wpos) {
                return Ok(step(at, true));
            }
            if handed >= budget {
                return Ok(step(at, false));
            }
            let file = match File::open(self.data_file(at.file_num)) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    at = RecordPos {
                        file_num: at.file_num + 1,
                        offset: 0,
                    };
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let limit = if at.file_num < wfn {
                file.metadata()?.len() as i64
            } else {
                wpos
            };
            let next_file = RecordPos {
                file_num: at.file_num + 1,
                offset: 0,
            };
            if at.offset + 4 > limit {
                // The rest of a completed file (or a torn tail) holds no record.
                at = next_file;
                continue;
            }
            // One block: what is left of the budget (at least one header), within the file.
            let want = (max_bytes.saturating_sub(handed).saturating_add(4))
                .max(4096)
                .min((limit - at.offset) as usize);
            let block = read_block(&file, at.offset, want)?;
            // Shorter than asked: the file ends before its limit, where the reader fails.
            let short = block.len() < want;
            let mut off = 0usize;
            let mut damaged = false;
            while handed < budget && at.offset + (off as i64) < limit {
                if off + 4 > block.len() {
                    damaged = short;
                    break;
                }
                let size = i64::from(i32::from_be_bytes([
                    block[off],
                    block[off + 1],
                    block[off + 2],
                    block[off + 3],
                ]));
                if size < min || size > max || at.offset + off as i64 + 4 + size > limit {
                    damaged = true;
                    break;
                }
                let size = size as usize;
                if off + 4 + size > block.len() {
                    if short {
                        damaged = true;
                    } else if off == 0 {
                        // Larger than the block: read it on its own.
                        let rec = read_block(&file, at.offset + 4, size)?;
                        if rec.len() < size {
                            damaged = true;
                            break;
                        }
                        handed += size;
                        f(rec);
                        off = 4 + size;
                    }
                    break;
                }
                handed += size;
                f(block.slice(off + 4..off + 4 + size));
                off += 4 + size;
            }
            at.offset += off as i64;
            if damaged || (at.offset >= limit && at.file_num < wfn) {
                // Done with this file, or what the reader would skip of it (diskqueue.go,
                // handleReadError: the rest of the file).
                at = next_file;
            }
        }
    }

    /// Takes up to `max` records, handing each with its position to `sink`. `track`: the
    /// caller settles records through the watermark (`read_batch_pos`).
    pub(super) fn read_into(
        &self,
        max: usize,
        track: bool,
        sink: &mut dyn FnMut(Bytes, RecordPos),
    ) -> usize {
        let mut rs = self.reader.lock();
        let mut taken = 0;
        let mut tracked = Vec::new();
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
            let mut step = self.read_step(&mut rs, positions, max - taken, &mut |b, p| {
                if track {
                    tracked.push(p);
                }
                sink(b, p)
            });
            step.positions = std::mem::take(&mut tracked);
            taken += step.records;
            self.commit_read(&mut rs, step);
        }
        taken
    }

    /// Reads up to `want` records of file `rfn` starting at `rpos`, without the state lock.
    /// `wfn`/`wpos` is a snapshot of the writer (it only moves forward meanwhile).
    fn read_step(
        &self,
        rs: &mut ReadSide,
        (rfn, rpos, wfn, wpos): (i64, i64, i64, i64),
        want: usize,
        sink: &mut dyn FnMut(Bytes, RecordPos),
    ) -> ReadStep {
        let mut step = ReadStep {
            file_num: rfn,
            end_pos: rpos,
            records: 0,
            positions: Vec::new(),
            outcome: ReadOutcome::Stopped,
        };
        if rs.file.is_none() || rs.file_num != rfn || rs.buf_pos != rpos {
            rs.reset(rfn, rpos);
            match File::open(self.data_file(rfn)) {
                Ok(f) => rs.file = Some(f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    step.outcome = ReadOutcome::Missing(e.to_string());
                    return step;
                }
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
            sink(
                rs.buf.split_to(size as usize).freeze(),
                RecordPos {
                    file_num: rfn,
                    offset: pos,
                },
            );
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
            st.depth = st.depth.saturating_sub(step.records as i64);
            st.watermark.taken(&step.positions);
            let mut force = false;
            // A file skipped (missing, corrupt): the unread bytes are counted again.
            let recount = matches!(
                step.outcome,
                ReadOutcome::Missing(_) | ReadOutcome::Error(_)
            );
            match step.outcome {
                ReadOutcome::Stopped => {}
                ReadOutcome::FileDone => {
                    rs.close();
                    let num = st.read_file_num;
                    if st.watermark.holds(num) {
                        st.watermark.hold(num);
                    } else {
                        delete.push(self.data_file(num));
                    }
                    st.read_file_num += 1;
                    st.read_pos = 0;
                    // The file read to its end: `end_pos` is its length.
                    st.sealed = (st.sealed - step.end_pos).max(0);
                    force = true;
                }
                ReadOutcome::Missing(err) => {
                    // go-diskqueue treats this like corruption and steps one file number at
                    // a time; with metadata pointing far ahead that is endless, so jump to
                    // the next data file that exists (or the writer's).
                    let wfn = st.write_file_num;
                    let next = super::recovery::data_file_nums(&self.name, &self.opts)
                        .into_iter()
                        .find(|&n| n > st.read_file_num)
                        .map_or(wfn, |n| n.min(wfn));
                    tracing::error!(
                        "DISKQUEUE({}) reading {} - {err} - jumping to file {next}",
                        self.name,
                        self.data_file(st.read_file_num).display()
                    );
                    if st.read_file_num == wfn {
                        st.write_file = None;
                        st.write_file_num += 1;
                        st.write_pos = 0;
                    }
                    rs.close();
                    st.read_file_num = next.max(st.read_file_num + 1);
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
            if recount {
                st.sealed =
                    super::sealed_len(&self.opts, &self.name, st.read_file_num, st.write_file_num);
            }
            force |= self.check_tail(&mut st, rs, &mut delete);
            for num in st.watermark.released() {
                delete.push(self.data_file(num));
            }
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

    /// diskqueue.go, checkTailCorruption. Returns true if it changed anything (a sync is due).
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
            st.sealed = 0;
            st.depth = 0;
            changed = true;
        }
        changed
    }

    /// Deletes the held data files the watermark has moved past (no-op when none). Called by
    /// the syncer's timer, since `set_read_watermark` must not do I/O.
    pub(super) fn reap_held_files(&self) {
        let released = self.state.lock().watermark.released();
        for num in released {
            self.remove_data_file(&self.data_file(num));
        }
    }
}
