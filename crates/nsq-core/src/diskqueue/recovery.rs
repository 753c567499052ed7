//! Opening a queue: load the metadata and check it against the data files on disk
//! (go-diskqueue diskqueue.go, retrieveMetaData and the writePos/file-size check after it).
//!
//! go-diskqueue logs an unparsable metadata file and carries on with whatever it parsed (or
//! nothing). We never let metadata make a queue unusable and never lose a complete record:
//! - metadata that is missing is a new queue (positions 0), as go-diskqueue;
//! - metadata that is unreadable, does not parse, has negative or absurd values, a reader
//!   beyond the writer, a read position past the end of its data file, or names no existing
//!   data file while others exist, is logged and the positions are rebuilt by scanning the data files that exist: read from the oldest at 0,
//!   write after the last complete record of the newest, depth = the complete records;
//! - a write position past the end of the write file (the file was truncated) keeps the
//!   reader and moves the writer to a new file, so the damaged file is read as a finished one:
//!   every complete record is delivered, then the torn tail is set aside as `.bad`;
//! - bytes past the write position (written after the last metadata sync) are never
//!   overwritten: the writer skips to a new file, as go-diskqueue.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use super::meta::{self, Meta};
use super::{data_file_path, DiskQueueOptions};

/// File numbers above this are treated as corrupt metadata (keeps `+ 1` far from overflow;
/// at one 100 MiB file per millisecond it lasts 30,000 years).
const MAX_FILE_NUM: i64 = 1 << 40;
/// Depths above this are recounted (a petabyte of smallest records is ~2^45).
const MAX_DEPTH: i64 = 1 << 50;

/// The positions a queue starts from. Never fails: bad metadata is rebuilt from the data.
pub(super) fn recover(name: &str, opts: &DiskQueueOptions, meta_path: &Path) -> Meta {
    let loaded = match meta::read(meta_path) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(
                "DISKQUEUE({name}) failed to retrieveMetaData - {} - {e} - rebuilding positions from the data files",
                meta_path.display()
            );
            return rebuild(name, opts);
        }
    };
    let Some(mut m) = loaded else {
        return skip_unsynced(name, opts, Meta::default(), false);
    };
    if let Err(why) = check(name, opts, &m) {
        tracing::warn!(
            "DISKQUEUE({name}) metadata {:?} is inconsistent ({why}) - rebuilding positions from the data files",
            m.encode()
        );
        return rebuild(name, opts);
    }
    let write_path = data_file_path(&opts.data_path, name, m.write_file_num);
    let write_len = fs::metadata(&write_path).map(|md| md.len() as i64).ok();
    // A negative depth (go-diskqueue only fixes it at the tail) or one no disk could hold.
    let mut recount = !(0..=MAX_DEPTH).contains(&m.depth);
    match write_len {
        Some(len) if len < m.write_pos => {
            tracing::warn!(
                "DISKQUEUE({name}) metadata writePos {} > file size of {len} ({}), reading it as a finished file and writing to a new one",
                m.write_pos,
                write_path.display()
            );
            m.write_file_num += 1;
            m.write_pos = 0;
            recount = true;
        }
        None if m.write_pos > 0 => {
            tracing::warn!(
                "DISKQUEUE({name}) metadata writePos {} but {} is missing, writing to a new file",
                m.write_pos,
                write_path.display()
            );
            m.write_file_num += 1;
            m.write_pos = 0;
            recount = true;
        }
        _ => {}
    }
    let m = skip_unsynced(name, opts, m, true);
    if recount {
        let mut m = m;
        m.depth = count_between(name, opts, &m);
        return m;
    }
    m
}

/// Why metadata cannot be trusted (the text is for the log; the positions are rebuilt).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Untrusted {
    #[error("file number or position out of range")]
    OutOfRange,
    #[error("read position beyond write position")]
    ReadPastWrite,
    #[error("readPos {read_pos} past the end of a {len}-byte file")]
    ReadPastEnd { read_pos: i64, len: u64 },
    #[error("none of the data files it names exist")]
    NoNamedFile,
}

