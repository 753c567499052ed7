//! The protocol error type: an NSQ error code plus the exact description the reference sends.
//!
//! Every error frame the server writes is produced from an [`NsqError`] by
//! [`NsqError::to_frame_data`], so the wire text lives in one place. Descriptions that embed
//! client-supplied bytes "raw" (command names, message IDs, unparsable numbers) keep those bytes
//! exactly, even when they are not UTF-8.

use std::fmt;

use crate::message::MessageId;
use crate::quote::go_quote;

/// The machine-readable code at the start of an error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Invalid,
    BadBody,
    BadTopic,
    BadChannel,
    BadMessage,
    PubFailed,
    MpubFailed,
    DpubFailed,
    FinFailed,
    ReqFailed,
    TouchFailed,
    SubFailed,
    IdentifyFailed,
    AuthDisabled,
    AuthFailed,
    AuthFirst,
    Unauthorized,
    AuthError,
    BadProtocol,
}

impl ErrorCode {
    /// The code as it appears on the wire, e.g. `E_INVALID`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "E_INVALID",
            ErrorCode::BadBody => "E_BAD_BODY",
            ErrorCode::BadTopic => "E_BAD_TOPIC",
            ErrorCode::BadChannel => "E_BAD_CHANNEL",
            ErrorCode::BadMessage => "E_BAD_MESSAGE",
            ErrorCode::PubFailed => "E_PUB_FAILED",
            ErrorCode::MpubFailed => "E_MPUB_FAILED",
            ErrorCode::DpubFailed => "E_DPUB_FAILED",
            ErrorCode::FinFailed => "E_FIN_FAILED",
            ErrorCode::ReqFailed => "E_REQ_FAILED",
            ErrorCode::TouchFailed => "E_TOUCH_FAILED",
            ErrorCode::SubFailed => "E_SUB_FAILED",
            ErrorCode::IdentifyFailed => "E_IDENTIFY_FAILED",
            ErrorCode::AuthDisabled => "E_AUTH_DISABLED",
            ErrorCode::AuthFailed => "E_AUTH_FAILED",
            ErrorCode::AuthFirst => "E_AUTH_FIRST",
            ErrorCode::Unauthorized => "E_UNAUTHORIZED",
            ErrorCode::AuthError => "E_AUTH_ERROR",
            ErrorCode::BadProtocol => "E_BAD_PROTOCOL",
        }
    }

    /// Whether the server closes the connection after sending this error. Only the
    /// FIN/REQ/TOUCH failures leave the connection usable.
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            ErrorCode::FinFailed | ErrorCode::ReqFailed | ErrorCode::TouchFailed
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error to report to a client: code + description.
///
/// `desc` is the description as text. When a description embeds client bytes that are not
/// valid UTF-8, `desc` holds a lossy rendering and the exact bytes are kept aside;
/// [`NsqError::to_frame_data`] always yields the exact wire bytes, so servers must use it
/// (not `to_string()`) to build error frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsqError {
    pub code: ErrorCode,
    pub desc: String,
    /// Exact description bytes, only when they differ from `desc` (non-UTF-8 raw input).
    raw_desc: Option<Box<[u8]>>,
}

impl NsqError {
    /// An error with a textual description.
    pub fn new(code: ErrorCode, desc: impl Into<String>) -> Self {
        NsqError {
            code,
            desc: desc.into(),
            raw_desc: None,
        }
    }

    /// An error whose description is arbitrary bytes (client input inserted raw).
    pub fn from_raw(code: ErrorCode, desc: Vec<u8>) -> Self {
        match String::from_utf8(desc) {
            Ok(desc) => NsqError::new(code, desc),
            Err(e) => {
                let raw = e.into_bytes();
                NsqError {
                    code,
                    desc: String::from_utf8_lossy(&raw).into_owned(),
                    raw_desc: Some(raw.into_boxed_slice()),
                }
            }
        }
    }

    /// Whether the connection must be closed after sending this error.
    pub fn fatal(&self) -> bool {
        self.code.is_fatal()
    }

    /// The exact description bytes.
    pub fn desc_bytes(&self) -> &[u8] {
        self.raw_desc.as_deref().unwrap_or(self.desc.as_bytes())
    }

