//! The consumer's RDY/backoff state machine and IDENTIFY negotiation, byte for byte, against
//! a scripted fake nsqd on 127.0.0.1:0 (tokio paused time: the backoff waits are exact).
//! The fake decodes what the client sends with nsq-protocol's server-side decoder.

use std::time::Duration;

use bytes::BytesMut;
use nsq_client::{Config, Consumer, SignedDuration};
use nsq_compress::{SnappyReader, SnappyWriter};
use nsq_protocol::command::{Command, Decoder, Limits};
use nsq_protocol::frame;
use nsq_protocol::MessageId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// The server side of one client connection.
struct Fake<R, W> {
    r: R,
    w: W,
    buf: BytesMut,
    dec: Decoder,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Fake<R, W> {
    async fn command(&mut self) -> Command {
        loop {
            if let Some(c) = self.dec.decode(&mut self.buf, |_, _| Ok(())).unwrap() {
                return c;
            }
            let n = self.r.read_buf(&mut self.buf).await.unwrap();
            assert!(n > 0, "client hung up");
        }
    }

    async fn send(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let mut out = Vec::new();
        f(&mut out);
        self.w.write_all(&out).await.unwrap();
        self.w.flush().await.unwrap();
    }

    async fn ok(&mut self) {
        self.send(|b| frame::put_response(b, frame::OK)).await;
    }

    async fn message(&mut self, n: u64, attempts: u16) -> MessageId {
        let id = MessageId::from_u64(n);
        self.send(|b| frame::put_message(b, 0, attempts, &id, b"body"))
            .await;
        id
    }
}

fn config(max_in_flight: usize) -> Config {
    Config {
        max_in_flight,
        heartbeat_interval: Config::DISABLED,
        read_timeout: Duration::from_secs(3600),
        ..Config::default()
    }
}

/// Accepts one connection: magic, IDENTIFY (answered with `identify_response`), SUB → OK.
async fn accept(
    listener: &TcpListener,
    identify_response: &[u8],
) -> (
    Fake<tokio::net::tcp::OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf>,
    serde_json::Value,
) {
    let (s, _) = listener.accept().await.unwrap();
    let (mut r, w) = s.into_split();
    let mut magic = [0; 4];
    r.read_exact(&mut magic).await.unwrap();
    assert_eq!(&magic, nsq_protocol::MAGIC_V2);
    let mut fake = Fake {
        r,
        w,
        buf: BytesMut::new(),
        dec: Decoder::new(Limits::default()),
    };
    let Command::Identify { body } = fake.command().await else {
        panic!("IDENTIFY first");
    };
    let identify: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let resp = identify_response.to_vec();
    fake.send(|b| frame::put_response(b, &resp)).await;
    (fake, identify)
}

type TcpFake = Fake<tokio::net::tcp::OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf>;

/// Connects `consumer` to the fake nsqd on `listener`, which answers IDENTIFY with `OK` and
/// accepts the SUB; returns the fake, past the SUB.
async fn connect_subscribed(consumer: &Consumer, listener: &TcpListener) -> TcpFake {
    let addr = listener.local_addr().unwrap().to_string();
    let server = async {
        let (mut fake, _) = accept(listener, b"OK").await;
        subscribe(&mut fake).await;
        fake
    };
    let (connected, fake) = tokio::join!(consumer.connect_to_nsqd(&addr), server);
    connected.unwrap();
    fake
}

async fn subscribe<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(fake: &mut Fake<R, W>) {
    assert_eq!(
        fake.command().await,
        Command::Sub {
            topic: "t".into(),
            channel: "c".into()
        }
    );
    fake.ok().await;
}

#[tokio::test(start_paused = true)]
async fn backoff_sends_rdy_0_then_probes_with_rdy_1_then_resumes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut consumer = Consumer::new("t", "c", config(10)).unwrap();
    let mut fake = connect_subscribed(&consumer, &listener).await;
    assert_eq!(fake.command().await, Command::Rdy { count: 10 });

    // A failure: RDY 0 at once, then the REQ with the default delay (90s × 1 attempt). go-nsq
    // conn.go, writeLoop: the backoff signal (whose updateRDY writes the RDY) comes before
    // the REQ is written, so nsqd cannot deliver the requeued message again in between.
    let id = fake.message(1, 1).await;
    consumer.next().await.unwrap().requeue(None);
    assert_eq!(fake.command().await, Command::Rdy { count: 0 });
    assert_eq!(
        fake.command().await,
        Command::Req {
            id,
            timeout_ms: 90_000
        }
    );
    // Backoff level 1: 1s × 2^1, then one message at a time.
    let t0 = Instant::now();
    assert_eq!(fake.command().await, Command::Rdy { count: 1 });
    assert_eq!(t0.elapsed(), Duration::from_secs(2));

