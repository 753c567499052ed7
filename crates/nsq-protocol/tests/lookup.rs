//! nsqlookupd V1 protocol: decoder error texts and order, encoder, response framing, peer info.

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::DecodeError;
use nsq_protocol::error::{ErrorCode, NsqError};
use nsq_protocol::lookup::{
    encode_lookup_command, parse_peer_info, put_lookup_response, take_lookup_response,
    LookupCommand, LookupCommandKind, LookupDecoder, LookupLimits, PeerInfo, ReplicationInfo,
};

fn run(
    input: &[u8],
) -> (
    Vec<LookupCommand>,
    Option<DecodeError>,
    LookupDecoder,
    BytesMut,
) {
    let mut d = LookupDecoder::new(LookupLimits::default());
    let mut buf = BytesMut::from(input);
    let mut cmds = Vec::new();
    let end = loop {
        match d.decode(&mut buf, |_, _| Ok(())) {
            Ok(Some(c)) => cmds.push(c),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    (cmds, end, d, buf)
}

fn err(input: &[u8]) -> String {
    match run(input).1 {
        Some(DecodeError::Fatal(e)) => String::from_utf8(e.to_frame_data()).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn reg(topic: &str, channel: Option<&str>) -> LookupCommand {
    LookupCommand::Register {
        topic: topic.into(),
        channel: channel.map(Into::into),
    }
}

#[test]
fn commands() {
    let body = br#"{"broadcast_address":"10.0.0.5","hostname":"nsqd-a","http_port":4151,"tcp_port":4150,"version":"1.3.0"}"#;
    let mut input = b"IDENTIFY ignored\n".to_vec();
    input.extend_from_slice(&(body.len() as u32).to_be_bytes());
    input.extend_from_slice(body);
    input.extend_from_slice(
        b"REGISTER orders\nREGISTER orders billing extra\n  PING x \r\nUNREGISTER t\nUNREGISTER t c#ephemeral\nREGISTER t  c\n",
    );
    let (cmds, end, _, rest) = run(&input);
    assert!(end.is_none() && rest.is_empty());
    assert_eq!(
        cmds,
        vec![
            LookupCommand::Identify {
                body: Bytes::copy_from_slice(body)
            },
            reg("orders", None),
            reg("orders", Some("billing")),
            LookupCommand::Ping,
            LookupCommand::Unregister {
                topic: "t".into(),
                channel: None
            },
            LookupCommand::Unregister {
                topic: "t".into(),
                channel: Some("c#ephemeral".into())
            },
            // Empty channel parameter: topic-only registration.
            reg("t", None),
        ]
    );
    // Round trip through the encoder.
    let mut buf = BytesMut::new();
    for c in &cmds {
        encode_lookup_command(&mut buf, c);
    }
    let (again, end, _, _) = run(&buf);
    assert!(end.is_none());
    assert_eq!(again, cmds);
}

#[test]
fn error_texts() {
    assert_eq!(err(b"ping\n"), "E_INVALID invalid command ping");
    assert_eq!(err(b"\n"), "E_INVALID invalid command ");
    assert_eq!(err(b"   \r\n"), "E_INVALID invalid command ");
    assert_eq!(
        err(b"REGISTER\n"),
        "E_INVALID REGISTER insufficient number of params"
    );
    assert_eq!(
        err(b"REGISTER \n"),
        "E_INVALID REGISTER insufficient number of params"
    );
    assert_eq!(
        err(b"UNREGISTER\n"),
        "E_INVALID UNREGISTER insufficient number of params"
    );
    assert_eq!(
        err(b"REGISTER bad!name\n"),
        "E_BAD_TOPIC REGISTER topic name 'bad!name' is not valid"
    );
    assert_eq!(
        err(b"REGISTER  t\n"),
        "E_BAD_TOPIC REGISTER topic name '' is not valid"
    );
    assert_eq!(
        err(b"REGISTER bad! bad!\n"),
        "E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"
    );
    assert_eq!(
        err(b"REGISTER t c!\n"),
        "E_BAD_CHANNEL REGISTER channel name 'c!' is not valid"
    );
    assert_eq!(
        err(b"UNREGISTER t! c\n"),
        "E_BAD_TOPIC UNREGISTER topic name 't!' is not valid"
    );
    assert_eq!(
        err(b"UNREGISTER t c!\n"),
        "E_BAD_CHANNEL UNREGISTER channel name 'c!' is not valid"
    );
    assert_eq!(
        err(b"IDENTIFY\n\xff\xff\xff\xff"),
        "E_BAD_BODY IDENTIFY failed to read body size"
    );
    assert_eq!(
        err(b"IDENTIFY\n\x00\x50\x00\x01"),
        "E_BAD_BODY IDENTIFY failed to read body size"
    );
    // The example session's error frame is 0x37 bytes.
    assert_eq!(err(b"REGISTER bad!name\n").len(), 0x37);
}

#[test]
fn gate_runs_first() {
    let mut d = LookupDecoder::new(LookupLimits::default());
    let mut buf = BytesMut::from(&b"REGISTER bad!\n"[..]);
    let r = d.decode(&mut buf, |_, k| {
        if k == Some(LookupCommandKind::Register) {
            Err(NsqError::new(ErrorCode::Invalid, "client must IDENTIFY"))
        } else {
            Ok(())
        }
    });
    match r {
        Err(DecodeError::Fatal(e)) => assert_eq!(e.to_string(), "E_INVALID client must IDENTIFY"),
        other => panic!("{other:?}"),
    }
    // "cannot IDENTIFY again" is decided before the body is read.
    let mut d = LookupDecoder::new(LookupLimits::default());
    let mut buf = BytesMut::from(&b"IDENTIFY\n"[..]);
    let r = d.decode(&mut buf, |_, _| {
        Err(NsqError::new(ErrorCode::Invalid, "cannot IDENTIFY again"))
    });
    assert!(matches!(r, Err(DecodeError::Fatal(_))));
}

#[test]
fn identify_incomplete_and_eof() {
    let (cmds, end, d, rest) = run(b"IDENTIFY\n\0\0");
    assert!(cmds.is_empty() && end.is_none());
    assert_eq!(
        d.incomplete_read_error(&rest).unwrap().to_string(),
        "E_BAD_BODY IDENTIFY failed to read body size"
    );
    let (_, _, d, rest) = run(b"IDENTIFY\n\0\0\0\x05{}");
    assert_eq!(
        d.incomplete_read_error(&rest).unwrap().to_string(),
        "E_BAD_BODY IDENTIFY failed to read body"
    );
    let (_, _, d, rest) = run(b"PING");
    assert!(d.incomplete_read_error(&rest).is_none());
    // Byte by byte gives the same command.
    let body = br#"{"a":1}"#;
    let mut input = b"IDENTIFY\n".to_vec();
    input.extend_from_slice(&(body.len() as u32).to_be_bytes());
    input.extend_from_slice(body);
    input.extend_from_slice(b"PING\n");
    let mut d = LookupDecoder::new(LookupLimits::default());
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in input {
        buf.extend_from_slice(&[b]);
        if let Some(c) = d.decode(&mut buf, |_, _| Ok(())).unwrap() {
            got.push(c);
        }
    }
    assert_eq!(
        got,
        vec![
            LookupCommand::Identify {
                body: Bytes::from_static(body)
            },
            LookupCommand::Ping
        ]
    );
}

#[test]
fn line_too_long() {
    let limits = LookupLimits {
        max_line_len: 10,
        ..LookupLimits::default()
    };
    let mut d = LookupDecoder::new(limits);
    let mut buf = BytesMut::from(&b"PING 12345\n"[..]);
    assert_eq!(
        d.decode(&mut buf, |_, _| Ok(())),
        Err(DecodeError::LineTooLong)
    );
    let mut buf = BytesMut::from(&b"PING 1234\n"[..]);
    assert_eq!(
        d.decode(&mut buf, |_, _| Ok(())),
        Ok(Some(LookupCommand::Ping))
    );
}

#[test]
fn response_framing() {
    let mut buf = BytesMut::new();
    put_lookup_response(&mut buf, b"OK");
    assert_eq!(&buf[..], b"\0\0\0\x02OK");
    put_lookup_response(&mut buf, b"E_INVALID x");
    assert_eq!(
        take_lookup_response(&mut buf, 100),
        Ok(Some(Bytes::from_static(b"OK")))
    );
    let mut partial = buf.split_to(6);
    assert_eq!(take_lookup_response(&mut partial, 100), Ok(None));
    partial.unsplit(buf);
    assert_eq!(
        take_lookup_response(&mut partial, 100),
        Ok(Some(Bytes::from_static(b"E_INVALID x")))
    );
    assert!(partial.is_empty());
    let mut big = BytesMut::from(&b"\0\0\x01\0"[..]);
    assert!(take_lookup_response(&mut big, 100).is_err());
    let mut neg = BytesMut::from(&b"\xff\xff\xff\xff"[..]);
    assert!(take_lookup_response(&mut neg, 100).is_err());
}

#[test]
fn peer_info() {
    let p = PeerInfo {
        broadcast_address: "lookup1".into(),
        hostname: "lookup1".into(),
        http_port: 4161,
        tcp_port: 4160,
        version: "1.3.0".into(),
        ..Default::default()
    };
    let json = p.to_json();
    assert_eq!(
        String::from_utf8(json.clone()).unwrap(),
        r#"{"broadcast_address":"lookup1","hostname":"lookup1","http_port":4161,"tcp_port":4160,"version":"1.3.0"}"#
    );
    assert_eq!(json.len(), 0x67);
    assert_eq!(parse_peer_info(&json).unwrap(), p);
    let p2 = parse_peer_info(
        br#"{"BROADCAST_ADDRESS":"a","Tcp_Port":1,"http_port":2,"version":"v","remote_address":"x","extra":[1]}"#,
    )
    .unwrap();
    assert_eq!(
        (p2.broadcast_address.as_str(), p2.tcp_port, p2.http_port),
        ("a", 1, 2)
    );

    let decode_err = "E_BAD_BODY IDENTIFY failed to decode JSON body";
    let missing = "E_BAD_BODY IDENTIFY missing fields";
    for (body, want) in [
        (&b""[..], decode_err),
        (b"[]", decode_err),
        (br#"{"tcp_port":4150.5}"#, decode_err),
        (br#"{"tcp_port":"4150"}"#, decode_err),
        (br#"{"remote_address":5}"#, decode_err),
        (b"null", missing),
        (
            br#"{"broadcast_address":"a","tcp_port":1,"http_port":2}"#,
            missing,
        ),
        (
            br#"{"broadcast_address":"","tcp_port":1,"http_port":2,"version":"v"}"#,
            missing,
        ),
        (
            br#"{"broadcast_address":"a","tcp_port":0,"http_port":2,"version":"v"}"#,
            missing,
        ),
        (
            br#"{"broadcast_address":"a","tcp_port":1,"version":"v"}"#,
            missing,
        ),
    ] {
        assert_eq!(
            parse_peer_info(body).unwrap_err().to_string(),
            want,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

/// Ours: a replicating nsqd's IDENTIFY carries `"replication":{"group":…}` (keys stay
/// alphabetical); a `replication` that is not such an object is ignored, as NSQ's nsqlookupd
/// ignores the key altogether.
#[test]
fn peer_info_with_a_replication_group() {
    let p = PeerInfo {
        broadcast_address: "a".into(),
        hostname: "h".into(),
        http_port: 2,
        replication: Some(ReplicationInfo {
            group: "0123456789abcdef".into(),
        }),
        tcp_port: 1,
        version: "v".into(),
    };
    let json = p.to_json();
    assert_eq!(
        String::from_utf8(json.clone()).unwrap(),
        r#"{"broadcast_address":"a","hostname":"h","http_port":2,"replication":{"group":"0123456789abcdef"},"tcp_port":1,"version":"v"}"#
    );
    assert_eq!(parse_peer_info(&json).unwrap(), p);
    let base = r#""broadcast_address":"a","tcp_port":1,"http_port":2,"version":"v""#;
    for other in [r#"5"#, r#"null"#, r#"{"group":7}"#, r#"{}"#, r#""x""#] {
        let body = format!(r#"{{{base},"replication":{other}}}"#);
        assert_eq!(
            parse_peer_info(body.as_bytes()).unwrap().replication,
            None,
            "{body}"
        );
    }
    let body = format!(r#"{{{base},"replication":{{"group":""}}}}"#);
    assert_eq!(
        parse_peer_info(body.as_bytes()).unwrap().replication,
        Some(ReplicationInfo::default())
    );
}
