//! Property tests: encode → decode round trips, chunking independence of the decoders, no
//! panics on arbitrary input, message/frame round trips.

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{
    encode_command, Command, CommandKind, DecodeError, DecodeHooks, Decoder, Limits, Verdict,
};
use nsq_protocol::error::{ErrorCode, NsqError};
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

/// What the gate of [`decode_fins_chunked`] does with FIN lines.
#[derive(Debug, Clone, Copy)]
enum FinGate {
    Proceed,
    Ignore,
    Refuse,
}

/// A gate that records its calls, as `decode_chunked`'s does.
struct Recording {
    calls: Vec<(Vec<u8>, Option<CommandKind>)>,
    fin: FinGate,
}

impl DecodeHooks for Recording {
    fn gate(&mut self, name: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError> {
        self.calls.push((name.to_vec(), kind));
        match (kind, self.fin) {
            (Some(CommandKind::Fin), FinGate::Ignore) => Ok(Verdict::Ignore),
            (Some(CommandKind::Fin), FinGate::Refuse) => Err(NsqError::new(
                ErrorCode::Invalid,
                "cannot FIN in current state",
            )),
            _ => Ok(Verdict::Proceed),
        }
    }
}

/// As [`decode_chunked`], through `decode_with`; with `take_fins`, each decode is preceded by
/// [`Decoder::take_fins`] (as nsqd's reader does), its FINs recorded as `Command::Fin`.
fn decode_fins_chunked(input: &[u8], chunks: &[usize], fin: FinGate, take_fins: bool) -> Outcome {
    let mut d = Decoder::new(small_limits());
    let mut buf = BytesMut::new();
    let mut hooks = Recording { calls: vec![], fin };
    let mut commands = vec![];
    let mut end = None;
    let mut pos = 0;
    let mut sizes = chunks.iter().cycle();
    'input: while pos < input.len() {
        let n = (*sizes.next().unwrap()).clamp(1, input.len() - pos);
        buf.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        loop {
            if take_fins {
                let r = d.take_fins(&mut buf, &mut hooks, &mut |id| {
                    commands.push(Command::Fin { id })
                });
                if let Err(e) = r {
                    end = Some(e);
                    break 'input;
                }
            }
            match d.decode_with(&mut buf, &mut hooks) {
                Ok(Some(c)) => commands.push(c),
                Ok(None) => break,
                Err(e) => {
                    end = Some(e);
                    break 'input;
                }
            }
        }
    }
    let eof_error = end
        .is_none()
        .then(|| d.incomplete_read_error(&buf).map(|e| e.to_frame_data()))
        .flatten();
    Outcome {
        gate_calls: hooks.calls,
        commands,
        end,
        eof_error,
    }
}

/// [`protocolish`] with whole FIN lines, well and badly shaped, among its pieces.
fn finnish() -> impl Strategy<Value = Vec<u8>> {
    let fin = prop::sample::select(vec![
        &b"FIN 0123456789abcdef\n"[..],
        b"FIN 0123456789abcdef\n",
        b"FIN fedcba9876543210\n",
        b"FIN 0123456789abcdef\r\n",
        b"FIN 0123456789abcdef extra\n",
        b"FIN 0123456789abcde\n",
        b"FIN 01234567 9abcdef\n",
        b"FIN 0123456789abcde\r\n",
        b"FIN  0123456789abcde\n",
        b"FIN\n",
    ])
    .prop_map(|s| s.to_vec());
    let piece = prop_oneof![3 => fin, 1 => protocolish()];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
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

    /// `take_fins` changes nothing observable: the same gate calls, commands, consumed bytes
    /// (the end state and EOF error depend on them) and errors, whatever the gate says.
    #[test]
    fn taking_fins_first_changes_nothing(
        input in finnish(),
        chunks in proptest::collection::vec(1usize..40, 1..6),
        fin in prop::sample::select(vec![FinGate::Proceed, FinGate::Ignore, FinGate::Refuse]),
    ) {
        let general = decode_fins_chunked(&input, &chunks, fin, false);
        let fast = decode_fins_chunked(&input, &chunks, fin, true);
        prop_assert_eq!(&general, &fast);
        let whole = decode_fins_chunked(&input, &[usize::MAX], fin, true);
        prop_assert_eq!(&general, &whole);
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
