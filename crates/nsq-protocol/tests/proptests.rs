//! Property tests: encode → decode round trips, chunking independence of the decoders, no
//! panics on arbitrary input, message/frame round trips.

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{encode_command, Command, CommandKind, DecodeError, Decoder, Limits};
use nsq_protocol::frame::{put_message, take_frame};
use nsq_protocol::lookup::{encode_lookup_command, LookupCommand, LookupDecoder, LookupLimits};
use nsq_protocol::{message, MessageId};
use proptest::prelude::*;

fn topic() -> impl Strategy<Value = String> {
    "[.a-zA-Z0-9_-]{1,54}(#ephemeral)?"
}

fn body() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 1..200).prop_map(Bytes::from)
}

fn message_id() -> impl Strategy<Value = MessageId> {
    proptest::collection::vec(
        any::<u8>().prop_filter("separator", |b| !b" \n\r".contains(b)),
        16,
    )
    .prop_map(|v| MessageId::from_slice(&v).unwrap())
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        body().prop_map(|body| Command::Identify { body }),
        body().prop_map(|body| Command::Auth { body }),
        (topic(), topic()).prop_map(|(topic, channel)| Command::Sub { topic, channel }),
        (topic(), body()).prop_map(|(topic, body)| Command::Pub { topic, body }),
        (topic(), proptest::collection::vec(body(), 1..20))
            .prop_map(|(topic, bodies)| Command::Mpub { topic, bodies }),
        (topic(), 0i64..=3_600_000, body()).prop_map(|(topic, defer_ms, body)| Command::Dpub {
            topic,
            defer_ms,
            body
        }),
        (0i64..=2500).prop_map(|count| Command::Rdy { count }),
        message_id().prop_map(|id| Command::Fin { id }),
        (message_id(), 0i64..=i64::MAX)
            .prop_map(|(id, timeout_ms)| Command::Req { id, timeout_ms }),
        message_id().prop_map(|id| Command::Touch { id }),
        Just(Command::Cls),
        Just(Command::Nop),
    ]
}

/// Everything observable from one decoding run.
#[derive(Debug, PartialEq)]
struct Outcome {
    gate_calls: Vec<(Vec<u8>, Option<CommandKind>)>,
    commands: Vec<Command>,
    end: Option<DecodeError>,
    eof_error: Option<Vec<u8>>,
}

/// Feeds `input` in chunks of the given sizes (cycled), draining commands after each chunk.
fn decode_chunked(limits: Limits, input: &[u8], chunks: &[usize]) -> Outcome {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Outcome {
        gate_calls: vec![],
        commands: vec![],
        end: None,
        eof_error: None,
    };
    let mut pos = 0;
    let mut sizes = chunks.iter().cycle();
    while pos < input.len() {
        let n = (*sizes.next().unwrap()).clamp(1, input.len() - pos);
        buf.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        loop {
            let r = d.decode(&mut buf, |name, kind| {
                out.gate_calls.push((name.to_vec(), kind));
                Ok(())
            });
            match r {
                Ok(Some(c)) => out.commands.push(c),
                Ok(None) => break,
                Err(e) => {
                    out.end = Some(e);
                    return out;
                }
            }
        }
    }
    out.eof_error = d.incomplete_read_error(&buf).map(|e| e.to_frame_data());
    out
}

fn small_limits() -> Limits {
    Limits {
        max_body_size: 64,
        max_msg_size: 16,
        max_rdy_count: 50,
        max_req_timeout_ms: 1000,
    }
}

