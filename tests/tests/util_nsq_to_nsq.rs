//! `nsq_to_nsq` between real nsqd processes: a copy of 100k messages exactly once (bodies
//! compared as a multiset, counts at both ends) with `--require-json-field` /
//! `--require-json-value` dropping the messages that do not match and `--whitelist-json-field`
//! rewriting the rest byte for byte; round-robin over two destinations splitting the traffic
//! evenly; a destination that is down at start (messages requeued, then delivered once it is
//! up); the missing-field-with-value case requeueing; SIGTERM (exit 0); and the command-line
//! validation messages and exit statuses of nsq's apps/nsq_to_nsq/nsq_to_nsq.go.
//!
//! Build first: `cargo build -p nsqd-bin -p nsq_to_nsq-bin` (or set NSQD_BIN /
//! NSQ_TO_NSQ_BIN).

use std::time::{Duration, Instant};

use nsq_integration_tests::util::{
    argv0, assert_exit, assert_fatal, assert_help_header, assert_help_lists, assert_usage_error,
    assert_version, nsqd_registered_with, publish, wait_registered, Tool,
};
use nsq_integration_tests::{
    find_channel, find_topic, go_log_msgs, int, nsq_to_nsq_bin, run_tool, Nsqd, Nsqlookupd, V2Conn,
    Value,
};
use nsq_protocol::command::Command as Cmd;

const TIMEOUT: Duration = Duration::from_secs(300);

/// A running nsq_to_nsq (stderr collected, killed on drop unless stopped).
fn bridge(args: &[&str]) -> Tool {
    Tool::start(&nsq_to_nsq_bin(), args)
}

/// nsq_to_nsq from `topic` on `src` to the nsqd at `dests`, with `extra` arguments.
fn bridge_from(src: &Nsqd, topic: &str, dests: &[&str], extra: &[&str]) -> Tool {
    let (t, s) = (format!("--topic={topic}"), src.tcp_addr.to_string());
    let mut args = vec![t.as_str(), "--nsqd-tcp-address", &s];
    for d in dests {
        args.extend(["--destination-nsqd-tcp-address", d]);
    }
    args.extend_from_slice(extra);
    bridge(&args)
}

/// Waits until the source channel has nothing queued or in flight and the destination topic
/// has received at least `want` messages; returns the destination topic's message count.
fn wait_copied(
    src: &Nsqd,
    topic: &str,
    channel: &str,
    dst: &Nsqd,
    dst_topic: &str,
    want: i64,
) -> i64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = src.stats();
        let drained = find_channel(&s, topic, channel)
            .is_some_and(|c| int(c, "depth") == 0 && int(c, "in_flight_count") == 0);
        let d = dst.stats();
        let got = find_topic(&d, dst_topic).map_or(0, |t| int(t, "message_count"));
        if drained && got >= want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "copied {got} of {want}; source /stats: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `bodies`, published to `topic` on `src`, are on `dst_topic` of `dst`, each
/// exactly once (in any order).
fn assert_copied_once(src: &Nsqd, topic: &str, dst: &Nsqd, dst_topic: &str, bodies: &[Vec<u8>]) {
    let n = bodies.len();
    let got = wait_copied(src, topic, "nsq_to_nsq", dst, dst_topic, n as i64);
    assert_eq!(got, n as i64);
    let mut want = bodies.to_vec();
    want.sort();
    assert!(drain(dst, dst_topic, n) == want);
}

/// Waits until `d1` and `d2` together have `n` messages on `topic`; returns their counts.
fn wait_total(topic: &str, d1: &Nsqd, d2: &Nsqd, n: i64) -> (i64, i64) {
    let deadline = Instant::now() + TIMEOUT;
    let count = |d: &Nsqd| d.topic_stats(topic).map_or(0, |t| int(&t, "message_count"));
    while count(d1) + count(d2) < n {
        assert!(Instant::now() < deadline, "{} + {}", count(d1), count(d2));
        std::thread::sleep(Duration::from_millis(100));
    }
    (count(d1), count(d2))
}

