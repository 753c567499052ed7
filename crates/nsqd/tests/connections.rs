//! Connections at capacity (issue 21): one file descriptor per TCP client, as NSQ, whatever
//! the client does (idle, publishing, a saturated consumer whose socket the reader parks, a
//! consumer whose send buffer is full).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{channel, start, v2};
use nsq_testkit::sized;

/// Inodes of the established IPv4 TCP sockets whose local port is `port` (the daemon's ends
/// of its client connections; the test's own ends have `port` as the remote port).
fn server_side_inodes(port: u16) -> HashSet<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let established = *f.get(3)? == "01";
            (local_port == port && established).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// How many of this process's descriptors refer to one of `inodes`.
fn descriptors_of(inodes: &HashSet<u64>) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            t.parse::<u64>().ok()
        })
        .filter(|i| inodes.contains(i))
        .count()
}

/// Waits until the daemon holds `want` descriptors of its client sockets, or 10 s; returns
/// (descriptors, server-side sockets) as last seen.
async fn server_descriptors(port: u16, want: usize) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let inodes = server_side_inodes(port);
        let fds = descriptors_of(&inodes);
        if (fds == want && inodes.len() == want) || Instant::now() > deadline {
            return (fds, inodes.len());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An MPUB of messages `first..first + n`, each `size` bytes starting `m<index>`.
fn mpub(topic: &str, first: usize, n: usize, size: usize) -> Vec<u8> {
    let mut body = (n as u32).to_be_bytes().to_vec();
    for i in first..first + n {
        let mut m = format!("m{i:05}").into_bytes();
        m.resize(size, b'.');
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(&m);
    }
    sized(&format!("MPUB {topic}\n"), &body)
}

/// 200 idle clients, a publisher and a saturated consumer (the reader parks its socket):
/// the daemon holds exactly one descriptor per connection (it held two: the write half was
/// a second descriptor of the same socket).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_descriptor_per_client() {
    let (h, _d) = start().await;
    let port = h.tcp_addr().port();
    let mut conns = Vec::new();
    for _ in 0..200 {
        conns.push(v2(&h).await);
    }
    let (fds, sockets) = server_descriptors(port, 200).await;
    assert_eq!(
        (fds, sockets),
        (200, 200),
        "200 idle clients: (descriptors, sockets)"
    );

    let mut p = v2(&h).await;
    p.send(&mpub("t", 0, 200, 10)).await;
    p.expect_response(b"OK").await;
    let mut sub = v2(&h).await;
    sub.send(b"SUB t c\nRDY 100\n").await;
    sub.expect_response(b"OK").await;
    for _ in 0..100 {
        sub.message().await;
    }
    // Saturated (100 of RDY 100 in flight): the reader parks the socket between reads.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (fds, sockets) = server_descriptors(port, 202).await;
    assert_eq!(
        (fds, sockets),
        (202, 202),
        "with a publisher and a parked consumer"
    );

    drop(conns);
    drop(sub);
    let (fds, sockets) = server_descriptors(port, 1).await;
    assert_eq!((fds, sockets), (1, 1), "after the others closed");
    h.shutdown().await;
}

/// A saturated consumer that stops reading: the writer fills the socket's send buffer and
/// waits for writability while the reader would park the socket; once the consumer reads
/// again, every message arrives and its FINs are taken (the wait was not lost with the
/// registration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_consumer_with_a_full_send_buffer_gets_everything() {
    const N: usize = 400;
    const SIZE: usize = 64 * 1024;
    let (h, _d) = start().await;
    let mut p = v2(&h).await;
    // In MPUBs of 3.2 MB (the body limit is 5 MB).
    for i in 0..8 {
        p.send(&mpub("t", i * N / 8, N / 8, SIZE)).await;
        p.expect_response(b"OK").await;
    }
    let mut sub = v2(&h).await;
    sub.send(b"SUB t c\nRDY 200\n").await;
    sub.expect_response(b"OK").await;
    // 200 × 64 KiB in flight is far more than the socket buffers hold: the writer blocks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ch = channel(&h, "t", "c");
    assert_eq!(ch.stats().in_flight_count, 200);
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < N {
        assert!(
            Instant::now() < deadline,
            "only {} of {N} arrived",
            seen.len()
        );
        let Ok(m) = tokio::time::timeout(Duration::from_secs(5), sub.message()).await else {
            panic!(
                "no message within 5 s after {} of {N}; {} in flight, depth {}",
                seen.len(),
                ch.stats().in_flight_count,
                ch.stats().depth
            );
        };
        assert_eq!(m.body.len(), SIZE);
        seen.insert(m.body[..6].to_vec());
        sub.send(format!("FIN {}\n", m.id).as_bytes()).await;
    }
    assert_eq!(seen.len(), N);
    let deadline = Instant::now() + Duration::from_secs(10);
    while ch.stats().in_flight_count > 0 {
        assert!(Instant::now() < deadline, "FINs not taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(sub);
    h.shutdown().await;
}

/// Every listener (TCP, HTTP, HTTPS) queues as many connects as the system allows
/// (`net.core.somaxconn`, as Go's `net.Listen`), not the 128 that Tokio's `TcpListener::bind` asks for: a burst of
/// connects waits in the accept queue instead of overflowing it.
#[tokio::test]
async fn listeners_have_the_system_backlog() {
    let Some(want) = nsq_testkit::sockets::somaxconn() else {
        eprintln!("no /proc/sys/net/core/somaxconn: skipped");
        return;
    };
    let pki = nsq_testkit::certs::Pki::new();
    let (h, _d) = common::start_with(&[
        format!("--tls-cert={}", pki.server.cert_path()),
        format!("--tls-key={}", pki.server.key_path()),
    ])
    .await;
    let ports = [
        ("TCP", h.tcp_addr().port()),
        ("HTTP", h.http_addr().unwrap().port()),
        ("HTTPS", h.nsqd.https_addr.unwrap().port()),
    ];
    for (what, port) in ports {
        let Some(got) = nsq_testkit::sockets::listen_backlog(port) else {
            eprintln!("`ss` not available: skipped");
            return;
        };
        assert_eq!(got, want, "{what} listener backlog");
    }
    h.shutdown().await;
}
