//! Clients per open-files limit (issue 21, defect 1: nsqd held two descriptors per plain TCP
//! client, so 504 clients under `ulimit -n 1024` where NSQ holds 1,013). The nsqd binary's
//! limit is lowered to 1024 with `prlimit` after it started; then clients connect one after
//! another and each must get its IDENTIFY answered. With one descriptor per client all but
//! the daemon's own dozen or so descriptors are clients.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use nsq_integration_tests::{have_program, Nsqd};

const LIMIT: usize = 1024;

/// Whether the daemon answers an IDENTIFY on a fresh connection within `wait` (the
/// connection is returned to be held open).
fn served(nsqd: &Nsqd, wait: Duration) -> Option<TcpStream> {
    let mut s = TcpStream::connect(nsqd.tcp_addr).ok()?;
    let body = br#"{"client_id":"capacity"}"#;
    let mut req = b"  V2IDENTIFY\n".to_vec();
    req.extend_from_slice(&(body.len() as u32).to_be_bytes());
    req.extend_from_slice(body);
    s.write_all(&req).ok()?;
    s.set_read_timeout(Some(wait)).ok()?;
    let mut ok = [0u8; 10];
    s.read_exact(&mut ok).ok()?;
    (&ok == b"\0\0\0\x06\0\0\0\0OK").then_some(s)
}

#[test]
fn a_thousand_clients_under_a_1024_descriptor_limit() {
    if !have_program("prlimit") {
        eprintln!("prlimit not installed: skipped");
        return;
    }
    let nsqd = Nsqd::start(&[]);
    let limit = format!("--nofile={LIMIT}:{LIMIT}");
    let status = Command::new("prlimit")
        .args(["--pid", &nsqd.pid().to_string(), &limit])
        .status()
        .expect("prlimit");
    assert!(status.success(), "prlimit failed");
    let mut held = Vec::new();
    while held.len() < LIMIT {
        // A client past the limit waits in the accept queue unanswered.
        match served(&nsqd, Duration::from_secs(2)) {
            Some(s) => held.push(s),
            None => break,
        }
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", nsqd.pid()))
        .map(|d| d.count())
        .unwrap_or(0);
    eprintln!(
        "{} clients served under a {LIMIT} limit; the daemon holds {fds} descriptors",
        held.len()
    );
    assert!(
        held.len() >= 1000,
        "only {} clients served under a {LIMIT} descriptor limit",
        held.len()
    );
}
