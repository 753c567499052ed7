//! A topic's syncer thread (the second half of file_logger.go's `router` sync point): it
//! makes the bytes the writer wrote durable (`fdatasync`, once for every batch queued behind
//! the first) and only then FINs their messages, so nothing is acknowledged to nsqd before
//! it is on disk. The writer (`file_logger.rs`) hands it batches and reads `idle` to decide
//! when an early sync is worth one (group commit).

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use nsq_client::Message;
use nsq_go::os::path_error;

use crate::fatalf;

/// A batch for the syncer: sync `file`, then FIN `msgs`.
pub(crate) struct SyncJob {
    pub(crate) file: Arc<File>,
    /// Its name, for the error line.
    pub(crate) path: String,
    pub(crate) msgs: Vec<Message>,
}

/// The syncer: fsync (once for everything queued), then FIN.
pub(crate) fn sync_loop(rx: Receiver<SyncJob>, label: String, idle: Arc<AtomicBool>) {
    loop {
        let first = match rx.try_recv() {
            Ok(j) => j,
            Err(_) => {
                idle.store(true, Ordering::Release);
                match rx.recv() {
                    Ok(j) => j,
                    Err(_) => break,
                }
            }
        };
        idle.store(false, Ordering::Release);
        let mut jobs = vec![first];
        while let Ok(j) = rx.try_recv() {
            jobs.push(j);
        }
        let mut synced: Vec<&Arc<File>> = Vec::new();
        for j in &jobs {
            if synced.iter().any(|f| Arc::ptr_eq(f, &j.file)) {
                continue;
            }
            if let Err(e) = j.file.sync_data() {
                fatalf!(
                    "{label} failed syncing messages: {}",
                    path_error("sync", &j.path, &e)
                );
            }
            synced.push(&j.file);
        }
        for j in jobs {
            for m in j.msgs {
                m.finish();
            }
        }
    }
}
