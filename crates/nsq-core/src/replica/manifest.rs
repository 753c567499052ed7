//! What a takeover took (docs/replication.md, "Takeover" and "Return"): the manifest file the
//! taker writes before it delivers anything, and the skip set a returning origin builds from
//! the manifest it is sent, so that it drops instead of delivering again what was taken over.
//!
//! The file is a run of records `[u32 len][u32 crc32][u8 type][payload]` (the replica
//! store's framing, `record.rs`) whose type and payload are the link's MANIFEST frames,
//! ended by a MANIFEST_END: what the taker sends a returning origin is what it stored, read
//! back as it is. Written to a temporary file, synced and renamed, so a manifest is whole or
//! absent; a file without its MANIFEST_END (or with a damaged record) is refused, and the
//! takeover then starts again from the backlog, which is deleted only after the manifest is
//! in place.
//!
//! NSQ has no counterpart.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nsq_protocol::message::MessageId;
use nsq_protocol::replication::{self, frame_type as ft, Frame, Manifest};

/// `[u32 len][u32 crc32]`.
const HEADER: usize = 8;
/// IDs per MANIFEST record (a channel with more gets several), so a record stays well below
/// the link's smallest frame limit (16 MiB): 65,536 × 16 bytes = 1 MiB.
const IDS_PER_RECORD: usize = 65_536;

/// The manifest of `(origin, epoch)` beside its backlog directory.
pub fn manifest_path(data_path: &Path, origin: u64, epoch: u64) -> PathBuf {
    data_path
        .join("replica")
        .join(format!("{origin:016x}.{epoch}.manifest"))
}

/// Why a manifest file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("manifest damaged at byte {0}")]
    Damaged(usize),
    #[error("manifest incomplete: no end record")]
    Incomplete,
    #[error("manifest of epoch {found} where {expected} was expected")]
    WrongEpoch { expected: u64, found: u64 },
}

