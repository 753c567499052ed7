//! The nsqlookupd TCP "V1" protocol (nsqlookupd/lookup_protocol_v1.go; nsqd/lookup_peer.go), both sides, sans-I/O.
//!
//! Client → server: after the magic `"  V1"`, lines `NAME[ PARAM ...]\n`; only `IDENTIFY` has
//! a body (`[4-byte signed size][JSON]`). Server → client: `[4-byte size][data]` with no frame
//! type, `OK`, a JSON document or an error text. Every error is fatal.
//!
//! [`LookupDecoder`] is the server side (same incremental style as
//! [`crate::command::Decoder`]); the only state-dependent checks ("cannot IDENTIFY again",
//! "client must IDENTIFY") go in its gate hook, which runs before parameter validation just
//! like the reference's. [`encode_lookup_command`] and [`take_lookup_response`] are the nsqd
//! side.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::command::DecodeError;
use crate::error::{ErrorCode, NsqError};
use crate::identify::{decode_go_object, GoType, GoValue};
use crate::names::{is_valid_channel_name, is_valid_topic_name};

/// A decoded nsqlookupd command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupCommand {
    Ping,
    /// Body: the nsqd's JSON peer info, see [`parse_peer_info`].
    Identify {
        body: Bytes,
    },
    /// `channel` is `None` when absent or empty.
    Register {
        topic: String,
        channel: Option<String>,
    },
    Unregister {
        topic: String,
        channel: Option<String>,
    },
}

impl LookupCommand {
    /// Which command this is.
    pub fn kind(&self) -> LookupCommandKind {
        match self {
            LookupCommand::Ping => LookupCommandKind::Ping,
            LookupCommand::Identify { .. } => LookupCommandKind::Identify,
            LookupCommand::Register { .. } => LookupCommandKind::Register,
            LookupCommand::Unregister { .. } => LookupCommandKind::Unregister,
        }
    }
}

/// The known nsqlookupd command names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LookupCommandKind {
    Ping,
    Identify,
    Register,
    Unregister,
}

/// The server's checks of a command against the connection's state, made before any of its
/// parameters are (nsqlookupd/lookup_protocol_v1.go, `IDENTIFY`, `REGISTER`, `UNREGISTER`):
/// a second IDENTIFY, and REGISTER/UNREGISTER before IDENTIFY, are `E_INVALID`.
pub fn gate(identified: bool, kind: Option<LookupCommandKind>) -> Result<(), NsqError> {
    match kind {
        Some(LookupCommandKind::Identify) if identified => {
            Err(NsqError::new(ErrorCode::Invalid, "cannot IDENTIFY again"))
        }
        Some(LookupCommandKind::Register | LookupCommandKind::Unregister) if !identified => {
            Err(NsqError::new(ErrorCode::Invalid, "client must IDENTIFY"))
        }
        _ => Ok(()),
    }
}

impl LookupCommandKind {
    /// The name as sent on the wire.
    pub fn name(self) -> &'static str {
        match self {
            LookupCommandKind::Ping => "PING",
            LookupCommandKind::Identify => "IDENTIFY",
            LookupCommandKind::Register => "REGISTER",
            LookupCommandKind::Unregister => "UNREGISTER",
        }
    }

    /// Case-sensitive lookup of a raw command name.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"PING" => LookupCommandKind::Ping,
            b"IDENTIFY" => LookupCommandKind::Identify,
            b"REGISTER" => LookupCommandKind::Register,
            b"UNREGISTER" => LookupCommandKind::Unregister,
            _ => return None,
        })
    }
}

impl fmt::Display for LookupCommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bounds the reference does not have but a server needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupLimits {
    /// A line without `\n` within this many bytes ends the connection
    /// ([`DecodeError::LineTooLong`]); the reference reads lines of any length.
    pub max_line_len: usize,
    /// IDENTIFY bodies above this (or negative) get `E_BAD_BODY IDENTIFY failed to read body
    /// size` (the reference allocates whatever is asked, or panics on a negative size).
    pub max_body_size: i64,
}

impl Default for LookupLimits {
    fn default() -> Self {
        LookupLimits {
            max_line_len: 16384,
            max_body_size: 5_242_880,
        }
    }
}

