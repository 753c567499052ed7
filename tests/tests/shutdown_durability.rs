//! Graceful shutdown durability: with 100k messages queued (half of them in flight to a
//! consumer that never FINs) and 1k deferred for an hour, SIGTERM must exit 0 and a restart on
//! the same data dir must deliver every message exactly once — the in-flight ones with their
//! attempts count preserved, the deferred ones immediately.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nsq_integration_tests::{find_channel, find_topic, int, Bytes, Nsqd};

const TOPIC: &str = "durable";
const CHANNEL: &str = "ch";
const QUEUED: usize = 100_000;
const IN_FLIGHT: usize = 50_000;
const DEFERRED: usize = 1_000;

fn body(i: usize) -> Bytes {
    Bytes::from(format!("q-{i:06}"))
}

fn deferred_body(i: usize) -> Bytes {
    Bytes::from(format!("d-{i:04}"))
}

#[test]
fn sigterm_with_half_in_flight_and_deferred_then_restart_delivers_everything_once() {
    let started = Instant::now();
    let args = ["--max-rdy-count=50000"];
    let nsqd = Nsqd::start(&args);

    // The consumer subscribes first so the channel exists and gets every message.
    let mut holder = nsqd.connect();
    holder.subscribe(TOPIC, CHANNEL);

    let mut producer = nsqd.connect();
    for batch in 0..QUEUED / 1000 {
        producer.mpublish(
            TOPIC,
            (batch * 1000..(batch + 1) * 1000).map(body).collect(),
        );
    }
    nsqd.wait_stats(
        "100k messages in the channel",
        Duration::from_secs(30),
        |s| find_channel(s, TOPIC, CHANNEL).is_some_and(|c| int(c, "depth") == QUEUED as i64),
    );

    // Take half of them in flight and never FIN them.
    holder.rdy(IN_FLIGHT as i64);
    let mut in_flight: HashSet<Bytes> = HashSet::with_capacity(IN_FLIGHT);
    let deadline = Instant::now() + Duration::from_secs(30);
    while in_flight.len() < IN_FLIGHT {
        assert!(
            Instant::now() < deadline,
            "only {} of {IN_FLIGHT} delivered",
            in_flight.len()
        );
        for m in holder.messages(Duration::from_secs(1)) {
            assert_eq!(m.attempts, 1);
            assert!(in_flight.insert(m.body.clone()), "duplicate {:?}", m.body);
        }
    }

    // 1k deferred for an hour.
    for i in 0..DEFERRED {
        producer.dpublish(TOPIC, 3_600_000, &deferred_body(i));
    }
    let stats = nsqd.wait_stats(
        "deferred and in-flight counts",
        Duration::from_secs(20),
        |s| {
            find_channel(s, TOPIC, CHANNEL).is_some_and(|c| {
                int(c, "deferred_count") == DEFERRED as i64
                    && int(c, "in_flight_count") == IN_FLIGHT as i64
            })
        },
    );
    let c = find_channel(&stats, TOPIC, CHANNEL).expect("channel");
    assert_eq!(int(c, "depth"), (QUEUED - IN_FLIGHT) as i64);
    eprintln!("set up in {:?}", started.elapsed());

    let dir = nsqd.sigterm_and_wait();
    drop(holder);
    drop(producer);
    eprintln!("shut down after {:?}", started.elapsed());

    let nsqd = Nsqd::start_in(dir, &args);
    let stats = nsqd.wait_stats(
        "all messages back in the channel",
        Duration::from_secs(20),
        |s| {
            find_channel(s, TOPIC, CHANNEL)
                .is_some_and(|c| int(c, "depth") == (QUEUED + DEFERRED) as i64)
        },
    );
    let c = find_channel(&stats, TOPIC, CHANNEL).expect("channel");
    assert_eq!(int(c, "in_flight_count"), 0);
    assert_eq!(
        int(c, "deferred_count"),
        0,
        "deferral is lost across a restart"
    );
    assert_eq!(int(find_topic(&stats, TOPIC).expect("topic"), "depth"), 0);

    // Drain with a consumer that FINs everything.
    let mut c = nsqd.connect();
    c.subscribe(TOPIC, CHANNEL);
    c.rdy(2500);
    let want = QUEUED + DEFERRED;
    let mut got: HashMap<Bytes, u16> = HashMap::with_capacity(want);
    let mut duplicates = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "only {} of {want} delivered after restart",
            got.len()
        );
        let batch = c.messages(Duration::from_secs(1));
        c.fin_all(batch.iter().map(|m| &m.id));
        for m in batch {
            if got.insert(m.body.clone(), m.attempts).is_some() {
                duplicates.push(m.body);
            }
        }
    }
    // Nothing more may arrive.
    let extra = c.messages(Duration::from_millis(1500));
    assert!(
        extra.is_empty(),
        "{} extra deliveries after all {want}",
        extra.len()
    );
    assert!(
        duplicates.is_empty(),
        "{} duplicates, e.g. {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(5)]
    );

    for i in 0..QUEUED {
        let b = body(i);
        let attempts = *got.get(&b).unwrap_or_else(|| panic!("lost {b:?}"));
        if in_flight.contains(&b) {
            assert!(
                attempts >= 2,
                "{b:?} was in flight at shutdown but came back with attempts {attempts}"
            );
        } else {
            assert_eq!(attempts, 1, "{b:?} was never delivered before");
        }
    }
    for i in 0..DEFERRED {
        let b = deferred_body(i);
        assert_eq!(
            got.get(&b),
            Some(&1),
            "deferred {b:?} must be delivered at once with attempts 1"
        );
    }

    let stats = nsqd.wait_stats("the channel to drain", Duration::from_secs(20), |s| {
        find_channel(s, TOPIC, CHANNEL)
            .is_some_and(|c| int(c, "in_flight_count") == 0 && int(c, "depth") == 0)
    });
    let ch = find_channel(&stats, TOPIC, CHANNEL).expect("channel");
    assert_eq!(int(ch, "deferred_count"), 0);
    assert_eq!(int(ch, "timeout_count"), 0);
    eprintln!("done in {:?}", started.elapsed());
}
