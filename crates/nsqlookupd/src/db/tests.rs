use super::*;

const S: i64 = 1_000_000_000;

fn live() -> Liveness {
    Liveness {
        inactive_producer_timeout: Duration::from_secs(300),
        tombstone_lifetime: Duration::from_secs(45),
    }
}

fn peer(port: u16, now: i64) -> Arc<Peer> {
    Peer::new(
        format!("127.0.0.1:{port}"),
        PeerInfo {
            broadcast_address: "b".into(),
            hostname: "h".into(),
            http_port: i64::from(port) + 1,
            tcp_port: i64::from(port),
            version: "1.3.0".into(),
            replication: None,
        },
        now,
    )
}

#[test]
fn inactive_producers_are_hidden_exactly_after_the_timeout() {
    let db = RegistrationDb::new();
    let p = peer(1000, 0);
    db.identify(&p);
    db.register(&p, "t", None);
    let at = |now| db.lookup("t", now, live()).unwrap().1.len();
    assert_eq!(at(300 * S), 1, "equal to the timeout is still active");
    assert_eq!(at(300 * S + 1), 0);
    assert_eq!(db.nodes(300 * S + 1, live()).len(), 0);
    assert_eq!(db.nodes(300 * S, live()).len(), 1);
    // PING brings it back.
    p.touch(400 * S);
    assert_eq!(at(400 * S), 1);
    // Still registered while inactive.
    assert_eq!(db.topics(), vec!["t".to_string()]);
}

#[test]
fn tombstones_expire_and_are_per_topic() {
    let db = RegistrationDb::new();
    let p = peer(1000, 0);
    db.identify(&p);
    db.register(&p, "a", None);
    db.register(&p, "b", Some("c"));
    db.tombstone("a", "b:1001", 10 * S);
    db.tombstone("a", "b:9999", 10 * S); // no match
    let n = |now| db.lookup("a", now, live()).unwrap().1.len();
    assert_eq!(n(10 * S), 0);
    assert_eq!(n(55 * S - 1), 0);
    assert_eq!(n(55 * S), 1, "lifetime reached: visible again");
    assert_eq!(db.lookup("b", 10 * S, live()).unwrap().1.len(), 1);
    let nodes = db.nodes(20 * S, live());
    assert_eq!(nodes[0].topics, vec!["a", "b"]);
    assert_eq!(nodes[0].tombstones, vec![true, false]);
    assert_eq!(db.nodes(55 * S, live())[0].tombstones, vec![false, false]);
    // Re-register keeps the tombstone; re-tombstone refreshes it.
    db.register(&p, "a", None);
    assert_eq!(n(20 * S), 0);
    db.tombstone("a", "b:1001", 50 * S);
    assert_eq!(n(94 * S), 0);
    assert_eq!(n(95 * S), 1);
    let dbg = db.debug();
    assert!(dbg["topic:a:"][0].tombstoned);
    assert_eq!(dbg["topic:a:"][0].tombstoned_at, 50 * S);
    assert_eq!(dbg["topic:b:"][0].tombstoned_at, GO_ZERO_TIME_UNIX_NANO);
}

#[test]
fn unregister_rules() {
    let db = RegistrationDb::new();
    let p = peer(1000, 0);
    db.identify(&p);
    db.register(&p, "t", Some("c"));
    db.register(&p, "t", Some("e#ephemeral"));
    db.register(&p, "x#ephemeral", Some("c"));
    db.unregister(&p.id, "t", Some("c"));
    db.unregister(&p.id, "t", Some("e#ephemeral"));
    assert_eq!(db.channels("t"), vec!["c"]);
    let removed = db.unregister(&p.id, "x#ephemeral", None);
    assert_eq!(removed.len(), 2);
    assert_eq!(db.topics(), vec!["t"]);
    assert_eq!(db.channels("x#ephemeral"), vec!["c"]);
    assert_eq!(
        db.lookup_registrations(&p.id),
        vec![Registration::client(), Registration::topic("t")]
    );
    db.remove_peer(&p.id);
    assert!(db.lookup_registrations(&p.id).is_empty());
    assert_eq!(db.topics(), vec!["t"]);
    assert_eq!(db.lookup("t", 0, live()).unwrap().1, vec![]);
}

#[test]
fn wildcards() {
    let db = RegistrationDb::new();
    let (p, q) = (peer(1000, 0), peer(2000, 0));
    db.register(&p, "a", Some("c1"));
    db.register(&q, "b", Some("c2"));
    db.register(&p, "b", None);
    assert_eq!(db.channels("*"), vec!["c1", "c2"]);
    let (ch, prods) = db.lookup("*", 0, live()).unwrap();
    assert_eq!(ch.len(), 2);
    assert_eq!(prods.len(), 2);
    assert!(db.lookup("", 0, live()).is_none());
    assert!(db.channels("").is_empty());
    db.delete_topic("*");
    assert!(db.topics().is_empty());
    assert!(db.channels("*").is_empty());
}
