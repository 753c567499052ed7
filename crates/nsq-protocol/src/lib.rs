//! Sans-I/O NSQ wire formats: byte slices in, typed values out, no sockets and no runtime.
//!
//! * [`command`]: the V2 client command line and body framing, with an incremental [`command::Decoder`].
//! * [`frame`]: server frames (response / error / message) both ways.
//! * [`message`]: the 26-byte message header + body encoding shared by frames and the diskqueue.
//! * [`identify`]: IDENTIFY request/response JSON with the reference's bounds and leniency.
//! * [`lookup`]: the nsqlookupd V1 protocol.
//! * [`names`]: topic/channel name validation.
//! * [`replication`]: the nsqd-to-nsqd replication link (issue 22, docs/replication.md).
//! * [`error`]: the one error type that carries the NSQ code and exact wire text.

pub mod command;
pub mod error;
pub mod frame;
pub mod identify;
pub mod lookup;
pub mod message;
pub mod names;
pub mod replication;

/// Go's `%q`, used in error descriptions; it lives in `nsq-go` with the other Go rules.
pub use nsq_go::quote;

pub use command::{Command, CommandKind, DecodeError, Decoder, Limits};
pub use error::{ErrorCode, NsqError};
pub use message::{MessageId, MESSAGE_HEADER_LEN};

/// The 4-byte magic a V2 client sends first.
pub const MAGIC_V2: &[u8; 4] = b"  V2";
/// The 4-byte magic an nsqd sends to nsqlookupd.
pub const MAGIC_V1: &[u8; 4] = b"  V1";
/// The protocol level we are compatible with, as reported in IDENTIFY and /info.
pub const VERSION: &str = "1.3.0";
