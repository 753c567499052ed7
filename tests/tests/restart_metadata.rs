//! Topics, channels and pause flags survive a graceful restart through `nsqd.dat`, which has
//! the reference's shape (compact JSON, keys in order, `channels: null` when empty, no
//! ephemeral names).

use std::time::Duration;

use nsq_integration_tests::{find_channel, find_topic, Nsqd, Value};

#[test]
fn restart_keeps_topics_channels_and_pause_flags() {
    let nsqd = Nsqd::start(&[]);
    nsqd.http_ok("/topic/create?topic=rt");
    nsqd.http_ok("/channel/create?topic=rt&channel=c1");
    nsqd.http_ok("/channel/create?topic=rt&channel=c2");
    nsqd.http_ok("/channel/create?topic=rt&channel=eph%23ephemeral");
    nsqd.http_ok("/channel/pause?topic=rt&channel=c1");
    nsqd.http_ok("/topic/create?topic=rt2");
    nsqd.http_ok("/topic/pause?topic=rt2");
    nsqd.http_ok("/topic/create?topic=gone%23ephemeral");

    let stats = nsqd.stats();
    assert_eq!(
        find_channel(&stats, "rt", "c1").expect("c1")["paused"],
        true
    );
    assert_eq!(find_topic(&stats, "rt2").expect("rt2")["paused"], true);

    let dir = nsqd.sigterm_and_wait();

    // nsqd.dat as the reference writes it.
    let raw = std::fs::read_to_string(dir.path().join("nsqd.dat")).expect("nsqd.dat exists");
    assert!(raw.starts_with("{\"topics\":["), "nsqd.dat: {raw}");
    assert!(
        raw.trim_end().ends_with(",\"version\":\"1.3.0\"}"),
        "nsqd.dat: {raw}"
    );
    assert!(
        !raw.contains(' ') && !raw.contains('\n'),
        "compact JSON expected: {raw:?}"
    );
    assert!(
        raw.contains("{\"name\":\"rt2\",\"paused\":true,\"channels\":null}"),
        "nsqd.dat: {raw}"
    );
    assert!(
        raw.contains("{\"name\":\"rt\",\"paused\":false,\"channels\":[{\"name\":\"c"),
        "nsqd.dat: {raw}"
    );
    assert!(
        raw.contains("{\"name\":\"c1\",\"paused\":true}"),
        "nsqd.dat: {raw}"
    );
    assert!(
        raw.contains("{\"name\":\"c2\",\"paused\":false}"),
        "nsqd.dat: {raw}"
    );
    assert!(
        !raw.contains("ephemeral"),
        "ephemeral names are not persisted: {raw}"
    );
    let md: Value = serde_json::from_str(&raw).expect("nsqd.dat is JSON");
    let topics = md["topics"].as_array().expect("topics array");
    assert_eq!(topics.len(), 2, "nsqd.dat: {raw}");
    let rt = topics.iter().find(|t| t["name"] == "rt").expect("rt");
    assert_eq!(rt["channels"].as_array().expect("rt channels").len(), 2);

    let nsqd = Nsqd::start_in(dir, &[]);
    let stats = nsqd.wait_stats("topics reloaded", Duration::from_secs(10), |s| {
        find_topic(s, "rt").is_some() && find_topic(s, "rt2").is_some()
    });
    let rt = find_topic(&stats, "rt").expect("rt");
    assert_eq!(rt["paused"], false);
    let names: Vec<&str> = rt["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|c| c["channel_name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["c1", "c2"], "channels sorted, ephemeral gone");
    assert_eq!(
        find_channel(&stats, "rt", "c1").expect("c1")["paused"],
        true
    );
    assert_eq!(
        find_channel(&stats, "rt", "c2").expect("c2")["paused"],
        false
    );
    assert_eq!(find_topic(&stats, "rt2").expect("rt2")["paused"], true);
    assert!(
        find_topic(&stats, "gone#ephemeral").is_none(),
        "ephemeral topic must not come back"
    );

    // Still paused in practice: a consumer of c1 gets nothing until unpause.
    let mut p = nsqd.connect();
    p.publish("rt", b"after-restart");
    let mut c = nsqd.connect();
    c.subscribe("rt", "c1");
    c.rdy(1);
    assert!(
        c.try_message(Duration::from_millis(1500)).is_none(),
        "paused channel delivered"
    );
    nsqd.http_ok("/channel/unpause?topic=rt&channel=c1");
    let m = c.message(Duration::from_secs(10));
    assert_eq!(&m.body[..], b"after-restart");
    c.fin(&m.id);

    // The unpause is persisted too.
    let dir = nsqd.sigterm_and_wait();
    let raw = std::fs::read_to_string(dir.path().join("nsqd.dat")).expect("nsqd.dat");
    assert!(
        raw.contains("{\"name\":\"c1\",\"paused\":false}"),
        "unpause persisted: {raw}"
    );
}
