//! The server side of the V2 command protocol: the incremental [`Decoder`] that takes whole
//! commands off a connection's buffer and validates them in the reference's order
//! (nsqd/protocol_v2.go, Exec and the per-command functions).

use std::fmt;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};

use super::{Command, CommandKind, Limits, MAX_LINE_LEN};
use crate::error::{ErrorCode, NsqError};
use crate::message::MessageId;
use crate::names::{is_valid_channel_name, is_valid_topic_name};
use crate::quote::go_quote;

/// Why decoding stopped for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No `\n` within [`MAX_LINE_LEN`] bytes: the reference closes the connection without an
    /// error frame.
    LineTooLong,
    /// Send this error frame, then close (every decoder error is fatal).
    Fatal(NsqError),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::LineTooLong => write!(f, "command line longer than {MAX_LINE_LEN} bytes"),
            DecodeError::Fatal(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<NsqError> for DecodeError {
    fn from(e: NsqError) -> Self {
        DecodeError::Fatal(e)
    }
}

/// What the gate decided about a command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Validate and decode the command normally.
    #[default]
    Proceed,
    /// Drop the command line without validating it and go on with the next line (RDY in
    /// CLOSING state). A body, if the command has one, is *not* skipped, so only use this
    /// for commands without a body.
    Ignore,
}

/// Server-state hooks called by [`Decoder::decode_with`].
pub trait DecodeHooks {
    /// Called exactly once per command line, after splitting and before any parameter check,
    /// with the raw name and the recognised command (`None` for an unknown name). An `Err` is
    /// returned from the decoder as [`DecodeError::Fatal`].
    fn gate(&mut self, raw_name: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError>;

    /// Called once per MPUB after its topic name was validated and before its body is read
    /// (where the reference runs the auth check and creates the topic).
    fn mpub_topic(&mut self, topic: &str) -> Result<(), NsqError> {
        let _ = topic;
        Ok(())
    }
}

struct GateFn<G>(G);

impl<G> DecodeHooks for GateFn<G>
where
    G: FnMut(&[u8], Option<CommandKind>) -> Result<(), NsqError>,
{
    fn gate(&mut self, raw_name: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError> {
        (self.0)(raw_name, kind).map(|()| Verdict::Proceed)
    }
}

/// A command whose line has been consumed and accepted, waiting for (the rest of) its body.
#[derive(Debug)]
enum Pending {
    Identify,
    Auth,
    Pub { topic: String },
    Dpub { topic: String, defer_ms: i64 },
    Mpub { topic: String, scan: MpubScan },
}

/// How far the MPUB messages have been validated, so that a large MPUB arriving in many reads
/// is walked once.
#[derive(Debug, Default)]
struct MpubScan {
    /// Messages whose size and body are fully buffered and valid.
    done: u32,
    /// Offset (from the start of the body, i.e. the total-size field) of message `done`'s size.
    offset: usize,
}

/// Incremental V2 command decoder; one per connection.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    /// How many bytes of the (incomplete) line at the front of the buffer were already
    /// searched for `\n`.
    line_scanned: usize,
    pending: Option<Pending>,
}

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            line_scanned: 0,
            pending: None,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether a command line was accepted and its body is still incomplete.
    pub fn in_body(&self) -> bool {
        self.pending.is_some()
    }

    /// Takes one whole command off the front of `buf`.
    ///
    /// Returns `Ok(None)` when more bytes are needed; the decoder remembers its progress, so
    /// call again with the same buffer after appending to it. On success exactly the
    /// command's bytes have been consumed. `gate` is [`DecodeHooks::gate`] without the
    /// option to ignore a command; use [`Decoder::decode_with`] for that and for the MPUB
    /// hook.
    pub fn decode<G>(&mut self, buf: &mut BytesMut, gate: G) -> Result<Option<Command>, DecodeError>
    where
        G: FnMut(&[u8], Option<CommandKind>) -> Result<(), NsqError>,
    {
        self.decode_with(buf, &mut GateFn(gate))
    }

    /// [`Decoder::decode`] with all the hooks.
    pub fn decode_with<H: DecodeHooks + ?Sized>(
        &mut self,
        buf: &mut BytesMut,
        hooks: &mut H,
    ) -> Result<Option<Command>, DecodeError> {
        let result = self.decode_inner(buf, hooks);
        if result.is_err() {
            self.pending = None;
            self.line_scanned = 0;
        }
        result
    }

