//! Data-dir compatibility: a data directory built byte by byte the way the reference nsqd
//! leaves it (`nsqd.dat` + go-diskqueue v1.1.0 files, see spec diskqueue.md and
//! nsqd-internals.md §9) is picked up by our nsqd: depths, pause flags, message IDs,
//! timestamps and attempts all carry over.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use nsq_integration_tests::{find_channel, find_topic, int, DataDir, Nsqd};

/// A stored message: (id, timestamp ns, attempts, body).
type Stored = (&'static str, i64, u16, &'static str);

const TOPIC_MSGS: [Stored; 3] = [
    (
        "0c1a2b3c4d5e6001",
        1_700_000_000_000_000_001,
        0,
        "topic-msg-1",
    ),
    (
        "0c1a2b3c4d5e6002",
        1_700_000_000_000_000_002,
        0,
        "topic-msg-2",
    ),
    (
        "0c1a2b3c4d5e6003",
        1_700_000_000_000_000_003,
        0,
        "topic-msg-3",
    ),
];

/// Channel records as a graceful shutdown leaves them: one that had been delivered once (in
/// flight at shutdown, attempts 1) and one never delivered.
const C2_MSGS: [Stored; 2] = [
    (
        "0c1a2b3c4d5e5001",
        1_699_999_999_000_000_001,
        1,
        "chan-msg-1",
    ),
    (
        "0c1a2b3c4d5e5002",
        1_699_999_999_000_000_002,
        0,
        "chan-msg-2",
    ),
];

/// One diskqueue record: 4-byte BE payload size, then 8-byte ts, 2-byte attempts, 16-byte
/// hex ID and the body.
fn record(m: &Stored) -> Vec<u8> {
    let (id, ts, attempts, body) = *m;
    assert_eq!(id.len(), 16);
    let mut r = Vec::new();
    r.extend_from_slice(&((26 + body.len()) as i32).to_be_bytes());
    r.extend_from_slice(&ts.to_be_bytes());
    r.extend_from_slice(&attempts.to_be_bytes());
    r.extend_from_slice(id.as_bytes());
    r.extend_from_slice(body.as_bytes());
    r
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("write {name}: {e}"));
}

/// The data dir: topic `compat` with channels `c1` (paused) and `c2`; the topic queue holds 3
/// messages across two data files (rotated at `--max-bytes-per-file=100`: two 41-byte records
/// fill file 0, the third would end at 123 > 100), the `compat:c2` queue holds 2.
fn build_fixture(dir: &Path, nsqd_dat: &[u8]) {
    write(dir, "nsqd.dat", nsqd_dat);

    let file0: Vec<u8> = TOPIC_MSGS[..2].iter().flat_map(record).collect();
    let file1: Vec<u8> = record(&TOPIC_MSGS[2]);
    assert_eq!((file0.len(), file1.len()), (82, 41));
    write(dir, "compat.diskqueue.000000.dat", &file0);
    write(dir, "compat.diskqueue.000001.dat", &file1);
    write(
        dir,
        "compat.diskqueue.meta.dat",
        format!("3\n0,0\n1,{}\n", file1.len()).as_bytes(),
    );

    let c2: Vec<u8> = C2_MSGS.iter().flat_map(record).collect();
    write(dir, "compat:c2.diskqueue.000000.dat", &c2);
    write(
        dir,
        "compat:c2.diskqueue.meta.dat",
        format!("2\n0,0\n0,{}\n", c2.len()).as_bytes(),
    );
}

const BOTH_CHANNELS: &[u8] = br#"{"topics":[{"name":"compat","paused":false,"channels":[{"name":"c1","paused":true},{"name":"c2","paused":false}]}],"version":"1.3.0"}"#;
const ONLY_C2: &[u8] = br#"{"topics":[{"name":"compat","paused":false,"channels":[{"name":"c2","paused":false}]}],"version":"1.3.0"}"#;

/// Consumes `compat/c2` and checks it yields its own 2 messages plus the topic's 3, with IDs,
/// timestamps and attempts kept.
fn consume_c2(nsqd: &Nsqd) {
    let mut c2 = nsqd.connect();
    c2.subscribe("compat", "c2");
    c2.rdy(10);
    let mut got = HashMap::new();
    while got.len() < 5 {
        let m = c2.message(Duration::from_secs(10));
        c2.fin(&m.id);
        let body = String::from_utf8(m.body.to_vec()).expect("utf8 body");
        assert!(got.insert(body.clone(), m).is_none(), "duplicate {body}");
    }
    assert!(
        c2.try_message(Duration::from_millis(500)).is_none(),
        "more than 5 messages on c2"
    );
    for (id, ts, attempts, body) in TOPIC_MSGS.iter().chain(C2_MSGS.iter()) {
        let m = got
            .get(*body)
            .unwrap_or_else(|| panic!("{body} not delivered on c2"));
        assert_eq!(m.id.as_bytes(), id.as_bytes(), "{body}: ID");
        assert_eq!(m.timestamp_ns, *ts, "{body}: timestamp");
        assert_eq!(
            m.attempts,
            attempts + 1,
            "{body}: attempts stored {attempts}, +1 for this delivery"
        );
    }
}

