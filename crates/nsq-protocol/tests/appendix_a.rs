//! Every Appendix A error text the command decoder produces, byte for byte, plus the
//! decoder-level cases of nsqd/protocol_v2.go's command parsing and its line rules.

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use nsq_protocol::command::{
    clamp_req_timeout, Command, CommandKind, DecodeError, DecodeHooks, Decoder, Limits, Verdict,
    MAX_LINE_LEN,
};
use nsq_protocol::{MessageId, NsqError};

const ID: &[u8; 16] = b"18acd669e6269000";

fn assert_err(input: &[u8], want: &str) {
    assert_eq!(
        String::from_utf8_lossy(&err_text(input)),
        want,
        "input {:?}",
        String::from_utf8_lossy(input)
    );
}

fn assert_eof(input: &[u8], want: &str) {
    assert_eq!(
        eof_text(input)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .as_deref(),
        Some(want),
        "input {:?}",
        String::from_utf8_lossy(input)
    );
}

#[test]
fn invalid_command() {
    assert_err(b"FOO\n", "E_INVALID invalid command FOO");
    assert_err(b"pub t\n", "E_INVALID invalid command pub");
    assert_err(b"\n", "E_INVALID invalid command ");
    assert_err(b"\r\n", "E_INVALID invalid command ");
    assert_err(b" NOP\n", "E_INVALID invalid command ");
    assert_eq!(err_text(b"F\xffO\n"), b"E_INVALID invalid command F\xffO");
    // Frame bytes of a response frame (nsqd/protocol.go, `SendFramedResponse`).
    let mut frame = Vec::new();
    nsq_protocol::frame::put_error(&mut frame, &err_text(b"FOO\n"));
    assert_eq!(&frame[..8], &[0, 0, 0, 0x21, 0, 0, 0, 1]);
}

#[test]
fn identify_body_errors() {
    assert_err(
        &cat(&[b"IDENTIFY\n", &be(5_242_881)]),
        "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880",
    );
    assert_err(
        &cat(&[b"IDENTIFY\n", &be(0)]),
        "E_BAD_BODY IDENTIFY invalid body size 0",
    );
    assert_err(
        &cat(&[b"IDENTIFY\n", &be(-1)]),
        "E_BAD_BODY IDENTIFY invalid body size -1",
    );
    assert_eof(
        b"IDENTIFY\n",
        "E_BAD_BODY IDENTIFY failed to read body size",
    );
    assert_eof(
        b"IDENTIFY\n\0\0",
        "E_BAD_BODY IDENTIFY failed to read body size",
    );
    assert_eof(
        &cat(&[b"IDENTIFY\n", &be(10), b"{}"]),
        "E_BAD_BODY IDENTIFY failed to read body",
    );
    // Parameters on the IDENTIFY line are ignored.
    let r = run(&cat(&[b"IDENTIFY a b c\n", &sized(b"{}")]));
    assert_eq!(
        r.commands,
        vec![Command::Identify {
            body: Bytes::from_static(b"{}")
        }]
    );
}

#[test]
fn auth_errors() {
    assert_err(b"AUTH x\n", "E_INVALID AUTH invalid number of parameters");
    assert_err(b"AUTH \n", "E_INVALID AUTH invalid number of parameters");
    assert_err(
        &cat(&[b"AUTH\n", &be(5_242_881)]),
        "E_BAD_BODY AUTH body too big 5242881 > 5242880",
    );
    assert_err(
        &cat(&[b"AUTH\n", &be(0)]),
        "E_BAD_BODY AUTH invalid body size 0",
    );
    assert_eof(b"AUTH\n", "E_BAD_BODY AUTH failed to read body size");
    assert_eof(
        &cat(&[b"AUTH\n", &be(3), b"a"]),
        "E_BAD_BODY AUTH failed to read body",
    );
    let r = run(&cat(&[b"AUTH\n", &sized(b"secret")]));
    assert_eq!(
        r.commands,
        vec![Command::Auth {
            body: Bytes::from_static(b"secret")
        }]
    );
}