/// Why `m` cannot be trusted, if it cannot.
fn check(name: &str, opts: &DiskQueueOptions, m: &Meta) -> Result<(), Untrusted> {
    let nums_ok = (0..=MAX_FILE_NUM).contains(&m.read_file_num)
        && (0..=MAX_FILE_NUM).contains(&m.write_file_num);
    if !nums_ok || m.read_pos < 0 || m.write_pos < 0 {
        return Err(Untrusted::OutOfRange);
    }
    if (m.read_file_num, m.read_pos) > (m.write_file_num, m.write_pos) {
        return Err(Untrusted::ReadPastWrite);
    }
    let read_path = data_file_path(&opts.data_path, name, m.read_file_num);
    match fs::metadata(&read_path) {
        Ok(md) if (md.len() as i64) < m.read_pos => Err(Untrusted::ReadPastEnd {
            read_pos: m.read_pos,
            len: md.len(),
        }),
        // An empty queue (reader at the writer) whose write file is not created yet: other
        // data files are leftovers of consumed data (a failed or interrupted deletion), not
        // records to serve.
        Err(_) if (m.read_file_num, m.read_pos) == (m.write_file_num, m.write_pos) => Ok(()),
        Err(_) => {
            // A missing read file is normal after a crash (go-diskqueue deletes a finished
            // file before the metadata moves on): the reader goes on with the next file. But
            // if records are claimed and none of the files the positions name exists while
            // other data files do, the numbers are wrong, not the data.
            let nums = data_file_nums(name, opts);
            let in_range = nums
                .iter()
                .any(|n| (m.read_file_num..=m.write_file_num).contains(n));
            if !in_range && !nums.is_empty() {
                Err(Untrusted::NoNamedFile)
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// Never overwrite bytes written after the last metadata sync (diskqueue.go,
/// retrieveMetaData's caller: "metadata writePos < file size, skipping to new file"). We also
/// skip any later non-empty file (a rotation whose metadata sync was lost in a crash).
fn skip_unsynced(name: &str, opts: &DiskQueueOptions, mut m: Meta, had_meta: bool) -> Meta {
    loop {
        let path = data_file_path(&opts.data_path, name, m.write_file_num);
        match fs::metadata(&path) {
            Ok(md) if md.len() as i64 > m.write_pos => {
                if had_meta {
                    tracing::warn!(
                        "DISKQUEUE({name}) metadata writePos {} < file size of {}, skipping to new file",
                        m.write_pos,
                        md.len()
                    );
                }
                m.write_file_num += 1;
                m.write_pos = 0;
            }
            _ => return m,
        }
    }
}

/// Positions from the data files alone: read the oldest from 0, write after the newest's last
/// complete record (or in a new file if garbage follows it), depth = complete records.
fn rebuild(name: &str, opts: &DiskQueueOptions) -> Meta {
    let nums = data_file_nums(name, opts);
    let (Some(&oldest), Some(&newest)) = (nums.first(), nums.last()) else {
        tracing::warn!("DISKQUEUE({name}) no data files - starting empty");
        return Meta::default();
    };
    let mut m = Meta {
        depth: 0,
        read_file_num: oldest,
        read_pos: 0,
        write_file_num: newest,
        write_pos: 0,
    };
    for &num in &nums {
        let (count, end) = scan(name, opts, num, 0, None);
        m.depth += count;
        if num == newest {
            m.write_pos = end;
        }
    }
    let m = skip_unsynced(name, opts, m, true);
    tracing::warn!(
        "DISKQUEUE({name}) rebuilt positions from data files {oldest}..={newest}: {:?}",
        m.encode()
    );
    m
}

/// Complete records between the read and the write position of `m`.
fn count_between(name: &str, opts: &DiskQueueOptions, m: &Meta) -> i64 {
    let mut depth = 0;
    for num in data_file_nums(name, opts) {
        if num < m.read_file_num || num > m.write_file_num {
            continue;
        }
        let start = if num == m.read_file_num {
            m.read_pos
        } else {
            0
        };
        let limit = (num == m.write_file_num).then_some(m.write_pos);
        depth += scan(name, opts, num, start, limit).0;
    }
    depth
}

/// The numbers of this queue's data files (`<name>.diskqueue.<digits>.dat`), ascending.
pub(super) fn data_file_nums(name: &str, opts: &DiskQueueOptions) -> Vec<i64> {
    let prefix = format!("{name}.diskqueue.");
    let mut nums: Vec<i64> = match fs::read_dir(&opts.data_path) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let file_name = e.file_name();
                let digits = file_name
                    .to_str()?
                    .strip_prefix(&prefix)?
                    .strip_suffix(".dat")?;
                if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                digits.parse::<i64>().ok().filter(|n| *n <= MAX_FILE_NUM)
            })
            .collect(),
        Err(e) => {
            tracing::error!(
                "DISKQUEUE({name}) failed to list {} - {e}",
                opts.data_path.display()
            );
            Vec::new()
        }
    };
    nums.sort_unstable();
    nums
}

/// Counts the complete, valid records of data file `num` from `start` (up to `limit` or the
/// file's end); returns the count and the offset after the last of them.
fn scan(
    name: &str,
    opts: &DiskQueueOptions,
    num: i64,
    start: i64,
    limit: Option<i64>,
) -> (i64, i64) {
    let path = data_file_path(&opts.data_path, name, num);
    let (mut count, mut pos) = (0i64, start.max(0));
    let result = (|| -> io::Result<()> {
        let file = File::open(&path)?;
        let len = file.metadata()?.len() as i64;
        let limit = limit.map_or(len, |l| l.min(len));
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(io::SeekFrom::Start(pos as u64))?;
        let (min, max) = (opts.min_msg_size as i64, opts.max_msg_size as i64);
        while pos + 4 <= limit {
            let mut size = [0u8; 4];
            r.read_exact(&mut size)?;
            let size = i32::from_be_bytes(size) as i64;
            if size < min || size > max || pos + 4 + size > limit {
                break;
            }
            r.seek_relative(size)?;
            pos += 4 + size;
            count += 1;
        }
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!("DISKQUEUE({name}) scanning {} - {e}", path.display());
    }
    (count, pos)
}
