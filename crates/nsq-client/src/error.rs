//! The client's error type. A server error frame becomes [`Error::Server`], which keeps the
//! NSQ code (`E_BAD_TOPIC`, `E_PUB_FAILED`, …) as nsq-protocol's [`ErrorCode`] and the text.

use std::io;

use nsq_protocol::ErrorCode;

/// Every code an error frame can carry, for matching the text's first word.
const CODES: &[ErrorCode] = &[
    ErrorCode::Invalid,
    ErrorCode::BadBody,
    ErrorCode::BadTopic,
    ErrorCode::BadChannel,
    ErrorCode::BadMessage,
    ErrorCode::PubFailed,
    ErrorCode::MpubFailed,
    ErrorCode::DpubFailed,
    ErrorCode::FinFailed,
    ErrorCode::ReqFailed,
    ErrorCode::TouchFailed,
    ErrorCode::SubFailed,
    ErrorCode::IdentifyFailed,
    ErrorCode::AuthDisabled,
    ErrorCode::AuthFailed,
    ErrorCode::AuthFirst,
    ErrorCode::Unauthorized,
    ErrorCode::AuthError,
    ErrorCode::BadProtocol,
];

/// An error frame from nsqd: `<CODE> <description>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The code, when it is one nsqd sends.
    pub code: Option<ErrorCode>,
    /// The whole frame text, e.g. `E_BAD_TOPIC PUB topic name "a b" is not valid`.
    pub text: String,
}

impl ServerError {
    /// Parses an error frame's data.
    pub fn from_frame(data: &[u8]) -> Self {
        let text = String::from_utf8_lossy(data).into_owned();
        let first = text.split(' ').next().unwrap_or("");
        let code = CODES.iter().copied().find(|c| c.as_str() == first);
        ServerError { code, text }
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a client operation failed. Display texts follow go-nsq's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// nsqd answered with an error frame (`ErrProtocol` in go-nsq).
    #[error("{0}")]
    Server(ServerError),
    /// Reading or writing the connection failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Dialing nsqd failed; displayed as Go's `*net.OpError` (go-nsq's dial error), e.g.
    /// `dial tcp 127.0.0.1:4150: connect: connection refused`.
    #[error("{}", dial_text(.addr, .source))]
    Dial {
        /// The address dialed: the resolved `ip:port` when resolution succeeded, as Go names
        /// it, else the text given.
        addr: String,
        #[source]
        source: io::Error,
    },
    /// The connection closed before the answer arrived.
    #[error("not connected")]
    NotConnected,
    /// IDENTIFY failed (go-nsq's `ErrIdentify`).
    #[error("failed to IDENTIFY - {0}")]
    Identify(String),
    /// nsqd requires AUTH and no secret is configured.
    #[error("Auth Required")]
    AuthRequired,
    /// AUTH was refused.
    #[error("Error authenticating {0}")]
    Auth(String),
    /// The TLS configuration or handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// Something nsqd sent is not valid protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The producer or consumer was stopped.
    #[error("stopped")]
    Stopped,
    /// A topic or channel name is not valid.
    #[error("invalid {kind} name {name:?}")]
    InvalidName { kind: &'static str, name: String },
    /// An invalid configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A lookupd query failed.
    #[error("lookupd {addr}: {reason}")]
    Lookupd { addr: String, reason: String },
    /// `DPUB` with a delay that does not fit the protocol.
    #[error("invalid defer {0:?}")]
    InvalidDelay(std::time::Duration),
}

/// Go's text for a failed dial of `addr` (net/net.go, `OpError.Error`; the syscall texts of
/// its `*os.SyscallError`): `dial tcp <addr>: connect: connection refused`,
/// `dial tcp <addr>: i/o timeout`, `dial tcp: lookup <host>: no such host`,
/// `dial tcp: address <addr>: missing port in address`.
fn dial_text(addr: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("dial tcp {addr}: connect: connection refused"),
        io::ErrorKind::TimedOut => format!("dial tcp {addr}: i/o timeout"),
        io::ErrorKind::InvalidInput if !addr.contains(':') => {
            format!("dial tcp: address {addr}: missing port in address")
        }
        _ if e.raw_os_error().is_none() && e.to_string().contains("lookup") => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            format!("dial tcp: lookup {host}: no such host")
        }
        _ => {
            // Rust's `Network is unreachable (os error 101)` → Go's `network is unreachable`.
            let t = e.to_string();
            let t = t.split(" (os error").next().unwrap_or(&t);
            let mut c = t.chars();
            let t = match c.next() {
                Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
                None => String::new(),
            };
            format!("dial tcp {addr}: connect: {t}")
        }
    }
}

impl Error {
    /// The NSQ error code, for an error frame from nsqd.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server(e) => e.code,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dial_errors_display_gos_text() {
        let e = |kind: io::ErrorKind, addr: &str| Error::Dial {
            addr: addr.to_string(),
            source: io::Error::from(kind),
        };
        assert_eq!(
            e(io::ErrorKind::ConnectionRefused, "127.0.0.1:4150").to_string(),
            "dial tcp 127.0.0.1:4150: connect: connection refused"
        );
        assert_eq!(
            e(io::ErrorKind::TimedOut, "10.0.0.1:4150").to_string(),
            "dial tcp 10.0.0.1:4150: i/o timeout"
        );
        assert_eq!(
            e(io::ErrorKind::InvalidInput, "nohost").to_string(),
            "dial tcp: address nohost: missing port in address"
        );
        let unreachable = Error::Dial {
            addr: "10.0.0.1:4150".to_string(),
            source: io::Error::from_raw_os_error(101),
        };
        assert_eq!(
            unreachable.to_string(),
            "dial tcp 10.0.0.1:4150: connect: network is unreachable"
        );
    }

    #[test]
    fn error_frame_code() {
        let e = ServerError::from_frame(b"E_BAD_TOPIC PUB topic name \"a b\" is not valid");
        assert_eq!(e.code, Some(ErrorCode::BadTopic));
        assert_eq!(Error::Server(e).code(), Some(ErrorCode::BadTopic));
        assert_eq!(
            ServerError::from_frame(b"E_BAD_PROTOCOL").code,
            Some(ErrorCode::BadProtocol)
        );
        assert_eq!(ServerError::from_frame(b"E_NEW thing").code, None);
    }
}
