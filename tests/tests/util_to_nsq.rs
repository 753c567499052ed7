//! `to_nsq` against the real nsqd: stdin split on `--delimiter` and published to every
//! `--nsqd-tcp-address` (exact bodies, in order), `--rate` throttling, `--producer-opt`, a
//! publish error (exit 1), SIGTERM while stdin is still open (exit 0), and the command-line
//! validation messages and exit statuses of nsq's apps/to_nsq/to_nsq.go.
//!
//! Build first: `cargo build -p nsqd-bin -p to_nsq-bin` (or set NSQD_BIN / TO_NSQ_BIN).

use std::io::Write;
use std::time::{Duration, Instant};

use nsq_integration_tests::util::{
    argv0, assert_fatal, assert_help_lists, assert_usage_error, Tool,
};
use nsq_integration_tests::{go_log_msgs, run_tool, to_nsq_bin, Nsqd};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Subscribes to `topic` on a fresh channel and returns the bodies of the first `n` messages
/// (FINed), panicking if they do not all arrive within the timeout.
fn consume(nsqd: &Nsqd, topic: &str, n: usize) -> Vec<Vec<u8>> {
    let mut c = nsqd.connect();
    c.subscribe(topic, "check");
    c.rdy(1000);
    let mut bodies = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while bodies.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} messages",
            bodies.len()
        );
        let m = c.message(TIMEOUT);
        c.fin(&m.id);
        bodies.push(m.body.to_vec());
    }
    // Nothing more than expected.
    assert!(c.try_message(Duration::from_millis(300)).is_none());
    bodies
}

fn bodies(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn publishes_every_line_to_every_nsqd() {
    let (a, b) = (Nsqd::start(&[]), Nsqd::start(&[]));
    let (aa, ba) = (a.tcp_addr.to_string(), b.tcp_addr.to_string());
    let out = run_tool(
        &to_nsq_bin(),
        &[
            "--topic",
            "lines",
            "--nsqd-tcp-address",
            &aa,
            "-nsqd-tcp-address",
            &ba,
        ],
        b"a\nbb\n\n\nc c\xff\nlast",
        TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    // Empty pieces are skipped; the final piece keeps its last byte (the reference's
    // truncation of an undelimited last piece is not copied).
    let want: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        b"bb".to_vec(),
        b"c c\xff".to_vec(),
        b"last".to_vec(),
    ];
    assert_eq!(consume(&a, "lines", 4), want);
    assert_eq!(consume(&b, "lines", 4), want);
}

#[test]
fn delimiter_and_producer_opt() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &to_nsq_bin(),
        &[
            "-topic=semi",
            "--delimiter=;",
            "--producer-opt",
            "dial_timeout,2s",
            "--producer-opt",
            "snappy",
            "--nsqd-tcp-address",
            &addr,
        ],
        b"x;;y\nz;",
        TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(consume(&nsqd, "semi", 2), bodies(&["x", "y\nz"]));
}

#[test]
fn rate_throttles_publishing() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let start = Instant::now();
    let out = run_tool(
        &to_nsq_bin(),
        &[
            "--topic",
            "slow",
            "--rate",
            "5",
            "--nsqd-tcp-address",
            &addr,
        ],
        b"1\n2\n3\n4\n5\n6\n",
        TIMEOUT,
    );
    let took = start.elapsed();
    assert!(out.status.success());
    // One token at the start, then one every 200 ms: six messages take at least ~1 s; a
    // loaded machine can only make it slower.
    assert!(took >= Duration::from_millis(800), "took {took:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(" Throttling messages rate to max:5/second\n"),
        "{err}"
    );
    assert_eq!(
        consume(&nsqd, "slow", 6),
        bodies(&["1", "2", "3", "4", "5", "6"])
    );
}

#[test]
fn publish_error_is_fatal() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &to_nsq_bin(),
        &["--topic", "bad*topic", "--nsqd-tcp-address", &addr],
        b"one\ntwo\n",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("E_BAD_TOPIC"), "{err}");

    // Nothing listens on a port just released: the dial error is fatal too.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = run_tool(
        &to_nsq_bin(),
        &["--topic", "t", "--nsqd-tcp-address", &port.to_string()],
        b"one\n",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn sigterm_with_open_stdin_exits_zero() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let (tool, mut stdin) = Tool::start_with_stdin(
        &to_nsq_bin(),
        &["--topic", "open", "--nsqd-tcp-address", &addr],
    );
    stdin.write_all(b"first\n").unwrap();
    stdin.flush().unwrap();
    nsqd.wait_stats("the first message", TIMEOUT, |s| {
        s["topics"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["topic_name"] == "open" && t["message_count"] == 1)
        })
    });
    let (status, _) = tool.stop("TERM");
    drop(stdin);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = to_nsq_bin();
    assert_fatal(&bin, &[], "--topic required");
    assert_fatal(
        &bin,
        &["--topic", "t", "--delimiter", "ab"],
        "--delimiter must be a single byte",
    );
    assert_fatal(
        &bin,
        &["--topic", "t", "--delimiter", ""],
        "--delimiter must be a single byte",
    );
    assert_fatal(&bin, &["--topic", "t"], "--nsqd-tcp-address required");

    // Flag errors: message, usage, exit 2.
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--topic", "t", "--producer-opt", "bogus,1"],
        "invalid value \"bogus,1\" for flag -producer-opt: invalid option bogus",
    );
    // to_nsq has no -version flag.
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--version"],
        "flag provided but not defined: -version",
    );

    let out = run_tool(&bin, &["--rate", "x"], b"", TIMEOUT);
    assert_eq!(out.status.code(), Some(2));

    let err = assert_help_lists(
        &bin,
        &[
            "-delimiter string",
            "-nsqd-tcp-address value",
            "-producer-opt value",
            "-rate int",
            "-topic string",
        ],
    );
    assert!(
        err.starts_with(&format!("Usage of {}:\n", argv0(&bin))),
        "{err}"
    );
    assert!(!err.contains("-version"), "{err}");
}

/// go-nsq's own lines through its default logger (producer.go, `connect` and `Stop`; conn.go,
/// the close): the connection is dialed at the first publish and closed at EOF.
#[test]
fn go_nsq_logs_connecting_and_stopping() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &to_nsq_bin(),
        &["--topic", "logged", "--nsqd-tcp-address", &addr],
        b"one\ntwo\n",
        TIMEOUT,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        go_log_msgs(&out.stderr),
        [
            format!("INF    1 ({addr}) connecting to nsqd"),
            format!("INF    1 ({addr}) stopping"),
            format!("INF    1 ({addr}) beginning close"),
            format!("INF    1 ({addr}) readLoop exiting"),
            format!("INF    1 ({addr}) breaking out of writeLoop"),
            format!("INF    1 ({addr}) writeLoop exiting"),
            format!("INF    1 ({addr}) exiting router"),
        ]
    );
    assert_eq!(consume(&nsqd, "logged", 2), bodies(&["one", "two"]));
}