/// Writes the manifest of `epoch`: `entries` are `(topic, channel, ids)`, an empty channel for
/// messages pending on the topic. Temporary file, fsync, rename, directory fsync. Returns the
/// number of IDs written.
pub fn write(
    path: &Path,
    epoch: u64,
    entries: impl IntoIterator<Item = (String, String, Vec<MessageId>)>,
) -> io::Result<u64> {
    let mut buf = Vec::new();
    let mut ids_written = 0u64;
    for (topic, channel, ids) in entries {
        for chunk in ids.chunks(IDS_PER_RECORD) {
            ids_written += chunk.len() as u64;
            put_record(
                &mut buf,
                &Frame::Manifest(Manifest {
                    epoch,
                    topic: topic.clone(),
                    channel: channel.clone(),
                    ids: chunk.to_vec(),
                }),
            )?;
        }
    }
    put_record(&mut buf, &Frame::ManifestEnd { epoch })?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = File::create(&tmp).and_then(|mut f| {
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(ids_written)
}

fn put_record(buf: &mut Vec<u8>, frame: &Frame) -> io::Result<()> {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEADER]);
    buf.push(frame.frame_type());
    replication::encode_payload(frame, buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let body = &buf[start + HEADER..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Reads a whole manifest of `epoch`: its MANIFEST records, in file order.
pub fn read(path: &Path, epoch: u64) -> Result<Vec<Manifest>, ManifestError> {
    let data = Bytes::from(std::fs::read(path)?);
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let rest = &data[pos..];
        if rest.len() < HEADER {
            return Err(ManifestError::Incomplete);
        }
        let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len == 0 || rest.len() < HEADER + len {
            return Err(if len == 0 {
                ManifestError::Damaged(pos)
            } else {
                ManifestError::Incomplete
            });
        }
        let body = data.slice(pos + HEADER..pos + HEADER + len);
        if crc32fast::hash(&body) != crc {
            return Err(ManifestError::Damaged(pos));
        }
        let frame = replication::decode_payload(body[0], body.slice(1..))
            .map_err(|_| ManifestError::Damaged(pos))?;
        pos += HEADER + len;
        let found = match frame {
            Frame::Manifest(m) if m.epoch == epoch => {
                out.push(m);
                continue;
            }
            Frame::Manifest(m) => m.epoch,
            Frame::ManifestEnd { epoch: e } if e == epoch && pos == data.len() => return Ok(out),
            Frame::ManifestEnd { epoch: e } if e == epoch => return Err(ManifestError::Damaged(pos)),
            Frame::ManifestEnd { epoch: e } => e,
            _ => return Err(ManifestError::Damaged(pos - HEADER - len)),
        };
        return Err(ManifestError::WrongEpoch {
            expected: epoch,
            found,
        });
    }
}

/// The number of IDs in a manifest (for TAKEN_OVER's `entries`).
pub fn count(manifest: &[Manifest]) -> u64 {
    manifest.iter().map(|m| m.ids.len() as u64).sum()
}

/// What a returning origin must not deliver: per `(topic, channel)` the IDs taken over (an
/// empty channel: pending on the topic). Each ID is dropped when it is next met (taken from a
/// memory queue or the diskqueue, found in flight or deferred) and then forgotten.
#[derive(Debug, Default, Clone)]
pub struct SkipSet {
    by_queue: HashMap<(String, String), HashSet<MessageId>>,
    len: usize,
}

impl SkipSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a manifest's entries (several manifests, from several takers, add up).
    pub fn add(&mut self, manifest: &[Manifest]) {
        for m in manifest {
            let set = self
                .by_queue
                .entry((m.topic.clone(), m.channel.clone()))
                .or_default();
            for id in &m.ids {
                if set.insert(*id) {
                    self.len += 1;
                }
            }
        }
    }

    /// Whether `id` on `topic`/`channel` was taken over; if so it is forgotten (true once).
    pub fn take(&mut self, topic: &str, channel: &str, id: &MessageId) -> bool {
        let key = (topic.to_string(), channel.to_string());
        let Some(set) = self.by_queue.get_mut(&key) else {
            return false;
        };
        if !set.remove(id) {
            return false;
        }
        self.len -= 1;
        if set.is_empty() {
            self.by_queue.remove(&key);
        }
        true
    }

    /// Whether anything of `topic`/`channel` is still to be skipped (a cheap test before
    /// [`SkipSet::take`] on a hot path).
    pub fn covers(&self, topic: &str, channel: &str) -> bool {
        !self.by_queue.is_empty()
            && self
                .by_queue
                .contains_key(&(topic.to_string(), channel.to_string()))
    }

    /// Forgets a queue (its channel or topic was deleted, or emptied).
    pub fn forget(&mut self, topic: &str, channel: &str) {
        if let Some(set) = self
            .by_queue
            .remove(&(topic.to_string(), channel.to_string()))
        {
            self.len -= set.len();
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Frame types a manifest file holds (for a caller that streams the file onto a link).
pub fn is_manifest_frame(frame_type: u8) -> bool {
    matches!(frame_type, ft::MANIFEST | ft::MANIFEST_END)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> MessageId {
        MessageId([n; 16])
    }

    fn entries() -> Vec<(String, String, Vec<MessageId>)> {
        vec![
            ("t".into(), "c1".into(), vec![id(1), id(2)]),
            ("t".into(), "".into(), vec![id(3)]),
            ("u".into(), "c".into(), (0..=255).map(id).collect()),
        ]
    }

    #[test]
    fn write_then_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m");
        assert_eq!(write(&p, 7, entries()).unwrap(), 259);
        let m = read(&p, 7).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].topic.as_str(), m[0].channel.as_str()), ("t", "c1"));
        assert_eq!(m[0].ids, [id(1), id(2)]);
        assert_eq!(m[1].channel, "");
        assert_eq!(count(&m), 259);
        assert!(!dir.path().join("m.tmp").exists());
        assert!(matches!(
            read(&p, 8),
            Err(ManifestError::WrongEpoch {
                expected: 8,
                found: 7
            })
        ));
    }

    #[test]
    fn a_cut_or_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m");
        write(&p, 1, entries()).unwrap();
        let whole = std::fs::read(&p).unwrap();
        for cut in [0, 5, 20, whole.len() - 1] {
            std::fs::write(&p, &whole[..cut]).unwrap();
            assert!(
                matches!(read(&p, 1), Err(ManifestError::Incomplete)),
                "cut at {cut}"
            );
        }
        let mut bad = whole.clone();
        bad[HEADER + 3] ^= 0xff;
        std::fs::write(&p, &bad).unwrap();
        assert!(matches!(read(&p, 1), Err(ManifestError::Damaged(0))));
        let mut trailing = whole;
        trailing.push(0);
        std::fs::write(&p, &trailing).unwrap();
        assert!(read(&p, 1).is_err(), "bytes after the end record");
    }

    #[test]
    fn skip_set_drops_each_taken_id_once() {
        let m: Vec<Manifest> = entries()
            .into_iter()
            .map(|(topic, channel, ids)| Manifest {
                epoch: 1,
                topic,
                channel,
                ids,
            })
            .collect();
        let mut s = SkipSet::new();
        s.add(&m);
        s.add(&m[..1]);
        assert_eq!(s.len(), 259, "a second manifest with the same entries adds nothing");
        assert!(s.covers("t", "c1"));
        assert!(!s.covers("t", "c2"));
        assert!(s.take("t", "c1", &id(1)));
        assert!(!s.take("t", "c1", &id(1)), "forgotten once taken");
        assert!(!s.take("t", "c2", &id(2)), "another channel keeps its copy");
        assert!(s.take("t", "", &id(3)));
        assert!(!s.covers("t", ""));
        s.forget("u", "c");
        assert_eq!(s.len(), 1);
        assert!(s.take("t", "c1", &id(2)));
        assert!(s.is_empty());
    }
}
