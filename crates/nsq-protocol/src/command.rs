//! V2 client commands: the [`Command`] type shared by both sides, the incremental, sans-I/O
//! [`Decoder`] a server uses (in `command/decode.rs`) and the encoders a client uses
//! ([`encode_command`] and the allocation-free `put_*` helpers, in `command/encode.rs`).
//!
//! A command is one line `NAME[ PARAM ...]\n` (at most [`MAX_LINE_LEN`] bytes including the
//! `\n`), optionally followed by a body. The decoder takes whole commands off the front of a
//! `BytesMut`; `Ok(None)` means "read more bytes and call again" (mini-redis's `Incomplete`).
//! Bodies are zero-copy `Bytes` slices of the connection's buffer, and FIN/RDY/REQ/TOUCH/NOP
//! decode without allocating.
//!
//! The checks run in exactly the reference's order (nsqd/protocol_v2.go, Exec and the
//! per-command handlers such as SUB, PUB, MPUB), so the first failing check
//! decides the error text. Checks that need connection or server state are the server's job:
//! the per-state rules (the `client.State` checks in nsqd/protocol_v2.go's handlers), the
//! TLS-required policy (nsqd/protocol_v2.go, enforceTLSPolicy) and RDY-in-CLOSING (ignored
//! silently) are decided by the `gate` hook, which runs right after the line is split and
//! before any parameter is looked at. The rest is done by the server after decoding:
//! SUB with heartbeats disabled (must be checked in the gate, it precedes the parameter
//! checks), AUTH already set / disabled and the auth server query, the auth checks of
//! SUB/PUB/DPUB, and clamping of REQ timeouts ([`clamp_req_timeout`]). MPUB's auth check and
//! topic creation happen before its body is read; [`DecodeHooks::mpub_topic`] is the place.

use std::fmt;

use bytes::Bytes;

use crate::message::MessageId;

mod decode;
mod encode;

pub use decode::*;
pub use encode::*;

/// Maximum length of a command line, including the `\n`.
pub const MAX_LINE_LEN: usize = 16384;

/// Server limits the decoder enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--max-body-size`: bounds IDENTIFY/AUTH bodies and the MPUB total size and count.
    pub max_body_size: i64,
    /// `--max-msg-size`: bounds each PUB/DPUB/MPUB message.
    pub max_msg_size: i64,
    /// `--max-rdy-count`.
    pub max_rdy_count: i64,
    /// `--max-req-timeout` in ms: bounds DPUB's defer (REQ is clamped by the server instead).
    pub max_req_timeout_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_size: 5_242_880,
            max_msg_size: 1_048_576,
            max_rdy_count: 2500,
            max_req_timeout_ms: 3_600_000,
        }
    }
}

/// A fully decoded client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Body: the raw JSON, see [`crate::identify::parse_identify`].
    Identify {
        body: Bytes,
    },
    /// Body: the secret.
    Auth {
        body: Bytes,
    },
    Sub {
        topic: String,
        channel: String,
    },
    Pub {
        topic: String,
        body: Bytes,
    },
    Mpub {
        topic: String,
        bodies: Vec<Bytes>,
    },
    /// `defer_ms` is in `0..=max_req_timeout_ms` for any value a client really sends.
    Dpub {
        topic: String,
        defer_ms: i64,
        body: Bytes,
    },
    Rdy {
        count: i64,
    },
    Fin {
        id: MessageId,
    },
    /// `timeout_ms` as sent (not clamped): see [`clamp_req_timeout`].
    Req {
        id: MessageId,
        timeout_ms: i64,
    },
    Touch {
        id: MessageId,
    },
    Cls,
    Nop,
}

impl Command {
    /// Which command this is.
    pub fn kind(&self) -> CommandKind {
        match self {
            Command::Identify { .. } => CommandKind::Identify,
            Command::Auth { .. } => CommandKind::Auth,
            Command::Sub { .. } => CommandKind::Sub,
            Command::Pub { .. } => CommandKind::Pub,
            Command::Mpub { .. } => CommandKind::Mpub,
            Command::Dpub { .. } => CommandKind::Dpub,
            Command::Rdy { .. } => CommandKind::Rdy,
            Command::Fin { .. } => CommandKind::Fin,
            Command::Req { .. } => CommandKind::Req,
            Command::Touch { .. } => CommandKind::Touch,
            Command::Cls => CommandKind::Cls,
            Command::Nop => CommandKind::Nop,
        }
    }
}

/// The known command names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    Identify,
    Auth,
    Sub,
    Pub,
    Mpub,
    Dpub,
    Rdy,
    Fin,
    Req,
    Touch,
    Cls,
    Nop,
}

impl CommandKind {
    /// The name as sent on the wire.
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Identify => "IDENTIFY",
            CommandKind::Auth => "AUTH",
            CommandKind::Sub => "SUB",
            CommandKind::Pub => "PUB",
            CommandKind::Mpub => "MPUB",
            CommandKind::Dpub => "DPUB",
            CommandKind::Rdy => "RDY",
            CommandKind::Fin => "FIN",
            CommandKind::Req => "REQ",
            CommandKind::Touch => "TOUCH",
            CommandKind::Cls => "CLS",
            CommandKind::Nop => "NOP",
        }
    }

    /// Case-sensitive lookup of a raw command name.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"IDENTIFY" => CommandKind::Identify,
            b"AUTH" => CommandKind::Auth,
            b"SUB" => CommandKind::Sub,
            b"PUB" => CommandKind::Pub,
            b"MPUB" => CommandKind::Mpub,
            b"DPUB" => CommandKind::Dpub,
            b"RDY" => CommandKind::Rdy,
            b"FIN" => CommandKind::Fin,
            b"REQ" => CommandKind::Req,
            b"TOUCH" => CommandKind::Touch,
            b"CLS" => CommandKind::Cls,
            b"NOP" => CommandKind::Nop,
            _ => return None,
        })
    }

    /// Whether a body follows the command line.
    pub fn has_body(self) -> bool {
        matches!(
            self,
            CommandKind::Identify
                | CommandKind::Auth
                | CommandKind::Pub
                | CommandKind::Mpub
                | CommandKind::Dpub
        )
    }
}

impl fmt::Display for CommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
