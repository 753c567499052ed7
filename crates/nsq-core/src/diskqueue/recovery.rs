//! Opening a queue: load the metadata and check it against the data files on disk
//! (go-diskqueue diskqueue.go, retrieveMetaData and the file-size check in New's caller).

use std::fs;
use std::path::Path;

use super::meta::{self, Meta};
use super::{data_file_path, DiskQueueOptions};
use crate::backend::BackendError;

/// The positions a queue starts from.
pub(super) fn recover(
    name: &str,
    opts: &DiskQueueOptions,
    meta_path: &Path,
) -> Result<Meta, BackendError> {
    let loaded = meta::read(meta_path).map_err(|e| {
        tracing::error!(
            "DISKQUEUE({name}) failed to retrieveMetaData - {} - {e}",
            meta_path.display()
        );
        BackendError::Io(e)
    })?;
    let had_meta = loaded.is_some();
    let mut m = loaded.unwrap_or_default();

    // Never overwrite bytes written after the last metadata sync (diskqueue.go,
    // retrieveMetaData: "metadata writePos < file size, skipping to new file"). We also skip
    // any later non-empty file (a rotation whose metadata sync was lost in a crash).
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
    Ok(m)
}