    fn decode_inner<H: DecodeHooks + ?Sized>(
        &mut self,
        buf: &mut BytesMut,
        hooks: &mut H,
    ) -> Result<Option<Command>, DecodeError> {
        loop {
            if let Some(pending) = &mut self.pending {
                let cmd = pending_body(pending, &self.limits, buf)?;
                if cmd.is_some() {
                    self.pending = None;
                }
                return Ok(cmd);
            }

            // Find the end of the line, resuming where the last call stopped.
            let window = buf.len().min(MAX_LINE_LEN);
            let from = self.line_scanned.min(window);
            let line_len = match buf[from..window].iter().position(|&b| b == b'\n') {
                Some(i) => from + i + 1,
                None if buf.len() >= MAX_LINE_LEN => return Err(DecodeError::LineTooLong),
                None => {
                    self.line_scanned = window;
                    return Ok(None);
                }
            };
            self.line_scanned = 0;

            let mut line = &buf[..line_len - 1];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            let params = Params::split(line);
            let kind = CommandKind::from_name(params.get(0));
            if hooks.gate(params.get(0), kind)? == Verdict::Ignore {
                buf.advance(line_len);
                continue;
            }
            let Some(kind) = kind else {
                return Err(NsqError::invalid_command(params.get(0)).into());
            };
            let step = parse_line(kind, &params, &self.limits)?;
            buf.advance(line_len);
            match step {
                Step::Done(cmd) => return Ok(Some(cmd)),
                Step::Body(pending) => {
                    if let Pending::Mpub { topic, .. } = &pending {
                        hooks.mpub_topic(topic)?;
                    }
                    self.pending = Some(pending);
                }
            }
        }
    }

    /// Takes the run of plain FINs (`FIN <16-byte ID>\n`, most of what a consumer sends) at
    /// the front of `buf`, handing each ID to `on_fin`: what as many [`Decoder::decode_with`]
    /// calls returning [`Command::Fin`] would do (the same gate call per line, the same bytes
    /// consumed, the same error if the gate refuses) without building a [`Command`] and
    /// splitting the line for each. It stops at the first line of any other shape — another
    /// command, a FIN ended by `\r\n` or with more parameters, an incomplete line, a body
    /// being read — which `decode_with` then takes. Returns how many FINs it took.
    pub fn take_fins<H: DecodeHooks + ?Sized>(
        &mut self,
        buf: &mut BytesMut,
        hooks: &mut H,
        on_fin: &mut impl FnMut(MessageId),
    ) -> Result<usize, DecodeError> {
        /// `FIN `, the 16 ID bytes, `\n`.
        const LEN: usize = 21;
        if self.pending.is_some() {
            return Ok(0);
        }
        let mut taken = 0;
        while let Some(line) = buf.get(..LEN) {
            let id = &line[4..LEN - 1];
            // The line `decode_with` would split into exactly `FIN` and a 16-byte ID.
            if &line[..4] != b"FIN "
                || line[LEN - 1] != b'\n'
                || id.iter().any(|&b| matches!(b, b' ' | b'\n' | b'\r'))
            {
                break;
            }
            self.line_scanned = 0;
            let verdict = hooks.gate(b"FIN", Some(CommandKind::Fin))?;
            let id = MessageId::from_slice(id).expect("16 bytes");
            buf.advance(LEN);
            if verdict == Verdict::Proceed {
                on_fin(id);
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// At EOF with `buf` holding the unconsumed bytes after the last `Ok(None)`: the error the
    /// reference sends when the socket closes in the middle of a command body (`None` when it
    /// closes silently: between commands or inside a command line).
    pub fn incomplete_read_error(&self, buf: &[u8]) -> Option<NsqError> {
        let bad_body = |d: &str| Some(NsqError::new(ErrorCode::BadBody, d));
        let bad_msg = |d: &str| Some(NsqError::new(ErrorCode::BadMessage, d));
        let have_size = buf.len() >= 4;
        match self.pending.as_ref()? {
            Pending::Identify if !have_size => bad_body("IDENTIFY failed to read body size"),
            Pending::Identify => bad_body("IDENTIFY failed to read body"),
            Pending::Auth if !have_size => bad_body("AUTH failed to read body size"),
            Pending::Auth => bad_body("AUTH failed to read body"),
            Pending::Pub { .. } if !have_size => bad_msg("PUB failed to read message body size"),
            Pending::Pub { .. } => bad_msg("PUB failed to read message body"),
            Pending::Dpub { .. } if !have_size => bad_msg("DPUB failed to read message body size"),
            Pending::Dpub { .. } => bad_msg("DPUB failed to read message body"),
            Pending::Mpub { .. } if !have_size => bad_body("MPUB failed to read body size"),
            Pending::Mpub { .. } if buf.len() < 8 => bad_body("MPUB failed to read message count"),
            Pending::Mpub { scan, .. } => {
                let offset = scan.offset.max(8);
                if buf.len() < offset + 4 {
                    bad_msg(&format!(
                        "MPUB failed to read message({}) body size",
                        scan.done
                    ))
                } else {
                    bad_msg("MPUB failed to read message body")
                }
            }
        }
    }
}

/// The first few space-separated tokens of a line and the total token count, without
/// allocating. Commands use at most three tokens; more are counted and ignored.
struct Params<'a> {
    tokens: [&'a [u8]; 3],
    count: usize,
}

impl<'a> Params<'a> {
    fn split(line: &'a [u8]) -> Self {
        let mut tokens: [&[u8]; 3] = [&[]; 3];
        let mut count = 0;
        for t in line.split(|&b| b == b' ') {
            if count < tokens.len() {
                tokens[count] = t;
            }
            count += 1;
        }
        Params { tokens, count }
    }

    fn get(&self, i: usize) -> &'a [u8] {
        self.tokens[i]
    }
}

enum Step {
    Done(Command),
    Body(Pending),
}

fn invalid(desc: impl Into<String>) -> NsqError {
    NsqError::new(ErrorCode::Invalid, desc)
}

fn invalid_raw(prefix: &str, raw: &[u8]) -> NsqError {
    let mut d = Vec::with_capacity(prefix.len() + raw.len());
    d.extend_from_slice(prefix.as_bytes());
    d.extend_from_slice(raw);
    NsqError::from_raw(ErrorCode::Invalid, d)
}

fn topic_param(raw: &[u8], code_prefix: &str, cmd: &str) -> Result<String, NsqError> {
    if is_valid_topic_name(raw) {
        // Valid names are ASCII.
        Ok(String::from_utf8_lossy(raw).into_owned())
    } else {
        Err(NsqError::new(
            ErrorCode::BadTopic,
            format!(
                "{code_prefix}{cmd} topic name {} is not valid",
                go_quote(raw)
            ),
        ))
    }
}

fn message_id(raw: &[u8]) -> Result<MessageId, NsqError> {
    MessageId::from_slice(raw).ok_or_else(|| invalid("invalid message ID"))
}

/// The reference's digits-only parser (internal/protocol/byte_base10.go, ByteToBase10):
/// empty is 0, overflow wraps modulo 2^64.
pub fn parse_base10(raw: &[u8]) -> Option<u64> {
    raw.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.wrapping_mul(10).wrapping_add(u64::from(d - b'0')))
    })
}