    // A second failure (attempt 2: delay 180s): level 2, 4 s.
    let id = fake.message(2, 2).await;
    consumer.next().await.unwrap().requeue(None);
    assert_eq!(fake.command().await, Command::Rdy { count: 0 });
    assert_eq!(
        fake.command().await,
        Command::Req {
            id,
            timeout_ms: 180_000
        }
    );
    let t0 = Instant::now();
    assert_eq!(fake.command().await, Command::Rdy { count: 1 });
    assert_eq!(t0.elapsed(), Duration::from_secs(4));

    // A success steps down one level: RDY 0 again (before the FIN) for 2 s, then the RDY 1
    // probe.
    let id = fake.message(3, 1).await;
    consumer.next().await.unwrap().finish();
    assert_eq!(fake.command().await, Command::Rdy { count: 0 });
    assert_eq!(fake.command().await, Command::Fin { id });
    let t0 = Instant::now();
    assert_eq!(fake.command().await, Command::Rdy { count: 1 });
    assert_eq!(t0.elapsed(), Duration::from_secs(2));

    // The next success leaves backoff: back to the full RDY (written before the FIN).
    let id = fake.message(4, 1).await;
    consumer.next().await.unwrap().finish();
    assert_eq!(fake.command().await, Command::Rdy { count: 10 });
    assert_eq!(fake.command().await, Command::Fin { id });

    // requeue_without_backoff does not touch RDY; a dropped message is requeued at once.
    let id = fake.message(5, 1).await;
    consumer
        .next()
        .await
        .unwrap()
        .requeue_without_backoff(Some(Duration::from_millis(1500)));
    assert_eq!(
        fake.command().await,
        Command::Req {
            id,
            timeout_ms: 1500
        }
    );
    let id = fake.message(6, 1).await;
    drop(consumer.next().await.unwrap());
    assert_eq!(fake.command().await, Command::Req { id, timeout_ms: 0 });

    // Graceful stop: CLS; CLOSE_WAIT; the client closes (nothing in flight).
    let stopping = consumer.stop_handle();
    let stop = tokio::spawn(async move { stopping.stop().await });
    assert_eq!(fake.command().await, Command::Cls);
    fake.send(|b| frame::put_response(b, frame::CLOSE_WAIT))
        .await;
    let mut rest = Vec::new();
    fake.r.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    stop.await.unwrap();
    assert!(consumer.next().await.is_none());
    let stats = consumer.stats();
    assert_eq!((stats.messages_received, stats.messages_finished), (6, 2));
    assert_eq!(stats.messages_requeued, 4);
}

#[tokio::test(start_paused = true)]
async fn max_attempts_gives_up_with_fin_and_the_hook() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (hook_tx, mut hook_rx) = tokio::sync::mpsc::unbounded_channel();
    let hook: nsq_client::GiveUpHook = std::sync::Arc::new(move |m: &nsq_client::Message| {
        let _ = hook_tx.send(m.attempts());
    });
    let mut cfg = config(1);
    cfg.max_attempts = 3;
    let mut consumer = Consumer::with_give_up("t", "c", cfg, Some(hook)).unwrap();
    let mut fake = connect_subscribed(&consumer, &listener).await;
    assert_eq!(fake.command().await, Command::Rdy { count: 1 });
    let id = fake.message(1, 4).await;
    assert_eq!(fake.command().await, Command::Fin { id });
    assert_eq!(hook_rx.recv().await, Some(4));
    let id = fake.message(2, 3).await;
    let m = consumer.next().await.unwrap();
    assert_eq!(m.id(), &id);
    m.finish();
    assert_eq!(fake.command().await, Command::Fin { id });
}

#[tokio::test(start_paused = true)]
async fn identify_sends_every_field_and_negotiates_snappy_and_max_rdy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut cfg = config(100);
    cfg.snappy = true;
    cfg.client_id = "cid".into();
    cfg.hostname = "host.example".into();
    cfg.user_agent = "ua/1".into();
    cfg.sample_rate = 7;
    cfg.msg_timeout = Duration::from_secs(5);
    cfg.output_buffer_size = 4096;
    cfg.output_buffer_timeout = SignedDuration::from_std(Duration::from_millis(50));
    let consumer = Consumer::new("t", "c", cfg).unwrap();
    let server = async {
        let resp = br#"{"max_rdy_count":5,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":5000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":true,"sample_rate":7,"auth_required":false,"output_buffer_size":4096,"output_buffer_timeout":50}"#;
        let (fake, identify) = accept(&listener, resp).await;
        // Upgrade: everything after the IDENTIFY response is snappy-framed, both ways.
        let mut fake = Fake {
            r: SnappyReader::new(fake.r),
            w: SnappyWriter::new(fake.w),
            buf: fake.buf,
            dec: fake.dec,
        };
        fake.ok().await;
        subscribe(&mut fake).await;
        (fake, identify)
    };
    let (connected, (mut fake, identify)) = tokio::join!(consumer.connect_to_nsqd(&addr), server);
    connected.unwrap();
    let want = serde_json::json!({
        "client_id": "cid", "hostname": "host.example", "user_agent": "ua/1",
        "short_id": "cid", "long_id": "host.example",
        "feature_negotiation": true, "tls_v1": false, "snappy": true, "deflate": false,
        "deflate_level": 6, "heartbeat_interval": -1, "sample_rate": 7,
        "output_buffer_size": 4096, "output_buffer_timeout": 50, "msg_timeout": 5000,
    });
    assert_eq!(identify, want);
    // max_in_flight 100 is truncated to the server's max_rdy_count.
    assert_eq!(fake.command().await, Command::Rdy { count: 5 });
}