/// The gate hook of [`LookupDecoder::decode`], as a trait object.
type LookupGate<'a> = dyn FnMut(&[u8], Option<LookupCommandKind>) -> Result<(), NsqError> + 'a;

/// Incremental server-side decoder for one nsqlookupd connection (after the magic).
#[derive(Debug)]
pub struct LookupDecoder {
    limits: LookupLimits,
    /// Bytes of the incomplete line at the front of the buffer already searched for `\n`.
    line_scanned: usize,
    /// An IDENTIFY line was accepted; its body is incomplete.
    in_identify_body: bool,
}

impl LookupDecoder {
    /// A decoder with the given bounds.
    pub fn new(limits: LookupLimits) -> Self {
        LookupDecoder {
            limits,
            line_scanned: 0,
            in_identify_body: false,
        }
    }

    /// Takes one whole command off the front of `buf`; `Ok(None)` = need more bytes.
    ///
    /// `gate(raw_name, kind)` runs exactly once per command line, right after it is split and
    /// before any parameter check or body read; its `Err` is returned as
    /// [`DecodeError::Fatal`]. The server uses it for `E_INVALID cannot IDENTIFY again` and
    /// `E_INVALID client must IDENTIFY` (REGISTER/UNREGISTER before IDENTIFY).
    pub fn decode<G>(
        &mut self,
        buf: &mut BytesMut,
        mut gate: G,
    ) -> Result<Option<LookupCommand>, DecodeError>
    where
        G: FnMut(&[u8], Option<LookupCommandKind>) -> Result<(), NsqError>,
    {
        let result = self.decode_inner(buf, &mut gate);
        if result.is_err() {
            self.in_identify_body = false;
            self.line_scanned = 0;
        }
        result
    }

    fn decode_inner(
        &mut self,
        buf: &mut BytesMut,
        gate: &mut LookupGate<'_>,
    ) -> Result<Option<LookupCommand>, DecodeError> {
        if self.in_identify_body {
            let body = self.identify_body(buf)?;
            if body.is_some() {
                self.in_identify_body = false;
            }
            return Ok(body.map(|body| LookupCommand::Identify { body }));
        }

        let max = self.limits.max_line_len;
        let window = buf.len().min(max);
        let from = self.line_scanned.min(window);
        let line_len = match buf[from..window].iter().position(|&b| b == b'\n') {
            Some(i) => from + i + 1,
            None if buf.len() >= max => return Err(DecodeError::LineTooLong),
            None => {
                self.line_scanned = window;
                return Ok(None);
            }
        };
        self.line_scanned = 0;

        let line = go_trim_space(&buf[..line_len]);
        let mut tokens: [&[u8]; 3] = [&[]; 3];
        let mut count = 0;
        for t in line.split(|&b| b == b' ') {
            if count < tokens.len() {
                tokens[count] = t;
            }
            count += 1;
        }
        let kind = LookupCommandKind::from_name(tokens[0]);
        gate(tokens[0], kind)?;
        let cmd = match kind {
            None => return Err(NsqError::invalid_command(tokens[0]).into()),
            Some(LookupCommandKind::Ping) => LookupCommand::Ping,
            Some(LookupCommandKind::Identify) => {
                buf.advance(line_len);
                self.in_identify_body = true;
                return self.decode_inner(buf, gate);
            }
            Some(k @ (LookupCommandKind::Register | LookupCommandKind::Unregister)) => {
                let (topic, channel) = topic_channel(k.name(), &tokens[..count.min(3)])?;
                if k == LookupCommandKind::Register {
                    LookupCommand::Register { topic, channel }
                } else {
                    LookupCommand::Unregister { topic, channel }
                }
            }
        };
        buf.advance(line_len);
        Ok(Some(cmd))
    }

