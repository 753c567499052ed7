//! `<data-path>/replication.dat` (docs/replication.md, "Node identity"): this node's stable
//! replication node ID, its epoch as an origin and, after a clean stop, the epoch's last seq.
//! Written as `nsqd.dat` is (`metadata.rs`: temporary file, fsync, rename); only read or
//! written when replication is on.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name under the data path.
pub const FILE: &str = "replication.dat";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    /// 16 hex digits.
    node_id: String,
    epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    clean_seq: Option<u64>,
}

/// What this start of the node is, as an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub node_id: u64,
    /// The epoch this run replicates its publishes in.
    pub epoch: u64,
    /// The seq this run starts after: the previous run's `clean_seq` when it stopped cleanly
    /// (same epoch), else 0 (a new epoch).
    pub start_seq: u64,
    /// The previous epoch ended with an unclean stop (HELLO's PREVIOUS_UNCLEAN).
    pub previous_unclean: Option<u64>,
}

/// Why `replication.dat` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("failed to read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to parse {}: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("failed to write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The path of `replication.dat` under `data_path`.
pub fn path(data_path: &Path) -> PathBuf {
    data_path.join(FILE)
}

/// Loads (or creates) the identity at startup and persists what this run is — without
/// `clean_seq`, whose absence at the next start means this run did not stop cleanly. A clean
/// previous stop keeps the epoch and continues its seq; an unclean one (or none recorded)
/// starts the next epoch.
pub fn load_and_start(data_path: &Path) -> Result<Identity, IdentityError> {
    let p = path(data_path);
    let id = match std::fs::read(&p) {
        Ok(data) => {
            let d: OnDisk = serde_json::from_slice(&data).map_err(|e| IdentityError::Parse {
                path: p.clone(),
                reason: e.to_string(),
            })?;
            let node_id = u64::from_str_radix(&d.node_id, 16)
                .ok()
                .filter(|n| *n != 0 && d.node_id.len() == 16)
                .ok_or_else(|| IdentityError::Parse {
                    path: p.clone(),
                    reason: format!("bad node_id {:?}", d.node_id),
                })?;
            match d.clean_seq {
                Some(seq) => Identity {
                    node_id,
                    epoch: d.epoch,
                    start_seq: seq,
                    previous_unclean: None,
                },
                None => Identity {
                    node_id,
                    epoch: d.epoch + 1,
                    start_seq: 0,
                    previous_unclean: Some(d.epoch),
                },
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Identity {
            node_id: loop {
                let n: u64 = rand::random();
                if n != 0 {
                    break n;
                }
            },
            epoch: 1,
            start_seq: 0,
            previous_unclean: None,
        },
        Err(source) => return Err(IdentityError::Read { path: p, source }),
    };
    write(data_path, &id, None)?;
    Ok(id)
}

/// Writes the identity, with `clean_seq` after a clean stop.
pub fn write(data_path: &Path, id: &Identity, clean_seq: Option<u64>) -> Result<(), IdentityError> {
    use std::os::unix::fs::OpenOptionsExt;
    let target = path(data_path);
    let err = |source| IdentityError::Write {
        path: target.clone(),
        source,
    };
    let d = OnDisk {
        version: 1,
        node_id: format!("{:016x}", id.node_id),
        epoch: id.epoch,
        clean_seq,
    };
    let data = serde_json::to_vec(&d).expect("identity serializes");
    let tmp = data_path.join(format!("{FILE}.{}.tmp", rand::random::<u32>()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(&data).map_err(err)?;
    f.sync_all().map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(err)?;
    if let Ok(d) = std::fs::File::open(data_path) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_start_clean_and_unclean_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_and_start(dir.path()).unwrap();
        assert_ne!(a.node_id, 0);
        assert_eq!((a.epoch, a.start_seq, a.previous_unclean), (1, 0, None));
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"version":1,"node_id":"{:016x}","epoch":1}}"#,
                a.node_id
            )
        );
        // No clean_seq: the next start is a new epoch after an unclean stop.
        let b = load_and_start(dir.path()).unwrap();
        assert_eq!(b.node_id, a.node_id);
        assert_eq!((b.epoch, b.start_seq, b.previous_unclean), (2, 0, Some(1)));
        // A clean stop at seq 81234 keeps the epoch.
        write(dir.path(), &b, Some(81234)).unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(text.ends_with(r#""epoch":2,"clean_seq":81234}"#), "{text}");
        let c = load_and_start(dir.path()).unwrap();
        assert_eq!((c.epoch, c.start_seq, c.previous_unclean), (2, 81234, None));
        // clean_seq is removed at startup.
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(!text.contains("clean_seq"), "{text}");
        // No temporary files left.
        let n = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(n, 1);
    }

    #[test]
    fn damaged_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), b"{").unwrap();
        assert!(matches!(
            load_and_start(dir.path()),
            Err(IdentityError::Parse { .. })
        ));
    }
}
