//! Bad input robustness: each malformed command gets its exact error text (Go `%q` quoting
//! where the reference uses it) and closes only its own connection; abrupt disconnects and
//! 1000 half-open connections leave the daemon serving. Throughout, a second, healthy consumer
//! keeps streaming and must receive every message published meanwhile.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::{http_get, Bytes, Nsqd, ReadError, V2Conn};

/// A consumer on `healthy/ch` running in its own thread, FINing everything it gets.
struct HealthyConsumer {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Bytes>>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl HealthyConsumer {
    fn start(nsqd: &Nsqd) -> HealthyConsumer {
        let mut c = nsqd.connect();
        c.subscribe("healthy", "ch");
        c.rdy(100);
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(Mutex::new(Vec::new()));
        let (stop2, got2) = (stop.clone(), got.clone());
        let handle = thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                let batch = c.messages(Duration::from_millis(200));
                c.fin_all(batch.iter().map(|m| &m.id));
                got2.lock()
                    .expect("lock")
                    .extend(batch.into_iter().map(|m| m.body));
            }
        });
        HealthyConsumer {
            stop,
            got,
            handle: Some(handle),
        }
    }

    /// Waits until every body in `want` has arrived, then stops and returns all deliveries.
    fn finish(mut self, want: &HashSet<Bytes>) -> Vec<Bytes> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let have: HashSet<Bytes> = self.got.lock().expect("lock").iter().cloned().collect();
            if want.is_subset(&have) || Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        thread::sleep(Duration::from_millis(300)); // anything unexpected still in transit
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .expect("handle")
            .join()
            .expect("healthy consumer thread panicked");
        let got = self.got.lock().expect("lock").clone();
        got
    }
}

/// Publishes numbered messages to `healthy` between the bad inputs.
struct Producer {
    conn: V2Conn,
    sent: HashSet<Bytes>,
}

impl Producer {
    fn tick(&mut self, step: &str) {
        let body = Bytes::from(format!("healthy {} after {step}", self.sent.len()));
        self.conn.publish("healthy", &body);
        self.sent.insert(body);
    }
}

fn fatal(nsqd: &Nsqd, send: &[u8], expect: &[u8]) {
    let mut c = nsqd.connect();
    c.write_raw(send).expect("write");
    c.expect_fatal(expect);
}

