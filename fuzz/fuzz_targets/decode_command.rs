//! Fuzz target: arbitrary bytes through the V2 command decoder and the lookupd decoder,
//! whole and in two chunks, checking that chunking does not change the outcome.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nsq_protocol::command::{Decoder, Limits};
use nsq_protocol::lookup::{LookupDecoder, LookupLimits};

fn v2(input: &[u8], split: usize) -> String {
    let limits = Limits {
        max_body_size: 1024,
        max_msg_size: 256,
        max_rdy_count: 100,
        max_req_timeout_ms: 1000,
    };
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut log = String::new();
    for part in [&input[..split], &input[split..]] {
        buf.extend_from_slice(part);
        loop {
            match d.decode(&mut buf, |_, _| Ok(())) {
                Ok(Some(c)) => log.push_str(&format!("{c:?};")),
                Ok(None) => break,
                Err(e) => return format!("{log}{e:?}"),
            }
        }
    }
    format!("{log}{:?}", d.incomplete_read_error(&buf))
}

fn lookup(input: &[u8], split: usize) -> String {
    let mut d = LookupDecoder::new(LookupLimits {
        max_line_len: 256,
        max_body_size: 1024,
    });
    let mut buf = BytesMut::new();
    let mut log = String::new();
    for part in [&input[..split], &input[split..]] {
        buf.extend_from_slice(part);
        loop {
            match d.decode(&mut buf, |_, _| Ok(())) {
                Ok(Some(c)) => log.push_str(&format!("{c:?};")),
                Ok(None) => break,
                Err(e) => return format!("{log}{e:?}"),
            }
        }
    }
    format!("{log}{:?}", d.incomplete_read_error(&buf))
}

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    assert_eq!(v2(data, data.len()), v2(data, split));
    assert_eq!(lookup(data, data.len()), lookup(data, split));
    let _ = nsq_protocol::identify::parse_identify(data);
    let _ = nsq_protocol::lookup::parse_peer_info(data);
});
