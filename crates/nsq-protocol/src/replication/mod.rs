//! The replication link between nsqd (issue 22, docs/replication.md), sans-I/O.
//!
//! NSQ has no such link: an origin nsqd dials a peer's ordinary TCP port and sends
//! [`MAGIC_R1`] where a client sends `"  V2"`. A node with replication off answers it as
//! nsqd/tcp.go `Handle` answers any unknown magic (`E_BAD_PROTOCOL`, close), so this module
//! is only reached when replication is on.
//!
//! After the magic both sides exchange frames `[u32 size][u8 type][payload]`, big-endian,
//! `size = 1 + payload length`. [`encode`] appends one frame, [`decode`] takes one whole frame
//! off the front of a buffer (`Ok(None)`: need more bytes) and refuses malformed ones with a
//! typed [`FrameError`]. [`encode_payload`] / [`decode_payload`] are the same without the
//! size prefix: the replica store (`nsq-core`, `replica/`) keeps the frames it receives as
//! records of that form.
//!
//! Field encodings: `str8` = `u8` length + UTF-8, `str16` = `u16` length + UTF-8, `bytes` =
//! `u32` length + bytes, lists = a count (`u16` or `u32`) then the items. A count that could
//! not fit in the rest of the payload is refused before anything is allocated.

/// The 4-byte magic an origin sends first on a replication link.
pub const MAGIC_R1: &[u8; 4] = b"  R1";
/// The link protocol version carried in HELLO and WELCOME. Version 2 added the membership
/// proof (HELLO's nonce, CHALLENGE, AUTH); version 3 the replication core's facts (PING and
/// PONG carrying the origin's clock, STATUS entries' `complete` flag, `echo` and state `gone`,
/// TAKEN_OVER's `last_seq`, DROP's taker); version 5 the queue settings (ADMIN op 6, a TOPIC
/// item's settings, flag `2`). A HELLO of another version is decoded only as far
/// as its version and node ID (the first two fields of every version), so that it can be
/// refused as unsupported or as not in the group.
pub const LINK_VERSION: u16 = 5;
/// The bytes of a handshake nonce (HELLO, CHALLENGE).
pub const NONCE_LEN: usize = 16;
/// The most bytes of a membership proof (CHALLENGE, AUTH).
pub const MAX_PROOF_LEN: usize = 64;
/// The smallest frame limit a side announces (docs/replication.md: the larger of this and
/// twice `--max-body-size`).
pub const MIN_MAX_FRAME: u32 = 16 << 20;

/// Frame type bytes.
pub mod frame_type {
    pub const HELLO: u8 = 0x01;
    pub const PUB: u8 = 0x02;
    pub const STATE: u8 = 0x03;
    pub const FIN: u8 = 0x04;
    pub const REQ: u8 = 0x05;
    pub const FANOUT: u8 = 0x06;
    pub const ADMIN: u8 = 0x07;
    pub const CATCHUP_BEGIN: u8 = 0x08;
    pub const CATCHUP_END: u8 = 0x09;
    pub const GOODBYE: u8 = 0x0a;
    pub const DROP: u8 = 0x0b;
    pub const MANIFEST_APPLIED: u8 = 0x0c;
    pub const HANDOFF: u8 = 0x0d;
    pub const HANDOFF_END: u8 = 0x0e;
    pub const AUTH: u8 = 0x0f;
    pub const PING: u8 = 0x10;
    pub const STANDBY: u8 = 0x11;
    pub const HEARTBEAT: u8 = 0x40;
    pub const STATUS: u8 = 0x41;
    pub const ERROR: u8 = 0x42;
    pub const WELCOME: u8 = 0x81;
    pub const ACK: u8 = 0x82;
    pub const TAKEN_OVER: u8 = 0x83;
    pub const MANIFEST: u8 = 0x84;
    pub const MANIFEST_END: u8 = 0x85;
    pub const HANDOFF_DONE: u8 = 0x86;
    pub const CHALLENGE: u8 = 0x87;
    pub const PONG: u8 = 0x88;
}

mod decoding;
mod encoding;
mod error;
mod frames;

pub use decoding::{decode, decode_payload};
pub use encoding::{encode, encode_payload, try_encode};
pub use error::{FrameError, LinkErrorCode};
pub use frames::{
    Admin, AdminOp, BacklogState, Challenge, ChannelItem, Direction, Fanout, Fin, Frame, Hello,
    Item, Manifest, MessageItem, PendingChannel, Pub, PubMessage, Req, ReqEntry, Settings,
    StatusEntry, TopicItem, Welcome, WelcomeAnswer,
};

#[cfg(test)]
mod tests;