/// Go's `time.Duration(ms) * time.Millisecond` in nanoseconds, wrapping like Go does.
fn go_ms_to_ns(ms: i64) -> i64 {
    ms.wrapping_mul(1_000_000)
}

/// The requeue delay the reference applies to `REQ <id> <timeout_ms>`: negative (only via
/// overflow) becomes 0, above `max_req_timeout_ms` becomes the maximum; never an error.
pub fn clamp_req_timeout(timeout_ms: i64, max_req_timeout_ms: i64) -> Duration {
    let ns = go_ms_to_ns(timeout_ms);
    let max = max_req_timeout_ms.saturating_mul(1_000_000);
    Duration::from_nanos(ns.clamp(0, max.max(0)) as u64)
}

fn parse_line(kind: CommandKind, p: &Params<'_>, limits: &Limits) -> Result<Step, NsqError> {
    use CommandKind as K;
    let done = |c| Ok(Step::Done(c));
    match kind {
        K::Identify => Ok(Step::Body(Pending::Identify)),
        K::Auth => {
            if p.count != 1 {
                return Err(invalid("AUTH invalid number of parameters"));
            }
            Ok(Step::Body(Pending::Auth))
        }
        K::Sub => {
            if p.count < 3 {
                return Err(invalid("SUB insufficient number of parameters"));
            }
            let topic = topic_param(p.get(1), "", "SUB")?;
            let raw = p.get(2);
            if !is_valid_channel_name(raw) {
                return Err(NsqError::new(
                    ErrorCode::BadChannel,
                    format!("SUB channel name {} is not valid", go_quote(raw)),
                ));
            }
            let channel = String::from_utf8_lossy(raw).into_owned();
            done(Command::Sub { topic, channel })
        }
        K::Pub => {
            if p.count < 2 {
                return Err(invalid("PUB insufficient number of parameters"));
            }
            let topic = topic_param(p.get(1), "", "PUB")?;
            Ok(Step::Body(Pending::Pub { topic }))
        }
        K::Mpub => {
            if p.count < 2 {
                return Err(invalid("MPUB insufficient number of parameters"));
            }
            let topic = topic_param(p.get(1), "E_BAD_TOPIC ", "MPUB")?;
            Ok(Step::Body(Pending::Mpub {
                topic,
                scan: MpubScan::default(),
            }))
        }
        K::Dpub => {
            if p.count < 3 {
                return Err(invalid("DPUB insufficient number of parameters"));
            }
            let topic = topic_param(p.get(1), "", "DPUB")?;
            let raw = p.get(2);
            let ms = parse_base10(raw)
                .ok_or_else(|| invalid_raw("DPUB could not parse timeout ", raw))?;
            let ns = go_ms_to_ns(ms as i64);
            if ns < 0 || ns > limits.max_req_timeout_ms.saturating_mul(1_000_000) {
                // The reference prints the parsed value unsigned.
                return Err(invalid(format!(
                    "DPUB timeout {ms} out of range 0-{}",
                    limits.max_req_timeout_ms
                )));
            }
            Ok(Step::Body(Pending::Dpub {
                topic,
                defer_ms: ms as i64,
            }))
        }
        K::Rdy => {
            let count = if p.count > 1 {
                let raw = p.get(1);
                parse_base10(raw).ok_or_else(|| invalid_raw("RDY could not parse count ", raw))?
                    as i64
            } else {
                1
            };
            if count < 0 || count > limits.max_rdy_count {
                return Err(invalid(format!(
                    "RDY count {count} out of range 0-{}",
                    limits.max_rdy_count
                )));
            }
            done(Command::Rdy { count })
        }
        K::Fin | K::Touch => {
            if p.count < 2 {
                return Err(invalid(format!(
                    "{} insufficient number of params",
                    kind.name()
                )));
            }
            let id = message_id(p.get(1))?;
            done(if kind == K::Fin {
                Command::Fin { id }
            } else {
                Command::Touch { id }
            })
        }
        K::Req => {
            if p.count < 3 {
                return Err(invalid("REQ insufficient number of params"));
            }
            let id = message_id(p.get(1))?;
            let raw = p.get(2);
            let timeout_ms = parse_base10(raw)
                .ok_or_else(|| invalid_raw("REQ could not parse timeout ", raw))?
                as i64;
            done(Command::Req { id, timeout_ms })
        }
        K::Cls => done(Command::Cls),
        K::Nop => done(Command::Nop),
    }
}

