//! Moving a finished file from `--work-dir` to `--output-dir` (file_logger.go, `Close`):
//! a hard link then an unlink, so an existing file is never overwritten, with the next
//! revisions tried while the name is taken.

use nsq_go::os::path_error;

use super::Writer;
use crate::filename::{base_of, dir_of, with_rev};
use crate::{fatalf, logf};

impl Writer {
    /// Moves a finished file from the work dir to the output dir without overwriting: a
    /// hard link then an unlink, with the next revisions tried while the name is taken.
    pub(super) fn move_out(&self, src: &str) {
        let dst = self.output_name(src);
        logf!(Info, "{} moving finished file {src} to {dst}", self.label());
        match exclusive_rename(src, &dst) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => fatalf!(
                "{} unable to move file from {src} to {dst}: {}",
                self.label(),
                link_error(src, &dst, &e)
            ),
        }
        let dst_tmpl = format!("{}{}", dir_of(&dst), base_of(&self.filename));
        if !dst_tmpl.contains("<REV>") {
            fatalf!(
                "{} unable to move file from {src} to {dst}: destination exists",
                self.label()
            );
        }
        let mut i = self.rev + 1;
        loop {
            logf!(
                Warn,
                "{} destination file already exists: {dst}",
                self.label()
            );
            let d = with_rev(&dst_tmpl, i);
            match exclusive_rename(src, &d) {
                Ok(()) => {
                    logf!(
                        Info,
                        "{} renamed finished file {src} to {d} to avoid overwrite",
                        self.label()
                    );
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => i += 1,
                Err(e) => fatalf!(
                    "{} unable to rename file from {src} to {d}: {}",
                    self.label(),
                    link_error(src, &d, &e)
                ),
            }
        }
    }
}

/// `exclusiveRename`: hard link, then remove the source; fails if `dst` exists.
fn exclusive_rename(src: &str, dst: &str) -> std::io::Result<()> {
    std::fs::hard_link(src, dst)?;
    std::fs::remove_file(src)
}

/// Go's `*LinkError` text: `link <src> <dst>: file exists`.
fn link_error(src: &str, dst: &str, e: &std::io::Error) -> String {
    let p = path_error("link", src, e);
    match p.split_once(": ") {
        Some((head, tail)) => format!("{head} {dst}: {tail}"),
        None => p,
    }
}