#[test]
fn bad_inputs_only_close_their_own_connection() {
    let nsqd = Nsqd::start(&[]);
    let healthy = HealthyConsumer::start(&nsqd);
    let mut p = Producer {
        conn: nsqd.connect(),
        sent: HashSet::new(),
    };
    p.tick("start");

    // Garbage after the magic.
    fatal(&nsqd, b"HELLO WORLD\n", b"E_INVALID invalid command HELLO");
    p.tick("text garbage");
    fatal(
        &nsqd,
        b"\xde\xad\xbe\xef\x00\x01\n",
        b"E_INVALID invalid command \xde\xad\xbe\xef\x00\x01",
    );
    p.tick("binary garbage");
    fatal(&nsqd, b"pub t\n", b"E_INVALID invalid command pub");
    p.tick("lowercase command");
    fatal(&nsqd, b"\n", b"E_INVALID invalid command ");
    p.tick("empty line");
    {
        // A line longer than 16384 bytes: closed without an error frame.
        let mut c = nsqd.connect();
        let _ = c.write_raw(&vec![b'A'; 20_000]);
        c.expect_closed(Duration::from_secs(10));
    }
    p.tick("overlong line");

    // Body sizes.
    let mut mpub_too_big = b"MPUB healthy\n".to_vec();
    mpub_too_big.extend_from_slice(&5_242_881i32.to_be_bytes());
    fatal(
        &nsqd,
        &mpub_too_big,
        b"E_BAD_BODY MPUB body too big 5242881 > 5242880",
    );
    p.tick("MPUB body too big");
    let mut mpub_msg_too_big = b"MPUB healthy\n".to_vec();
    mpub_msg_too_big.extend_from_slice(&1_048_590i32.to_be_bytes());
    mpub_msg_too_big.extend_from_slice(&1i32.to_be_bytes());
    mpub_msg_too_big.extend_from_slice(&1_048_577i32.to_be_bytes());
    fatal(
        &nsqd,
        &mpub_msg_too_big,
        b"E_BAD_MESSAGE MPUB message too big 1048577 > 1048576",
    );
    p.tick("MPUB message too big");
    let mut mpub_zero = b"MPUB healthy\n".to_vec();
    mpub_zero.extend_from_slice(&4i32.to_be_bytes());
    mpub_zero.extend_from_slice(&0i32.to_be_bytes());
    fatal(
        &nsqd,
        &mpub_zero,
        b"E_BAD_BODY MPUB invalid message count 0",
    );
    p.tick("MPUB zero messages");
    fatal(
        &nsqd,
        b"PUB healthy\n\xff\xff\xff\xff",
        b"E_BAD_MESSAGE PUB invalid message body size -1",
    );
    p.tick("negative PUB size");
    fatal(
        &nsqd,
        b"PUB healthy\n\0\0\0\0",
        b"E_BAD_MESSAGE PUB invalid message body size 0",
    );
    p.tick("empty PUB");
    fatal(
        &nsqd,
        b"DPUB healthy -1\n",
        b"E_INVALID DPUB could not parse timeout -1",
    );
    p.tick("negative DPUB timeout");

    // IDENTIFY.
    fatal(
        &nsqd,
        b"IDENTIFY\n\0\0\0\x09{not json",
        b"E_BAD_BODY IDENTIFY failed to decode JSON body",
    );
    p.tick("invalid IDENTIFY JSON");
    let hb = br#"{"heartbeat_interval":999}"#;
    let mut identify = b"IDENTIFY\n".to_vec();
    identify.extend_from_slice(&(hb.len() as i32).to_be_bytes());
    identify.extend_from_slice(hb);
    fatal(
        &nsqd,
        &identify,
        b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid",
    );
    p.tick("IDENTIFY bad heartbeat");

    // Bad topic and channel names, %q-quoted.
    fatal(
        &nsqd,
        b"PUB bad!topic\n",
        br#"E_BAD_TOPIC PUB topic name "bad!topic" is not valid"#,
    );
    p.tick("bad PUB topic");
    fatal(
        &nsqd,
        b"PUB a\"b\\c\td\n",
        br#"E_BAD_TOPIC PUB topic name "a\"b\\c\td" is not valid"#,
    );
    p.tick("PUB topic with quote, backslash and tab");
    fatal(
        &nsqd,
        b"PUB x\xffy\x01\n",
        br#"E_BAD_TOPIC PUB topic name "x\xffy\x01" is not valid"#,
    );
    p.tick("PUB topic with invalid UTF-8 and a control byte");
    fatal(
        &nsqd,
        "PUB тест\n".as_bytes(),
        "E_BAD_TOPIC PUB topic name \"тест\" is not valid".as_bytes(),
    );
    p.tick("PUB topic in Cyrillic");
    fatal(
        &nsqd,
        b"PUB  healthy\n",
        br#"E_BAD_TOPIC PUB topic name "" is not valid"#,
    );
    p.tick("PUB with two spaces");
    let long = "t".repeat(65);
    fatal(
        &nsqd,
        format!("PUB {long}\n").as_bytes(),
        format!("E_BAD_TOPIC PUB topic name \"{long}\" is not valid").as_bytes(),
    );
    p.tick("65-byte topic name");
    fatal(
        &nsqd,
        b"MPUB x!\n",
        br#"E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x!" is not valid"#,
    );
    p.tick("bad MPUB topic");
    fatal(
        &nsqd,
        b"DPUB #ephemeral 0\n",
        br##"E_BAD_TOPIC DPUB topic name "#ephemeral" is not valid"##,
    );
    p.tick("bad DPUB topic");
    fatal(
        &nsqd,
        b"SUB bad/topic ch\n",
        br#"E_BAD_TOPIC SUB topic name "bad/topic" is not valid"#,
    );
    p.tick("bad SUB topic");
    fatal(
        &nsqd,
        b"SUB healthy bad*chan\n",
        br#"E_BAD_CHANNEL SUB channel name "bad*chan" is not valid"#,
    );
    p.tick("bad SUB channel");
    fatal(
        &nsqd,
        b"SUB healthy\n",
        b"E_INVALID SUB insufficient number of parameters",
    );
    p.tick("SUB without channel");

    // Abrupt disconnect in the middle of a PUB body: nothing is published.
    {
        let mut c = nsqd.connect();
        let mut partial = b"PUB healthy\n".to_vec();
        partial.extend_from_slice(&100i32.to_be_bytes());
        partial.extend_from_slice(b"TRUNCATED-BODY");
        c.write_raw(&partial).expect("write");
        let _ = c.stream().shutdown(std::net::Shutdown::Both);
    }
    p.tick("disconnect mid-PUB body");

    // 1000 connections opened and dropped, some with half a command.
    let halves: [&[u8]; 6] = [
        b"",
        b"  V",
        b"  V2",
        b"  V2PUB heal",
        b"  V2PUB healthy\n\0\0",
        b"  V2MPUB healthy\n\0\0\0\x10\0\0\0\x02\0\0\0\x03abc",
    ];
    for i in 0..1000 {
        let mut c = V2Conn::connect_raw(nsqd.tcp_addr);
        let _ = c.write_raw(halves[i % halves.len()]);
        if i % 100 == 0 {
            p.tick("some half-open connections");
        }
    }
    p.tick("1000 dropped connections");

    // Still healthy: /ping, a fresh publisher and the healthy consumer.
    let ping = http_get(nsqd.http_addr, "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
    let mut fresh = nsqd.connect();
    fresh.publish("healthy", b"from a fresh connection");
    p.sent
        .insert(Bytes::from_static(b"from a fresh connection"));
    nsqd.http_pub("healthy", b"over http at the end");
    p.sent.insert(Bytes::from_static(b"over http at the end"));

    let got = healthy.finish(&p.sent);
    let got_set: HashSet<Bytes> = got.iter().cloned().collect();
    let missing: Vec<_> = p.sent.difference(&got_set).collect();
    assert!(missing.is_empty(), "healthy consumer missed {missing:?}");
    let unexpected: Vec<_> = got_set.difference(&p.sent).collect();
    assert!(
        unexpected.is_empty(),
        "healthy consumer got unexpected {unexpected:?}"
    );
    assert_eq!(
        got.len(),
        got_set.len(),
        "duplicate deliveries to the healthy consumer"
    );

    // The producer connection survived all of it, and so did the daemon.
    p.tick("the end");
    let mut nsqd = nsqd;
    assert!(nsqd.is_running(), "nsqd died");
}

#[test]
fn fatal_error_on_one_connection_leaves_others_untouched() {
    let nsqd = Nsqd::start(&[]);
    let mut a = nsqd.connect();
    let mut b = nsqd.connect();
    a.publish("iso", b"1");
    b.write_raw(b"BOGUS\n").expect("write");
    b.expect_fatal(b"E_INVALID invalid command BOGUS");
    a.publish("iso", b"2");
    match a.read_frame(Duration::from_millis(300)) {
        Err(ReadError::Timeout) => {}
        other => panic!("unexpected on the healthy connection: {other:?}"),
    }
}
