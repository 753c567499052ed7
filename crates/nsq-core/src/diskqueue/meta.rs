//! The diskqueue metadata file (`<name>.diskqueue.meta.dat`; go-diskqueue diskqueue.go,
//! retrieveMetaData and persistMetaData): three lines of
//! decimal text, parsed strictly and replaced atomically (temp file + fsync + rename).

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The persisted queue positions: `<depth>\n<readFileNum>,<readPos>\n<writeFileNum>,<writePos>\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Meta {
    pub(crate) depth: i64,
    pub(crate) read_file_num: i64,
    pub(crate) read_pos: i64,
    pub(crate) write_file_num: i64,
    pub(crate) write_pos: i64,
}

impl Meta {
    /// The exact bytes go-diskqueue writes.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{}\n{},{}\n{},{}\n",
            self.depth, self.read_file_num, self.read_pos, self.write_file_num, self.write_pos
        )
    }

    /// Parses the reference format (`"%d\n%d,%d\n%d,%d\n"`). Anything else is an error: we
    /// let `recovery.rs` rebuild the positions from the data files. A missing final newline is
    /// tolerated.
    pub(crate) fn parse(text: &[u8]) -> Result<Meta, MetaError> {
        let text = std::str::from_utf8(text).map_err(|_| MetaError::NotUtf8)?;
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines: Vec<&str> = body.split('\n').collect();
        if lines.len() != 3 {
            return Err(MetaError::Lines(lines.len()));
        }
        let depth = parse_int(lines[0])?;
        let (read_file_num, read_pos) = parse_pair(lines[1])?;
        let (write_file_num, write_pos) = parse_pair(lines[2])?;
        if read_file_num < 0 || read_pos < 0 || write_file_num < 0 || write_pos < 0 {
            return Err(MetaError::Negative);
        }
        Ok(Meta {
            depth,
            read_file_num,
            read_pos,
            write_file_num,
            write_pos,
        })
    }
}

/// Why a metadata file does not parse (the text is for the log; recovery follows).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MetaError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("expected 3 lines, found {0}")]
    Lines(usize),
    #[error("bad integer {0:?}")]
    NotInteger(String),
    #[error("bad integer {text:?}: {source}")]
    IntRange {
        text: String,
        source: std::num::ParseIntError,
    },
    #[error("expected `<num>,<pos>`, got {0:?}")]
    NotPair(String),
    #[error("negative file number or position")]
    Negative,
}

fn parse_int(s: &str) -> Result<i64, MetaError> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    let ok = {
        let d = digits.strip_prefix('-').unwrap_or(digits);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    };
    if !ok {
        return Err(MetaError::NotInteger(s.to_string()));
    }
    digits.parse::<i64>().map_err(|source| MetaError::IntRange {
        text: s.to_string(),
        source,
    })
}

fn parse_pair(line: &str) -> Result<(i64, i64), MetaError> {
    let (a, b) = line
        .split_once(',')
        .ok_or_else(|| MetaError::NotPair(line.to_string()))?;
    Ok((parse_int(a)?, parse_int(b)?))
}

/// Reads the metadata file: `Ok(None)` if it does not exist, `InvalidData` if it does not parse.
pub(crate) fn read(path: &Path) -> io::Result<Option<Meta>> {
    match fs::read(path) {
        Ok(bytes) => Meta::parse(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `meta` to `<path>.<rand>.tmp` (mode 0600), fsyncs it and renames it over `path`.
/// The directory is not fsynced (as the reference).
pub(crate) fn write_atomic(path: &Path, meta: &Meta) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", rand::random::<u32>()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(meta.encode().as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_reference_example() {
        let m = Meta::parse(b"6\n0,0\n2,74\n").unwrap();
        assert_eq!(
            m,
            Meta {
                depth: 6,
                read_file_num: 0,
                read_pos: 0,
                write_file_num: 2,
                write_pos: 74
            }
        );
        assert_eq!(m.encode().as_bytes(), b"6\n0,0\n2,74\n");
        assert_eq!(Meta::parse(b"-3\n1,5\n1,9").unwrap().depth, -3);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b""[..],
            b"6\n0,0\n",
            b"6\n0,0\n2,74\nextra\n",
            b"x\n0,0\n2,74\n",
            b"6\n0;0\n2,74\n",
            b"6\n0,0\n2,-1\n",
            b"6\n0, 0\n2,74\n",
        ] {
            assert!(Meta::parse(bad).is_err(), "{bad:?}");
        }
    }
}
