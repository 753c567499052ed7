//! `nsq_tail` against the real nsqd: bodies on stdout framed `[<topic> | ]<body>\n` (compared
//! byte for byte), `-n` (exit 0 after that many messages of one topic, and a lowered RDY),
//! several `--topic`s with `--print-topic`, the random ephemeral channel name, the user agent
//! and `--consumer-opt` as nsqd sees them, SIGTERM (exit 0), and the command-line validation
//! messages and exit statuses of nsq's apps/nsq_tail/nsq_tail.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsq_tail-bin` (or set NSQD_BIN / NSQ_TAIL_BIN).

use std::time::Duration;

use nsq_integration_tests::util::{
    argv0, assert_exit, assert_fatal, assert_help_header, assert_help_lists, assert_usage_error,
    assert_version, nsqd_registered_with, publish, wait_registered, Tool,
};
use nsq_integration_tests::{go_log_msgs, nsq_tail_bin, run_tool, Nsqd, Nsqlookupd, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn prints_bodies_byte_for_byte_and_stops_after_n() {
    let nsqd = Nsqd::start(&[]);
    let bodies: [&[u8]; 5] = [b"one", b"two words", b" ", b"bin\x00\xff\x01", b"tab\tend"];
    publish(&nsqd, "tailed", &bodies);
    let addr = nsqd.tcp_addr.to_string();
    let out = run_tool(
        &nsq_tail_bin(),
        &["--topic", "tailed", "--nsqd-tcp-address", &addr, "-n", "5"],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 0);
    let mut want = Vec::new();
    for b in bodies {
        want.extend_from_slice(b);
        want.push(b'\n');
    }
    assert_eq!(out.stdout, want);
    // The tool's line, then go-nsq's (consumer.go, ConnectToNSQD) through go-nsq's default
    // logger; -n exits from the handler, so nothing is logged after that.
    let msgs = go_log_msgs(&out.stderr);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert_eq!(msgs[0], "Adding consumer for topic: tailed");
    let (head, channel_and_rest) = msgs[1].split_at("INF    1 [tailed/tail".len());
    assert_eq!(head, "INF    1 [tailed/tail");
    let (digits, rest) = channel_and_rest.split_at(6);
    assert!(digits.chars().all(|c| c.is_ascii_digit()), "{msgs:?}");
    assert_eq!(
        rest,
        format!("#ephemeral] ({addr}) connecting to nsqd"),
        "{msgs:?}"
    );
}

#[test]
fn several_topics_with_print_topic() {
    let nsqd = Nsqd::start(&[]);
    publish(&nsqd, "t1", &["a1", "a2", "a3"]);
    publish(&nsqd, "t2", &["b1", "b2", "b3"]);
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
    let tool = Tool::start(
        &nsq_tail_bin(),
        &[
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
        ],
    );
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

    let (status, _) = tool.stop("TERM");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_tail_bin();
    assert_fatal(
        &bin,
        &["--topic", "t"],
        "--nsqd-tcp-address or --lookupd-http-address required",
    );
    assert_fatal(
        &bin,
        &[
            "--topic",
            "t",
            "--nsqd-tcp-address",
            "127.0.0.1:4150",
            "--lookupd-http-address",
            "127.0.0.1:4161",
        ],
        "use --nsqd-tcp-address or --lookupd-http-address not both",
    );
    assert_fatal(
        &bin,
        &["--nsqd-tcp-address", "127.0.0.1:4150"],
        "--topic required",
    );
    // go-nsq's NewConsumer refuses it (config.go, Validate); nsq_tail.go `log.Fatal`s that,
    // after logging the topic it was adding.
    let out = run_tool(
        &bin,
        &[
            "--topic=t",
            "--nsqd-tcp-address=127.0.0.1:1",
            "--max-in-flight=-1",
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 1);
    assert_eq!(
        go_log_msgs(&out.stderr),
        [
            "Adding consumer for topic: t",
            "invalid MaxInFlight ! -1 < 0"
        ]
    );
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--consumer-opt", "bogus,1"],
        "invalid value \"bogus,1\" for flag -consumer-opt: invalid option bogus",
    );
    // go-nsq's `coerceDuration` takes a negative duration; the option's `min` tag refuses it
    // in `Config.Set`, during flag parsing.
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--consumer-opt", "read_timeout,-1s"],
        "invalid value \"read_timeout,-1s\" for flag -consumer-opt: \
         invalid read_timeout ! -1s < 100ms",
    );
    // A value that does not parse is refused with Go's parser error (config.go, `coerce`;
    // before: `- invalid value type`).
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--consumer-opt", "read_timeout,-1"],
        "invalid value \"read_timeout,-1\" for flag -consumer-opt: \
         failed to coerce option read_timeout (-1) - time: missing unit in duration \"-1\"",
    );
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--consumer-opt", "max_in_flight,lots"],
        "invalid value \"max_in_flight,lots\" for flag -consumer-opt: \
         failed to coerce option max_in_flight (lots) - strconv.ParseInt: parsing \"lots\": invalid syntax",
    );
    // `dial_timeout` has no `min`: -1s is taken, and Go's dialer, given a deadline that has
    // already passed, fails every dial with `i/o timeout` (even to a listening port).
    let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listening.local_addr().unwrap().to_string();
    let out = run_tool(
        &bin,
        &[
            "--topic=t",
            "--nsqd-tcp-address",
            &addr,
            "--consumer-opt",
            "dial_timeout,-1s",
        ],
        b"",
        TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        go_log_msgs(&out.stderr).last().map(String::as_str),
        Some(format!("dial tcp {addr}: i/o timeout").as_str()),
        "{out:?}"
    );
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--bogus"],
        "flag provided but not defined: -bogus",
    );
    assert_version(&bin, "nsq_tail");
    assert_help_header(&bin, &argv0(&bin));
    assert_help_lists(
        &bin,
        &[
            "-channel string",
            "-consumer-opt value",
            "-lookupd-http-address value",
            "-max-in-flight int",
            "-n int",
            "-nsqd-tcp-address value",
            "-print-topic",
            "-topic value",
            "-version",
        ],
    );
}

