//! The acceptance commands of the issue, run literally as users type them: a PUB over `nc`
//! (raw socket fallback when `nc` is not installed), `curl` /pub and `curl` /stats.

use std::process::Command;

use nsq_integration_tests::{curl, find_topic, have_program, http_get, int, Nsqd, V2Conn, Value};

const OK_FRAME: [u8; 10] = [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K'];

#[test]
fn printf_nc_pub_then_curl_pub_then_curl_stats() {
    let nsqd = Nsqd::start(&[]);
    let tcp_port = nsqd.tcp_addr.port();
    let http_port = nsqd.http_addr.port();

    // printf '  V2PUB t\n\0\0\0\x05hello' | nc -q1 127.0.0.1 <port>
    let reply: Vec<u8> = if have_program("nc") {
        let script =
            format!("printf '  V2PUB t\\n\\0\\0\\0\\x05hello' | nc -q1 127.0.0.1 {tcp_port}");
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "{script}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    } else {
        eprintln!(
            "NOTE: `nc` is not installed (CI should `apt-get install -y netcat-openbsd`); \
             sending the same bytes over a raw socket"
        );
        let mut c = V2Conn::connect_raw(nsqd.tcp_addr);
        c.write_raw(b"  V2PUB t\n\0\0\0\x05hello").expect("write");
        let f = c
            .read_frame(std::time::Duration::from_secs(10))
            .expect("a frame");
        let mut bytes = ((4 + f.data.len()) as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&f.frame_type.to_be_bytes());
        bytes.extend_from_slice(&f.data);
        bytes
    };
    assert_eq!(reply, OK_FRAME, "the 10-byte OK frame");

    // curl -s -d x 'http://127.0.0.1:<port>/pub?topic=t'
    let out = curl(&[
        "-d",
        "x",
        &format!("http://127.0.0.1:{http_port}/pub?topic=t"),
    ]);
    assert_eq!(out, "OK");

    // curl -s 'http://127.0.0.1:<port>/stats?format=json'
    let out = curl(&[&format!("http://127.0.0.1:{http_port}/stats?format=json")]);
    let stats: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stats JSON ({e}): {out}"));
    assert_eq!(stats["version"], "1.3.0");
    assert_eq!(stats["health"], "OK");
    let t = find_topic(&stats, "t").unwrap_or_else(|| panic!("topic t missing: {out}"));
    assert_eq!(int(t, "depth"), 2, "{out}");
    assert_eq!(int(t, "message_count"), 2, "{out}");
    assert_eq!(int(t, "message_bytes"), 6, "hello + x");
    assert_eq!(t["channels"], Value::Array(vec![]), "no channels yet");
    assert_eq!(t["paused"], false);
    // The raw document keeps the reference's key order and compact form.
    assert!(
        out.starts_with(r#"{"version":"1.3.0","health":"OK","start_time":"#),
        "{out}"
    );
    assert!(
        out.contains(
            r#"{"topic_name":"t","channels":[],"depth":2,"backend_depth":0,"message_count":2,"message_bytes":6,"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}}"#
        ),
        "{out}"
    );

    // And the plain-text form and /ping answer too.
    let text = curl(&[&format!("http://127.0.0.1:{http_port}/stats")]);
    assert!(
        text.contains("   [t              ] depth: 2 "),
        "text /stats lists topic t: {text}"
    );
    let ping = http_get(nsqd.http_addr, "/ping");
    assert_eq!((ping.status, ping.text().as_str()), (200, "OK"));
}

#[test]
fn bad_magic_gets_e_bad_protocol() {
    let nsqd = Nsqd::start(&[]);
    let mut c = V2Conn::connect_raw(nsqd.tcp_addr);
    c.write_raw(b"  V1").expect("write");
    c.expect_error(b"E_BAD_PROTOCOL");
    c.expect_closed(std::time::Duration::from_secs(10));
}
