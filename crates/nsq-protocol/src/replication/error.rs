//! Why a frame is refused ([`FrameError`]) and the code of an ERROR frame ([`LinkErrorCode`]).

#[cfg(doc)]
use super::MAX_PROOF_LEN;

/// The code of an ERROR frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkErrorCode {
    BadFrame = 1,
    /// The replica's backlog of this origin reached `--replication-max-backlog-bytes`.
    Full = 2,
    OutOfSequence = 3,
    /// Not a member of the group, or a link to oneself.
    NotInGroup = 4,
    Internal = 5,
    UnsupportedVersion = 6,
}

/// Why bytes are not a valid frame. Every one ends the session (an ERROR frame, then close).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size field is 0: no room for the type byte.
    #[error("replication frame of size 0")]
    EmptyFrame,
    /// The size field is above the limit.
    #[error("replication frame of {size} bytes is above the limit of {max}")]
    Oversize { size: u64, max: u64 },
    #[error("unknown replication frame type 0x{0:02x}")]
    UnknownType(u8),
    /// The payload ends inside a field.
    #[error("replication frame 0x{frame_type:02x} is truncated")]
    Truncated { frame_type: u8 },
    /// The payload has bytes after its last field.
    #[error("replication frame 0x{frame_type:02x} has {extra} trailing bytes")]
    TrailingBytes { frame_type: u8, extra: usize },
    /// A list count that cannot fit in the rest of the payload.
    #[error("replication frame 0x{frame_type:02x}: a count of {count} does not fit")]
    BadCount { frame_type: u8, count: u64 },
    #[error("replication frame 0x{frame_type:02x}: a name is not UTF-8")]
    BadUtf8 { frame_type: u8 },
    /// A value outside its enumeration (op, kind, state, answer, code, flag bits).
    #[error("replication frame 0x{frame_type:02x}: bad {what} {value}")]
    BadValue {
        frame_type: u8,
        what: &'static str,
        value: u64,
    },
    /// A string too long for its length field (encoding only).
    #[error("a string of {0} bytes is too long for its field")]
    StringTooLong(usize),
    /// A list longer than its `u16` count field (encoding only).
    #[error("a list of {0} items is too long for its count field")]
    ListTooLong(usize),
    /// A membership proof above [`MAX_PROOF_LEN`] bytes (encoding only).
    #[error("a proof of {0} bytes is too long")]
    ProofTooLong(usize),
}
