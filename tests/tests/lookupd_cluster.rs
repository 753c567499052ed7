//! Black-box cluster tests: one real `nsqlookupd` plus several real `nsqd` processes that
//! register with it (`--lookupd-tcp-address`), observed through the lookupd's HTTP API, the
//! nsqd's `/stats`, and an unmodified third-party consumer (crates.io `tokio-nsq` 0.14) that
//! discovers the nsqd through `/lookup`.
//!
//! Contract: spec nsqlookupd.md §4 (registration DB), §5.6 (`/lookup`), §5.13 (tombstones) and
//! nsqd-internals.md §2.1 (channel pre-creation) and §16 (nsqd as a lookupd client; ours
//! notices a closed lookupd connection within ~1 s and re-registers at once).
//!
//! Build the binaries first: `cargo build -p nsqd-bin -p nsqlookupd-bin`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use nsq_integration_tests::{
    curl, find_channel, find_topic, http_get, int, Nsqd, Nsqlookupd, V2Conn, Value,
};
use tokio::time::timeout;
use tokio_nsq::{
    NSQChannel, NSQConsumerConfig, NSQConsumerConfigSources, NSQConsumerLookupConfig, NSQTopic,
};

/// `(tcp_port, http_port)` of an nsqd: how a producer is identified in `/lookup`.
type Ports = (u16, u16);

fn ports(n: &Nsqd) -> Ports {
    (n.tcp_addr.port(), n.http_addr.port())
}

fn port_set<'a>(nsqds: impl IntoIterator<Item = &'a Nsqd>) -> BTreeSet<Ports> {
    nsqds.into_iter().map(ports).collect()
}

