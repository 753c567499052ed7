//! Rewriting a deferred journal whole (see the module comment of `deferred_store`): after
//! compaction, and after damage, with the damaged file set aside as `.bad`.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::record::encode_add;
use super::Replayed;

/// Writes `buf` as the whole journal at `path`: a temporary file, synced, renamed over `path`,
/// the directory synced. On error `path` is untouched (and the temporary file removed).
pub(super) fn write_journal(path: &Path, buf: &[u8]) -> io::Result<()> {
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
pub(super) fn set_aside_and_rewrite(
    path: &Path,
    entries: &[Replayed],
) -> io::Result<(PathBuf, u64)> {
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