    fn identify_body(&self, buf: &mut BytesMut) -> Result<Option<Bytes>, NsqError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if size < 0 || i64::from(size) > self.limits.max_body_size {
            return Err(NsqError::new(
                ErrorCode::BadBody,
                "IDENTIFY failed to read body size",
            ));
        }
        let size = size as usize;
        if buf.len() < 4 + size {
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(size).freeze()))
    }

    /// At EOF with `buf` holding the unconsumed bytes after the last `Ok(None)`: the error the
    /// reference sends when the socket closes inside an IDENTIFY body (`None` otherwise).
    pub fn incomplete_read_error(&self, buf: &[u8]) -> Option<NsqError> {
        if !self.in_identify_body {
            return None;
        }
        let desc = if buf.len() < 4 {
            "IDENTIFY failed to read body size"
        } else {
            "IDENTIFY failed to read body"
        };
        Some(NsqError::new(ErrorCode::BadBody, desc))
    }
}

fn topic_channel(cmd: &str, params: &[&[u8]]) -> Result<(String, Option<String>), NsqError> {
    if params.len() <= 1 {
        return Err(NsqError::new(
            ErrorCode::Invalid,
            format!("{cmd} insufficient number of params"),
        ));
    }
    let topic = params[1];
    let channel = params.get(2).copied().unwrap_or_default();
    if !is_valid_topic_name(topic) {
        return Err(quoted_single(ErrorCode::BadTopic, cmd, "topic", topic));
    }
    if !channel.is_empty() && !is_valid_channel_name(channel) {
        return Err(quoted_single(
            ErrorCode::BadChannel,
            cmd,
            "channel",
            channel,
        ));
    }
    let own = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((own(topic), (!channel.is_empty()).then(|| own(channel))))
}

/// `<CMD> <what> name '<raw>' is not valid` (single quotes, raw bytes).
fn quoted_single(code: ErrorCode, cmd: &str, what: &str, raw: &[u8]) -> NsqError {
    let mut d = format!("{cmd} {what} name '").into_bytes();
    d.extend_from_slice(raw);
    d.extend_from_slice(b"' is not valid");
    NsqError::from_raw(code, d)
}

/// Go's `strings.TrimSpace`: strips leading and trailing Unicode white space (a byte that is
/// not part of valid UTF-8 stops the trimming).
fn go_trim_space(mut b: &[u8]) -> &[u8] {
    while let Some((c, n)) = first_char(b) {
        if !c.is_whitespace() {
            break;
        }
        b = &b[n..];
    }
    while let Some((c, n)) = last_char(b) {
        if !c.is_whitespace() {
            break;
        }
        b = &b[..b.len() - n];
    }
    b
}

fn first_char(b: &[u8]) -> Option<(char, usize)> {
    (1..=b.len().min(4)).find_map(|n| {
        std::str::from_utf8(&b[..n])
            .ok()
            .and_then(|s| s.chars().next())
            .map(|c| (c, n))
    })
}

fn last_char(b: &[u8]) -> Option<(char, usize)> {
    (1..=b.len().min(4)).find_map(|n| {
        std::str::from_utf8(&b[b.len() - n..])
            .ok()
            .and_then(|s| s.chars().next())
            .map(|c| (c, n))
    })
}

/// Appends the wire encoding of a command (nsqd side).
pub fn encode_lookup_command(buf: &mut BytesMut, cmd: &LookupCommand) {
    match cmd {
        LookupCommand::Ping => buf.put_slice(b"PING\n"),
        LookupCommand::Identify { body } => {
            buf.put_slice(b"IDENTIFY\n");
            buf.put_u32(body.len() as u32);
            buf.put_slice(body);
        }
        LookupCommand::Register { topic, channel } => {
            put_topic_line(buf, b"REGISTER ", topic, channel)
        }
        LookupCommand::Unregister { topic, channel } => {
            put_topic_line(buf, b"UNREGISTER ", topic, channel)
        }
    }
}

fn put_topic_line(buf: &mut BytesMut, prefix: &[u8], topic: &str, channel: &Option<String>) {
    buf.put_slice(prefix);
    buf.put_slice(topic.as_bytes());
    if let Some(c) = channel {
        buf.put_u8(b' ');
        buf.put_slice(c.as_bytes());
    }
    buf.put_u8(b'\n');
}

/// Appends one response: `[4-byte size][data]`.
pub fn put_lookup_response(buf: &mut impl BufMut, data: &[u8]) {
    buf.put_u32(data.len() as u32);
    buf.put_slice(data);
}

/// A lookupd response whose size is negative or above the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("response body size ({size}) is greater than limit ({limit})")]
pub struct ResponseTooBig {
    pub size: i32,
    pub limit: usize,
}

