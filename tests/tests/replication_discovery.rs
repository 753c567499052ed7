//! Members found through nsqlookupd (issue 29, docs/replication.md "Membership") with the real
//! binaries: three nsqd with `--replicas=2 --lookupd-tcp-address` and no
//! `--replication-peer` link to each other and take over a killed one; a node of another
//! group (another secret) on the same nsqlookupd is not added; a `--replication-peer` that is
//! also found under another spelling is linked to once.
//!
//! Build first: `cargo build -p nsqd-bin -p nsqlookupd-bin` (or set NSQD_BIN/NSQLOOKUPD_BIN).

use std::path::Path;
use std::time::Duration;

use nsq_integration_tests::{consume_all, int, Bytes, DataDir, Nsqd, Nsqlookupd, Value};

/// A free TCP port on 127.0.0.1 (bound to `:0`, then released for the daemon to take).
fn free_port() -> u16 {
    nsq_testkit::free_port()
}

/// Writes a secret file `name` holding `secret`; the flag naming it.
fn secret_flag(dir: &Path, name: &str, secret: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    format!("--replication-secret-file={}", path.display())
}

/// A replicating nsqd (`--replicas=2`) registered with nsqlookupd `l`, plus `extra`.
fn member(l: &Nsqlookupd, extra: &[&str]) -> Nsqd {
    member_in(l, DataDir::temp(), extra)
}

/// [`member`] on data directory `dir`.
fn member_in(l: &Nsqlookupd, dir: DataDir, extra: &[&str]) -> Nsqd {
    let lookupd = format!("--lookupd-tcp-address={}", l.tcp_addr);
    let mut args = vec![
        "--replicas=2",
        lookupd.as_str(),
        "--broadcast-address=127.0.0.1",
        "--replication-takeover-timeout=2s",
    ];
    args.extend_from_slice(extra);
    Nsqd::start_in(dir, &args)
}