    /// The data of the error frame: `"<CODE> <desc>"`, or the bare code for `E_BAD_PROTOCOL`.
    pub fn to_frame_data(&self) -> Vec<u8> {
        let code = self.code.as_str().as_bytes();
        if self.code == ErrorCode::BadProtocol {
            return code.to_vec();
        }
        let desc = self.desc_bytes();
        let mut out = Vec::with_capacity(code.len() + 1 + desc.len());
        out.extend_from_slice(code);
        out.push(b' ');
        out.extend_from_slice(desc);
        out
    }

    // ----- constructors for the texts of the spec's Appendix A that need server state -----

    /// `E_BAD_PROTOCOL` (bad magic).
    pub fn bad_protocol() -> Self {
        NsqError::new(ErrorCode::BadProtocol, "")
    }

    /// `E_INVALID invalid command <raw name>`.
    pub fn invalid_command(raw_name: &[u8]) -> Self {
        NsqError::from_raw(
            ErrorCode::Invalid,
            concat(b"invalid command ", raw_name, b""),
        )
    }

    /// `E_INVALID cannot <CMD> in current state`.
    pub fn cannot_in_current_state(cmd: &str) -> Self {
        NsqError::new(ErrorCode::Invalid, format!("cannot {cmd} in current state"))
    }

    /// `E_INVALID cannot <NAME> in current state (TLS required)`, raw name as received.
    pub fn tls_required(raw_name: &[u8]) -> Self {
        NsqError::from_raw(
            ErrorCode::Invalid,
            concat(b"cannot ", raw_name, b" in current state (TLS required)"),
        )
    }

    /// `E_INVALID cannot SUB with heartbeats disabled`.
    pub fn sub_heartbeats_disabled() -> Self {
        NsqError::new(ErrorCode::Invalid, "cannot SUB with heartbeats disabled")
    }

    /// `E_INVALID AUTH already set`.
    pub fn auth_already_set() -> Self {
        NsqError::new(ErrorCode::Invalid, "AUTH already set")
    }

    /// `E_AUTH_DISABLED AUTH disabled`.
    pub fn auth_disabled() -> Self {
        NsqError::new(ErrorCode::AuthDisabled, "AUTH disabled")
    }

    /// `E_AUTH_FAILED AUTH failed`.
    pub fn auth_failed() -> Self {
        NsqError::new(ErrorCode::AuthFailed, "AUTH failed")
    }

    /// `E_UNAUTHORIZED AUTH no authorizations found`.
    pub fn auth_no_authorizations() -> Self {
        NsqError::new(ErrorCode::Unauthorized, "AUTH no authorizations found")
    }

    /// `E_AUTH_ERROR AUTH error <error>`.
    pub fn auth_error(error: &str) -> Self {
        NsqError::new(ErrorCode::AuthError, format!("AUTH error {error}"))
    }

    /// `E_AUTH_FIRST AUTH required before <CMD>`.
    pub fn auth_first(cmd: &str) -> Self {
        NsqError::new(ErrorCode::AuthFirst, format!("AUTH required before {cmd}"))
    }

    /// `E_UNAUTHORIZED AUTH failed for <CMD> on "<topic>" "<channel>"` (both `%q`-quoted;
    /// channel is `""` for publish commands).
    pub fn unauthorized(cmd: &str, topic: &str, channel: &str) -> Self {
        NsqError::new(
            ErrorCode::Unauthorized,
            format!(
                "AUTH failed for {cmd} on {} {}",
                go_quote(topic.as_bytes()),
                go_quote(channel.as_bytes())
            ),
        )
    }

    /// `E_IDENTIFY_FAILED cannot enable both deflate and snappy compression`.
    pub fn identify_both_compressions() -> Self {
        NsqError::new(
            ErrorCode::IdentifyFailed,
            "cannot enable both deflate and snappy compression",
        )
    }

    /// `E_IDENTIFY_FAILED IDENTIFY failed <error>` (upgrade failure).
    pub fn identify_failed(error: &str) -> Self {
        NsqError::new(
            ErrorCode::IdentifyFailed,
            format!("IDENTIFY failed {error}"),
        )
    }

