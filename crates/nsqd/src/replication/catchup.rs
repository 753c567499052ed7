//! The origin's catch-up of a replica (docs/replication.md, "Who holds which origin's
//! messages", Catch-up): the engine's snapshot read in chunks on a blocking thread
//! (`nsq_core::CatchupScan`), and the writer's state while it interleaves STATE items with
//! the live frames (`origin.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use nsq_protocol::replication::Item;
use tokio::sync::mpsc;

use super::Replication;

/// Bytes of bodies read from disk per catch-up chunk (`nsq_core::CatchupScan`); with the
/// chunk being sent and the one queued, a catch-up holds at most three of them.
const CHUNK_BYTES: usize = 1 << 20;

/// One chunk of a catch-up snapshot, with the log's last seq read before it was taken.
pub(super) struct Chunk {
    /// The items must go out before any live frame above this seq (see
    /// `nsq_core::CatchupScan`: a frame above it may settle what they say is pending).
    pub(super) seq: u64,
    pub(super) items: Vec<Item>,
    /// The snapshot is complete after these items.
    pub(super) last: bool,
}

/// Reads the catch-up snapshot in chunks of [`CHUNK_BYTES`] on a blocking thread, each
/// chunk after the link took the one before (the channel holds one: at most three chunks
/// exist at once — being sent, queued, being read). An error is the last message.
pub(super) fn start_catchup(repl: &Arc<Replication>) -> mpsc::Receiver<Result<Chunk, String>> {
    let (tx, rx) = mpsc::channel::<Result<Chunk, String>>(1);
    let engine = repl.engine().cloned();
    let log = repl.log.clone();
    tokio::task::spawn_blocking(move || {
        let Some(e) = engine else {
            let _ = tx.blocking_send(Err("the engine is gone".into()));
            return;
        };
        let mut scan = nsq_core::CatchupScan::new(&e);
        drop(e);
        loop {
            let seq = log.last_seq();
            let mut items = Vec::new();
            let chunk = scan
                .next_chunk(CHUNK_BYTES, &mut items)
                .map(|last| Chunk { seq, items, last })
                .map_err(|e| e.to_string());
            let end = !matches!(chunk, Ok(Chunk { last: false, .. }));
            if tx.blocking_send(chunk).is_err() || end {
                return;
            }
        }
    });
    rx
}

/// A catch-up in progress on the writer's side.
pub(super) struct Catchup {
    pub(super) chunks: mpsc::Receiver<Result<Chunk, String>>,
    /// Items of the last chunk received, not sent yet.
    pub(super) items: VecDeque<Item>,
    /// Live frames above this seq wait (the last chunk's `seq`; CATCHUP_BEGIN's at first).
    pub(super) limit: u64,
    /// The last chunk was received.
    pub(super) complete: bool,
}

impl Catchup {
    /// A chunk arrived (the items before it are sent): its items are next, and live frames
    /// up to its seq may go before them.
    pub(super) fn take(&mut self, chunk: Result<Chunk, String>) -> Result<(), String> {
        let chunk = chunk.map_err(|e| format!("catch-up snapshot failed, no CATCHUP_END - {e}"))?;
        self.limit = self.limit.max(chunk.seq);
        self.items.extend(chunk.items);
        self.complete = chunk.last;
        Ok(())
    }
}