/// Subscribes to `topic` and takes exactly `n` messages (FINishing them), then checks that no
/// more arrive for a moment. Returns the bodies sorted.
fn drain(nsqd: &Nsqd, topic: &str, n: usize) -> Vec<Vec<u8>> {
    let mut c: V2Conn = nsqd.connect();
    c.subscribe(topic, "check");
    c.rdy(2000);
    let mut bodies = Vec::with_capacity(n);
    let deadline = Instant::now() + TIMEOUT;
    while bodies.len() < n {
        assert!(Instant::now() < deadline, "drained {} of {n}", bodies.len());
        let frames = match c.read_batch(Duration::from_secs(5)) {
            Ok(f) => f,
            Err(_) => continue,
        };
        let mut fins = Vec::with_capacity(frames.len());
        for f in frames {
            assert_eq!(f.frame_type, 2, "{}", nsq_integration_tests::describe(&f));
            let m = nsq_protocol::message::decode(f.data).unwrap();
            fins.push(Cmd::Fin { id: m.id });
            bodies.push(m.body.to_vec());
        }
        c.send(&fins);
    }
    match c.read_batch(Duration::from_millis(500)) {
        Err(_) => {}
        Ok(extra) => panic!("{} messages more than {n} on {topic}", extra.len()),
    }
    bodies.sort();
    bodies
}