    /// `E_SUB_FAILED SUB failed consumers for <t>:<c> exceeds limit of <n>`.
    pub fn sub_consumer_limit(topic: &str, channel: &str, limit: i64) -> Self {
        NsqError::new(
            ErrorCode::SubFailed,
            format!("SUB failed consumers for {topic}:{channel} exceeds limit of {limit}"),
        )
    }

    /// `E_SUB_FAILED SUB failed exiting`.
    pub fn sub_failed_exiting() -> Self {
        NsqError::new(ErrorCode::SubFailed, "SUB failed exiting")
    }

    /// `E_SUB_FAILED SUB failed to deleted topic/channel` (sic).
    pub fn sub_failed_deleted() -> Self {
        NsqError::new(ErrorCode::SubFailed, "SUB failed to deleted topic/channel")
    }

    /// `E_PUB_FAILED PUB failed <error>`.
    pub fn pub_failed(error: &str) -> Self {
        NsqError::new(ErrorCode::PubFailed, format!("PUB failed {error}"))
    }

    /// `E_MPUB_FAILED MPUB failed <error>`.
    pub fn mpub_failed(error: &str) -> Self {
        NsqError::new(ErrorCode::MpubFailed, format!("MPUB failed {error}"))
    }

    /// `E_DPUB_FAILED DPUB failed <error>`.
    pub fn dpub_failed(error: &str) -> Self {
        NsqError::new(ErrorCode::DpubFailed, format!("DPUB failed {error}"))
    }

    /// `E_FIN_FAILED FIN <id> failed <reason>` (non-fatal), e.g. reason `ID not in flight`.
    pub fn fin_failed(id: &MessageId, reason: &str) -> Self {
        in_flight_failed(ErrorCode::FinFailed, b"FIN ", id, reason)
    }

    /// `E_REQ_FAILED REQ <id> failed <reason>` (non-fatal).
    pub fn req_failed(id: &MessageId, reason: &str) -> Self {
        in_flight_failed(ErrorCode::ReqFailed, b"REQ ", id, reason)
    }

    /// `E_TOUCH_FAILED TOUCH <id> failed <reason>` (non-fatal).
    pub fn touch_failed(id: &MessageId, reason: &str) -> Self {
        in_flight_failed(ErrorCode::TouchFailed, b"TOUCH ", id, reason)
    }
}

/// Reason text for FIN/REQ/TOUCH of a message that is not in flight.
pub const REASON_NOT_IN_FLIGHT: &str = "ID not in flight";
/// Reason text for FIN/REQ/TOUCH of a message in flight to another connection.
pub const REASON_NOT_OWNER: &str = "client does not own message";

fn in_flight_failed(code: ErrorCode, cmd: &[u8], id: &MessageId, reason: &str) -> NsqError {
    let mut tail = Vec::with_capacity(8 + reason.len());
    tail.extend_from_slice(b" failed ");
    tail.extend_from_slice(reason.as_bytes());
    NsqError::from_raw(code, concat(cmd, id.as_bytes(), &tail))
}

fn concat(a: &[u8], b: &[u8], c: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len() + c.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v.extend_from_slice(c);
    v
}

impl fmt::Display for NsqError {
    /// The error frame data (lossy only if raw client bytes were not UTF-8).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code == ErrorCode::BadProtocol {
            f.write_str(self.code.as_str())
        } else {
            write!(f, "{} {}", self.code.as_str(), self.desc)
        }
    }
}

