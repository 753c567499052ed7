//! Exact bytes of every frame, decoder errors, and a round trip over random frames.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::message::MessageId;

const ID: MessageId = MessageId(*b"0123456789abcdef");
const ID_HEX: &str = "30313233343536373839616263646566";

/// Hex digits with spaces for readability, `{id}` standing for [`ID`].
fn hex(s: &str) -> Vec<u8> {
    let s = s.replace("{id}", ID_HEX).replace(' ', "");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn enc(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode(frame, &mut out);
    out
}

/// Encodes, compares with the expected bytes, and decodes them back.
fn check(frame: Frame, expected: &str) {
    let bytes = hex(expected);
    assert_eq!(enc(&frame), bytes, "{frame:?}");
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(decode(&mut buf, MIN_MAX_FRAME).unwrap(), Some(frame));
    assert!(buf.is_empty());
}

#[test]
fn hello_bytes() {
    check(
        Frame::Hello(Hello {
            version: LINK_VERSION,
            node_id: 0x0102030405060708,
            epoch: 3,
            resume: true,
            sync: true,
            previous_unclean: false,
            resume_seq: 9,
            previous_epoch: 2,
            replicas: 2,
            max_frame: 0x0100_0000,
            nsqd_node_id: 617,
            broadcast_address: "h1".into(),
            tcp_port: 4150,
            http_port: 4151,
            nonce: *b"0123456789abcdef",
        }),
        "00000043 01 0005 0102030405060708 0000000000000003 03 0000000000000009 \
         0000000000000002 0002 01000000 0269 02 6831 1036 1037 {id}",
    );
}

#[test]
fn a_hello_of_another_version_is_read_only_as_far_as_its_version_and_node_id() {
    // Version 1 to 4 HELLOs (version 1 had no nonce; version 3 had no STANDBY; version 4 no
    // queue settings) and future ones: they decode to their version and node ID alone, so the replica can answer
    // "unsupported version" (or "not in group").
    for (version, rest, node_id) in [
        (
            1u16,
            "0102030405060708 0000000000000003 03 0000000000000009",
            0x0102030405060708,
        ),
        (2, "0000000000000009", 9),
        (3, "0000000000000009", 9),
        (4, "0000000000000009", 9),
        (6, "0000000000000009", 9),
        (6, "ffff", 0),
    ] {
        let payload = hex(&format!("{version:04x} {rest}"));
        let mut bytes = hex(&format!("{:08x} 01", payload.len() + 1));
        bytes.extend_from_slice(&payload);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut want = Hello::other_version(version);
        want.node_id = node_id;
        assert_eq!(
            decode(&mut buf, MIN_MAX_FRAME).unwrap(),
            Some(Frame::Hello(want))
        );
        assert!(buf.is_empty());
    }
}

#[test]
fn handshake_bytes() {
    check(
        Frame::Challenge(Challenge {
            node_id: 10,
            nonce: *b"0123456789abcdef",
            broadcast_address: "h1".into(),
            tcp_port: 4150,
            proof: Bytes::from_static(b"pr"),
        }),
        "00000021 87 000000000000000a {id} 02 6831 1036 02 7072",
    );
    check(
        Frame::Challenge(Challenge {
            node_id: 10,
            nonce: *b"0123456789abcdef",
            broadcast_address: String::new(),
            tcp_port: 0,
            proof: Bytes::new(),
        }),
        "0000001d 87 000000000000000a {id} 00 0000 00",
    );
    check(
        Frame::Auth {
            proof: Bytes::from_static(b"pr"),
        },
        "00000004 0f 02 7072",
    );
    assert_eq!(
        Frame::Auth {
            proof: Bytes::new()
        }
        .direction(),
        Direction::OriginToReplica
    );
    // A proof above 64 bytes is refused both ways.
    let long = Frame::Auth {
        proof: Bytes::from(vec![0u8; 65]),
    };
    assert_eq!(
        try_encode(&long, &mut Vec::new()),
        Err(FrameError::ProofTooLong(65))
    );
    let mut bytes = hex("00000043 0f 41");
    bytes.extend_from_slice(&[0u8; 65]);
    assert_eq!(
        decode_err(&bytes, MIN_MAX_FRAME),
        FrameError::BadValue {
            frame_type: 0x0f,
            what: "proof length",
            value: 65
        }
    );
}

#[test]
fn lists_longer_than_their_u16_count_are_an_encoding_error() {
    let entry = StatusEntry {
        origin: 1,
        epoch: 1,
        state: BacklogState::Detached,
        last_seq: 0,
        messages: 0,
        bytes: 0,
        complete: false,
        echo: 0,
    };
    let most = Frame::Status(vec![entry; usize::from(u16::MAX)]);
    let mut out = Vec::new();
    try_encode(&most, &mut out).unwrap();
    assert_eq!(&out[5..7], &[0xff, 0xff]);
    let over = Frame::Status(vec![entry; usize::from(u16::MAX) + 1]);
    assert_eq!(
        try_encode(&over, &mut Vec::new()),
        Err(FrameError::ListTooLong(65536))
    );
    let channels = Frame::Fanout(Fanout {
        seq: 1,
        topic: "t".into(),
        more: false,
        channels: vec![String::new(); 65536],
        ids: vec![],
    });
    assert_eq!(
        try_encode(&channels, &mut Vec::new()),
        Err(FrameError::ListTooLong(65536))
    );
}

#[test]
fn pub_bytes() {
    check(
        Frame::Pub(Pub {
            seq: 7,
            topic: "t".into(),
            defer_until: 0,
            channels: vec!["a".into(), "b".into()],
            messages: vec![PubMessage {
                id: ID,
                timestamp: 5,
                body: Bytes::from_static(b"hi"),
            }],
        }),
        "0000003b 02 0000000000000007 0174 0000000000000000 0002 0161 0162 00000001 {id} \
         0000000000000005 00000002 6869",
    );
}

#[test]
fn state_bytes() {
    check(
        Frame::State(Item::Topic(TopicItem {
            topic: "t".into(),
            paused: true,
            settings: vec![],
            channels: vec![ChannelItem {
                name: "a".into(),
                paused: false,
                settings: vec![],
            }],
        })),
        "0000000a 03 01 0174 01 0001 0161 00",
    );
    // Settings follow a flags byte with bit 2; none: the layout of link version 4.
    check(
        Frame::State(Item::Topic(TopicItem {
            topic: "t".into(),
            paused: true,
            settings: vec![("ttl".into(), "60000000000".into())],
            channels: vec![ChannelItem {
                name: "a".into(),
                paused: false,
                settings: vec![("max_attempts".into(), "3".into())],
            }],
        })),
        "0000002b 03 01 0174 03 01 0374746c 0b3630303030303030303030 0001 0161 02 01 \
         0c6d61785f617474656d707473 0133",
    );
    check(
        Frame::State(Item::Message(MessageItem {
            topic: "t".into(),
            id: ID,
            timestamp: 5,
            topic_pending: false,
            topic_due: 0,
            channels: vec![PendingChannel {
                name: "a".into(),
                due: 6,
                attempts: 2,
            }],
            body: Bytes::from_static(b"x"),
        })),
        "00000038 03 02 0174 {id} 0000000000000005 00 0000000000000000 0001 0161 \
         0000000000000006 0002 00000001 78",
    );
}

#[test]
fn settlement_bytes() {
    check(
        Frame::Fin(Fin {
            seq: 8,
            topic: "t".into(),
            channel: "a".into(),
            ids: vec![ID],
        }),
        "00000021 04 0000000000000008 0174 0161 00000001 {id}",
    );
    check(
        Frame::Req(Req {
            seq: 9,
            topic: "t".into(),
            channel: "a".into(),
            entries: vec![ReqEntry {
                id: ID,
                due: 10,
                attempts: 3,
            }],
        }),
        "0000002b 05 0000000000000009 0174 0161 00000001 {id} 000000000000000a 0003",
    );
    check(
        Frame::Fanout(Fanout {
            seq: 10,
            topic: "t".into(),
            more: true,
            channels: vec!["a".into()],
            ids: vec![ID],
        }),
        "00000024 06 000000000000000a 0174 01 0001 0161 00000001 {id}",
    );
    check(
        Frame::Admin(Admin {
            seq: 11,
            op: AdminOp::Delete,
            topic: "t".into(),
            channel: "a".into(),
            settings: vec![],
        }),
        "0000000e 07 000000000000000b 02 0174 0161",
    );
    check(
        Frame::Admin(Admin {
            seq: 12,
            op: AdminOp::Settings,
            topic: "t".into(),
            channel: "a".into(),
            settings: vec![("ttl".into(), "1".into())],
        }),
        "00000015 07 000000000000000c 06 0174 0161 01 0374746c 0131",
    );
    check(
        Frame::Admin(Admin {
            seq: 12,
            op: AdminOp::Settings,
            topic: "t".into(),
            channel: String::new(),
            settings: vec![],
        }),
        "0000000e 07 000000000000000c 06 0174 00 00",
    );
}

#[test]
fn small_origin_frames_bytes() {
    check(
        Frame::CatchupBegin { seq: 12 },
        "00000009 08 000000000000000c",
    );
    check(
        Frame::CatchupEnd { seq: 13 },
        "00000009 09 000000000000000d",
    );
    check(Frame::Goodbye { seq: 14 }, "00000009 0a 000000000000000e");
    check(
        Frame::Drop { epoch: 3, taker: 9 },
        "00000011 0b 0000000000000003 0000000000000009",
    );
    check(Frame::Ping { stamp: 17 }, "00000009 10 0000000000000011");
    check(Frame::Standby { epoch: 5 }, "00000009 11 0000000000000005");
    check(
        Frame::ManifestApplied { epoch: 3 },
        "00000009 0c 0000000000000003",
    );
}

#[test]
fn handoff_bytes() {
    check(
        Frame::Handoff {
            origin: 1,
            epoch: 2,
            item: Item::Topic(TopicItem {
                topic: "t".into(),
                paused: false,
                settings: vec![],
                channels: vec![],
            }),
        },
        "00000017 0d 0000000000000001 0000000000000002 01 0174 00 0000",
    );
    check(
        Frame::HandoffEnd {
            origin: 1,
            epoch: 2,
            items: 5,
        },
        "00000019 0e 0000000000000001 0000000000000002 0000000000000005",
    );
    check(
        Frame::HandoffDone {
            origin: 1,
            epoch: 2,
        },
        "00000011 86 0000000000000001 0000000000000002",
    );
}

#[test]
fn either_direction_bytes() {
    check(Frame::Heartbeat, "00000001 40");
    check(
        Frame::Status(vec![StatusEntry {
            origin: 1,
            epoch: 2,
            state: BacklogState::TakingOver,
            last_seq: 3,
            messages: 4,
            bytes: 5,
            complete: true,
            echo: 6,
        }]),
        "00000035 41 0001 0000000000000001 0000000000000002 03 0000000000000003 \
         0000000000000004 0000000000000005 01 0000000000000006",
    );
    check(
        Frame::Status(vec![StatusEntry {
            origin: 1,
            epoch: 2,
            state: BacklogState::Gone,
            last_seq: 3,
            messages: 0,
            bytes: 0,
            complete: false,
            echo: 0,
        }]),
        "00000035 41 0001 0000000000000001 0000000000000002 05 0000000000000003 \
         0000000000000000 0000000000000000 00 0000000000000000",
    );
    check(
        Frame::Error {
            code: LinkErrorCode::Full,
            text: "full".into(),
        },
        "00000009 42 0002 0004 66756c6c",
    );
}

#[test]
fn replica_frames_bytes() {
    check(
        Frame::Welcome(Welcome {
            version: 1,
            node_id: 10,
            answer: WelcomeAnswer::Catchup,
            last_seq: 0,
            max_frame: 0x0100_0000,
        }),
        "00000018 81 0001 000000000000000a 02 0000000000000000 01000000",
    );
    check(Frame::Ack { seq: 15 }, "00000009 82 000000000000000f");
    check(
        Frame::TakenOver {
            epoch: 2,
            by_node: 10,
            entries: 7,
            last_seq: 8,
        },
        "00000021 83 0000000000000002 000000000000000a 0000000000000007 0000000000000008",
    );
    check(Frame::Pong { stamp: 17 }, "00000009 88 0000000000000011");
    check(
        Frame::Manifest(Manifest {
            epoch: 2,
            topic: "t".into(),
            channel: String::new(),
            ids: vec![ID],
        }),
        "00000020 84 0000000000000002 0174 00 00000001 {id}",
    );
    check(
        Frame::ManifestEnd { epoch: 2 },
        "00000009 85 0000000000000002",
    );
}

#[test]
fn directions_and_seqs() {
    assert_eq!(Frame::Heartbeat.direction(), Direction::Either);
    assert_eq!(
        Frame::Ack { seq: 1 }.direction(),
        Direction::ReplicaToOrigin
    );
    assert_eq!(
        Frame::Goodbye { seq: 1 }.direction(),
        Direction::OriginToReplica
    );
    assert_eq!(Frame::Goodbye { seq: 4 }.seq(), Some(4));
    assert_eq!(Frame::Ack { seq: 4 }.seq(), None);
    assert_eq!(Frame::Drop { epoch: 4, taker: 1 }.seq(), None);
    assert_eq!(
        Frame::Standby { epoch: 1 }.direction(),
        Direction::OriginToReplica
    );
    assert_eq!(
        Frame::Ping { stamp: 1 }.direction(),
        Direction::OriginToReplica
    );
    assert_eq!(
        Frame::Pong { stamp: 1 }.direction(),
        Direction::ReplicaToOrigin
    );
    assert_eq!(Frame::Ping { stamp: 4 }.seq(), None);
}

#[test]
fn the_magic_is_distinct_from_v1_and_v2() {
    assert_eq!(MAGIC_R1, &[0x20, 0x20, 0x52, 0x31]);
    assert_ne!(MAGIC_R1, crate::MAGIC_V2);
    assert_ne!(MAGIC_R1, crate::MAGIC_V1);
}

#[test]
fn partial_input_needs_more_and_consumes_nothing() {
    let bytes = enc(&Frame::Ack { seq: 15 });
    for cut in 0..bytes.len() {
        let mut buf = BytesMut::from(&bytes[..cut]);
        assert_eq!(decode(&mut buf, MIN_MAX_FRAME), Ok(None), "cut at {cut}");
        assert_eq!(buf.len(), cut);
    }
    // Two frames in one buffer come out one at a time.
    let mut two = bytes.clone();
    two.extend_from_slice(&enc(&Frame::Heartbeat));
    let mut buf = BytesMut::from(&two[..]);
    assert_eq!(
        decode(&mut buf, MIN_MAX_FRAME),
        Ok(Some(Frame::Ack { seq: 15 }))
    );
    assert_eq!(decode(&mut buf, MIN_MAX_FRAME), Ok(Some(Frame::Heartbeat)));
    assert_eq!(decode(&mut buf, MIN_MAX_FRAME), Ok(None));
}

fn decode_err(bytes: &[u8], max: u32) -> FrameError {
    decode(&mut BytesMut::from(bytes), max).unwrap_err()
}

#[test]
fn malformed_frames_are_typed_errors() {
    assert_eq!(decode_err(&hex("00000000"), 100), FrameError::EmptyFrame);
    // Oversize is refused from the size field alone.
    assert_eq!(
        decode_err(&hex("00000065"), 100),
        FrameError::Oversize {
            size: 101,
            max: 100
        }
    );
    assert_eq!(
        decode_err(&hex("00000001 7f"), 100),
        FrameError::UnknownType(0x7f)
    );
    assert_eq!(
        decode_err(&hex("00000005 82 00000000"), 100),
        FrameError::Truncated { frame_type: 0x82 }
    );
    assert_eq!(
        decode_err(&hex("0000000a 82 0000000000000001 00"), 100),
        FrameError::TrailingBytes {
            frame_type: 0x82,
            extra: 1
        }
    );
    // A FIN claiming 2^32-1 IDs in a few bytes: refused before allocating.
    assert_eq!(
        decode_err(
            &hex("00000015 04 0000000000000001 0174 0161 ffffffff 00000000"),
            100
        ),
        FrameError::BadCount {
            frame_type: 0x04,
            count: 0xffff_ffff
        }
    );
    assert_eq!(
        decode_err(&hex("0000000e 07 0000000000000001 02 01ff 0161"), 100),
        FrameError::BadUtf8 { frame_type: 0x07 }
    );
    assert_eq!(
        decode_err(&hex("0000000e 07 0000000000000001 09 0174 0161"), 100),
        FrameError::BadValue {
            frame_type: 0x07,
            what: "ADMIN op",
            value: 9
        }
    );
    assert_eq!(
        decode_err(&hex("00000005 42 0009 0000"), 100),
        FrameError::BadValue {
            frame_type: 0x42,
            what: "ERROR code",
            value: 9
        }
    );
    // A body length beyond the frame.
    assert_eq!(
        decode_err(
            &hex("00000035 02 0000000000000001 0174 0000000000000000 0000 00000001 {id} 0000000000000005 00000009"),
            100
        ),
        FrameError::Truncated { frame_type: 0x02 }
    );
    assert_eq!(
        decode_err(&hex("00000002 03 07"), 100),
        FrameError::BadValue {
            frame_type: 0x03,
            what: "item kind",
            value: 7
        }
    );
    assert_eq!(
        FrameError::Oversize {
            size: 101,
            max: 100
        }
        .to_string(),
        "replication frame of 101 bytes is above the limit of 100"
    );
}

#[test]
fn unknown_hello_flags_are_refused() {
    let mut bytes = enc(&Frame::Hello(Hello {
        version: LINK_VERSION,
        node_id: 1,
        epoch: 1,
        resume: false,
        sync: false,
        previous_unclean: false,
        resume_seq: 0,
        previous_epoch: 0,
        replicas: 2,
        max_frame: MIN_MAX_FRAME,
        nsqd_node_id: 0,
        broadcast_address: String::new(),
        tcp_port: 0,
        http_port: 0,
        nonce: [0; NONCE_LEN],
    }));
    bytes[4 + 1 + 2 + 8 + 8] = 0x08;
    assert_eq!(
        decode_err(&bytes, MIN_MAX_FRAME),
        FrameError::BadValue {
            frame_type: 0x01,
            what: "HELLO flags",
            value: 8
        }
    );
}

#[test]
fn names_too_long_for_their_field_are_an_encoding_error() {
    let frame = Frame::Drop { epoch: 1, taker: 2 };
    assert!(try_encode(&frame, &mut Vec::new()).is_ok());
    let frame = Frame::Fin(Fin {
        seq: 1,
        topic: "x".repeat(256),
        channel: "a".into(),
        ids: vec![],
    });
    assert_eq!(
        try_encode(&frame, &mut Vec::new()),
        Err(FrameError::StringTooLong(256))
    );
}

#[test]
fn decode_payload_is_the_frame_without_its_size() {
    let frame = Frame::Fin(Fin {
        seq: 3,
        topic: "t".into(),
        channel: "c".into(),
        ids: vec![ID, ID],
    });
    let mut payload = Vec::new();
    encode_payload(&frame, &mut payload).unwrap();
    assert_eq!(&enc(&frame)[5..], &payload[..]);
    assert_eq!(
        decode_payload(frame.frame_type(), Bytes::from(payload)),
        Ok(frame)
    );
}

// ------------------------------------------------------------------------------------------
// Property tests

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_.#-]{0,12}"
}