#[test]
fn copies_100k_exactly_once_with_json_filtering() {
    let src = Nsqd::start(&[]);
    let dst = Nsqd::start(&[]);
    let total = 100_000;
    let mut bodies = Vec::with_capacity(total);
    let mut want = Vec::new();
    for i in 0..total {
        let (body, out) = match i % 10 {
            0..=5 => (
                format!(r#"{{"k":"v","id":{i},"f":1.50,"drop":"x<y","z":[1,2]}}"#),
                Some(format!(r#"{{"f":1.5,"id":{i},"k":"v"}}"#)),
            ),
            6 => (
                format!(r#"{{ "f" : "<&>" , "id" : {i}.0e0, "k" : "v" }}"#),
                Some(format!(r#"{{"f":"\u003c\u0026\u003e","id":{i},"k":"v"}}"#)),
            ),
            7 => (format!(r#"{{"k":"w","id":{i}}}"#), None),
            8 => (format!(r#"{{"k":1,"id":{i}}}"#), None),
            _ => (format!("not json {i}"), None),
        };
        bodies.push(body.into_bytes());
        want.extend(out.map(String::into_bytes));
    }
    want.sort();
    publish(&src, "orders", &bodies);

    let d = dst.tcp_addr.to_string();
    let bridge = bridge_from(
        &src,
        "orders",
        &[&d],
        &[
            "--destination-topic=copy",
            "--require-json-field=k",
            "--require-json-value=v",
            "--whitelist-json-field=k",
            "--whitelist-json-field=id",
            "--whitelist-json-field=f",
            "--whitelist-json-field=missing",
            "--max-in-flight=500",
        ],
    );
    let got = wait_copied(
        &src,
        "orders",
        "nsq_to_nsq",
        &dst,
        "copy",
        want.len() as i64,
    );
    assert_eq!(got, want.len() as i64, "duplicates published");
    let copied = drain(&dst, "copy", want.len());
    assert!(
        copied == want,
        "the copied bodies differ from the expected ones"
    );

    let log = bridge.stop_ok("TERM");
    let undecodable = log
        .lines()
        .filter(|l| l.contains(" ERROR: Unable to decode json: not json "))
        .count();
    assert_eq!(undecodable, total / 10);
    // One destination: only the aggregate timing series, every 250 publishes.
    assert!(
        log.lines()
            .any(|l| l.contains(" [aggregate]: finished 250 - 99th: ")),
        "{}",
        &log[..log.len().min(2000)]
    );
    assert!(!log.contains(&format!("[{d}]:")));
    // Nothing left at the source, and nothing was requeued.
    let ch = src.channel_stats("orders", "nsq_to_nsq").unwrap();
    assert_eq!(int(&ch, "depth"), 0);
    assert_eq!(int(&ch, "requeue_count"), 0, "{ch}");
}

#[test]
fn round_robin_splits_between_two_destinations() {
    let src = Nsqd::start(&[]);
    let d1 = Nsqd::start(&[]);
    let d2 = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..1000).map(|i| format!("m{i:04}").into_bytes()).collect();
    publish(&src, "rr", &bodies);
    let (a1, a2) = (d1.tcp_addr.to_string(), d2.tcp_addr.to_string());
    let bridge = bridge_from(
        &src,
        "rr",
        &[&a1, &a2],
        &[
            "--channel=bridge",
            "--mode=round-robin",
            "--status-every=100",
        ],
    );
    // The shared counter alternates per message: an even split.
    assert_eq!(wait_total("rr", &d1, &d2, 1000), (500, 500));
    let mut all = drain(&d1, "rr", 500);
    all.extend(drain(&d2, "rr", 500));
    all.sort();
    assert!(all == bodies);
    let log = bridge.stop_ok("TERM");
    // Several destinations: a warning per series (below 100 is not), lines per address and
    // for the aggregate.
    for prefix in [
        format!("[{a1}]:"),
        format!("[{a2}]:"),
        "[aggregate]:".to_string(),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!(" {prefix} finished 100 - 99th: "))),
            "{prefix}: {log}"
        );
    }
    assert!(!log.contains("Warning: use more than 100"), "{log}");
}

/// A port nothing listens on (bound and released; nsqd takes it later).
fn free_port() -> u16 {
    nsq_testkit::free_port()
}

#[test]
fn destination_down_at_start_requeues_then_delivers() {
    let src = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("late{i:03}").into_bytes())
        .collect();
    publish(&src, "later", &bodies);
    let port = free_port();
    let dest = format!("127.0.0.1:{port}");
    let bridge = bridge_from(
        &src,
        "later",
        &[&dest],
        &[
            "--consumer-opt=default_requeue_delay,100ms",
            "--consumer-opt=max_requeue_delay,200ms",
            "--consumer-opt=backoff_multiplier,20ms",
            "--consumer-opt=max_backoff_duration,200ms",
            "--consumer-opt=max_attempts,0",
        ],
    );
    src.wait_stats("requeues while the destination is down", TIMEOUT, |s| {
        find_channel(s, "later", "nsq_to_nsq").is_some_and(|c| int(c, "requeue_count") >= 3)
    });
    let tcp = format!("--tcp-address={dest}");
    let dst = Nsqd::start(&[&tcp]);
    assert_copied_once(&src, "later", &dst, "later", &bodies);
    let log = bridge.stop_ok("TERM");
    assert!(log.contains("connection refused"), "{log}");
}

#[test]
fn missing_field_with_required_value_is_requeued() {
    let src = Nsqd::start(&[]);
    let dst = Nsqd::start(&[]);
    publish(
        &src,
        "req",
        &[br#"{"other":1}"#.to_vec(), br#"{"k":"v"}"#.to_vec()],
    );
    let d = dst.tcp_addr.to_string();
    let bridge = bridge_from(
        &src,
        "req",
        &[&d],
        &[
            "--require-json-field=k",
            "--require-json-value=v",
            "--consumer-opt=default_requeue_delay,50ms",
            "--consumer-opt=backoff_multiplier,10ms",
            "--consumer-opt=max_attempts,3",
        ],
    );
    // Requeued until max_attempts, then given up; the matching one is copied unchanged.
    src.wait_stats("the missing-field message given up", TIMEOUT, |s| {
        find_channel(s, "req", "nsq_to_nsq").is_some_and(|c| {
            int(c, "requeue_count") >= 3 && int(c, "depth") == 0 && int(c, "in_flight_count") == 0
        })
    });
    assert!(drain(&dst, "req", 1) == vec![br#"{"k":"v"}"#.to_vec()]);
    let log = bridge.stop_ok("TERM");
    assert!(
        log.lines()
            .filter(|l| l.ends_with(" ERROR: missing field to check required value"))
            .count()
            >= 3,
        "{log}"
    );
    // go-nsq logs the handler's "backoff" error, then gives the message up after
    // max_attempts (consumer.go, handlerLoop and shouldFailMessage).
    let msgs = go_log_msgs(log.as_bytes());
    let failed = msgs
        .iter()
        .filter(|m| {
            m.starts_with("ERR    2 [req/nsq_to_nsq] Handler returned error (backoff) for msg ")
        })
        .count();
    assert!(failed >= 3, "{log}");
    assert!(
        msgs.iter()
            .any(|m| m.starts_with("WRN    2 [req/nsq_to_nsq] msg ")
                && m.ends_with(" attempted 4 times, giving up")),
        "{log}"
    );
}

#[test]
fn user_agents_and_channel_at_both_ends() {
    let src = Nsqd::start(&[]);
    let dst = Nsqd::start(&[]);
    publish(&src, "ua", &[b"x".to_vec()]);
    let d = dst.tcp_addr.to_string();
    let bridge = bridge_from(
        &src,
        "ua",
        &[&d],
        &[
            "--consumer-opt=client_id,bridge-c",
            "--producer-opt=client_id,bridge-p",
            "--max-in-flight=17",
        ],
    );
    let stats = src.wait_stats("the consumer", TIMEOUT, |s| {
        find_channel(s, "ua", "nsq_to_nsq")
            .is_some_and(|c| c["clients"].as_array().is_some_and(|a| a.len() == 1))
    });
    let c = &find_channel(&stats, "ua", "nsq_to_nsq").unwrap()["clients"][0];
    assert_eq!(c["user_agent"], "nsq_to_nsq/1.3.0 go-nsq/1.1.0");
    assert_eq!(c["client_id"], "bridge-c");
    assert_eq!(c["ready_count"], 17);
    let stats = dst.wait_stats("the producer", TIMEOUT, |s| {
        s["producers"].as_array().is_some_and(|a| !a.is_empty())
    });
    let p: &Value = &stats["producers"][0];
    assert_eq!(p["user_agent"], "nsq_to_nsq/1.3.0 go-nsq/1.1.0", "{p}");
    assert_eq!(p["client_id"], "bridge-p", "{p}");
    // SIGINT stops it like SIGTERM. go-nsq logs the consumer (instance 2; the producer,
    // made first, is 1) dialing and stopping, and nothing of the producer's stopping: the
    // reference never stops its producers (nsq_to_nsq.go, `main`).
    let log = bridge.stop_ok("INT");
    let msgs = go_log_msgs(log.as_bytes());
    let src_addr = src.tcp_addr.to_string();
    for want in [
        format!("INF    2 [ua/nsq_to_nsq] ({src_addr}) connecting to nsqd"),
        format!("INF    1 ({d}) connecting to nsqd"),
        "INF    2 [ua/nsq_to_nsq] stopping...".to_string(),
        "WRN    2 [ua/nsq_to_nsq] there are 0 connections left alive".to_string(),
    ] {
        assert!(msgs.contains(&want), "{want} not in {msgs:#?}");
    }
    // The producer's only line is its dial: no stopping, and no close as the process ends.
    let producer: Vec<&String> = msgs
        .iter()
        .filter(|m| m.get(4..9) == Some("   1 "))
        .collect();
    assert_eq!(
        producer,
        [&format!("INF    1 ({d}) connecting to nsqd")],
        "{msgs:#?}"
    );
}

#[test]
fn validation_messages_and_exit_codes() {
    let bin = nsq_to_nsq_bin();
    let fatal = |args: &[&str], msg: &str| assert_fatal(&bin, args, msg);
    let n = ["--nsqd-tcp-address", "127.0.0.1:4150"];

    fatal(&[], "--topic and --channel are required");
    // go-nsq's NewConsumer refuses it (config.go, Validate); nsq_to_nsq.go `log.Fatal`s that.
    fatal(
        &[
            "--topic=t",
            "--nsqd-tcp-address=127.0.0.1:1",
            "--destination-nsqd-tcp-address=127.0.0.1:1",
            "--max-in-flight=-2",
        ],
        "invalid MaxInFlight ! -2 < 0",
    );
    fatal(
        &["--topic=t", "--channel="],
        "--topic and --channel are required",
    );
    fatal(&["--topic=t", "--topic=bad!"], "--topic is invalid");
    fatal(
        &["--topic=t", "--destination-topic=no pe"],
        "--destination-topic is invalid",
    );
    fatal(&["--topic=t", "--channel=a/b"], "--channel is invalid");
    fatal(
        &["--topic=t"],
        "--nsqd-tcp-address or --lookupd-http-address required",
    );
    fatal(
        &[
            "--topic=t",
            n[0],
            n[1],
            "--lookupd-http-address=127.0.0.1:4161",
        ],
        "use --nsqd-tcp-address or --lookupd-http-address not both",
    );
    fatal(
        &["--topic=t", n[0], n[1]],
        "--destination-nsqd-tcp-address required",
    );

    for (flag, value) in [("--consumer-opt", "bogus,1"), ("--producer-opt", "bogus,1")] {
        assert_usage_error(
            &bin,
            &argv0(&bin),
            &[flag, value],
            &format!(
                "invalid value \"bogus,1\" for flag {}: invalid option bogus",
                &flag[1..]
            ),
        );
    }
    assert_usage_error(
        &bin,
        &argv0(&bin),
        &["--bogus"],
        "flag provided but not defined: -bogus",
    );
    assert_version(&bin, "nsq_to_nsq");
    assert_help_header(&bin, &argv0(&bin));
    assert_help_lists(
        &bin,
        &[
            "-channel string\n    \tnsq channel (default \"nsq_to_nsq\")",
            "-consumer-opt value",
            "-destination-nsqd-tcp-address value",
            "-destination-topic string",
            "-lookupd-http-address value",
            "-max-in-flight int\n    \tmax number of messages to allow in flight (default 200)",
            "-mode string\n    \tthe upstream request mode options: round-robin, hostpool (default), epsilon-greedy (default \"hostpool\")",
            "-nsqd-tcp-address value",
            "-producer-opt value",
            "-require-json-field string",
            "-require-json-value string",
            "-status-every int\n    \tthe # of requests between logging status (per destination), 0 disables (default 250)",
            "-topic value",
            "-version",
            "-whitelist-json-field value",
        ],
    );
}

#[test]
fn refused_source_is_fatal_with_go_text() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let out = run_tool(
        &nsq_to_nsq_bin(),
        &[
            "--topic=t",
            "--nsqd-tcp-address",
            &addr,
            "--destination-nsqd-tcp-address",
            &addr,
        ],
        b"",
        TIMEOUT,
    );
    assert_exit(&out, 1);
    // go-nsq's own line as it dials (instance 2: the producer was made first), then the
    // tool's `log.Fatal(err)`.
    assert_eq!(
        go_log_msgs(&out.stderr),
        [
            format!("INF    2 [t/nsq_to_nsq] ({addr}) connecting to nsqd"),
            format!("dial tcp {addr}: connect: connection refused"),
        ]
    );
}

#[test]
fn hostpool_moves_traffic_off_a_dead_destination() {
    let src = Nsqd::start(&[]);
    let live = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("hp{i:04}").into_bytes())
        .collect();
    publish(&src, "hp", &bodies);
    let dead = format!("127.0.0.1:{}", free_port());
    let l = live.tcp_addr.to_string();
    // The default mode is hostpool: the dead destination is tried first, marked failed and
    // then left alone for 30 s, so everything (the requeued messages too) goes to the live one.
    let bridge = bridge_from(
        &src,
        "hp",
        &[&dead, &l],
        &[
            "--consumer-opt=default_requeue_delay,50ms",
            "--consumer-opt=backoff_multiplier,10ms",
            "--consumer-opt=max_backoff_duration,100ms",
            "--consumer-opt=max_attempts,0",
        ],
    );
    assert_copied_once(&src, "hp", &live, "hp", &bodies);
    let ch = src.channel_stats("hp", "nsq_to_nsq").unwrap();
    assert!(int(&ch, "requeue_count") >= 1, "{ch}");
    let log = bridge.stop_ok("TERM");
    assert!(
        log.contains(&format!("dial tcp {dead}: connect: connection refused")),
        "{log}"
    );
}

#[test]
fn discovers_the_source_via_lookupd() {
    let lookupd = Nsqlookupd::start(&[]);
    let src = nsqd_registered_with(&lookupd);
    let dst = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..50).map(|i| format!("lk{i:02}").into_bytes()).collect();
    publish(&src, "found", &bodies);
    wait_registered(&lookupd, "found");
    let (lh, d) = (lookupd.http_addr.to_string(), dst.tcp_addr.to_string());
    let bridge = bridge(&[
        "--topic=found",
        "--lookupd-http-address",
        &lh,
        "--destination-nsqd-tcp-address",
        &d,
        "--destination-topic=copied",
    ]);
    assert_copied_once(&src, "found", &dst, "copied", &bodies);
    bridge.stop_ok("TERM");
}

#[test]
fn a_body_the_destination_refuses_does_not_hold_back_the_others() {
    let src = Nsqd::start(&[]);
    // The destination takes bodies of at most 100 bytes: an MPUB holding a bigger one is
    // refused as a whole, and the messages are then published one by one.
    let dst = Nsqd::start(&["--max-msg-size=100"]);
    let bodies: Vec<Vec<u8>> = (0..300).map(|i| format!("ok{i:03}").into_bytes()).collect();
    // Published among the first ones, so that they travel in MPUBs with small ones (without
    // the one-by-one retry, those would be requeued with them until max_attempts, and lost).
    let mut sent = bodies.clone();
    for i in 0..3u8 {
        sent.insert(1 + 40 * usize::from(i), vec![b'0' + i; 150]);
    }
    publish(&src, "big", &sent);
    let d = dst.tcp_addr.to_string();
    let bridge = bridge_from(
        &src,
        "big",
        &[&d],
        &[
            "--consumer-opt=default_requeue_delay,20ms",
            "--consumer-opt=backoff_multiplier,10ms",
            "--consumer-opt=max_backoff_duration,50ms",
            "--consumer-opt=max_attempts,3",
        ],
    );
    // The big ones are requeued until max_attempts and then given up; the others are copied.
    assert_copied_once(&src, "big", &dst, "big", &bodies);
    let ch = src.channel_stats("big", "nsq_to_nsq").unwrap();
    assert!(int(&ch, "requeue_count") >= 3, "{ch}");
    bridge.stop_ok("TERM");
}

#[test]
fn large_bodies_are_split_into_mpubs_the_destination_accepts() {
    let src = Nsqd::start(&[]);
    // MPUB bodies above 1.1 MB are refused here; the tool keeps each MPUB under 1 MiB.
    let dst = Nsqd::start(&["--max-msg-size=500000", "--max-body-size=1100000"]);
    let bodies: Vec<Vec<u8>> = (0..12u8).map(|i| vec![b'a' + i; 400_000]).collect();
    publish(&src, "large", &bodies);
    let d = dst.tcp_addr.to_string();
    let bridge = bridge_from(&src, "large", &[&d], &[]);
    // (The bodies are in sorted order already.)
    assert_copied_once(&src, "large", &dst, "large", &bodies);
    let ch = src.channel_stats("large", "nsq_to_nsq").unwrap();
    assert_eq!(int(&ch, "requeue_count"), 0, "{ch}");
    let log = bridge.stop_ok("TERM");
    assert!(!log.contains("one by one"), "{log}");
}

#[test]
fn epsilon_greedy_delivers_everything_across_two_destinations() {
    let src = Nsqd::start(&[]);
    let d1 = Nsqd::start(&[]);
    let d2 = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..500).map(|i| format!("eg{i:03}").into_bytes()).collect();
    publish(&src, "eg", &bodies);
    let (a1, a2) = (d1.tcp_addr.to_string(), d2.tcp_addr.to_string());
    let bridge = bridge_from(&src, "eg", &[&a1, &a2], &["--mode=epsilon-greedy"]);
    let (n1, n2) = wait_total("eg", &d1, &d2, 500);
    assert_eq!(n1 + n2, 500);
    let mut all = drain(&d1, "eg", n1 as usize);
    all.extend(drain(&d2, "eg", n2 as usize));
    all.sort();
    assert!(all == bodies);
    bridge.stop_ok("TERM");
}

/// Issue 23: with one of two destinations down (`--mode hostpool`, the default, go-nsq's
/// default 90 s requeue delay), the reference publishes message by message, so each failed
/// attempt costs one message (requeued by its handler's error) and go-hostpool marks the host
/// down before the next one: 40 messages → 1 requeued, 39 at the live destination at once.
/// Here messages go out in groups (MPUB); a group that fails costs its first message and the
/// rest goes to the other destination at once. So: every failed attempt (one go-nsq
/// `Handler returned error` line each) delays exactly one message, the dead host is marked
/// down before it gets many more, and everything else arrives within seconds, not 90 s.
#[test]
fn a_dead_destination_delays_one_message_per_failed_attempt() {
    let src = Nsqd::start(&[]);
    let live = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..40).map(|i| format!("one{i:02}").into_bytes()).collect();
    publish(&src, "one_down", &bodies);
    let dead = format!("127.0.0.1:{}", free_port());
    let l = live.tcp_addr.to_string();
    let started = Instant::now();
    // The dead one first, so hostpool's first pick is the dead one.
    let bridge = bridge_from(&src, "one_down", &[&dead, &l], &[]);
    let (copied, ch) = loop {
        let copied = find_topic(&live.stats(), "one_down").map_or(0, |t| int(t, "message_count"));
        let ch = src.channel_stats("one_down", "nsq_to_nsq");
        if let Some(ch) = ch.clone().filter(|c| {
            int(c, "in_flight_count") == 0
                && int(c, "depth") == 0
                && copied + int(c, "deferred_count") == 40
        }) {
            break (copied, ch);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "copied {copied}; source channel: {ch:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = bridge.stop_ok("TERM");
    let failures = log.matches("Handler returned error (dial tcp").count() as i64;
    let what = format!("copied {copied}, {failures} failed attempts; {ch}\n{log}");
    assert!(failures >= 1, "{what}");
    // One message delayed per failed attempt, and only a few attempts.
    assert_eq!(int(&ch, "requeue_count"), failures, "{what}");
    assert_eq!(int(&ch, "deferred_count"), failures, "{what}");
    assert!(failures <= 2, "{what}");
    assert_eq!(copied, 40 - failures, "{what}");
    assert!(
        log.contains(&format!("dial tcp {dead}: connect: connection refused")),
        "{log}"
    );
}

/// Issue 31: round-robin with a dead destination. The reference's shared counter gives each
/// message a destination once (nsq_to_nsq.go, `HandleMessage`) and nothing marks the dead
/// one, so every message counted for it fails on its own (a `Handler returned error` line,
/// REQ with go-nsq's 90 s delay and backoff) and every other one is copied: exactly half of
/// a batch, whatever the timing. Before, a failed group cost one message and the rest went
/// to the live destination (9 of 10 copied), and the retries advanced the counter, which
/// changed which later messages met the dead destination.
#[test]
fn round_robin_fails_every_message_counted_for_a_dead_destination() {
    let src = Nsqd::start(&[]);
    let live = Nsqd::start(&[]);
    let bodies: Vec<Vec<u8>> = (0..10).map(|i| format!("rr{i}").into_bytes()).collect();
    publish(&src, "rr_down", &bodies);
    let dead = format!("127.0.0.1:{}", free_port());
    let l = live.tcp_addr.to_string();
    let bridge = bridge_from(
        &src,
        "rr_down",
        &[&dead, &l],
        &["--mode=round-robin", "--max-in-flight=10"],
    );
    let started = Instant::now();
    let (copied, ch) = loop {
        let copied = find_topic(&live.stats(), "rr_down").map_or(0, |t| int(t, "message_count"));
        let ch = src.channel_stats("rr_down", "nsq_to_nsq");
        if let Some(ch) = ch.clone().filter(|c| {
            int(c, "in_flight_count") == 0
                && int(c, "depth") == 0
                && copied + int(c, "deferred_count") == 10
        }) {
            break (copied, ch);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "copied {copied}; source channel: {ch:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = bridge.stop_ok("TERM");
    let failures = log.matches("Handler returned error (dial tcp").count() as i64;
    let what = format!("copied {copied}, {failures} failed; {ch}\n{log}");
    assert_eq!(copied, 5, "{what}");
    assert_eq!(int(&ch, "deferred_count"), 5, "{what}");
    assert_eq!(int(&ch, "requeue_count"), 5, "{what}");
    assert_eq!(failures, 5, "{what}");
}