fn read_i32(buf: &[u8], at: usize) -> Option<i32> {
    buf.get(at..at + 4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// IDENTIFY/AUTH body: too big is checked before non-positive.
fn body_checks(cmd: &str, size: i32, limits: &Limits) -> Result<(), NsqError> {
    let bad = |d: String| Err(NsqError::new(ErrorCode::BadBody, d));
    if i64::from(size) > limits.max_body_size {
        return bad(format!(
            "{cmd} body too big {size} > {}",
            limits.max_body_size
        ));
    }
    if size <= 0 {
        return bad(format!("{cmd} invalid body size {size}"));
    }
    Ok(())
}

/// PUB/DPUB message: non-positive is checked before too big.
fn message_checks(cmd: &str, size: i32, limits: &Limits) -> Result<(), NsqError> {
    let bad = |d: String| Err(NsqError::new(ErrorCode::BadMessage, d));
    if size <= 0 {
        return bad(format!("{cmd} invalid message body size {size}"));
    }
    if i64::from(size) > limits.max_msg_size {
        return bad(format!(
            "{cmd} message too big {size} > {}",
            limits.max_msg_size
        ));
    }
    Ok(())
}

/// `[size][body]`: validates the size as soon as it is buffered, takes the body when whole.
///
/// Bodies are copied out of the read buffer into allocations of their own (one per command):
/// a queued message then pins only its own bytes, not a whole read buffer, and the read buffer
/// stays uniquely owned, so the connection reuses it instead of allocating a new one.
fn sized_body(
    buf: &mut BytesMut,
    check: impl FnOnce(i32) -> Result<(), NsqError>,
) -> Result<Option<Bytes>, NsqError> {
    let Some(size) = read_i32(buf, 0) else {
        return Ok(None);
    };
    check(size)?;
    let size = size as usize;
    if buf.len() < 4 + size {
        return Ok(None);
    }
    let body = Bytes::copy_from_slice(&buf[4..4 + size]);
    buf.advance(4 + size);
    Ok(Some(body))
}

fn pending_body(
    pending: &mut Pending,
    limits: &Limits,
    buf: &mut BytesMut,
) -> Result<Option<Command>, NsqError> {
    Ok(match pending {
        Pending::Identify => sized_body(buf, |n| body_checks("IDENTIFY", n, limits))?
            .map(|body| Command::Identify { body }),
        Pending::Auth => {
            sized_body(buf, |n| body_checks("AUTH", n, limits))?.map(|body| Command::Auth { body })
        }
        Pending::Pub { topic } => {
            sized_body(buf, |n| message_checks("PUB", n, limits))?.map(|body| Command::Pub {
                topic: std::mem::take(topic),
                body,
            })
        }
        Pending::Dpub { topic, defer_ms } => {
            sized_body(buf, |n| message_checks("DPUB", n, limits))?.map(|body| Command::Dpub {
                topic: std::mem::take(topic),
                defer_ms: *defer_ms,
                body,
            })
        }
        Pending::Mpub { topic, scan } => {
            mpub_body(scan, limits, buf)?.map(|bodies| Command::Mpub {
                topic: std::mem::take(topic),
                bodies,
            })
        }
    })
}

/// `[total size][count][size1][body1]...`: parsed by count; the total is only range-checked.
fn mpub_body(
    scan: &mut MpubScan,
    limits: &Limits,
    buf: &mut BytesMut,
) -> Result<Option<Vec<Bytes>>, NsqError> {
    let bad_body = |d: String| Err(NsqError::new(ErrorCode::BadBody, d));
    let bad_msg = |d: String| Err(NsqError::new(ErrorCode::BadMessage, d));

    let Some(total) = read_i32(buf, 0) else {
        return Ok(None);
    };
    if total <= 0 {
        return bad_body(format!("MPUB invalid body size {total}"));
    }
    if i64::from(total) > limits.max_body_size {
        return bad_body(format!(
            "MPUB body too big {total} > {}",
            limits.max_body_size
        ));
    }
    let Some(count) = read_i32(buf, 4) else {
        return Ok(None);
    };
    let max_messages = (limits.max_body_size - 4) / 5;
    if count <= 0 || i64::from(count) > max_messages {
        return bad_body(format!("MPUB invalid message count {count}"));
    }
    let count = count as u32;
    if scan.offset == 0 {
        scan.offset = 8;
    }
    while scan.done < count {
        let Some(size) = read_i32(buf, scan.offset) else {
            return Ok(None);
        };
        if size <= 0 {
            return bad_msg(format!(
                "MPUB invalid message({}) body size {size}",
                scan.done
            ));
        }
        if i64::from(size) > limits.max_msg_size {
            return bad_msg(format!(
                "MPUB message too big {size} > {}",
                limits.max_msg_size
            ));
        }
        let end = scan.offset + 4 + size as usize;
        if buf.len() < end {
            return Ok(None);
        }
        scan.offset = end;
        scan.done += 1;
    }

    // The bodies are copied into one exact-size allocation shared by the batch (see
    // `sized_body` for why), without the length prefixes.
    let end = scan.offset;
    let mut all = BytesMut::with_capacity(end - 8 - 4 * count as usize);
    let mut spans = Vec::with_capacity(count as usize);
    let mut at = 8;
    while at < end {
        let size = read_i32(buf, at).expect("validated") as usize;
        spans.push(all.len()..all.len() + size);
        all.extend_from_slice(&buf[at + 4..at + 4 + size]);
        at += 4 + size;
    }
    buf.advance(end);
    let all = all.freeze();
    Ok(Some(spans.into_iter().map(|r| all.slice(r)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base10() {
        assert_eq!(parse_base10(b""), Some(0));
        assert_eq!(parse_base10(b"0042"), Some(42));
        assert_eq!(parse_base10(b"-1"), None);
        assert_eq!(parse_base10(b"+1"), None);
        assert_eq!(parse_base10(b"1 "), None);
        assert_eq!(parse_base10(b"0x10"), None);
        assert_eq!(parse_base10(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_base10(b"18446744073709551616"), Some(0));
    }

    #[test]
    fn clamp() {
        assert_eq!(clamp_req_timeout(i64::MAX, 3_600_000), Duration::ZERO); // wraps negative in Go
        assert_eq!(
            clamp_req_timeout(3_600_001, 3_600_000),
            Duration::from_secs(3600)
        );
    }
}