/// Inputs that reach deep into the decoder: known line starts, sizes and random bytes.
fn protocolish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            &b"PUB t\n"[..],
            b"MPUB t\n",
            b"DPUB t 5\n",
            b"IDENTIFY\n",
            b"AUTH\n",
            b"SUB t c\n",
            b"RDY ",
            b"FIN ",
            b"REQ ",
            b"TOUCH ",
            b"NOP\n",
            b"CLS\n",
            b"\n",
            b" ",
            b"\r\n",
            b"0123456789abcdef",
        ])
        .prop_map(|s| s.to_vec()),
        (-2i32..40).prop_map(|n| n.to_be_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn encode_decode_round_trip(
        cmds in proptest::collection::vec(command(), 1..12),
        chunks in proptest::collection::vec(1usize..300, 1..8),
    ) {
        let mut buf = BytesMut::new();
        for c in &cmds {
            encode_command(&mut buf, c);
        }
        let out = decode_chunked(Limits::default(), &buf, &chunks);
        prop_assert_eq!(&out.commands, &cmds);
        prop_assert_eq!(out.end, None);
        prop_assert_eq!(out.eof_error, None);
        let kinds: Vec<_> = out.gate_calls.iter().map(|(_, k)| *k).collect();
        let want: Vec<_> = cmds.iter().map(|c| Some(c.kind())).collect();
        prop_assert_eq!(kinds, want);
    }

    #[test]
    fn chunking_does_not_matter(input in protocolish(), chunks in proptest::collection::vec(1usize..20, 1..6)) {
        let whole = decode_chunked(small_limits(), &input, &[usize::MAX]);
        let bytewise = decode_chunked(small_limits(), &input, &[1]);
        let chunked = decode_chunked(small_limits(), &input, &chunks);
        prop_assert_eq!(&whole, &bytewise);
        prop_assert_eq!(&whole, &chunked);
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        let whole = decode_chunked(small_limits(), &input, &[usize::MAX]);
        let bytewise = decode_chunked(small_limits(), &input, &[1]);
        prop_assert_eq!(whole, bytewise);
        let _ = nsq_protocol::identify::parse_identify(&input);
        let _ = nsq_protocol::lookup::parse_peer_info(&input);
        let _ = nsq_protocol::quote::go_quote(&input);
    }

    #[test]
    fn lookup_round_trip_and_chunking(
        cmds in proptest::collection::vec(prop_oneof![
            Just(LookupCommand::Ping),
            body().prop_map(|body| LookupCommand::Identify { body }),
            (topic(), proptest::option::of(topic()))
                .prop_map(|(topic, channel)| LookupCommand::Register { topic, channel }),
            (topic(), proptest::option::of(topic()))
                .prop_map(|(topic, channel)| LookupCommand::Unregister { topic, channel }),
        ], 1..10),
        garbage in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut buf = BytesMut::new();
        for c in &cmds {
            encode_lookup_command(&mut buf, c);
        }
        buf.extend_from_slice(&garbage);
        let run = |step: usize| {
            let mut d = LookupDecoder::new(LookupLimits::default());
            let mut b = BytesMut::new();
            let mut got = Vec::new();
            for chunk in buf.chunks(step) {
                b.extend_from_slice(chunk);
                loop {
                    match d.decode(&mut b, |_, _| Ok(())) {
                        Ok(Some(c)) => got.push(Ok(c)),
                        Ok(None) => break,
                        Err(e) => { got.push(Err(e)); return got; }
                    }
                }
            }
            got
        };
        let whole = run(buf.len().max(1));
        prop_assert_eq!(&whole, &run(1));
        let ok: Vec<_> = whole.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
        prop_assert_eq!(&ok[..cmds.len()], &cmds[..]);
    }

    #[test]
    fn message_round_trip(ts in any::<i64>(), attempts in any::<u16>(), id in any::<u64>(), body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let id = MessageId::from_u64(id);
        let mut payload = Vec::new();
        message::encode(&mut payload, ts, attempts, &id, &body);
        let m = message::decode(Bytes::from(payload)).unwrap();
        prop_assert_eq!((m.timestamp_ns, m.attempts, m.id, &m.body[..]), (ts, attempts, id, &body[..]));

        let mut frames = BytesMut::new();
        put_message(&mut frames, ts, attempts, &id, &body);
        let f = take_frame(&mut frames).unwrap().unwrap();
        prop_assert_eq!(f.frame_type, 2);
        let m = message::decode(f.data).unwrap();
        prop_assert_eq!(&m.body[..], &body[..]);
        prop_assert!(frames.is_empty());
    }
}