fn settings() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((name(), "[ -~]{0,20}"), 0..3)
}

fn id() -> impl Strategy<Value = MessageId> {
    any::<[u8; 16]>().prop_map(MessageId)
}

fn body() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        (
            name(),
            any::<bool>(),
            settings(),
            proptest::collection::vec((name(), any::<bool>(), settings()), 0..4)
        )
            .prop_map(|(topic, paused, settings, chans)| Item::Topic(TopicItem {
                topic,
                paused,
                settings,
                channels: chans
                    .into_iter()
                    .map(|(name, paused, settings)| ChannelItem {
                        name,
                        paused,
                        settings,
                    })
                    .collect(),
            })),
        (
            name(),
            id(),
            any::<i64>(),
            any::<bool>(),
            any::<i64>(),
            proptest::collection::vec((name(), any::<i64>(), any::<u16>()), 0..4),
            body()
        )
            .prop_map(
                |(topic, id, timestamp, topic_pending, topic_due, chans, body)| {
                    Item::Message(MessageItem {
                        topic,
                        id,
                        timestamp,
                        topic_pending,
                        topic_due,
                        channels: chans
                            .into_iter()
                            .map(|(name, due, attempts)| PendingChannel {
                                name,
                                due,
                                attempts,
                            })
                            .collect(),
                        body,
                    })
                }
            ),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    let ids = || proptest::collection::vec(id(), 0..5);
    let names = || proptest::collection::vec(name(), 0..4);
    prop_oneof![
        (
            any::<([u8; 16], u64, u64, bool, bool, bool, u64, u64)>(),
            any::<(u16, u32, u16, u16, u16)>(),
            name()
        )
            .prop_map(
                |(
                    (
                        nonce,
                        node_id,
                        epoch,
                        resume,
                        sync,
                        previous_unclean,
                        resume_seq,
                        previous_epoch,
                    ),
                    (replicas, max_frame, nsqd_node_id, tcp_port, http_port),
                    broadcast_address,
                )| Frame::Hello(Hello {
                    version: LINK_VERSION,
                    node_id,
                    epoch,
                    resume,
                    sync,
                    previous_unclean,
                    resume_seq,
                    previous_epoch,
                    replicas,
                    max_frame,
                    nsqd_node_id,
                    broadcast_address,
                    tcp_port,
                    http_port,
                    nonce,
                })
            ),
        (
            any::<u64>(),
            name(),
            any::<i64>(),
            names(),
            proptest::collection::vec((id(), any::<i64>(), body()), 0..4)
        )
            .prop_map(|(seq, topic, defer_until, channels, msgs)| Frame::Pub(Pub {
                seq,
                topic,
                defer_until,
                channels,
                messages: msgs
                    .into_iter()
                    .map(|(id, timestamp, body)| PubMessage {
                        id,
                        timestamp,
                        body
                    })
                    .collect(),
            })),
        item().prop_map(Frame::State),
        (any::<u64>(), name(), name(), ids()).prop_map(|(seq, topic, channel, ids)| {
            Frame::Fin(Fin {
                seq,
                topic,
                channel,
                ids,
            })
        }),
        (
            any::<u64>(),
            name(),
            name(),
            proptest::collection::vec((id(), any::<i64>(), any::<u16>()), 0..4)
        )
            .prop_map(|(seq, topic, channel, e)| Frame::Req(Req {
                seq,
                topic,
                channel,
                entries: e
                    .into_iter()
                    .map(|(id, due, attempts)| ReqEntry { id, due, attempts })
                    .collect(),
            })),
        (any::<u64>(), name(), any::<bool>(), names(), ids()).prop_map(
            |(seq, topic, more, channels, ids)| Frame::Fanout(Fanout {
                seq,
                topic,
                more,
                channels,
                ids,
            })
        ),
        (any::<u64>(), 1u8..=6, name(), name(), settings()).prop_map(
            |(seq, op, topic, channel, settings)| {
                let op = [
                    AdminOp::Create,
                    AdminOp::Delete,
                    AdminOp::Empty,
                    AdminOp::Pause,
                    AdminOp::Unpause,
                    AdminOp::Settings,
                ][op as usize - 1];
                // Only a settings change carries settings.
                let settings = if op == AdminOp::Settings {
                    settings
                } else {
                    Vec::new()
                };
                Frame::Admin(Admin {
                    seq,
                    op,
                    topic,
                    channel,
                    settings,
                })
            }
        ),
        any::<u64>().prop_map(|seq| Frame::CatchupBegin { seq }),
        any::<u64>().prop_map(|seq| Frame::CatchupEnd { seq }),
        any::<u64>().prop_map(|seq| Frame::Goodbye { seq }),
        any::<(u64, u64)>().prop_map(|(epoch, taker)| Frame::Drop { epoch, taker }),
        any::<u64>().prop_map(|stamp| Frame::Ping { stamp }),
        any::<u64>().prop_map(|stamp| Frame::Pong { stamp }),
        any::<u64>().prop_map(|epoch| Frame::ManifestApplied { epoch }),
        any::<u64>().prop_map(|epoch| Frame::Standby { epoch }),
        (any::<u64>(), any::<u64>(), item()).prop_map(|(origin, epoch, item)| Frame::Handoff {
            origin,
            epoch,
            item
        }),
        any::<(u64, u64, u64)>().prop_map(|(origin, epoch, items)| Frame::HandoffEnd {
            origin,
            epoch,
            items
        }),
        Just(Frame::Heartbeat),
        proptest::collection::vec(any::<(u64, u64, u64, u64, u64, u64)>(), 0..4).prop_map(|v| {
            Frame::Status(
                v.into_iter()
                    .enumerate()
                    .map(
                        |(i, (origin, epoch, last_seq, messages, bytes, echo))| StatusEntry {
                            origin,
                            epoch,
                            state: [
                                BacklogState::Replicating,
                                BacklogState::Detached,
                                BacklogState::TakingOver,
                                BacklogState::TakenOver,
                                BacklogState::Gone,
                            ][i % 5],
                            last_seq,
                            messages,
                            bytes,
                            complete: i % 2 == 0,
                            echo,
                        },
                    )
                    .collect(),
            )
        }),
        ("[ -~]{0,30}", 0usize..6).prop_map(|(text, c)| Frame::Error {
            code: [
                LinkErrorCode::BadFrame,
                LinkErrorCode::Full,
                LinkErrorCode::OutOfSequence,
                LinkErrorCode::NotInGroup,
                LinkErrorCode::Internal,
                LinkErrorCode::UnsupportedVersion,
            ][c],
            text,
        }),
        any::<(u16, u64, bool, u64, u32)>().prop_map(
            |(version, node_id, resume, last_seq, max_frame)| Frame::Welcome(Welcome {
                version,
                node_id,
                answer: if resume {
                    WelcomeAnswer::Resume
                } else {
                    WelcomeAnswer::Catchup
                },
                last_seq,
                max_frame,
            })
        ),
        any::<u64>().prop_map(|seq| Frame::Ack { seq }),
        any::<(u64, u64, u64, u64)>().prop_map(|(epoch, by_node, entries, last_seq)| {
            Frame::TakenOver {
                epoch,
                by_node,
                entries,
                last_seq,
            }
        }),
        (any::<u64>(), name(), name(), ids()).prop_map(|(epoch, topic, channel, ids)| {
            Frame::Manifest(Manifest {
                epoch,
                topic,
                channel,
                ids,
            })
        }),
        any::<u64>().prop_map(|epoch| Frame::ManifestEnd { epoch }),
        any::<(u64, u64)>().prop_map(|(origin, epoch)| Frame::HandoffDone { origin, epoch }),
        (
            any::<(u64, [u8; 16], u16)>(),
            name(),
            proptest::collection::vec(any::<u8>(), 0..=MAX_PROOF_LEN)
        )
            .prop_map(|((node_id, nonce, tcp_port), broadcast_address, proof)| {
                Frame::Challenge(Challenge {
                    node_id,
                    nonce,
                    broadcast_address,
                    tcp_port,
                    proof: Bytes::from(proof),
                })
            }),
        proptest::collection::vec(any::<u8>(), 0..=MAX_PROOF_LEN).prop_map(|p| Frame::Auth {
            proof: Bytes::from(p)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any sequence of frames, encoded back to back and fed in arbitrary chunks, decodes to
    /// the same frames.
    #[test]
    fn round_trip_in_chunks(
        frames in proptest::collection::vec(frame(), 1..6),
        chunks in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let mut wire = Vec::new();
        for f in &frames {
            encode(f, &mut wire);
        }
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut i = 0;
        while pos < wire.len() {
            let n = chunks[i % chunks.len()].min(wire.len() - pos);
            buf.extend_from_slice(&wire[pos..pos + n]);
            pos += n;
            i += 1;
            while let Some(f) = decode(&mut buf, MIN_MAX_FRAME).unwrap() {
                out.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(out, frames);
    }

    /// Arbitrary bytes never panic: the decoder answers a frame, "need more" or an error.
    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = decode(&mut buf, 1024) {}
    }

    /// Any payload after a known type byte either decodes to a frame that re-encodes to
    /// exactly those bytes, or is refused. (A HELLO of another link version is read only as
    /// far as its version: the one exception.)
    #[test]
    fn payload_decoding_is_canonical(ty in prop::sample::select(vec![
        0x01u8, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0d, 0x0f, 0x41, 0x42, 0x81, 0x84,
        0x87,
    ]), payload in proptest::collection::vec(any::<u8>(), 0..96)) {
        let decoded = decode_payload(ty, Bytes::from(payload.clone()));
        if let Ok(Frame::Hello(h)) = &decoded {
            if h.version != LINK_VERSION {
                let mut want = Hello::other_version(h.version);
                want.node_id = h.node_id;
                prop_assert_eq!(h, &want);
                return Ok(());
            }
        }
        if let Ok(frame) = decoded {
            let mut again = Vec::new();
            encode_payload(&frame, &mut again).unwrap();
            prop_assert_eq!(again, payload);
        }
    }
}