/// nsqd side: takes one response off the front of `buf` (`None` = need more bytes). A size
/// above `max_size` (nsqd uses its `--max-body-size`) or negative is an error.
pub fn take_lookup_response(
    buf: &mut BytesMut,
    max_size: usize,
) -> Result<Option<Bytes>, ResponseTooBig> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 || size as usize > max_size {
        return Err(ResponseTooBig {
            size,
            limit: max_size,
        });
    }
    let size = size as usize;
    if buf.len() < 4 + size {
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size).freeze()))
}

/// The peer info exchanged by IDENTIFY: the body nsqd sends and the reply nsqlookupd sends.
/// Field order is alphabetical, as the reference's reply (a Go map) has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeerInfo {
    pub broadcast_address: String,
    pub hostname: String,
    pub http_port: i64,
    /// Ours, not NSQ's: `"replication":{"group":"<16 hex>"}`, sent by an nsqd that replicates
    /// its publishes (docs/replication.md, "Membership"), so that the members of one group
    /// find each other through nsqlookupd. Absent otherwise, and never in nsqlookupd's reply.
    /// NSQ's nsqlookupd ignores it: nsqlookupd/lookup_protocol_v1.go, `IDENTIFY`, decodes
    /// the body with `json.Unmarshal` into its `PeerInfo` struct (registration_db.go), and
    /// encoding/json skips keys the struct has no field for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationInfo>,
    pub tcp_port: i64,
    pub version: String,
}

/// The `replication` object of an IDENTIFY body (see [`PeerInfo::replication`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplicationInfo {
    /// Names the replication group: a hash of its shared secret, `""` for a group without
    /// one. Membership is still proven on the link; this only keeps groups apart.
    pub group: String,
}

impl PeerInfo {
    /// Compact JSON with keys in alphabetical order.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain struct serializes")
    }

    /// Decodes with Go `encoding/json` rules (case-insensitive keys, unknown keys ignored,
    /// integers only for the ports); does not check for missing fields.
    pub fn from_json(body: &[u8]) -> Result<PeerInfo, serde_json::Error> {
        const FIELDS: &[(&str, GoType)] = &[
            ("broadcast_address", GoType::Str),
            ("hostname", GoType::Str),
            ("http_port", GoType::I64),
            ("tcp_port", GoType::I64),
            ("version", GoType::Str),
            // Known to the reference (and overwritten by it), so it must be a string.
            ("remote_address", GoType::Str),
        ];
        let mut p = PeerInfo::default();
        decode_go_object(body, FIELDS, &mut |i, v| match (i, v) {
            (0, GoValue::Str(s)) => p.broadcast_address = s,
            (1, GoValue::Str(s)) => p.hostname = s,
            (2, GoValue::Int(n)) => p.http_port = n,
            (3, GoValue::Int(n)) => p.tcp_port = n,
            (4, GoValue::Str(s)) => p.version = s,
            _ => {}
        })?;
        p.replication = replication_of(body);
        Ok(p)
    }
}

/// The `replication` object of an IDENTIFY body, when it is one with a string `group`;
/// anything else there is ignored as NSQ ignores the key (the body is valid JSON already).
fn replication_of(body: &[u8]) -> Option<ReplicationInfo> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let group = v.get("replication")?.get("group")?.as_str()?;
    Some(ReplicationInfo {
        group: group.to_string(),
    })
}

/// Server side: decodes and checks an IDENTIFY body, with the reference's error texts
/// (`E_BAD_BODY IDENTIFY failed to decode JSON body`, `E_BAD_BODY IDENTIFY missing fields`).
pub fn parse_peer_info(body: &[u8]) -> Result<PeerInfo, NsqError> {
    let p = PeerInfo::from_json(body)
        .map_err(|_| NsqError::new(ErrorCode::BadBody, "IDENTIFY failed to decode JSON body"))?;
    if p.broadcast_address.is_empty() || p.tcp_port == 0 || p.http_port == 0 || p.version.is_empty()
    {
        return Err(NsqError::new(ErrorCode::BadBody, "IDENTIFY missing fields"));
    }
    Ok(p)
}