#[tokio::test]
async fn a_failed_first_connect_is_the_callers_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let consumer = Consumer::new("t", "c", config(1)).unwrap();
    let e = consumer.connect_to_nsqd(&addr).await.unwrap_err();
    assert!(matches!(e, nsq_client::Error::Dial { .. }), "{e}");
    // go-nsq's (Go's net.OpError) text.
    assert_eq!(
        e.to_string(),
        format!("dial tcp {addr}: connect: connection refused")
    );
    assert_eq!(consumer.stats().connections, 0);

    // An error frame for IDENTIFY fails the connect with its text.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = async {
        let (s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.into_split();
        let mut buf = vec![0; 4096];
        let _ = r.read(&mut buf).await.unwrap();
        let mut out = Vec::new();
        frame::put_error(&mut out, b"E_BAD_BODY IDENTIFY failed to decode JSON body");
        w.write_all(&out).await.unwrap();
        (r, w)
    };
    let (res, _conn) = tokio::join!(consumer.connect_to_nsqd(&addr), server);
    let e = res.unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to IDENTIFY - E_BAD_BODY IDENTIFY failed to decode JSON body"
    );
}

#[tokio::test(start_paused = true)]
async fn fewer_slots_than_connections_redistributes_rdy() {
    // max_in_flight 1 over two nsqd: the first gets RDY 1, the second nothing; once the first
    // has been idle longer than low_rdy_idle_timeout (10s, checked every 5s) it gives its RDY
    // back (RDY 0) and the slot goes to a random connection (go-nsq consumer.go,
    // redistributeRDY).
    let la = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lb = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (aa, ab) = (
        la.local_addr().unwrap().to_string(),
        lb.local_addr().unwrap().to_string(),
    );
    let consumer = Consumer::new("t", "c", config(1)).unwrap();
    let server = |l| async move {
        let (mut fake, _) = accept(l, b"OK").await;
        subscribe(&mut fake).await;
        fake
    };
    let (ra, mut a) = tokio::join!(consumer.connect_to_nsqd(&aa), server(&la));
    ra.unwrap();
    let t0 = Instant::now();
    assert_eq!(a.command().await, Command::Rdy { count: 1 });
    let (rb, mut b) = tokio::join!(consumer.connect_to_nsqd(&ab), server(&lb));
    rb.unwrap();
    assert_eq!(a.command().await, Command::Rdy { count: 0 });
    assert_eq!(t0.elapsed(), Duration::from_secs(15));
    // The freed slot goes to one of the two connections.
    tokio::select! {
        c = a.command() => assert_eq!(c, Command::Rdy { count: 1 }),
        c = b.command() => assert_eq!(c, Command::Rdy { count: 1 }),
    }
    assert_eq!(consumer.stats().connections, 2);
}

/// With `Config::logger` set, a consumer prints go-nsq's lines (consumer.go and conn.go,
/// their `log` functions) for a connect and a graceful stop, in go-nsq's format; the instance
/// number (shared by every test in this process) is cut out of each line.
#[tokio::test]
async fn go_nsq_log_lines_of_a_connect_and_a_graceful_stop() {
    use nsq_client::{GoLogger, LogLevel};
    use std::sync::{Arc, Mutex};

    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let mut cfg = config(5);
    cfg.logger = Some(GoLogger::new(LogLevel::Info, move |l| {
        sink.lock().unwrap().push(l.to_string())
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let consumer = Consumer::new("t", "c", cfg).unwrap();
    let mut fake = connect_subscribed(&consumer, &listener).await;
    assert_eq!(fake.command().await, Command::Rdy { count: 5 });

    let stop = consumer.stop_handle();
    let stopping = tokio::spawn(async move { stop.stop().await });
    assert_eq!(fake.command().await, Command::Cls);
    fake.send(|b| frame::put_response(b, b"CLOSE_WAIT")).await;
    drop(fake);
    tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .expect("stopped")
        .unwrap();

    let got: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| format!("{}{}", &l[..4], &l[8..]))
        .collect();
    let conn = |m: &str| format!("INF  [t/c] ({addr}) {m}");
    assert_eq!(
        got,
        [
            conn("connecting to nsqd"),
            "INF  [t/c] stopping...".to_string(),
            conn("received CLOSE_WAIT from nsqd"),
            conn("beginning close"),
            conn("readLoop exiting"),
            conn("breaking out of writeLoop"),
            conn("writeLoop exiting"),
            conn("finished draining, cleanup exiting"),
            conn("clean close complete"),
            "WRN  [t/c] there are 0 connections left alive".to_string(),
            "INF  [t/c] stopping handlers".to_string(),
            "INF  [t/c] rdyLoop exiting".to_string(),
        ]
    );
}