#[test]
fn sub_errors() {
    assert_err(b"SUB\n", "E_INVALID SUB insufficient number of parameters");
    assert_err(
        b"SUB t\n",
        "E_INVALID SUB insufficient number of parameters",
    );
    assert_err(
        b"SUB bad!t c\n",
        r#"E_BAD_TOPIC SUB topic name "bad!t" is not valid"#,
    );
    assert_err(
        b"SUB t bad!c\n",
        r#"E_BAD_CHANNEL SUB channel name "bad!c" is not valid"#,
    );
    assert_err(
        b"SUB t \n",
        r#"E_BAD_CHANNEL SUB channel name "" is not valid"#,
    );
    assert_err(
        "SUB тест c\n".as_bytes(),
        "E_BAD_TOPIC SUB topic name \"тест\" is not valid",
    );
    assert_err(
        b"SUB a\tb c\n",
        r#"E_BAD_TOPIC SUB topic name "a\tb" is not valid"#,
    );
    let r = run(b"SUB t c extra\n");
    assert_eq!(
        r.commands,
        vec![Command::Sub {
            topic: "t".into(),
            channel: "c".into()
        }]
    );
}

#[test]
fn pub_errors() {
    assert_err(b"PUB\n", "E_INVALID PUB insufficient number of parameters");
    assert_err(b"PUB  t\n", r#"E_BAD_TOPIC PUB topic name "" is not valid"#);
    // The body is not read when the topic is invalid.
    assert_err(
        b"PUB bad!t\n",
        r#"E_BAD_TOPIC PUB topic name "bad!t" is not valid"#,
    );
    assert_err(
        &cat(&[b"PUB t\n", &be(0)]),
        "E_BAD_MESSAGE PUB invalid message body size 0",
    );
    assert_err(
        &cat(&[b"PUB t\n", &be(-1)]),
        "E_BAD_MESSAGE PUB invalid message body size -1",
    );
    assert_err(
        &cat(&[b"PUB t\n", &be(1_048_577)]),
        "E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
    );
    assert_eof(
        b"PUB t\n",
        "E_BAD_MESSAGE PUB failed to read message body size",
    );
    assert_eof(
        &cat(&[b"PUB t\n", &be(5), b"ab"]),
        "E_BAD_MESSAGE PUB failed to read message body",
    );
    // Exactly max-msg-size is accepted.
    let body = vec![b'x'; 1_048_576];
    let r = run(&cat(&[b"PUB t extra\n", &sized(&body)]));
    assert_eq!(
        r.commands,
        vec![Command::Pub {
            topic: "t".into(),
            body: body.into()
        }]
    );
    assert!(r.end.is_none() && r.rest.is_empty());
}

#[test]
fn mpub_errors() {
    assert_err(
        b"MPUB\n",
        "E_INVALID MPUB insufficient number of parameters",
    );
    assert_err(
        b"MPUB x!\n",
        r#"E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x!" is not valid"#,
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(0)]),
        "E_BAD_BODY MPUB invalid body size 0",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(-5)]),
        "E_BAD_BODY MPUB invalid body size -5",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(5_242_881)]),
        "E_BAD_BODY MPUB body too big 5242881 > 5242880",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(10), &be(0)]),
        "E_BAD_BODY MPUB invalid message count 0",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(10), &be(-1)]),
        "E_BAD_BODY MPUB invalid message count -1",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(10), &be(1_048_576)]),
        "E_BAD_BODY MPUB invalid message count 1048576",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(20), &be(2), &sized(b"a"), &be(0)]),
        "E_BAD_MESSAGE MPUB invalid message(1) body size 0",
    );
    assert_err(
        &cat(&[b"MPUB t\n", &be(20), &be(2), &be(1_048_577)]),
        "E_BAD_MESSAGE MPUB message too big 1048577 > 1048576",
    );
    assert_eof(b"MPUB t\n", "E_BAD_BODY MPUB failed to read body size");
    assert_eof(
        &cat(&[b"MPUB t\n", &be(20)]),
        "E_BAD_BODY MPUB failed to read message count",
    );
    assert_eof(
        &cat(&[b"MPUB t\n", &be(20), &be(2)]),
        "E_BAD_MESSAGE MPUB failed to read message(0) body size",
    );
    assert_eof(
        &cat(&[b"MPUB t\n", &be(20), &be(2), &sized(b"a"), &[0, 0]]),
        "E_BAD_MESSAGE MPUB failed to read message(1) body size",
    );
    assert_eof(
        &cat(&[b"MPUB t\n", &be(20), &be(2), &sized(b"a"), &be(3), b"b"]),
        "E_BAD_MESSAGE MPUB failed to read message body",
    );
    // count == (max_body - 4) / 5 passes the count check.
    assert_eof(
        &cat(&[b"MPUB t\n", &be(10), &be(1_048_575)]),
        "E_BAD_MESSAGE MPUB failed to read message(0) body size",
    );
}