/// `/stats` replication peers: (address, state).
fn peers(s: &Value) -> Vec<(String, String)> {
    s["replication"]["peers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["address"].as_str().unwrap_or_default().to_string(),
                        p["state"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `/stats` lists exactly `want` as peers, all connected.
fn linked_to(s: &Value, want: &[&Nsqd]) -> bool {
    let mut got = peers(s);
    got.sort();
    let mut want: Vec<(String, String)> = want
        .iter()
        .map(|n| (n.tcp_addr.to_string(), "connected".to_string()))
        .collect();
    want.sort();
    got == want
}

fn found_log(n: &Nsqd, peer: &Nsqd) -> bool {
    let line = format!(
        "REPLICATION: found peer {} through nsqlookupd",
        peer.tcp_addr
    );
    n.log().iter().any(|l| l.contains(&line))
}

/// The depth of channel c of topic t on `n` (0 when it does not exist).
fn depth(n: &Nsqd) -> i64 {
    n.channel_stats("t", "c").map_or(0, |c| int(&c, "depth"))
}

#[test]
fn members_are_found_through_nsqlookupd_and_take_over() {
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_flag(dir.path(), "group.secret", "s3cret");
    let l = Nsqlookupd::start(&[]);
    let a_tcp = format!("--tcp-address=127.0.0.1:{}", free_port());
    // A keeps its messages on disk (synced every 100 ms), to have them to deliver again.
    let a_args = [
        secret.as_str(),
        &a_tcp,
        "--mem-queue-size=0",
        "--sync-timeout=100ms",
    ];
    let a = member(&l, &a_args);
    let b = member(&l, &[&secret]);
    let c = member(&l, &[&secret]);
    let started = std::time::Instant::now();
    for (n, others) in [(&a, [&b, &c]), (&b, [&a, &c]), (&c, [&a, &b])] {
        n.wait_stats("the other two linked", Duration::from_secs(10), |s| {
            linked_to(s, &others)
        });
        for o in others {
            assert!(found_log(n, o), "no 'found peer {}' logged", o.tcp_addr);
        }
    }
    eprintln!("all linked {:?} after the third start", started.elapsed());
    // nsqlookupd shows the group of each (one group: the same secret).
    let nodes = l.get_json("/nodes");
    let groups: Vec<&str> = nodes["producers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["replication_group"].as_str().unwrap())
        .collect();
    assert_eq!(groups.len(), 3);
    assert!(groups.iter().all(|g| g.len() == 16 && *g == groups[0]));

    create_topic_and_publish(&a, 10);
    let origin = a.stats()["replication"]["node_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A's replica set (one member with N = 2) holds its 10 messages.
    let held = |n: &Nsqd| {
        n.stats()["replication"]["backlogs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["origin"] == origin.as_str() && int(b, "messages") == 10)
    };
    nsq_integration_tests::wait_until(|| held(&b) || held(&c));

    std::thread::sleep(Duration::from_millis(500));
    let killed = std::time::Instant::now();
    let a_dir = a.kill9();
    let deadline = killed + Duration::from_secs(20);
    loop {
        let (db, dc) = (depth(&b), depth(&c));
        if db == 10 || dc == 10 {
            eprintln!(
                "taken over {:?} after the kill (timeout 2s): B {db}, C {dc}",
                killed.elapsed()
            );
            assert_eq!(db + dc, 10, "taken over once");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no takeover within 20 s: B {db}, C {dc}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A comes back on its data directory after an unclean stop: it holds delivery until the
    // members nsqlookupd lists answered, gets the taker's manifest and delivers none of the
    // 10 again.
    let a = member_in(&l, a_dir, &a_args);
    let again = consume_all(a.tcp_addr, "t", "c", 100, 1, Duration::from_secs(3));
    assert!(
        again.is_empty(),
        "A delivered taken-over messages: {again:?}"
    );
    a.wait_stats("A linked again", Duration::from_secs(10), |s| {
        linked_to(s, &[&b, &c])
    });
}

/// Creates channel c of topic t on `n` and publishes `count` messages (acknowledged).
fn create_topic_and_publish(n: &Nsqd, count: usize) {
    n.http_ok("/topic/create?topic=t");
    n.http_ok("/channel/create?topic=t&channel=c");
    let mut p = n.connect();
    p.mpublish(
        "t",
        (0..count).map(|i| Bytes::from(format!("m{i}"))).collect(),
    );
}

#[test]
fn a_node_of_another_group_is_not_added() {
    let dir = tempfile::tempdir().unwrap();
    let ours = secret_flag(dir.path(), "ours", "s3cret");
    let theirs = secret_flag(dir.path(), "theirs", "other");
    let l = Nsqlookupd::start(&[]);
    let a = member(&l, &[&ours]);
    let b = member(&l, &[&ours]);
    let d = member(&l, &[&theirs]);
    a.wait_stats("A linked to B", Duration::from_secs(10), |s| {
        linked_to(s, &[&b])
    });
    b.wait_stats("B linked to A", Duration::from_secs(10), |s| {
        linked_to(s, &[&a])
    });
    // D is registered with its own group, then a discovery round (every 5 s) passes.
    let d_port = i64::from(d.tcp_addr.port());
    nsq_integration_tests::wait_until(|| {
        l.get_json("/nodes")["producers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| int(p, "tcp_port") == d_port && p["replication_group"].is_string())
    });
    std::thread::sleep(Duration::from_secs(6));
    assert!(linked_to(&a.stats(), &[&b]), "{}", a.stats()["replication"]);
    assert!(linked_to(&b.stats(), &[&a]), "{}", b.stats()["replication"]);
    assert!(peers(&d.stats()).is_empty(), "{}", d.stats()["replication"]);
    for (n, other) in [(&a, &d), (&b, &d), (&d, &a), (&d, &b)] {
        assert!(!found_log(n, other));
    }
}

/// Without a secret: A lists B by hand as `localhost:<port>` and finds it through nsqlookupd
/// as `127.0.0.1:<port>`; A links to B once (the second entry is dropped once its CHALLENGE
/// names the node the first links to). B, with no `--replication-peer`, accepts A's link
/// from the address it found A at.
#[test]
fn a_listed_peer_found_under_another_address_is_linked_once() {
    let l = Nsqlookupd::start(&[]);
    let b_port = free_port();
    let b = member(&l, &[&format!("--tcp-address=127.0.0.1:{b_port}")]);
    let a = member(&l, &[&format!("--replication-peer=localhost:{b_port}")]);
    let b_node = b.stats()["replication"]["node_id"]
        .as_str()
        .unwrap()
        .to_string();
    let s = a.wait_stats("A linked to B once", Duration::from_secs(10), |s| {
        let p = s["replication"]["peers"].as_array().unwrap();
        p.len() == 1 && p[0]["state"] == "connected" && p[0]["node_id"] == b_node.as_str()
    });
    eprintln!("A's peer: {}", s["replication"]["peers"][0]["address"]);
    b.wait_stats("B linked to A", Duration::from_secs(10), |s| {
        linked_to(s, &[&a])
    });
    assert!(
        a.log().iter().any(|l| l.contains("REPLICATION: peer ")
            && l.contains(" is the node at ")
            && l.contains(", dropped")),
        "no duplicate dropped:\n{}",
        a.log().join("\n")
    );
    // It stays so: no link flaps between the two entries.
    std::thread::sleep(Duration::from_secs(3));
    let s = a.stats();
    let p = s["replication"]["peers"].as_array().unwrap();
    assert_eq!(p.len(), 1, "{}", s["replication"]);
    assert_eq!(p[0]["state"], "connected");
    assert!(!a
        .log()
        .iter()
        .any(|l| l.contains("link to") && l.contains("lost")));
}
