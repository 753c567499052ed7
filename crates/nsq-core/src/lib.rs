//! The NSQ queue engine, without sockets: topics fan messages out to channels; channels hold a
//! bounded memory queue that overflows to a [`backend::BackendQueue`], the in-flight and
//! deferred sets, and their consumers; the queue scanner times out and un-defers messages.

pub mod backend;
pub mod channel;
pub mod client_stats;
pub mod deferred;
pub mod deferred_store;
pub mod diskqueue;
pub mod e2e;
pub mod engine;
pub mod inflight;
pub mod memqueue;
pub mod message;
pub mod options;
pub mod queue_settings;
pub mod receipt;
pub mod replica;
pub mod replication;
pub mod replicator;
pub mod reserve;
pub mod scanner;
pub mod topic;

pub use backend::{BackendError, BackendQueue, DropSink, DurableWait, RecordPos, WriteTicket};
pub use channel::{
    Channel, ChannelStats, Consumer, FinishError, PeekState, Peeked, RequeueError, SubscribeError,
};
pub use engine::{Engine, Hooks, NoHooks};
pub use message::Message;
pub use options::{Health, Options, ScanOptions};
pub use receipt::PutReceipt;
pub use replicator::{CatchupError, CatchupScan, Replicator};
pub use topic::{Topic, TopicStats};
