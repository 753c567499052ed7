//! In-process V2 protocol tests: the daemon on 127.0.0.1:0, raw bytes in, exact bytes out.

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::{channel, start, start_with, v2};
use nsq_protocol::frame::take_frame;
use nsq_testkit::sized;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn pub_cmd(topic: &str, body: &[u8]) -> Vec<u8> {
    sized(&format!("PUB {topic}\n"), body)
}

#[tokio::test]
async fn bad_magic_gets_e_bad_protocol_bytes() {
    let (h, _d) = start().await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    s.write_all(b"  V1").await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL");
    h.shutdown().await;
}

#[tokio::test]
async fn pub_ok_exact_bytes() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    c.send(b"PUB t\n\0\0\0\x05hello").await;
    let mut got = [0u8; 10];
    c.s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"\x00\x00\x00\x06\x00\x00\x00\x00OK");
    assert_eq!(h.nsqd.engine.get_topic("t").unwrap().depth(), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn invalid_commands_are_fatal() {
    let (h, _d) = start().await;
    for (line, err) in [
        (&b"FOO\n"[..], "E_INVALID invalid command FOO"),
        (b"pub t\n", "E_INVALID invalid command pub"),
        (b"\n", "E_INVALID invalid command "),
        (b"PUB  t\n", "E_BAD_TOPIC PUB topic name \"\" is not valid"),
        (b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
        (b"RDY 1\n", "E_INVALID cannot RDY in current state"),
        (
            b"FIN 0123456789abcdef\n",
            "E_INVALID cannot FIN in current state",
        ),
        (b"CLS\n", "E_INVALID cannot CLS in current state"),
        (
            b"SUB t\n",
            "E_INVALID SUB insufficient number of parameters",
        ),
        (
            b"SUB t a#b\n",
            "E_BAD_CHANNEL SUB channel name \"a#b\" is not valid",
        ),
        (
            b"DPUB t 3600001\n",
            "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
        ),
        (b"DPUB t -1\n", "E_INVALID DPUB could not parse timeout -1"),
    ] {
        let mut c = v2(&h).await;
        c.send(line).await;
        c.expect_fatal(err).await;
    }
    h.shutdown().await;
}

#[tokio::test]
async fn body_size_errors() {
    let (h, _d) = start().await;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"PUB t\n\0\0\0\0".to_vec(),
            "E_BAD_MESSAGE PUB invalid message body size 0",
        ),
        (
            b"PUB t\n\xff\xff\xff\xff".to_vec(),
            "E_BAD_MESSAGE PUB invalid message body size -1",
        ),
        (
            b"PUB t\n\x00\x10\x00\x01".to_vec(),
            "E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
        ),
        (
            b"MPUB t\n\0\0\0\x04\0\0\0\0".to_vec(),
            "E_BAD_BODY MPUB invalid message count 0",
        ),
        (
            b"MPUB t\n\x00\x50\x00\x01".to_vec(),
            "E_BAD_BODY MPUB body too big 5242881 > 5242880",
        ),
        (
            b"MPUB a/b\n".to_vec(),
            "E_BAD_TOPIC E_BAD_TOPIC MPUB topic name \"a/b\" is not valid",
        ),
        (
            b"IDENTIFY\n\0\0\0\0".to_vec(),
            "E_BAD_BODY IDENTIFY invalid body size 0",
        ),
        (
            sized("IDENTIFY\n", b"not json"),
            "E_BAD_BODY IDENTIFY failed to decode JSON body",
        ),
        (
            sized("IDENTIFY\n", br#"{"heartbeat_interval":999}"#),
            "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid",
        ),
        (
            sized("IDENTIFY\n", br#"{"sample_rate":100}"#),
            "E_BAD_BODY IDENTIFY sample rate (100) is invalid",
        ),
        (sized("AUTH\n", b"secret"), "E_AUTH_DISABLED AUTH disabled"),
    ];
    for (bytes, err) in cases {
        let mut c = v2(&h).await;
        c.send(&bytes).await;
        c.expect_fatal(err).await;
    }
    h.shutdown().await;
}

#[tokio::test]
async fn line_too_long_closes_without_frame() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    let mut line = vec![b'N'; 16385];
    line[16384] = b'\n';
    c.send(&line).await;
    c.expect_closed().await;
    // 16384 bytes including the newline is still a line: an unknown command.
    let mut c = v2(&h).await;
    let mut line = vec![b'N'; 16384];
    line[16383] = b'\n';
    c.send(&line).await;
    let f = c.frame().await.unwrap();
    assert_eq!(f.frame_type, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn identify_feature_negotiation_json() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    c.send(&sized(
        "IDENTIFY\n",
        br#"{"feature_negotiation":true,"client_id":"x","unknown_key":1}"#,
    ))
    .await;
    c.expect_response(br#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#).await;
    c.send_ok(&sized("IDENTIFY\n", br#"{}"#)).await;
    c.send_ok(b"SUB t c\n").await;
    c.send(&sized("IDENTIFY\n", br#"{}"#)).await;
    c.expect_fatal("E_INVALID cannot IDENTIFY in current state")
        .await;
    h.shutdown().await;
}

#[tokio::test]
async fn rdy_window_fin_req_touch() {
    let (h, _d) = start().await;
    let mut p = v2(&h).await;
    let mut sub = v2(&h).await;
    sub.send_ok(b"SUB t c\n").await;
    for i in 0..5 {
        p.send_ok(&pub_cmd("t", format!("m{i}").as_bytes())).await;
    }
    sub.send(b"RDY 3\n").await;
    let m1 = sub.message().await;
    let m2 = sub.message().await;
    let m3 = sub.message().await;
    assert_eq!((m1.attempts, &m1.body[..]), (1, &b"m0"[..]));
    assert_eq!(&m2.body[..], b"m1");
    assert_eq!(&m3.body[..], b"m2");
    let ch = channel(&h, "t", "c");
    assert_eq!(ch.stats().in_flight_count, 3);

    // Lower the window; FINs below it deliver nothing until in-flight < RDY.
    sub.send(b"RDY 1\n").await;
    sub.send(format!("FIN {}\nFIN {}\n", m1.id, m2.id).as_bytes())
        .await;
    sub.send(format!("TOUCH {}\n", m3.id).as_bytes()).await;
    // Unknown ID: non-fatal error, connection stays.
    sub.send(b"FIN 0000000000000000\n").await;
    sub.expect_error("E_FIN_FAILED FIN 0000000000000000 failed ID not in flight")
        .await;
    // REQ 0 puts it at the tail: m3 and m4 come first, then it again with attempts 2.
    sub.send(format!("REQ {} 0\n", m3.id).as_bytes()).await;
    let m4 = sub.message().await;
    assert_eq!((&m4.body[..], m4.attempts), (&b"m3"[..], 1));
    sub.send(format!("FIN {}\nFIN {}\n", m4.id, m4.id).as_bytes())
        .await;
    // The error and the next message race (separate reader and delivery loops).
    let (a, b) = (sub.frame().await.unwrap(), sub.frame().await.unwrap());
    let (err, msg) = if a.frame_type == 1 { (a, b) } else { (b, a) };
    assert_eq!(
        String::from_utf8_lossy(&err.data),
        format!("E_FIN_FAILED FIN {} failed ID not in flight", m4.id)
    );
    let m5 = nsq_protocol::message::decode(msg.data).unwrap();
    assert_eq!(&m5.body[..], b"m4");
    sub.send(format!("FIN {}\n", m5.id).as_bytes()).await;
    let again = sub.message().await;
    assert_eq!(
        (again.id, again.attempts, &again.body[..]),
        (m3.id, 2, &b"m2"[..])
    );
    let m5 = again;

    // Another connection cannot FIN it.
    let mut other = v2(&h).await;
    other.send_ok(b"SUB t c\n").await;
    for (cmd, args) in [("FIN", ""), ("REQ", " 0"), ("TOUCH", "")] {
        other
            .send(format!("{cmd} {}{args}\n", m5.id).as_bytes())
            .await;
        other
            .expect_error(&format!(
                "E_{cmd}_FAILED {cmd} {} failed client does not own message",
                m5.id
            ))
            .await;
    }

    // Bad ID length and RDY range are fatal.
    sub.send(b"RDY 2501\n").await;
    sub.expect_fatal("E_INVALID RDY count 2501 out of range 0-2500")
        .await;
    other.send(b"FIN 123\n").await;
    other.expect_fatal("E_INVALID invalid message ID").await;
    h.shutdown().await;
}

#[tokio::test]
async fn cls_then_closing_state_rules() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    c.send_ok(b"SUB t c\nCLS\n").await;
    c.expect_response(b"CLOSE_WAIT").await;
    // RDY is silently ignored in CLOSING, PUB still works.
    c.send(b"RDY 10\n").await;
    c.send_ok(&pub_cmd("t", b"x")).await;
    c.send(b"CLS\n").await;
    c.expect_fatal("E_INVALID cannot CLS in current state")
        .await;
    h.shutdown().await;
}

#[tokio::test]
async fn mpub_parses_by_count_and_dpub_defers() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    // Declared total 100 but only 14 real bytes, followed by a PUB: two OKs.
    let mut b = b"MPUB t\n\x00\x00\x00\x64\x00\x00\x00\x01\x00\x00\x00\x06hello1".to_vec();
    b.extend(pub_cmd("t", b"after"));
    c.send_ok(&b).await;
    c.expect_response(b"OK").await;
    assert_eq!(h.nsqd.engine.get_topic("t").unwrap().depth(), 2);
    let mut sub = v2(&h).await;
    sub.send_ok(b"SUB d c\n").await;
    c.send_ok(&sized("DPUB d 60000\n", b"later")).await;
    let ch = h
        .nsqd
        .engine
        .get_topic("d")
        .unwrap()
        .get_channel("c")
        .unwrap();
    assert_eq!(ch.stats().deferred_count, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn sub_consumer_limit() {
    let (h, _d) = start_with(&["--max-channel-consumers=1"]).await;
    let mut a = v2(&h).await;
    a.send_ok(b"SUB t c\n").await;
    let mut b = v2(&h).await;
    b.send(b"SUB t c\n").await;
    b.expect_fatal("E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1")
        .await;
    h.shutdown().await;
}

#[tokio::test]
async fn heartbeat_then_close_when_silent() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    c.send_ok(&sized("IDENTIFY\n", br#"{"heartbeat_interval":1000}"#))
        .await;
    let start = std::time::Instant::now();
    // The first frame after ~1 s is a heartbeat.
    let f = c.any_frame().await.expect("a heartbeat");
    assert_eq!(&f.data[..], b"_heartbeat_");
    // Never answering: the server closes after ~2 heartbeats.
    c.rest().await;
    assert!(start.elapsed() >= Duration::from_millis(1500));
    h.shutdown().await;
}

#[tokio::test]
async fn msg_timeout_requeues() {
    let (h, _d) = start().await;
    let mut p = v2(&h).await;
    let mut c = v2(&h).await;
    c.send_ok(&sized("IDENTIFY\n", br#"{"msg_timeout":1000}"#))
        .await;
    c.send_ok(b"SUB t c\nRDY 1\n").await;
    p.send_ok(&pub_cmd("t", b"x")).await;
    let m = c.message().await;
    assert_eq!(m.attempts, 1);
    let again = c.message().await;
    assert_eq!((again.id, again.attempts), (m.id, 2));
    let ch = channel(&h, "t", "c");
    assert_eq!(ch.stats().timeout_count, 1);
    h.shutdown().await;
}

#[tokio::test]
async fn fatal_error_does_not_disturb_other_clients() {
    let (h, _d) = start().await;
    let mut sub = v2(&h).await;
    sub.send_ok(b"SUB t c\nRDY 100\n").await;
    let mut bad = v2(&h).await;
    bad.send(b"\xff\xfe garbage\n").await;
    assert_eq!(bad.frame().await.unwrap().frame_type, 1);
    let mut p = v2(&h).await;
    p.send_ok(&pub_cmd("t", b"still")).await;
    assert_eq!(&sub.message().await.body[..], b"still");
    h.shutdown().await;
}

/// The read deadline covers a whole command (nsqd/protocol_v2.go, IOLoop sets it once per
/// command): a PUB body sent one byte per 1.5 s must not keep the connection open past
/// 2 × heartbeat, although every single read comes well within it; the PUB then fails with
/// its body's read error.
#[tokio::test]
async fn trickled_body_hits_the_command_read_deadline() {
    let (h, _d) = start().await;
    let mut c = v2(&h).await;
    c.send_ok(&sized("IDENTIFY\n", br#"{"heartbeat_interval":1000}"#))
        .await;
    let start = std::time::Instant::now();
    let mut head = b"PUB t\n".to_vec();
    head.extend_from_slice(&10u32.to_be_bytes());
    c.send(&head).await;
    // Trickle the body from a second task while this one waits for the close.
    let (mut rd, mut wr) = c.s.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            if wr.write_all(b"x").await.is_err() {
                return;
            }
        }
    });
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut rest))
        .await
        .expect("connection closed before the body was complete")
        .ok();
    let took = start.elapsed();
    // Closed at ~2 s (2 × heartbeat from the command's start), long before the 15 s the body
    // takes; no OK was sent (heartbeats may have been), and the last frame is the body's read
    // error, as the reference's `io.ReadFull` fails on the deadline (nsqd/protocol_v2.go, PUB).
    assert!(took >= Duration::from_millis(1500), "closed after {took:?}");
    assert!(took < Duration::from_secs(9), "closed only after {took:?}");
    let mut buf = BytesMut::from(&rest[..]);
    let mut frames = Vec::new();
    while let Some(f) = take_frame(&mut buf).unwrap() {
        frames.push((f.frame_type, f.data.to_vec()));
    }
    let last = frames.pop().expect("an error frame");
    assert_eq!(
        (last.0, String::from_utf8_lossy(&last.1).into_owned()),
        (
            1,
            "E_BAD_MESSAGE PUB failed to read message body".to_string()
        )
    );
    for (t, data) in frames {
        assert_eq!((t, &data[..]), (0, &b"_heartbeat_"[..]));
    }
    trickle.abort();
    h.shutdown().await;
}

/// A saturated client (RDY 64, all in flight) that FINs one message per write, as go-nsq
/// does, gets every message exactly once: each freed slot is refilled, also when a FIN frees
/// just one (the writer is woken only when the window opens), with or without unbuffered
/// output requested in IDENTIFY.
#[tokio::test]
async fn saturated_client_gets_every_message_one_fin_per_write() {
    for identify in [None, Some(r#"{"output_buffer_timeout":-1}"#)] {
        let (h, _d) = start().await;
        let mut p = v2(&h).await;
        let mut body = 300u32.to_be_bytes().to_vec();
        for i in 0..300 {
            let m = format!("m{i:03}");
            body.extend_from_slice(&(m.len() as u32).to_be_bytes());
            body.extend_from_slice(m.as_bytes());
        }
        p.send(&sized("MPUB t\n", &body)).await;
        p.expect_response(b"OK").await;

        let mut sub = v2(&h).await;
        if let Some(json) = identify {
            sub.send(&sized("IDENTIFY\n", json.as_bytes())).await;
            sub.expect_response(b"OK").await;
        }
        sub.send(b"SUB t c\nRDY 64\n").await;
        sub.expect_response(b"OK").await;
        let mut window = Vec::new();
        for _ in 0..64 {
            window.push(sub.message().await);
        }
        let mut seen: Vec<String> = Vec::new();
        // One FIN: below the batch, delivered by the hold timer.
        let m = window.remove(0);
        seen.push(String::from_utf8_lossy(&m.body).into());
        sub.send(format!("FIN {}\n", m.id).as_bytes()).await;
        window.push(sub.message().await);
        // Then one write per FIN, as go-nsq does, until everything has come.
        while let Some(m) = (!window.is_empty()).then(|| window.remove(0)) {
            assert_eq!(m.attempts, 1);
            seen.push(String::from_utf8_lossy(&m.body).into());
            sub.send(format!("FIN {}\n", m.id).as_bytes()).await;
            if seen.len() + window.len() < 300 {
                // Drain whatever has arrived; at least one frame per 16 FINs must come.
                if seen.len().is_multiple_of(16) {
                    window.push(sub.message().await);
                }
                while let Some(f) = sub.buffered_frame() {
                    if f.frame_type == 2 {
                        window.push(nsq_protocol::message::decode(f.data).unwrap());
                    }
                }
            }
            if window.is_empty() && seen.len() < 300 {
                window.push(sub.message().await);
            }
        }
        seen.sort();
        let want: Vec<String> = (0..300).map(|i| format!("m{i:03}")).collect();
        assert_eq!(seen, want, "identify {identify:?}");
    }
}

/// Commands other than FIN on a saturated (parked) connection are still answered, and a
/// failed FIN still gets its error; closing such a connection is still noticed.
#[tokio::test]
async fn saturated_connection_still_answers_other_commands() {
    saturated_connection(&[]).await;
}

/// The same with parking turned off: the saturated connection is read on readiness.
#[tokio::test]
async fn saturated_connection_without_parked_reads() {
    saturated_connection(&["--parked-reads=false"]).await;
}

async fn saturated_connection(flags: &[&str]) {
    let (h, _d) = start_with(flags).await;
    assert_eq!(h.nsqd.tcp.parked_reads, flags.is_empty());
    let mut p = v2(&h).await;
    let mut body = 100u32.to_be_bytes().to_vec();
    for i in 0..100 {
        let m = format!("m{i:03}");
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(m.as_bytes());
    }
    p.send(&sized("MPUB t\n", &body)).await;
    p.expect_response(b"OK").await;

    let mut sub = v2(&h).await;
    sub.send(b"SUB t c\nRDY 64\n").await;
    sub.expect_response(b"OK").await;
    let mut got = Vec::new();
    for _ in 0..64 {
        got.push(sub.message().await);
    }
    // Saturated: 64 of RDY 64 in flight. A PUB, a TOUCH and a bad FIN are all answered.
    sub.send(&pub_cmd("other", b"x")).await;
    sub.expect_response(b"OK").await;
    sub.send(format!("TOUCH {}\nFIN 0000000000000000\n", got[0].id).as_bytes())
        .await;
    sub.expect_error("E_FIN_FAILED FIN 0000000000000000 failed ID not in flight")
        .await;
    let ch = channel(&h, "t", "c");
    assert_eq!(ch.stats().in_flight_count, 64);
    assert_eq!(ch.stats().consumers.len(), 1);
    // Closing while saturated (the reader parked) is noticed: the consumer goes away.
    drop(sub);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ch.stats().consumers.is_empty() {
        assert!(std::time::Instant::now() < deadline, "close not noticed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A body cut short by a half-close: the reference's `io.ReadFull` fails and the command
/// answers with its fatal read error before the connection closes (nsqd/protocol_v2.go,
/// `PUB`, `DPUB`, `readMPUB`, `IDENTIFY`, `AUTH`); an MPUB has created its topic by then. A
/// connection that ends between commands or inside a command line closes silently (`IOLoop`).
#[tokio::test]
async fn body_cut_short_by_a_half_close_gets_the_read_error() {
    let (h, _d) = start().await;
    let cases: &[(&[u8], &str)] = &[
        (
            b"PUB t\n\0\0\0\x0aabc",
            "E_BAD_MESSAGE PUB failed to read message body",
        ),
        (
            b"PUB t\n",
            "E_BAD_MESSAGE PUB failed to read message body size",
        ),
        (
            b"PUB t\n\0\0",
            "E_BAD_MESSAGE PUB failed to read message body size",
        ),
        (
            b"DPUB t 10\n\0\0\0\x0aabc",
            "E_BAD_MESSAGE DPUB failed to read message body",
        ),
        (
            b"MPUB m\n\0\0\0\x20\0\0\0\x02\0\0\0\x01a\0\0",
            "E_BAD_MESSAGE MPUB failed to read message(1) body size",
        ),
        (
            b"MPUB m\n\0\0\0\x20\0\0",
            "E_BAD_BODY MPUB failed to read message count",
        ),
        (
            b"IDENTIFY\n\0\0\0\x10{}",
            "E_BAD_BODY IDENTIFY failed to read body",
        ),
        (b"AUTH\n\0\0\0\x05ab", "E_BAD_BODY AUTH failed to read body"),
        (b"NOP\n", ""),
        (b"PUB t", ""),
    ];
    for (sent, text) in cases {
        let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
        s.write_all(b"  V2").await.unwrap();
        s.write_all(sent).await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
            .await
            .expect("closed within 10 s")
            .unwrap();
        let mut want = Vec::new();
        if !text.is_empty() {
            want.extend_from_slice(&(text.len() as u32 + 4).to_be_bytes());
            want.extend_from_slice(&1u32.to_be_bytes());
            want.extend_from_slice(text.as_bytes());
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "after {:?}",
            String::from_utf8_lossy(sent)
        );
        assert_eq!(got, want);
    }
    assert!(
        h.nsqd.engine.get_topic("m").is_some(),
        "MPUB created its topic"
    );
    assert!(
        h.nsqd.engine.get_topic("t").is_none(),
        "no PUB went through"
    );
    h.shutdown().await;
}
