//! `nsq_tail` against the real nsqd: bodies on stdout framed `[<topic> | ]<body>\n` (compared
//! byte for byte), `-n` (exit 0 after that many messages of one topic, and a lowered RDY),
//! several `--topic`s with `--print-topic`, the random ephemeral channel name, the user agent
//! and `--consumer-opt` as nsqd sees them, SIGTERM (exit 0), and the command-line validation
//! messages and exit statuses of nsq's apps/nsq_tail/nsq_tail.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsq_tail-bin` (or set NSQD_BIN / NSQ_TAIL_BIN).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nsq_integration_tests::{assert_go_log_line, nsq_tail_bin, run_tool, Nsqd, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

fn publish_all(nsqd: &Nsqd, topic: &str, bodies: &[&[u8]]) {
    let mut c = nsqd.connect();
    for b in bodies {
        c.publish(topic, b);
    }
}

#[test]
fn prints_bodies_byte_for_byte_and_stops_after_n() {
    let nsqd = Nsqd::start(&[]);
    let bodies: [&[u8]; 5] = [b"one", b"two words", b" ", b"bin\x00\xff\x01", b"tab\tend"];
    publish_all(&nsqd, "tailed", &bodies);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &nsq_tail_bin(),
        &["--topic", "tailed", "--nsqd-tcp-address", &addr, "-n", "5"],
        b"",
        TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = Vec::new();
    for b in bodies {
        want.extend_from_slice(b);
        want.push(b'\n');
    }
    assert_eq!(out.stdout, want);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .next()
            .is_some_and(|l| l.ends_with(" Adding consumer for topic: tailed")),
        "{err}"
    );
}

#[test]
fn several_topics_with_print_topic() {
    let nsqd = Nsqd::start(&[]);
    publish_all(&nsqd, "t1", &[b"a1", b"a2", b"a3"]);
    publish_all(&nsqd, "t2", &[b"b1", b"b2", b"b3"]);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &nsq_tail_bin(),
        &[
            "-topic=t1",
            "-topic=t2",
            "--print-topic",
            "--nsqd-tcp-address",
            &addr,
            "-n",
            "3",
            "--channel",
            "both",
        ],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.ends_with('\n'), "{text:?}");
    // Each topic's lines come in order; the process exits as soon as one topic has shown 3.
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    for line in text.lines() {
        match line.split_once(" | ") {
            Some(("t1", body)) => t1.push(body.to_string()),
            Some(("t2", body)) => t2.push(body.to_string()),
            _ => panic!("unexpected line {line:?} in {text:?}"),
        }
    }
    assert!(t1.len() == 3 || t2.len() == 3, "{text:?}");
    assert!(t1.len() <= 3 && t2.len() <= 3, "{text:?}");
    assert_eq!(t1[..], ["a1", "a2", "a3"][..t1.len()]);
    assert_eq!(t2[..], ["b1", "b2", "b3"][..t2.len()]);
}

/// The clients of `topic`'s only channel in `/stats`.
fn tail_channel(stats: &Value, topic: &str) -> Option<Value> {
    let t = stats["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic_name"] == topic)?;
    let ch = t["channels"].as_array()?.first()?;
    (ch["clients"].as_array()?.len() == 1).then(|| ch.clone())
}

#[test]
fn ephemeral_channel_user_agent_consumer_opt_and_sigterm() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let mut child = Command::new(nsq_tail_bin())
        .args([
            "--topic",
            "quiet",
            "--nsqd-tcp-address",
            &addr,
            "-n",
            "7",
            "--consumer-opt",
            "client_id,tailtest",
            "--consumer-opt",
            "max_in_flight,999",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stats = nsqd.wait_stats("nsq_tail's subscription", TIMEOUT, |s| {
        tail_channel(s, "quiet").is_some_and(|ch| ch["clients"][0]["ready_count"] == 7)
    });
    let ch = tail_channel(&stats, "quiet").unwrap();
    let name = ch["channel_name"].as_str().unwrap();
    let digits = name
        .strip_prefix("tail")
        .and_then(|r| r.strip_suffix("#ephemeral"))
        .unwrap_or_else(|| panic!("{name}"));
    assert!(
        digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    let client = &ch["clients"][0];
    assert_eq!(client["user_agent"], "nsq_tail/1.3.0 go-nsq/1.1.0");
    assert_eq!(client["client_id"], "tailtest");
    // -n 7 < --max-in-flight 200 lowers RDY to 7, and --consumer-opt cannot change it.
    assert_eq!(client["ready_count"], 7);

    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "nsq_tail ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_tail_bin();
    let run = |args: &[&str]| run_tool(&bin, args, b"", TIMEOUT);

    let out = run(&["--topic", "t"]);
    assert_eq!(out.status.code(), Some(1));
    assert_go_log_line(
        &out.stderr,
        "--nsqd-tcp-address or --lookupd-http-address required",
    );

    let out = run(&[
        "--topic",
        "t",
        "--nsqd-tcp-address",
        "127.0.0.1:4150",
        "--lookupd-http-address",
        "127.0.0.1:4161",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_go_log_line(
        &out.stderr,
        "use --nsqd-tcp-address or --lookupd-http-address not both",
    );

    let out = run(&["--nsqd-tcp-address", "127.0.0.1:4150"]);
    assert_eq!(out.status.code(), Some(1));
    assert_go_log_line(&out.stderr, "--topic required");

    let out = run(&["--consumer-opt", "bogus,1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "invalid value \"bogus,1\" for flag -consumer-opt: invalid option bogus\n\
             Usage of nsq_tail:\n"
        ),
        "{err}"
    );

    let out = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("flag provided but not defined: -bogus\nUsage of nsq_tail:\n"));

    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"nsq_tail v1.3.0\n");

    let out = run(&["-h"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in [
        "-channel string",
        "-consumer-opt value",
        "-lookupd-http-address value",
        "-max-in-flight int",
        "-n int",
        "-nsqd-tcp-address value",
        "-print-topic",
        "-topic value",
        "-version",
    ] {
        assert!(err.contains(&format!("  {flag}\n")), "{flag}: {err}");
    }
}

#[test]
fn discovers_nsqd_via_lookupd() {
    let lookupd = nsq_integration_tests::Nsqlookupd::start(&[]);
    let reg = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
    let nsqd = Nsqd::start(&["--broadcast-address=127.0.0.1", &reg]);
    publish_all(&nsqd, "found", &[b"x1", b"x2", b"x3"]);
    let deadline = Instant::now() + TIMEOUT;
    while lookupd.get("/lookup?topic=found").status != 200 {
        assert!(Instant::now() < deadline, "no registration");
        std::thread::sleep(Duration::from_millis(50));
    }
    let lh = lookupd.http_addr.to_string();
    let out = run_tool(
        &nsq_tail_bin(),
        &["--topic=found", "--lookupd-http-address", &lh, "-n=3"],
        b"",
        TIMEOUT,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"x1\nx2\nx3\n");
}