/// Calls `f` every 50 ms until it returns `Ok`, for at most `limit`; returns the value and the
/// time it took. Panics with the last error on timeout.
fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> (T, Duration) {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return (v, start.elapsed()),
            Err(e) if start.elapsed() >= limit => {
                panic!("timed out after {limit:?} waiting for {what}; last: {e}")
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One nsqlookupd and `n` nsqd registered with it.
struct Cluster {
    nsqds: Vec<Nsqd>,
    lookupd: Nsqlookupd,
}

impl Cluster {
    fn start(n: usize, lookupd_args: &[&str]) -> Cluster {
        let lookupd = Nsqlookupd::start(lookupd_args);
        let lookup_arg = format!("--lookupd-tcp-address={}", lookupd.tcp_addr);
        let nsqds: Vec<Nsqd> = (0..n)
            .map(|_| Nsqd::start(&[&lookup_arg, "--broadcast-address=127.0.0.1"]))
            .collect();
        let c = Cluster { nsqds, lookupd };
        c.wait_nodes(Duration::from_secs(20));
        c
    }

    /// Waits until every nsqd has IDENTIFYed (is listed by `/nodes`).
    fn wait_nodes(&self, limit: Duration) -> Duration {
        let want = port_set(&self.nsqds);
        poll("every nsqd in /nodes", limit, || {
            let nodes = self.lookupd.get_json("/nodes");
            let have: BTreeSet<Ports> = nodes["producers"]
                .as_array()
                .ok_or_else(|| format!("no producers array: {nodes}"))?
                .iter()
                .filter(|p| p["broadcast_address"] == "127.0.0.1")
                .map(|p| (port_of(&p["tcp_port"]), port_of(&p["http_port"])))
                .collect();
            if want.is_subset(&have) {
                Ok(())
            } else {
                Err(format!("want {want:?}; /nodes = {nodes}"))
            }
        })
        .1
    }

    /// The producers `/lookup?topic=` lists, or `None` on 404.
    fn lookup_ports(&self, topic: &str) -> Result<Option<BTreeSet<Ports>>, String> {
        lookup_ports(&self.lookupd, topic)
    }

    /// Polls until `/lookup?topic=` lists exactly `want`; returns the time it took.
    fn wait_lookup(&self, topic: &str, want: &BTreeSet<Ports>, limit: Duration) -> Duration {
        poll(
            &format!("/lookup?topic={topic} to list exactly {want:?}"),
            limit,
            || match self.lookup_ports(topic)? {
                Some(have) if &have == want => Ok(()),
                other => Err(format!("listed {other:?}")),
            },
        )
        .1
    }
}

fn port_of(v: &Value) -> u16 {
    v.as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or_else(|| panic!("not a port: {v}"))
}

fn lookup_ports(lookupd: &Nsqlookupd, topic: &str) -> Result<Option<BTreeSet<Ports>>, String> {
    let r = lookupd.get(&format!("/lookup?topic={topic}"));
    match r.status {
        404 => Ok(None),
        200 => {
            let v = r.json();
            let producers = v["producers"]
                .as_array()
                .ok_or_else(|| format!("no producers array: {v}"))?;
            Ok(Some(
                producers
                    .iter()
                    .map(|p| (port_of(&p["tcp_port"]), port_of(&p["http_port"])))
                    .collect(),
            ))
        }
        s => Err(format!("/lookup?topic={topic}: {s} {}", r.text())),
    }
}

fn os_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The channel names of a `{"channels":[...]}` document, sorted.
fn channel_names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["channels"]
        .as_array()
        .unwrap_or_else(|| panic!("no channels array: {v}"))
        .iter()
        .map(|c| c.as_str().expect("channel name string").to_string())
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------
// 1. /lookup lists every nsqd that published to the topic, in the reference's shape
// ---------------------------------------------------------------------------------------

#[test]
fn lookup_lists_all_three_producers_in_reference_shape() {
    let c = Cluster::start(3, &[]);

    let r = c.lookupd.get("/lookup?topic=t");
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, r#"{"message":"TOPIC_NOT_FOUND"}"#),
        "/lookup of a topic nobody has"
    );

    let started = Instant::now();
    for n in &c.nsqds {
        n.http_pub("t", b"hello");
    }
    let published = started.elapsed();
    let want = port_set(&c.nsqds);
    let took = c.wait_lookup("t", &want, Duration::from_secs(5));
    eprintln!(
        "3 x /pub took {published:?}; /lookup listed all 3 producers {took:?} after the last \
         /pub ({:?} after the first)",
        started.elapsed()
    );
    assert!(
        took < Duration::from_secs(3),
        "registration should reach lookupd almost at once (target < 1 s), took {took:?}"
    );

    // What users type, and what the consumers parse.
    let body = curl(&[&format!("http://{}/lookup?topic=t", c.lookupd.http_addr)]);
    assert!(
        body.starts_with(r#"{"channels":[],"producers":[{"#),
        "keys sorted, compact, channels first: {body}"
    );
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        v.as_object().expect("object").keys().collect::<Vec<_>>(),
        ["channels", "producers"]
    );
    let producers = v["producers"].as_array().expect("producers");
    assert_eq!(producers.len(), 3, "{body}");
    let hostname = os_hostname();
    let mut remotes = HashSet::new();
    let mut seen_ports = BTreeSet::new();
    for p in producers {
        let obj = p.as_object().expect("producer object");
        let mut keys: Vec<&str> = obj.keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "broadcast_address",
                "hostname",
                "http_port",
                "remote_address",
                "tcp_port",
                "version"
            ],
            "producer keys: {p}"
        );
        let remote: SocketAddr = p["remote_address"]
            .as_str()
            .expect("remote_address string")
            .parse()
            .unwrap_or_else(|e| panic!("remote_address is not ip:port ({e}): {p}"));
        assert_eq!(remote.ip().to_string(), "127.0.0.1", "{p}");
        assert!(
            remotes.insert(remote),
            "two producers share {remote}: {body}"
        );
        let host = p["hostname"].as_str().expect("hostname string");
        assert!(!host.is_empty(), "{p}");
        if let Some(h) = &hostname {
            assert_eq!(host, h, "hostname is the OS hostname: {p}");
        }
        assert_eq!(p["broadcast_address"], "127.0.0.1", "{p}");
        assert_eq!(p["version"], "1.3.0", "{p}");
        let pp = (port_of(&p["tcp_port"]), port_of(&p["http_port"]));
        assert!(
            want.contains(&pp),
            "producer ports {pp:?} are not (tcp, http) of any nsqd {want:?}"
        );
        seen_ports.insert(pp);
        // Field order as the reference (a record, not a map).
        let exact = format!(
            r#"{{"remote_address":{},"hostname":{},"broadcast_address":"127.0.0.1","tcp_port":{},"http_port":{},"version":"1.3.0"}}"#,
            serde_json::to_string(&remote.to_string()).expect("json"),
            serde_json::to_string(host).expect("json"),
            pp.0,
            pp.1
        );
        assert!(
            body.contains(&exact),
            "producer not in the reference's field order;\nwant {exact}\nin   {body}"
        );
    }
    assert_eq!(seen_ports, want, "each nsqd listed once");

    // V1 headers (go-nsq depends on X-NSQ-Content-Type).
    let r = http_get(c.lookupd.http_addr, "/lookup?topic=t");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(r.header("x-nsq-content-type"), Some("nsq; version=1.0"));

    // /topics and /nodes agree.
    let topics = c.lookupd.get_json("/topics");
    assert_eq!(topics, serde_json::json!({"topics": ["t"]}));
    let nodes = c.lookupd.get_json("/nodes");
    let node_remotes: HashSet<SocketAddr> = nodes["producers"]
        .as_array()
        .expect("nodes producers")
        .iter()
        .map(|n| {
            assert_eq!(n["topics"], serde_json::json!(["t"]), "{n}");
            assert_eq!(n["tombstones"], serde_json::json!([false]), "{n}");
            n["remote_address"]
                .as_str()
                .expect("remote_address")
                .parse()
                .expect("ip:port")
        })
        .collect();
    assert_eq!(node_remotes, remotes, "/nodes vs /lookup: {nodes}");
}

