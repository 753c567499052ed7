//! nsqadmin's `/metrics`: its upstream request counters after a request that reaches one live
//! nsqd and one closed port, and (when promtool is installed, as CI does) a clean
//! `promtool check metrics`.

mod common;

use std::time::Duration;

use nsq_http::client::HttpClient;

fn client() -> HttpClient {
    HttpClient::plain(
        Duration::from_secs(2),
        Duration::from_secs(10),
        "nsqadmin-test",
    )
}

#[tokio::test]
async fn upstream_errors_are_counted_per_upstream() {
    let (nsqd, _dir) = common::start_nsqd(&[]).await;
    let live = nsqd.http_addr().unwrap().to_string();
    let dead = common::dead_addr();
    let admin = common::start_admin(&[
        format!("--nsqd-http-address={live}"),
        format!("--nsqd-http-address={dead}"),
    ])
    .await;
    let base = format!("http://{}", admin.http_addr());

    let r = client()
        .request("GET", &format!("{base}/api/topics"), &[], b"")
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("connection refused"),
        "a partial answer with a WARNING expected: {} {body}",
        r.status
    );

    let r = client()
        .request("GET", &format!("{base}/metrics"), &[], b"")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = String::from_utf8(r.body).unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    };
    assert!(
        value(&format!(
            "nsq_admin_upstream_requests_total{{upstream=\"{live}\"}}"
        )) >= 1.0
    );
    assert!(
        value(&format!(
            "nsq_admin_upstream_requests_total{{upstream=\"{dead}\"}}"
        )) >= 1.0
    );
    assert!(
        value(&format!(
            "nsq_admin_upstream_request_errors_total{{upstream=\"{dead}\",reason=\"transport\"}}"
        )) >= 1.0
    );
    assert!(
        !text.contains(&format!("{{upstream=\"{live}\",reason=")),
        "{text}"
    );
    assert!(value("process_resident_memory_bytes") > 0.0);

    if which_promtool() {
        use std::io::Write as _;
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}\n{text}"
        );
    } else {
        eprintln!("skipping promtool check: promtool not installed (apt-get install prometheus)");
    }
    admin.shutdown().await;
    nsqd.shutdown().await;
}

fn which_promtool() -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("promtool").is_file())
    })
}
