//! Fuzz target: arbitrary bytes through nsqlookupd's V1 command decoder (the server side of
//! nsqlookupd/lookup_protocol_v1.go, IOLoop/Exec), fed in many chunks whose sizes come from
//! the input, with the server's state gate (`cannot IDENTIFY again`, `client must IDENTIFY`,
//! nsq-protocol/src/lookup.rs, gate). Checks: no panic; the outcome does not depend on
//! how the bytes were chunked; every decoded command re-encodes (`encode_lookup_command`,
//! nsqd's side) to bytes that a fresh decoder turns back into the same command; IDENTIFY
//! bodies that `parse_peer_info` accepts survive a `to_json` round trip. The nsqd side's
//! response reader (`take_lookup_response`) gets the same bytes.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nsq_protocol::lookup::{
    encode_lookup_command, gate, parse_peer_info, take_lookup_response, LookupCommand,
    LookupDecoder, LookupLimits,
};

const LIMITS: LookupLimits = LookupLimits {
    max_line_len: 512,
    max_body_size: 2048,
};

/// Decodes `input` fed in chunks of the given sizes (cycled; 0 means "the rest"), with the
/// server's state gate if `gated`; returns the commands and the final error or end-of-input
/// state, as text for comparison.
fn run(input: &[u8], chunks: &[u8], gated: bool) -> (Vec<LookupCommand>, String) {
    let mut d = LookupDecoder::new(LIMITS);
    let mut identified = false;
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < input.len() {
        let n = match chunks.get(i % chunks.len().max(1)) {
            Some(&c) if c > 0 => c as usize,
            _ => input.len() - pos,
        };
        i += 1;
        let end = (pos + n).min(input.len());
        buf.extend_from_slice(&input[pos..end]);
        pos = end;
        loop {
            let r = d.decode(&mut buf, |_, kind| {
                if gated {
                    gate(identified, kind)
                } else {
                    Ok(())
                }
            });
            match r {
                Ok(Some(c)) => {
                    identified |= matches!(c, LookupCommand::Identify { .. });
                    out.push(c);
                }
                Ok(None) => break,
                Err(e) => return (out, format!("{e:?}")),
            }
        }
    }
    let end = format!("{:?}", d.incomplete_read_error(&buf));
    (out, end)
}

fuzz_target!(|data: &[u8]| {
    // The first 4 bytes choose the chunk sizes; the rest is the connection's byte stream.
    let (chunks, input) = data.split_at(data.len().min(4));
    let whole = run(input, &[], true);
    let chunked = run(input, chunks, true);
    assert_eq!(whole, chunked, "chunking changed the outcome");

    for cmd in &whole.0 {
        let mut wire = BytesMut::new();
        encode_lookup_command(&mut wire, cmd);
        let (again, end) = run(&wire, &[], false);
        assert_eq!(
            again.as_slice(),
            std::slice::from_ref(cmd),
            "re-encoding: {end}"
        );
        if let LookupCommand::Identify { body } = cmd {
            if let Ok(peer) = parse_peer_info(body) {
                let back = parse_peer_info(&peer.to_json()).expect("our own JSON parses");
                assert_eq!(back, peer);
            }
        }
    }

    let mut responses = BytesMut::from(input);
    while let Ok(Some(_)) = take_lookup_response(&mut responses, 1024) {}
});
