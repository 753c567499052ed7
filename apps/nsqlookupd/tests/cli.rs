//! The `nsqlookupd` binary: `-version`, `-h`, flag errors, config errors, startup log lines
//! and a clean exit on SIGTERM/SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsqlookupd"))
}

#[test]
fn version_help_and_flag_errors() {
    let out = bin().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = String::from_utf8(out.stdout).unwrap();
    assert!(v.starts_with("nsqlookupd v1.3.0 (built w/rustc"), "{v}");

    let out = bin().arg("-h").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Usage of nsqlookupd:"));

    let out = bin().arg("-bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("flag provided but not defined: -bogus\nUsage of nsqlookupd:"));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "log_level = \"nope\"\n").unwrap();
    let out = bin()
        .arg(format!("--config={}", cfg.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed parsing log_level nope"));
}

#[test]
fn listen_failure_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = bin()
        .args([
            format!("--tcp-address={addr}"),
            "--http-address=127.0.0.1:0".to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "failed to instantiate nsqlookupd - listen ({addr}) failed"
        )),
        "{err}"
    );
}

fn start_and_signal(signal: &str) {
    let mut child = bin()
        .args(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut tcp = None;
    let mut http = None;
    while tcp.is_none() || http.is_none() {
        let line = lines.next().expect("log line").unwrap();
        assert!(line.starts_with("[nsqlookupd] "), "{line}");
        if let Some((_, a)) = line.split_once("INFO: TCP: listening on ") {
            tcp = Some(a.to_string());
        }
        if let Some((_, a)) = line.split_once("INFO: HTTP: listening on ") {
            http = Some(a.to_string());
        }
    }
    let mut conn = std::net::TcpStream::connect(tcp.unwrap()).unwrap();
    std::io::Write::write_all(&mut conn, b"  V1PING\n").unwrap();
    let mut resp = [0u8; 6];
    std::io::Read::read_exact(&mut conn, &mut resp).unwrap();
    assert_eq!(&resp, b"\0\0\0\x02OK");
    assert!(std::net::TcpStream::connect(http.unwrap()).is_ok());

    let st = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "exit within 10s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The open client connection was closed.
    let mut rest = Vec::new();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(std::io::Read::read_to_end(&mut conn, &mut rest).unwrap(), 0);
}

#[test]
fn sigterm_exits_cleanly() {
    start_and_signal("-TERM");
}

#[test]
fn sigint_exits_cleanly() {
    start_and_signal("-INT");
}