#[test]
fn discovers_nsqd_via_lookupd() {
    let lookupd = Nsqlookupd::start(&[]);
    let nsqd = nsqd_registered_with(&lookupd);
    publish(&nsqd, "found", &["x1", "x2", "x3"]);
    wait_registered(&lookupd, "found");
    let lh = lookupd.http_addr.to_string();
    let out = run_tool(
        &nsq_tail_bin(),
        &["--topic=found", "--lookupd-http-address", &lh, "-n=3"],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 0);
    assert_eq!(out.stdout, b"x1\nx2\nx3\n");
    // go-nsq's lines (consumer.go, queryLookupd and ConnectToNSQD), the random channel's
    // digits masked.
    let msgs: Vec<String> = go_log_msgs(&out.stderr)
        .iter()
        .map(|m| mask_channel(m))
        .collect();
    assert_eq!(
        msgs,
        [
            "Adding consumer for topic: found".to_string(),
            format!(
                "INF    1 [found/tail#######ephemeral] querying nsqlookupd \
                 http://{lh}/lookup?topic=found"
            ),
            format!(
                "INF    1 [found/tail#######ephemeral] (127.0.0.1:{}) connecting to nsqd",
                nsqd.tcp_addr.port()
            ),
        ]
    );
}

/// `tail123456#ephemeral` → `tail#######ephemeral`.
fn mask_channel(m: &str) -> String {
    match m.find("/tail") {
        Some(i) if m.len() >= i + 11 => {
            let digits = &m[i + 5..i + 11];
            assert!(digits.chars().all(|c| c.is_ascii_digit()), "{m}");
            format!("{}/tail######{}", &m[..i], &m[i + 11..])
        }
        _ => m.to_string(),
    }
}

/// go-nsq's lookupd errors (consumer.go, `queryLookupd`; api_request.go,
/// `apiRequestNegotiateV1`): a refused connection is Go's `*url.Error`
/// (`Get "<url>": dial tcp <addr>: connect: connection refused`), an answer other than 200 is
/// `got response <status line> <%q of the body>`; three tries in all. (The first query runs
/// inside `ConnectToNSQLookupd` while the list holds only that lookupd, so its retries go to
/// the same one.)
#[test]
fn lookupd_errors_in_go_nsqs_words() {
    let lookupd = Nsqlookupd::start(&[]);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let lh = lookupd.http_addr.to_string();
    let refused = format!("http://{closed}/lookup?topic=nosuch");
    let missing = format!("http://{lh}/lookup?topic=nosuch");
    let cases = [
        (
            closed.clone(),
            refused.clone(),
            format!("Get \"{refused}\": dial tcp {closed}: connect: connection refused"),
        ),
        (
            lh.clone(),
            missing,
            "got response 404 Not Found \"{\\\"message\\\":\\\"TOPIC_NOT_FOUND\\\"}\"".to_string(),
        ),
    ];
    for (addr, endpoint, err) in cases {
        let tool = Tool::start(
            &nsq_tail_bin(),
            &[
                "--topic=nosuch",
                "--channel=c",
                "--lookupd-http-address",
                &addr,
            ],
        );
        tool.wait_for("three failed lookups", TIMEOUT, || {
            tool.stderr().matches("error querying nsqlookupd").count() >= 3
        });
        let stderr = tool.stop_ok("TERM");
        let msgs: Vec<String> = go_log_msgs(stderr.as_bytes())
            .into_iter()
            .take_while(|m| !m.contains("stopping"))
            .collect();
        let query = format!("INF    1 [nosuch/c] querying nsqlookupd {endpoint}");
        let error = format!("ERR    1 [nosuch/c] error querying nsqlookupd ({endpoint}) - {err}");
        let retry = "INF    1 [nosuch/c] retrying with next nsqlookupd".to_string();
        assert_eq!(
            msgs,
            [
                "Adding consumer for topic: nosuch".to_string(),
                query.clone(),
                error.clone(),
                retry.clone(),
                query.clone(),
                error.clone(),
                retry,
                query,
                error,
            ]
        );
    }
}