// ---------------------------------------------------------------------------------------
// 2. A third-party consumer discovers all nsqd through the lookupd
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_nsq_consumer_discovers_every_nsqd_via_lookupd() {
    let c = tokio::task::block_in_place(|| {
        let c = Cluster::start(3, &[]);
        for n in &c.nsqds {
            n.http_ok("/topic/create?topic=t");
        }
        c.wait_lookup("t", &port_set(&c.nsqds), Duration::from_secs(10));
        c
    });

    let mut lookupds = HashSet::new();
    lookupds.insert(c.lookupd.http_url());
    let mut consumer = NSQConsumerConfig::new(
        NSQTopic::new("t").expect("topic name"),
        NSQChannel::new("c").expect("channel name"),
    )
    .set_max_in_flight(30)
    .set_sources(NSQConsumerConfigSources::Lookup(
        NSQConsumerLookupConfig::new()
            .set_poll_interval(Duration::from_secs(1))
            .set_addresses(lookupds),
    ))
    .build();

    // The consumer found and subscribed to every nsqd.
    tokio::task::block_in_place(|| {
        for n in &c.nsqds {
            n.wait_stats(
                "the tokio-nsq consumer to subscribe to t/c",
                Duration::from_secs(20),
                |s| find_channel(s, "t", "c").is_some_and(|ch| int(ch, "client_count") == 1),
            );
        }
        for (i, n) in c.nsqds.iter().enumerate() {
            for j in 0..100 {
                n.http_pub("t", format!("n{i}-{j:03}").as_bytes());
            }
        }
    });

    let mut seen: HashMap<Vec<u8>, u16> = HashMap::new();
    while seen.len() < 300 {
        let msg = timeout(Duration::from_secs(30), consumer.consume_filtered())
            .await
            .unwrap_or_else(|_| panic!("only {} of 300 messages within 30 s", seen.len()))
            .expect("consumer stream ended");
        let body = msg.body.clone();
        assert!(
            seen.insert(body.clone(), msg.attempt).is_none(),
            "duplicate delivery of {:?}",
            String::from_utf8_lossy(&body)
        );
        msg.finish().await;
    }
    // Nothing more arrives (exactly once).
    if let Ok(Some(extra)) = timeout(Duration::from_secs(2), consumer.consume_filtered()).await {
        panic!(
            "unexpected extra delivery {:?} (attempt {})",
            String::from_utf8_lossy(&extra.body),
            extra.attempt
        );
    }
    for i in 0..3 {
        for j in 0..100 {
            let b = format!("n{i}-{j:03}").into_bytes();
            assert_eq!(
                seen.get(&b),
                Some(&1),
                "{:?} not delivered once on first attempt",
                String::from_utf8_lossy(&b)
            );
        }
    }

    tokio::task::block_in_place(|| {
        for n in &c.nsqds {
            let s = n.wait_stats("t/c to drain", Duration::from_secs(20), |s| {
                find_channel(s, "t", "c")
                    .is_some_and(|ch| int(ch, "in_flight_count") == 0 && int(ch, "depth") == 0)
            });
            let ch = find_channel(&s, "t", "c").expect("channel");
            assert_eq!(int(ch, "message_count"), 100, "{ch}");
            assert_eq!(int(ch, "requeue_count"), 0, "{ch}");
            assert_eq!(int(ch, "timeout_count"), 0, "{ch}");
        }
        // The consumer's channel is registered with the lookupd by every nsqd.
        let ch = c.lookupd.get_json("/channels?topic=t");
        assert_eq!(channel_names(&ch), ["c"], "{ch}");
    });
    drop(consumer);
}

