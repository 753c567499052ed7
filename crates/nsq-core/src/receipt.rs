//! What a publish (or an internal re-store) must wait for before it counts as durable: the
//! write tickets of every backend and deferred store its messages went to.
//!
//! A topic fills a [`PutReceipt`] only when `Options::durable` is set (otherwise it stays
//! empty and costs nothing); the daemon awaits [`PutReceipt::durable`] before answering OK.
//! One fdatasync per backend serves every publisher waiting on it (the backends' group
//! commit), so concurrent publishers share syncs.

use std::sync::Arc;

use crate::backend::{BackendError, BackendQueue, DurableWait, WriteTicket};
use crate::deferred_store::{DeferredStore, StoreTicket};

/// One write to wait for.
#[derive(Clone)]
pub(crate) enum Pending {
    Backend(Arc<dyn BackendQueue>, WriteTicket),
    Store(Arc<DeferredStore>, StoreTicket),
}

/// The writes behind an acknowledgement (see the module comment).
#[derive(Default, Clone)]
pub struct PutReceipt {
    pending: Vec<Pending>,
    /// The replication log seq of the publish (0: not replicated; crate::replicator).
    replication_seq: u64,
}

impl std::fmt::Debug for PutReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutReceipt")
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl PutReceipt {
    /// The replication log seq the acknowledgement must also wait for (0: none); the daemon
    /// waits for its replicas (docs/replication.md, Acknowledgement).
    pub fn replication_seq(&self) -> u64 {
        self.replication_seq
    }

    pub(crate) fn set_replication_seq(&mut self, seq: u64) {
        self.replication_seq = seq;
    }

    /// Nothing to wait for on this node's disk.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Adds a write; a later ticket of the same backend/store replaces an earlier one (tickets
    /// of one writer only grow, and a sync covers everything before it).
    pub(crate) fn push(&mut self, p: Pending) {
        for q in &mut self.pending {
            match (&mut *q, &p) {
                (Pending::Backend(b, t), Pending::Backend(b2, t2)) if same(b, b2) => {
                    *t = (*t).max(*t2);
                    return;
                }
                (Pending::Store(s, t), Pending::Store(s2, t2)) if Arc::ptr_eq(s, s2) => {
                    *t = (*t).max(*t2);
                    return;
                }
                _ => {}
            }
        }
        self.pending.push(p);
    }

    /// Takes over the writes of `other` and the later of the two replication seqs (several
    /// puts behind one acknowledgement).
    pub fn absorb(&mut self, other: &mut PutReceipt) {
        self.replication_seq = self.replication_seq.max(other.replication_seq);
        for p in std::mem::take(&mut other.pending) {
            self.push(p);
        }
    }

    pub(crate) fn backend(&mut self, b: &Arc<dyn BackendQueue>, t: WriteTicket) {
        self.push(Pending::Backend(b.clone(), t));
    }

    pub(crate) fn store(&mut self, s: &Arc<DeferredStore>, t: StoreTicket) {
        self.push(Pending::Store(s.clone(), t));
    }

    /// Completes once every write behind the receipt is on stable storage; `Err` if a sync
    /// failed (the publish must then not be acknowledged).
    pub async fn durable(self) -> Result<(), BackendError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // Start every wait first so the syncs of different backends run concurrently.
        let waits: Vec<DurableWait> = self
            .pending
            .into_iter()
            .map(|p| match p {
                Pending::Backend(b, t) => b.wait_durable(t),
                Pending::Store(s, t) => {
                    let w: DurableWait =
                        Box::pin(async move { s.wait_durable(t).await.map_err(BackendError::Io) });
                    w
                }
            })
            .collect();
        let mut result = Ok(());
        for w in waits {
            if let Err(e) = w.await {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }
}

/// Same backend object (compares the data pointers, not the vtables).
fn same(a: &Arc<dyn BackendQueue>, b: &Arc<dyn BackendQueue>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