/// Issue 31: `--consumer-opt heartbeat_interval,…` reaches nsqd as go-nsq sends it (conn.go,
/// `identify`: whole milliseconds, `-1` for Go's -1 ns), and a refused SUB is not fatal,
/// since go-nsq's `ConnectToNSQD` does not wait for SUB's answer. Before, every negative
/// interval was sent as -1 and the refused SUB made nsq_tail exit 1 with
/// `E_INVALID cannot SUB with heartbeats disabled`.
#[test]
fn heartbeat_interval_reaches_nsqd_as_go_nsq_sends_it() {
    let nsqd = Nsqd::start(&[]);
    let addr = nsqd.tcp_addr.to_string();
    let bin = nsq_tail_bin();
    // -1ms is sent as -1 ("disabled"): IDENTIFY passes, SUB is refused, logged, and the
    // consumer reconnects after lookupd_poll_interval, again and again, until SIGTERM.
    let tool = Tool::start(
        &bin,
        &[
            "--topic=hb",
            "--nsqd-tcp-address",
            &addr,
            "--consumer-opt",
            "heartbeat_interval,-1ms",
            "--consumer-opt",
            "lookupd_poll_interval,100ms",
        ],
    );
    let refused =
        format!("({addr}) protocol error - E_INVALID cannot SUB with heartbeats disabled");
    tool.wait_for("two refused SUBs", TIMEOUT, || {
        tool.stderr().matches(&refused).count() >= 2
    });
    let err = tool.stop_ok("TERM");
    let msgs = go_log_msgs(err.as_bytes());
    let at = msgs
        .iter()
        .position(|m| m.ends_with(&refused))
        .unwrap_or_else(|| panic!("{msgs:?}"));
    // conn.go's readLoop: the error frame, then nsqd's close; consumer.go's onConnClose.
    let tail: Vec<&str> = msgs[at + 1..].iter().map(|m| m.as_str()).collect();
    assert!(
        tail[0].ends_with(&format!("({addr}) IO error - EOF")),
        "{msgs:?}"
    );
    assert!(
        tail.iter()
            .any(|m| m.ends_with("there are 0 connections left alive")),
        "{msgs:?}"
    );
    assert!(
        tail.iter()
            .any(|m| m.ends_with(&format!("({addr}) re-connecting in 100ms"))),
        "{msgs:?}"
    );

    // -1s is sent as -1000, which nsqd refuses at IDENTIFY: go-nsq's ConnectToNSQD fails, and
    // nsq_tail.go `log.Fatal`s its error.
    let out = run_tool(
        &bin,
        &[
            "--topic=hb",
            "--nsqd-tcp-address",
            &addr,
            "--consumer-opt",
            "heartbeat_interval,-1s",
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 1);
    assert_eq!(
        go_log_msgs(&out.stderr).last().map(String::as_str),
        Some("failed to IDENTIFY - E_BAD_BODY IDENTIFY heartbeat interval (-1000) is invalid"),
        "{out:?}"
    );

    // config.go, `Validate`, prints both durations with Go's `%v` (before: `90s`, `60s`).
    let out = run_tool(
        &bin,
        &[
            "--topic=hb",
            "--nsqd-tcp-address",
            &addr,
            "--consumer-opt",
            "heartbeat_interval,90s",
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 1);
    assert_eq!(
        go_log_msgs(&out.stderr).last().map(String::as_str),
        Some("HeartbeatInterval 1m30s must be less than ReadTimeout 1m0s"),
        "{out:?}"
    );
}