/// The same files with `nsqd.dat` listing only `c2`: no fan-out to several channels at load.
#[test]
fn reference_data_dir_single_channel_is_loaded_and_consumed() {
    let dir = DataDir::temp();
    build_fixture(dir.path(), ONLY_C2);
    let data_path = dir.path().to_path_buf();
    let nsqd = Nsqd::start_in(dir, &["--max-bytes-per-file=100"]);
    let stats = nsqd.wait_stats("depths after load", Duration::from_secs(15), |s| {
        find_topic(s, "compat").is_some_and(|t| int(t, "depth") == 0)
            && find_channel(s, "compat", "c2").is_some_and(|c| int(c, "depth") == 5)
    });
    assert_eq!(
        find_channel(&stats, "compat", "c2").expect("c2")["paused"],
        false
    );
    consume_c2(&nsqd);
    nsqd.wait_stats("everything finished", Duration::from_secs(10), |s| {
        find_channel(s, "compat", "c2")
            .is_some_and(|c| int(c, "depth") == 0 && int(c, "in_flight_count") == 0)
    });
    assert!(
        !data_path.join("compat.diskqueue.000000.dat").exists(),
        "consumed data file compat.diskqueue.000000.dat still exists"
    );
}

#[test]

fn reference_data_dir_is_loaded_and_consumed() {
    let dir = DataDir::temp();
    build_fixture(dir.path(), BOTH_CHANNELS);
    let data_path = dir.path().to_path_buf();
    let nsqd = Nsqd::start_in(dir, &["--max-bytes-per-file=100"]);

    // The topic pump hands the 3 topic messages to both channels; c1 is paused and keeps them.
    let stats = nsqd.wait_stats("depths after load", Duration::from_secs(15), |s| {
        find_topic(s, "compat").is_some_and(|t| int(t, "depth") == 0)
            && find_channel(s, "compat", "c1").is_some_and(|c| int(c, "depth") == 3)
            && find_channel(s, "compat", "c2").is_some_and(|c| int(c, "depth") == 5)
    });
    let t = find_topic(&stats, "compat").expect("topic");
    assert_eq!(t["paused"], false);
    assert_eq!(
        find_channel(&stats, "compat", "c1").expect("c1")["paused"],
        true
    );
    assert_eq!(
        find_channel(&stats, "compat", "c2").expect("c2")["paused"],
        false
    );

    consume_c2(&nsqd);

    // c1 stays paused: nothing is delivered until unpause, then the topic's 3.
    let mut c1 = nsqd.connect();
    c1.subscribe("compat", "c1");
    c1.rdy(10);
    assert!(
        c1.try_message(Duration::from_millis(1500)).is_none(),
        "paused c1 delivered"
    );
    let c1_stats = nsqd.channel_stats("compat", "c1").expect("c1");
    assert_eq!(
        (int(&c1_stats, "depth"), c1_stats["paused"].clone()),
        (3, true.into())
    );
    nsqd.http_ok("/channel/unpause?topic=compat&channel=c1");
    let mut c1_got = Vec::new();
    while c1_got.len() < 3 {
        let m = c1.message(Duration::from_secs(10));
        c1.fin(&m.id);
        c1_got.push(String::from_utf8(m.body.to_vec()).expect("utf8"));
    }
    c1_got.sort();
    assert_eq!(c1_got, ["topic-msg-1", "topic-msg-2", "topic-msg-3"]);

    nsqd.wait_stats("everything finished", Duration::from_secs(10), |s| {
        ["c1", "c2"].iter().all(|ch| {
            find_channel(s, "compat", ch)
                .is_some_and(|c| int(c, "depth") == 0 && int(c, "in_flight_count") == 0)
        })
    });
    // The completed topic data file is deleted once its records have been consumed.
    assert!(
        !data_path.join("compat.diskqueue.000000.dat").exists(),
        "consumed data file compat.diskqueue.000000.dat still exists"
    );
}