#[test]
fn mpub_parsed_by_count() {
    // Declared total 100 with 14 real bytes, followed by a PUB: two commands.
    let input = cat(&[
        b"MPUB t\n",
        &be(100),
        &be(2),
        &sized(b"m1"),
        &sized(b"m2"),
        b"PUB t\n",
        &sized(b"m3"),
    ]);
    let r = run(&input);
    assert_eq!(
        r.commands,
        vec![
            Command::Mpub {
                topic: "t".into(),
                bodies: vec![Bytes::from_static(b"m1"), Bytes::from_static(b"m2")]
            },
            Command::Pub {
                topic: "t".into(),
                body: Bytes::from_static(b"m3")
            },
        ]
    );
    assert!(r.end.is_none() && r.rest.is_empty());
    // Declared 5 with 14 real bytes: fine too.
    let r = run(&cat(&[
        b"MPUB t\n",
        &be(5),
        &be(2),
        &sized(b"m1"),
        &sized(b"m2"),
    ]));
    assert_eq!(r.commands.len(), 1);
}

#[test]
fn dpub_errors() {
    assert_err(
        b"DPUB t\n",
        "E_INVALID DPUB insufficient number of parameters",
    );
    assert_err(
        b"DPUB t! 10\n",
        r#"E_BAD_TOPIC DPUB topic name "t!" is not valid"#,
    );
    assert_err(
        b"DPUB t abc\n",
        "E_INVALID DPUB could not parse timeout abc",
    );
    assert_err(b"DPUB t -1\n", "E_INVALID DPUB could not parse timeout -1");
    assert_err(
        b"DPUB t 3600001\n",
        "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    );
    // Overflowing values print unsigned like the reference.
    assert_err(
        b"DPUB t 18446744073709551615\n",
        "E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000",
    );
    assert_err(
        &cat(&[b"DPUB t 10\n", &be(0)]),
        "E_BAD_MESSAGE DPUB invalid message body size 0",
    );
    assert_err(
        &cat(&[b"DPUB t 10\n", &be(1_048_577)]),
        "E_BAD_MESSAGE DPUB message too big 1048577 > 1048576",
    );
    assert_eof(
        b"DPUB t 10\n",
        "E_BAD_MESSAGE DPUB failed to read message body size",
    );
    assert_eof(
        &cat(&[b"DPUB t 10\n", &be(2), b"a"]),
        "E_BAD_MESSAGE DPUB failed to read message body",
    );
    let r = run(&cat(&[
        b"DPUB t 3600000\n",
        &sized(b"a"),
        b"DPUB t \n",
        &sized(b"b"),
    ]));
    assert_eq!(
        r.commands,
        vec![
            Command::Dpub {
                topic: "t".into(),
                defer_ms: 3_600_000,
                body: Bytes::from_static(b"a")
            },
            Command::Dpub {
                topic: "t".into(),
                defer_ms: 0,
                body: Bytes::from_static(b"b")
            },
        ]
    );
}

#[test]
fn rdy() {
    assert_err(b"RDY -1\n", "E_INVALID RDY could not parse count -1");
    assert_err(b"RDY 1x\n", "E_INVALID RDY could not parse count 1x");
    assert_err(
        b"RDY 2501\n",
        "E_INVALID RDY count 2501 out of range 0-2500",
    );
    assert_err(
        b"RDY 9223372036854775808\n",
        "E_INVALID RDY count -9223372036854775808 out of range 0-2500",
    );
    let r = run(b"RDY\nRDY \nRDY 0\nRDY 2500\nRDY 7 extra\n");
    let counts: Vec<_> = r
        .commands
        .iter()
        .map(|c| match c {
            Command::Rdy { count } => *count,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(counts, [1, 0, 0, 2500, 7]);
}

#[test]
fn fin_req_touch() {
    assert_err(b"FIN\n", "E_INVALID FIN insufficient number of params");
    assert_err(b"FIN 123\n", "E_INVALID invalid message ID");
    assert_err(b"FIN 18acd669e62690001\n", "E_INVALID invalid message ID");
    assert_err(b"TOUCH\n", "E_INVALID TOUCH insufficient number of params");
    assert_err(b"TOUCH abc\n", "E_INVALID invalid message ID");
    assert_err(
        b"REQ 18acd669e6269000\n",
        "E_INVALID REQ insufficient number of params",
    );
    assert_err(b"REQ short 10\n", "E_INVALID invalid message ID");
    assert_err(
        b"REQ 18acd669e6269000 -5\n",
        "E_INVALID REQ could not parse timeout -5",
    );
    let id = MessageId(*ID);
    let r = run(
        b"FIN 18acd669e6269000\nTOUCH 18acd669e6269000\nREQ 18acd669e6269000 \nREQ 18acd669e6269000 99999999\nFIN zzzzzzzzzzzzzzzz\n",
    );
    assert_eq!(
        r.commands,
        vec![
            Command::Fin { id },
            Command::Touch { id },
            Command::Req { id, timeout_ms: 0 },
            Command::Req {
                id,
                timeout_ms: 99_999_999
            },
            Command::Fin {
                id: MessageId(*b"zzzzzzzzzzzzzzzz")
            },
        ]
    );
    // The server clamps REQ timeouts silently.
    assert_eq!(
        clamp_req_timeout(99_999_999, 3_600_000).as_millis(),
        3_600_000
    );
    assert_eq!(clamp_req_timeout(0, 3_600_000).as_millis(), 0);
    assert_eq!(clamp_req_timeout(-1, 3_600_000).as_millis(), 0);
    assert_eq!(clamp_req_timeout(1500, 3_600_000).as_millis(), 1500);
}

#[test]
fn bodiless_commands_and_extra_params() {
    let r = run(b"NOP anything\nCLS\nNOP\r\n");
    assert_eq!(r.commands, vec![Command::Nop, Command::Cls, Command::Nop]);
}

#[test]
fn line_length_limit() {
    // 16384 bytes including the \n is fine.
    let mut line = vec![b'N', b'O', b'P', b' '];
    line.resize(MAX_LINE_LEN - 1, b'x');
    line.push(b'\n');
    assert_eq!(line.len(), MAX_LINE_LEN);
    let r = run(&line);
    assert_eq!(r.commands, vec![Command::Nop]);
    assert!(r.end.is_none());
    // 16385: no \n within the first 16384 bytes.
    let mut long = line.clone();
    long.insert(5, b'x');
    assert_eq!(run(&long).end, Some(DecodeError::LineTooLong));
    // Fed in pieces, the limit is detected as soon as 16384 bytes are buffered.
    let mut d = Decoder::new(Limits::default());
    let mut buf = BytesMut::new();
    for chunk in long.chunks(1000) {
        buf.extend_from_slice(chunk);
        match d.decode(&mut buf, |_, _| Ok(())) {
            Ok(None) => assert!(buf.len() < MAX_LINE_LEN),
            Err(e) => {
                assert_eq!(e, DecodeError::LineTooLong);
                assert!(buf.len() >= MAX_LINE_LEN);
                return;
            }
            Ok(Some(c)) => panic!("{c:?}"),
        }
    }
    panic!("no LineTooLong");
}

#[test]
fn gate_is_called_once_before_parameter_checks() {
    let mut d = Decoder::new(Limits::default());
    let mut calls = Vec::new();
    let input = cat(&[b"PUB t\n", &be(3), b"a"]);
    let mut buf = BytesMut::new();
    for b in &input {
        buf.extend_from_slice(&[*b]);
        let r = d.decode(&mut buf, |name: &[u8], kind| {
            calls.push((name.to_vec(), kind));
            Ok(())
        });
        assert_eq!(r, Ok(None));
    }
    assert_eq!(calls, vec![(b"PUB".to_vec(), Some(CommandKind::Pub))]);
    buf.extend_from_slice(b"bc");
    let r = d.decode(&mut buf, |_: &[u8], _| -> Result<(), NsqError> {
        panic!("gate again")
    });
    assert_eq!(
        r,
        Ok(Some(Command::Pub {
            topic: "t".into(),
            body: Bytes::from_static(b"abc")
        }))
    );

    // The gate's error wins over any parameter error (TLS required, wrong state).
    let mut buf = BytesMut::from(&b"FOO bar\n"[..]);
    let r = d.decode(&mut buf, |name, _| Err(NsqError::tls_required(name)));
    assert_eq!(
        r.unwrap_err(),
        DecodeError::Fatal(NsqError::tls_required(b"FOO"))
    );
    let mut buf = BytesMut::from(&b"RDY abc\n"[..]);
    let r = d.decode(&mut buf, |_, k: Option<CommandKind>| {
        Err(NsqError::cannot_in_current_state(k.unwrap().name()))
    });
    match r {
        Err(DecodeError::Fatal(e)) => {
            assert_eq!(e.to_frame_data(), b"E_INVALID cannot RDY in current state")
        }
        other => panic!("{other:?}"),
    }
    // Unknown commands reach the gate with None, then fail.
    let mut seen = None;
    let mut buf = BytesMut::from(&b"FOO\n"[..]);
    let r = d.decode(&mut buf, |n: &[u8], k| {
        seen = Some((n.to_vec(), k));
        Ok(())
    });
    assert!(matches!(r, Err(DecodeError::Fatal(_))));
    assert_eq!(seen, Some((b"FOO".to_vec(), None)));
}

struct Closing {
    mpub_topics: Vec<String>,
}

impl DecodeHooks for Closing {
    fn gate(&mut self, _: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError> {
        Ok(if kind == Some(CommandKind::Rdy) {
            Verdict::Ignore
        } else {
            Verdict::Proceed
        })
    }
    fn mpub_topic(&mut self, topic: &str) -> Result<(), NsqError> {
        self.mpub_topics.push(topic.to_owned());
        if topic == "denied" {
            return Err(NsqError::auth_first("MPUB"));
        }
        Ok(())
    }
}

#[test]
fn hooks_ignore_rdy_in_closing_and_see_mpub_topic() {
    let mut d = Decoder::new(Limits::default());
    let mut hooks = Closing {
        mpub_topics: vec![],
    };
    let mut buf = BytesMut::from(&b"RDY abc\nRDY 99999\nNOP\n"[..]);
    assert_eq!(d.decode_with(&mut buf, &mut hooks), Ok(Some(Command::Nop)));
    assert!(buf.is_empty());
    // The MPUB hook runs before the body is read (reference: auth + topic creation there).
    let mut buf = BytesMut::from(&b"MPUB t\n"[..]);
    assert_eq!(d.decode_with(&mut buf, &mut hooks), Ok(None));
    assert_eq!(hooks.mpub_topics, ["t"]);
    let mut d = Decoder::new(Limits::default());
    let mut buf = BytesMut::from(&b"MPUB denied\n\0\0\0\0"[..]);
    match d.decode_with(&mut buf, &mut hooks) {
        Err(DecodeError::Fatal(e)) => {
            assert_eq!(e.to_frame_data(), b"E_AUTH_FIRST AUTH required before MPUB")
        }
        other => panic!("{other:?}"),
    }
}

/// Bodies leave the read buffer: one exact-size allocation per MPUB, length prefixes dropped,
/// so queued messages never pin a connection's read buffer.
#[test]
fn bodies_are_copied_out_of_the_read_buffer() {
    let input = cat(&[b"MPUB t\n", &be(14), &be(2), &sized(b"m1"), &sized(b"m2")]);
    let mut buf = BytesMut::from(&input[..]);
    let base = buf.as_ptr() as usize;
    let cmd = Decoder::new(Limits::default())
        .decode(&mut buf, |_, _| Ok(()))
        .unwrap()
        .unwrap();
    let Command::Mpub { bodies, .. } = cmd else {
        panic!()
    };
    assert_eq!((&bodies[0][..], &bodies[1][..]), (&b"m1"[..], &b"m2"[..]));
    let (b0, b1) = (bodies[0].as_ptr() as usize, bodies[1].as_ptr() as usize);
    assert_eq!(b1, b0 + 2, "one allocation, no length prefixes");
    assert!(!(base..base + input.len()).contains(&b0));
    assert!(buf.is_empty());
}

#[test]
fn eof_between_commands_is_silent() {
    assert_eq!(eof_text(b""), None);
    assert_eq!(eof_text(b"NOP\n"), None);
    assert_eq!(eof_text(b"PUB t"), None);
}