// ---------------------------------------------------------------------------------------
// 3. A crashed lookupd restarted on the same ports gets every registration back
// ---------------------------------------------------------------------------------------

#[test]
fn lookupd_restarted_on_same_ports_relearns_topics_and_channels() {
    let mut c = Cluster::start(3, &[]);
    for n in &c.nsqds {
        // (nsqd's channel endpoints never create topics.)
        n.http_ok("/topic/create?topic=t");
        n.http_ok("/channel/create?topic=t&channel=c");
    }
    let want = port_set(&c.nsqds);
    c.wait_lookup("t", &want, Duration::from_secs(10));
    assert_eq!(
        channel_names(&c.lookupd.get_json("/channels?topic=t")),
        ["c"]
    );

    let old_pid = c.lookupd.pid();
    let t0 = Instant::now();
    c.lookupd.restart_same_ports();
    let restarted = t0.elapsed();
    assert_ne!(c.lookupd.pid(), old_pid, "a new process");

    // A fresh, empty DB that the nsqd refill (re-IDENTIFY + REGISTER replay).
    poll(
        "/lookup?topic=t with all 3 nsqd and /channels?topic=t with c",
        Duration::from_secs(20),
        || {
            let have = c.lookup_ports("t")?;
            if have.as_ref() != Some(&want) {
                return Err(format!("/lookup producers {have:?}"));
            }
            let ch = c.lookupd.get_json("/channels?topic=t");
            if channel_names(&ch) != ["c"] {
                return Err(format!("/channels {ch}"));
            }
            Ok(())
        },
    );
    eprintln!(
        "lookupd SIGKILLed and restarted in {restarted:?}; all registrations back {:?} after \
         the kill",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "re-registration should not wait for the reference's 15 s PING; took {:?}",
        t0.elapsed()
    );
    let lookup = c.lookupd.get_json("/lookup?topic=t");
    assert_eq!(channel_names(&lookup), ["c"], "{lookup}");
    c.wait_nodes(Duration::from_secs(5));

    // The new connections carry later changes too.
    c.nsqds[1].http_pub("t_after", b"x");
    let one: BTreeSet<Ports> = [ports(&c.nsqds[1])].into();
    c.wait_lookup("t_after", &one, Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------
// 4. Tombstones: hidden for the lifetime, gone for good once the nsqd deletes the topic
// ---------------------------------------------------------------------------------------

#[test]
fn tombstone_hides_producer_until_lifetime_and_topic_delete_removes_it() {
    const LIFETIME: Duration = Duration::from_secs(2);
    let c = Cluster::start(3, &["--tombstone-lifetime=2s"]);
    for n in &c.nsqds {
        n.http_pub("t", b"a");
        n.http_pub("t2", b"b");
    }
    let all = port_set(&c.nsqds);
    c.wait_lookup("t", &all, Duration::from_secs(10));
    c.wait_lookup("t2", &all, Duration::from_secs(10));

    let victim = &c.nsqds[0];
    let others = port_set(&c.nsqds[1..]);
    let node = format!("127.0.0.1:{}", victim.http_addr.port());

    let before_tombstone = Instant::now();
    c.lookupd
        .http_ok(&format!("/topic/tombstone?topic=t&node={node}"));
    c.lookupd
        .http_ok(&format!("/topic/tombstone?topic=t2&node={node}"));
    let t_now = c.lookup_ports("t").expect("lookup t");
    let t2_now = c.lookup_ports("t2").expect("lookup t2");
    let nodes = c.lookupd.get_json("/nodes");
    let checked_within = before_tombstone.elapsed();
    if checked_within < LIFETIME {
        assert_eq!(
            t_now.as_ref(),
            Some(&others),
            "tombstoned producer still in /lookup t"
        );
        assert_eq!(
            t2_now.as_ref(),
            Some(&others),
            "tombstoned producer still in /lookup t2"
        );
        // /nodes still lists the node, with its tombstones per topic.
        let v = nodes["producers"]
            .as_array()
            .expect("producers")
            .iter()
            .find(|p| port_of(&p["http_port"]) == victim.http_addr.port())
            .unwrap_or_else(|| panic!("tombstoned node missing from /nodes: {nodes}"));
        let topics = v["topics"].as_array().expect("topics");
        let tombs = v["tombstones"].as_array().expect("tombstones");
        assert_eq!(topics.len(), 2, "{v}");
        assert_eq!(tombs, &[Value::Bool(true), Value::Bool(true)], "{v}");
    } else {
        eprintln!(
            "WARNING: machine too slow ({checked_within:?} > tombstone lifetime) to check the \
             tombstoned state"
        );
    }

    // The operator then deletes the topic on that nsqd: it sends UNREGISTER t.
    victim.http_ok("/topic/delete?topic=t");
    assert!(
        victim.topic_stats("t").is_none(),
        "topic t deleted on the victim"
    );

    // t2 was only tombstoned: the producer comes back once the lifetime is over.
    let came_back = c.wait_lookup("t2", &all, Duration::from_secs(15));
    let since_tombstone = before_tombstone.elapsed();
    eprintln!("tombstoned producer reappeared in /lookup t2 {since_tombstone:?} after tombstoning");
    assert!(
        since_tombstone >= LIFETIME - Duration::from_millis(100),
        "tombstone expired early: producer back after {since_tombstone:?} ({came_back:?} poll)"
    );

    // t was deleted on the victim: it stays gone after the lifetime.
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        assert_eq!(
            c.lookup_ports("t").expect("lookup t").as_ref(),
            Some(&others),
            "deleted topic's producer reappeared after the tombstone lifetime"
        );
        thread::sleep(Duration::from_millis(100));
    }
    let nodes = c.lookupd.get_json("/nodes");
    let v = nodes["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .find(|p| port_of(&p["http_port"]) == victim.http_addr.port())
        .unwrap_or_else(|| panic!("victim missing from /nodes: {nodes}"));
    assert_eq!(v["topics"], serde_json::json!(["t2"]), "{v}");
    assert_eq!(v["tombstones"], serde_json::json!([false]), "{v}");
}

// ---------------------------------------------------------------------------------------
// 5. Channel pre-creation from the lookupd on the first publish
// ---------------------------------------------------------------------------------------

#[test]
fn first_publish_precreates_channels_known_to_lookupd() {
    let c = Cluster::start(1, &[]);
    c.lookupd.http_ok("/channel/create?topic=fresh&channel=pre");
    c.lookupd
        .http_ok("/channel/create?topic=fresh&channel=eph%23ephemeral");
    assert_eq!(
        channel_names(&c.lookupd.get_json("/channels?topic=fresh")),
        ["eph#ephemeral", "pre"]
    );
    let n = &c.nsqds[0];
    // The nsqd learns the lookupd's HTTP address from the IDENTIFY reply; a REGISTER seen by
    // the lookupd proves that reply was processed.
    n.http_ok("/topic/create?topic=probe");
    c.wait_lookup("probe", &[ports(n)].into(), Duration::from_secs(10));

    n.http_pub("fresh", b"first");
    let s = n.stats();
    let t = find_topic(&s, "fresh").expect("topic fresh");
    let names: Vec<&str> = t["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|ch| ch["channel_name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        ["pre"],
        "only the non-ephemeral channel is pre-created: {t}"
    );
    let pre = find_channel(&s, "fresh", "pre").expect("channel pre");
    assert_eq!(int(pre, "depth"), 1, "the first message went to pre: {pre}");
    assert_eq!(int(pre, "message_count"), 1, "{pre}");
    assert_eq!(int(t, "message_count"), 1, "{t}");
    assert_eq!(int(t, "depth"), 0, "{t}");

    // The nsqd registers the topic and the pre-created channel.
    c.wait_lookup("fresh", &[ports(n)].into(), Duration::from_secs(5));

    // And the message is there for a consumer of pre.
    let mut conn = V2Conn::connect(n.tcp_addr);
    conn.subscribe("fresh", "pre");
    conn.rdy(1);
    let m = conn.message(Duration::from_secs(10));
    assert_eq!(&m.body[..], b"first");
    assert_eq!(m.attempts, 1);
    conn.fin(&m.id);
}
