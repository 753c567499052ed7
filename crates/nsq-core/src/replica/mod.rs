//! Replica backlogs (issue 22, docs/replication.md): what this nsqd keeps of another nsqd's
//! unsettled messages so that it can deliver them if that nsqd is lost.
//!
//! NSQ has nothing like it; the closest pieces are go-diskqueue's append-only data files and
//! the deferred journal of this repository (`deferred_store.rs`), whose record framing
//! (`[len][crc32][body]`) the segments reuse.
//!
//! * [`record`]: the record format, sans-I/O.
//! * [`index`]: what is pending where, the catch-up rules and the trimming rule, sans-I/O.
//! * [`store`]: the segment files of one backlog on disk.
//! * [`manifest`]: what a takeover took, on disk, and the skip set of a returning origin.
//! * [`adopt`]: a taken-over backlog item as the messages to put on this node.

pub mod adopt;
pub mod index;
pub mod manifest;
pub mod record;
pub mod store;

pub use index::{Index, IndexError, Loc};
pub use record::Record;
pub use store::{
    backlog_dir, Damage, OpenReport, OriginBytes, ReplicaStore, StoreError, StoreOptions,
};
