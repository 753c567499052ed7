//! Helpers shared by the integration tests: drive a decoder over a whole buffer.
#![allow(dead_code, unreachable_pub)]

use bytes::BytesMut;
use nsq_protocol::command::{Command, DecodeError, Decoder, Limits};

/// Everything a decoder produced from `input` with a permissive gate: the commands, then how
/// it stopped (`None` = wants more bytes), plus the decoder and the leftover buffer.
pub struct Run {
    pub commands: Vec<Command>,
    pub end: Option<DecodeError>,
    pub decoder: Decoder,
    pub rest: BytesMut,
}

pub fn run_with(limits: Limits, input: &[u8]) -> Run {
    let mut decoder = Decoder::new(limits);
    let mut buf = BytesMut::from(input);
    let mut commands = Vec::new();
    let end = loop {
        match decoder.decode(&mut buf, |_, _| Ok(())) {
            Ok(Some(c)) => commands.push(c),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    Run {
        commands,
        end,
        decoder,
        rest: buf,
    }
}

pub fn run(input: &[u8]) -> Run {
    run_with(Limits::default(), input)
}

/// The error frame data the decoder ends `input` with (panics if it does not end in error).
pub fn err_text(input: &[u8]) -> Vec<u8> {
    err_text_with(Limits::default(), input)
}

pub fn err_text_with(limits: Limits, input: &[u8]) -> Vec<u8> {
    match run_with(limits, input).end {
        Some(DecodeError::Fatal(e)) => e.to_frame_data(),
        other => panic!(
            "expected a fatal error for {:?}, got {other:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

/// The error the server would send if the client closed the socket after `input`.
pub fn eof_text(input: &[u8]) -> Option<Vec<u8>> {
    let r = run(input);
    assert!(r.end.is_none(), "unexpected end {:?}", r.end);
    r.decoder
        .incomplete_read_error(&r.rest)
        .map(|e| e.to_frame_data())
}

/// `[4-byte BE size][data]`.
pub fn sized(data: &[u8]) -> Vec<u8> {
    let mut v = (data.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub fn be(n: i32) -> [u8; 4] {
    n.to_be_bytes()
}