impl std::error::Error for NsqError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_frame_data() {
        let e = NsqError::new(ErrorCode::Invalid, "cannot RDY in current state");
        assert_eq!(e.to_string(), "E_INVALID cannot RDY in current state");
        assert_eq!(e.to_frame_data(), b"E_INVALID cannot RDY in current state");
        assert!(e.fatal());
        assert_eq!(NsqError::bad_protocol().to_frame_data(), b"E_BAD_PROTOCOL");
        assert_eq!(NsqError::bad_protocol().to_string(), "E_BAD_PROTOCOL");
    }

    #[test]
    fn fatality() {
        for c in [
            ErrorCode::FinFailed,
            ErrorCode::ReqFailed,
            ErrorCode::TouchFailed,
        ] {
            assert!(!c.is_fatal());
        }
        for c in [
            ErrorCode::Invalid,
            ErrorCode::BadBody,
            ErrorCode::AuthError,
            ErrorCode::BadProtocol,
        ] {
            assert!(c.is_fatal());
        }
    }

    #[test]
    fn raw_bytes_are_exact() {
        let e = NsqError::invalid_command(b"F\xffO");
        assert_eq!(e.to_frame_data(), b"E_INVALID invalid command F\xffO");
        assert_eq!(e.to_string(), "E_INVALID invalid command F\u{fffd}O");
        let e = NsqError::tls_required(b"NOP");
        assert_eq!(
            e.to_frame_data(),
            b"E_INVALID cannot NOP in current state (TLS required)"
        );
    }

    #[test]
    fn state_dependent_texts() {
        let id = MessageId(*b"18acd669e6269000");
        let cases: Vec<(NsqError, &[u8])> = vec![
            (
                NsqError::cannot_in_current_state("IDENTIFY"),
                b"E_INVALID cannot IDENTIFY in current state",
            ),
            (
                NsqError::cannot_in_current_state("CLS"),
                b"E_INVALID cannot CLS in current state",
            ),
            (
                NsqError::sub_heartbeats_disabled(),
                b"E_INVALID cannot SUB with heartbeats disabled",
            ),
            (NsqError::auth_already_set(), b"E_INVALID AUTH already set"),
            (NsqError::auth_disabled(), b"E_AUTH_DISABLED AUTH disabled"),
            (NsqError::auth_failed(), b"E_AUTH_FAILED AUTH failed"),
            (
                NsqError::auth_no_authorizations(),
                b"E_UNAUTHORIZED AUTH no authorizations found",
            ),
            (
                NsqError::auth_error("boom"),
                b"E_AUTH_ERROR AUTH error boom",
            ),
            (
                NsqError::auth_first("PUB"),
                b"E_AUTH_FIRST AUTH required before PUB",
            ),
            (
                NsqError::unauthorized("PUB", "other", ""),
                b"E_UNAUTHORIZED AUTH failed for PUB on \"other\" \"\"",
            ),
            (
                NsqError::unauthorized("SUB", "t", "ch"),
                b"E_UNAUTHORIZED AUTH failed for SUB on \"t\" \"ch\"",
            ),
            (
                NsqError::identify_both_compressions(),
                b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
            ),
            (
                NsqError::identify_failed("EOF"),
                b"E_IDENTIFY_FAILED IDENTIFY failed EOF",
            ),
            (
                NsqError::sub_consumer_limit("t", "c", 2),
                b"E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 2",
            ),
            (
                NsqError::sub_failed_exiting(),
                b"E_SUB_FAILED SUB failed exiting",
            ),
            (
                NsqError::sub_failed_deleted(),
                b"E_SUB_FAILED SUB failed to deleted topic/channel",
            ),
            (
                NsqError::pub_failed("exiting"),
                b"E_PUB_FAILED PUB failed exiting",
            ),
            (
                NsqError::mpub_failed("exiting"),
                b"E_MPUB_FAILED MPUB failed exiting",
            ),
            (
                NsqError::dpub_failed("exiting"),
                b"E_DPUB_FAILED DPUB failed exiting",
            ),
            (
                NsqError::fin_failed(&id, REASON_NOT_IN_FLIGHT),
                b"E_FIN_FAILED FIN 18acd669e6269000 failed ID not in flight",
            ),
            (
                NsqError::req_failed(&id, REASON_NOT_OWNER),
                b"E_REQ_FAILED REQ 18acd669e6269000 failed client does not own message",
            ),
            (
                NsqError::req_failed(&id, "exiting"),
                b"E_REQ_FAILED REQ 18acd669e6269000 failed exiting",
            ),
            (
                NsqError::req_failed(&id, "ID already deferred"),
                b"E_REQ_FAILED REQ 18acd669e6269000 failed ID already deferred",
            ),
            (
                NsqError::touch_failed(&id, REASON_NOT_IN_FLIGHT),
                b"E_TOUCH_FAILED TOUCH 18acd669e6269000 failed ID not in flight",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_frame_data(), want, "{e}");
        }
        assert!(!NsqError::fin_failed(&id, REASON_NOT_OWNER).fatal());
    }
}
