//! `/metrics` against the real binaries: the exposition passes `promtool check metrics` with no
//! lint complaints, its values match `/stats` after a scripted publish/consume, and a real
//! Prometheus server scrapes nsqd and answers a PromQL query for a channel's depth.
//!
//! promtool and prometheus come from Debian's `prometheus` package, which `.ci/run` installs;
//! the tests that need them print a message and pass when they are absent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::{
    find_channel, find_topic, have_program, http_get, http_post, int, Nsqd, Nsqlookupd, Value,
};

/// Series name plus labels (sorted) → value.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// A small parser of the text format, strict enough to catch bad escaping.
fn parse_exposition(text: &str) -> Samples {
    let mut out = Samples::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.find('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some(i) => {
                let body = series[i + 1..]
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unterminated labels in {line:?}"));
                (series[..i].to_string(), parse_labels(body, line))
            }
        };
        assert!(
            out.insert((name, labels), value).is_none(),
            "duplicate series {line:?}"
        );
    }
    out
}

fn parse_labels(mut s: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    while !s.is_empty() {
        let (k, rest) = s
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label in {line:?}"));
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => v.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => v.push(c),
                    other => panic!("bad escape {other:?} in {line:?}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => v.push(c),
                None => panic!("unterminated label value in {line:?}"),
            }
        };
        labels.insert(k.to_string(), v);
        s = &rest[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
    labels
}

fn get(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = (
        name.to_string(),
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no series {name}{labels:?} in /metrics"))
}

fn metrics(addr: SocketAddr, query: &str) -> String {
    let r = http_get(addr, &format!("/metrics{query}"));
    assert_eq!(r.status, 200, "/metrics: {}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    r.text()
}

/// `promtool check metrics` on `text`: must exit 0 and print nothing (no lint problem).
/// Returns false (after saying so) when promtool is not installed.
fn promtool_check(text: &str) -> bool {
    if !have_program("promtool") {
        eprintln!("skipping promtool check: promtool not installed (apt-get install prometheus)");
        return false;
    }
    use std::io::Write as _;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {} {said}\n--- exposition ---\n{text}",
        out.status
    );
    true
}

#[test]
fn nsqd_metrics_match_stats_and_pass_promtool() {
    let nsqd = Nsqd::start(&[
        "--e2e-processing-latency-percentile=0.99,0.5",
        // Most messages spill to the disk queue, so backend depth is not 0.
        "--mem-queue-size=2",
    ]);
    nsqd.http_ok("/topic/create?topic=m_t");
    nsqd.http_ok("/channel/create?topic=m_t&channel=c1");
    nsqd.http_ok("/channel/create?topic=m_t&channel=c2");
    for i in 0..10 {
        nsqd.http_pub("m_t", format!("msg-{i}").as_bytes());
    }

    // A producer and a consumer whose identities need label escaping.
    let mut producer = nsqd.connect();
    producer.identify(r#"{"client_id":"prod\"q","hostname":"h\\1"}"#);
    producer.publish("m_t", b"from-tcp");
    let mut consumer = nsqd.connect();
    consumer.identify(r#"{"client_id":"cons\\x\"y","hostname":"line\nbreak"}"#);
    consumer.subscribe("m_t", "c1");
    consumer.rdy(3);
    let got: Vec<_> = (0..3)
        .map(|_| consumer.message(Duration::from_secs(15)))
        .collect();
    consumer.rdy(0);
    consumer.fin(&got[0].id);
    consumer.req(&got[1].id, 60_000);
    // got[2] stays in flight.
    nsqd.wait_stats("c1 settles", Duration::from_secs(15), |s| {
        find_channel(s, "m_t", "c1").is_some_and(|c| {
            int(c, "in_flight_count") == 1
                && int(c, "deferred_count") == 1
                && int(c, "requeue_count") == 1
        })
    });

    let stats = nsqd.stats();
    let text = metrics(nsqd.http_addr, "?per_client=true");
    let stats_after = nsqd.stats();
    assert_eq!(
        stats["topics"], stats_after["topics"],
        "stats moved mid-test"
    );
    promtool_check(&text);
    promtool_check(&metrics(nsqd.http_addr, ""));
    let m = parse_exposition(&text);

    let t = find_topic(&stats, "m_t").expect("topic");
    let tl = [("topic", "m_t")];
    for (family, key) in [
        ("nsq_topic_depth", "depth"),
        ("nsq_topic_backend_depth", "backend_depth"),
        ("nsq_topic_messages_total", "message_count"),
        ("nsq_topic_message_bytes_total", "message_bytes"),
    ] {
        assert_eq!(get(&m, family, &tl), int(t, key) as f64, "{family}");
    }
    assert_eq!(get(&m, "nsq_topic_messages_total", &tl), 11.0);
    assert_eq!(get(&m, "nsq_topic_paused", &tl), 0.0);
    for ch in ["c1", "c2"] {
        let c = find_channel(&stats, "m_t", ch).expect("channel");
        let cl = [("topic", "m_t"), ("channel", ch)];
        for (family, key) in [
            ("nsq_channel_depth", "depth"),
            ("nsq_channel_backend_depth", "backend_depth"),
            ("nsq_channel_in_flight", "in_flight_count"),
            ("nsq_channel_deferred", "deferred_count"),
            ("nsq_channel_messages_total", "message_count"),
            ("nsq_channel_requeued_total", "requeue_count"),
            ("nsq_channel_timed_out_total", "timeout_count"),
            ("nsq_channel_clients", "client_count"),
        ] {
            assert_eq!(get(&m, family, &cl), int(c, key) as f64, "{family} {ch}");
        }
        assert_eq!(get(&m, "nsq_channel_paused", &cl), 0.0);
        for q in ["0.99", "0.5"] {
            let mut l = cl.to_vec();
            l.push(("quantile", q));
            get(&m, "nsq_channel_e2e_processing_latency_seconds", &l);
        }
    }
    assert_eq!(
        get(
            &m,
            "nsq_channel_depth",
            &[("topic", "m_t"), ("channel", "c2")]
        ),
        11.0
    );
    assert!(
        get(
            &m,
            "nsq_channel_backend_depth",
            &[("topic", "m_t"), ("channel", "c2")]
        ) > 0.0
    );
    assert_eq!(
        get(
            &m,
            "nsq_channel_in_flight",
            &[("topic", "m_t"), ("channel", "c1")]
        ),
        1.0
    );

    // Per-client series, with their labels unescaped back to what IDENTIFY sent.
    let c1 = find_channel(&stats, "m_t", "c1").expect("c1");
    let client = &c1["clients"][0];
    let remote = client["remote_address"].as_str().expect("remote_address");
    let labels = [
        ("topic", "m_t"),
        ("channel", "c1"),
        ("client_id", "cons\\x\"y"),
        ("hostname", "line\nbreak"),
        ("remote_address", remote),
    ];
    assert_eq!(
        get(&m, "nsq_client_ready", &labels),
        int(client, "ready_count") as f64
    );
    assert_eq!(get(&m, "nsq_client_in_flight", &labels), 1.0);
    assert_eq!(get(&m, "nsq_client_messages_total", &labels), 3.0);
    assert_eq!(get(&m, "nsq_client_finished_total", &labels), 1.0);
    assert_eq!(get(&m, "nsq_client_requeued_total", &labels), 1.0);
    let producers = stats["producers"].as_array().expect("producers");
    let p_remote = producers[0]["remote_address"].as_str().expect("remote");
    assert_eq!(
        get(
            &m,
            "nsq_producer_messages_total",
            &[
                ("topic", "m_t"),
                ("client_id", "prod\"q"),
                ("hostname", "h\\1"),
                ("remote_address", p_remote)
            ]
        ),
        1.0
    );

    // Without the parameter: no per-client series.
    let plain = metrics(nsqd.http_addr, "");
    assert!(!plain.contains("nsq_client_ready{"), "{plain}");
    assert!(plain.contains("nsq_channel_depth{topic=\"m_t\",channel=\"c1\"} 8\n"));

    // Node-level families.
    assert_eq!(get(&m, "nsq_nsqd_healthy", &[]), 1.0);
    assert_eq!(
        get(&m, "nsq_nsqd_start_time_seconds", &[]),
        int(&stats, "start_time") as f64
    );
    assert!(get(&m, "nsq_nsqd_uptime_seconds", &[]) >= 0.0);
    assert_eq!(get(&m, "nsq_nsqd_topics", &[]), 1.0);
    assert_eq!(get(&m, "nsq_nsqd_channels", &[]), 2.0);
    assert_eq!(get(&m, "nsq_nsqd_tcp_connections", &[]), 2.0);
    assert!(get(&m, "process_resident_memory_bytes", &[]) > 0.0);
    assert!(get(&m, "process_open_fds", &[]) > 0.0);
    assert!(get(&m, "process_cpu_seconds_total", &[]) >= 0.0);
    let start = get(&m, "process_start_time_seconds", &[]);
    assert!(
        (start - int(&stats, "start_time") as f64).abs() < 60.0,
        "process start {start} vs nsqd start"
    );
}

#[test]
fn nsqlookupd_metrics_count_producers_topics_channels_tombstones() {
    let lookupd = Nsqlookupd::start(&[]);
    let lookupd_tcp = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
    let nsqd = Nsqd::start(&[&lookupd_tcp, "--broadcast-address=127.0.0.1"]);
    nsqd.http_ok("/topic/create?topic=lk_a");
    nsqd.http_ok("/channel/create?topic=lk_a&channel=ch1");
    nsqd.http_ok("/topic/create?topic=lk_b");
    let deadline = Instant::now() + Duration::from_secs(30);
    let m = loop {
        let m = parse_exposition(&metrics(lookupd.http_addr, ""));
        if m.get(&("nsq_lookupd_topics".to_string(), BTreeMap::new())) == Some(&2.0)
            && m.get(&("nsq_lookupd_channels".to_string(), BTreeMap::new())) == Some(&1.0)
        {
            break m;
        }
        assert!(Instant::now() < deadline, "lookupd never saw 2 topics");
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(get(&m, "nsq_lookupd_producers", &[]), 1.0);
    assert_eq!(get(&m, "nsq_lookupd_tombstones", &[]), 0.0);
    let node = format!("127.0.0.1:{}", nsqd.http_addr.port());
    let r = http_post(
        lookupd.http_addr,
        &format!("/topic/tombstone?topic=lk_a&node={node}"),
        b"",
    );
    assert_eq!(r.status, 200, "tombstone: {}", r.text());
    let text = metrics(lookupd.http_addr, "");
    promtool_check(&text);
    let m = parse_exposition(&text);
    assert_eq!(get(&m, "nsq_lookupd_tombstones", &[]), 1.0);
    assert!(get(&m, "process_resident_memory_bytes", &[]) > 0.0);
}

/// A Prometheus server (its own config and TSDB in a temp dir) killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now (bound and released).
fn free_port() -> u16 {
    nsq_testkit::free_port()
}

fn start_prometheus(target: SocketAddr) -> Prometheus {
    let dir = tempfile::Builder::new()
        .prefix("nsq-prom-")
        .tempdir()
        .expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: nsqd\n    scrape_interval: 1s\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("write prometheus.yml");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log fd"))
        .stderr(log)
        .spawn()
        .expect("spawn prometheus");
    Prometheus {
        child,
        addr,
        _dir: dir,
    }
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn prometheus_scrapes_nsqd_and_answers_promql_for_channel_depth() {
    if !have_program("prometheus") {
        eprintln!("skipping: prometheus not installed (apt-get install prometheus)");
        return;
    }
    let nsqd = Nsqd::start(&[]);
    nsqd.http_ok("/topic/create?topic=prom_t");
    nsqd.http_ok("/channel/create?topic=prom_t&channel=prom_c");
    for i in 0..7 {
        nsqd.http_pub("prom_t", format!("m{i}").as_bytes());
    }
    let mut prom = start_prometheus(nsqd.http_addr);
    let query = url_escape(r#"nsq_channel_depth{topic="prom_t",channel="prom_c"}"#);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::from("(no answer yet)");
    loop {
        if let Ok(Some(status)) = prom.child.try_wait() {
            let log = std::fs::read_to_string(prom._dir.path().join("prometheus.log"));
            panic!("prometheus exited ({status}): {log:?}");
        }
        if std::net::TcpStream::connect(prom.addr).is_ok() {
            let r = http_get(prom.addr, &format!("/api/v1/query?query={query}"));
            last = r.text();
            if r.status == 200 {
                let v: Value = r.json();
                if let Some(sample) = v["data"]["result"].as_array().and_then(|a| a.first()) {
                    assert_eq!(v["status"], "success");
                    assert_eq!(sample["metric"]["job"], "nsqd");
                    assert_eq!(sample["value"][1], "7", "{v}");
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered the channel depth; last answer: {last}; log: {:?}",
            std::fs::read_to_string(prom._dir.path().join("prometheus.log"))
        );
        thread::sleep(Duration::from_millis(500));
    }
}
