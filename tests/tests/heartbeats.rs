//! Heartbeats and the read deadline: with IDENTIFY `heartbeat_interval` 1000 a `_heartbeat_`
//! arrives about a second later; a client that never answers is disconnected after about two
//! intervals, while one that answers with NOP stays connected. Timing assertions are loose.

use std::time::{Duration, Instant};

use nsq_integration_tests::{describe, Nsqd, ReadError};
use nsq_protocol::frame::HEARTBEAT;

#[test]
fn silent_client_gets_heartbeat_then_is_disconnected() {
    let nsqd = Nsqd::start(&[]);
    let mut c = nsqd.connect();
    c.auto_nop = false;
    let f = c.identify(r#"{"heartbeat_interval":1000}"#);
    assert_eq!(
        (f.frame_type, &f.data[..]),
        (0, &b"OK"[..]),
        "{}",
        describe(&f)
    );
    let identified = Instant::now();

    let f = c
        .read_frame(Duration::from_secs(5))
        .expect("a heartbeat within 5 s");
    assert_eq!(
        (f.frame_type, &f.data[..]),
        (0, HEARTBEAT),
        "{}",
        describe(&f)
    );
    let first_heartbeat = identified.elapsed();

    // No NOP: the server closes the connection (~2 s after the last command), no error frame.
    let deadline = identified + Duration::from_secs(5);
    loop {
        match c.read_frame(deadline.saturating_duration_since(Instant::now())) {
            Ok(f) if f.frame_type == 0 && f.data == HEARTBEAT => continue,
            Ok(f) => panic!("unexpected {}", describe(&f)),
            Err(ReadError::Closed) => break,
            Err(e) => panic!("connection not closed within 5 s of IDENTIFY: {e:?}"),
        }
    }
    let closed = identified.elapsed();
    eprintln!("first heartbeat after {first_heartbeat:?}, closed after {closed:?}");
    assert!(
        closed >= Duration::from_millis(1000),
        "closed after only {closed:?}"
    );
}

#[test]
fn client_answering_nop_stays_connected() {
    let nsqd = Nsqd::start(&[]);
    let mut c = nsqd.connect();
    c.auto_nop = false;
    let f = c.identify(r#"{"heartbeat_interval":1000}"#);
    assert_eq!(&f.data[..], b"OK", "{}", describe(&f));
    let until = Instant::now() + Duration::from_secs(5);
    let mut heartbeats = 0;
    while Instant::now() < until {
        let f = c
            .read_frame(Duration::from_secs(5))
            .expect("heartbeats keep coming");
        assert_eq!(
            (f.frame_type, &f.data[..]),
            (0, HEARTBEAT),
            "{}",
            describe(&f)
        );
        heartbeats += 1;
        c.write_raw(b"NOP\n").expect("NOP");
    }
    assert!(
        heartbeats >= 3,
        "only {heartbeats} heartbeats in 5 s with a 1 s interval"
    );
    // Still usable.
    c.publish("hb", b"still here");
}

#[test]
fn identify_heartbeat_interval_bounds() {
    let nsqd = Nsqd::start(&[]);
    for (json, err) in [
        (
            r#"{"heartbeat_interval":999}"#,
            &b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"[..],
        ),
        (
            r#"{"heartbeat_interval":-2}"#,
            b"E_BAD_BODY IDENTIFY heartbeat interval (-2) is invalid",
        ),
        (
            r#"{"heartbeat_interval":60001}"#,
            b"E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid",
        ),
    ] {
        let mut c = nsqd.connect();
        let f = c.identify(json);
        assert_eq!(
            (f.frame_type, &f.data[..]),
            (1, err),
            "{json}: {}",
            describe(&f)
        );
        c.expect_closed(Duration::from_secs(10));
    }
    // -1 disables heartbeats, and then SUB is refused.
    let mut c = nsqd.connect();
    let f = c.identify(r#"{"heartbeat_interval":-1}"#);
    assert_eq!(&f.data[..], b"OK", "{}", describe(&f));
    c.send(&[nsq_protocol::command::Command::Sub {
        topic: "hb".into(),
        channel: "c".into(),
    }]);
    c.expect_fatal(b"E_INVALID cannot SUB with heartbeats disabled");
}
