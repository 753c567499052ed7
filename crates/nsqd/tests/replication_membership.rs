//! Only members link (docs/replication.md, "Membership"): a stranger's HELLO — node ID 0, an
//! address no `--replication-peer` names, no proof or a proof of another secret — gets ERROR
//! code 4 `not in group`, its PUB is never acknowledged, and it leaves nothing under
//! `<data-path>/replica/` and in `/stats`. Members with the same secret replicate; members
//! with different secrets refuse each other, both as replica and as origin. Ports are all
//! bound to `:0`; the second loopback address 127.0.0.2 plays a host that is not a peer.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::pair::Pair;
use nsq_protocol::replication::{
    self, Frame, Hello, LinkErrorCode, Pub, PubMessage, LINK_VERSION, MAGIC_R1, NONCE_LEN,
};
use nsq_protocol::MessageId;
use nsq_testkit::frames::{sized, FrameConn};
use nsq_testkit::http::request;
use nsqd::replication::membership::{self, Secret, Side};
use nsqd::NsqdHandle;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A raw origin: a link opened from `from` (a loopback address) with a HELLO of `node_id`.
struct Link {
    s: TcpStream,
    buf: BytesMut,
    hello: Hello,
}

impl Link {
    async fn open(to: SocketAddr, from: &str, node_id: u64) -> Link {
        let sock = TcpSocket::new_v4().unwrap();
        sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = sock.connect(to).await.unwrap();
        s.write_all(MAGIC_R1).await.unwrap();
        let mut hello = Hello::other_version(LINK_VERSION);
        hello.node_id = node_id;
        hello.epoch = 1;
        hello.replicas = 2;
        hello.max_frame = replication::MIN_MAX_FRAME;
        hello.nsqd_node_id = 1001;
        hello.broadcast_address = "stranger".into();
        hello.tcp_port = 1;
        hello.nonce = membership::nonce();
        let mut l = Link {
            s,
            buf: BytesMut::new(),
            hello: hello.clone(),
        };
        l.send(&Frame::Hello(hello)).await;
        l
    }

    async fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        replication::encode(f, &mut b);
        // The replica may have closed already (a refusal): later reads show it.
        let _ = self.s.write_all(&b).await;
    }

    /// The next frame that is not a HEARTBEAT or STATUS; `None` once the replica closed.
    async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = replication::decode(&mut self.buf, replication::MIN_MAX_FRAME).unwrap()
            {
                if matches!(
                    f,
                    Frame::Heartbeat | Frame::Status(_) | Frame::Ping { .. } | Frame::Pong { .. }
                ) {
                    continue;
                }
                return Some(f);
            }
            let n = tokio::time::timeout(Duration::from_secs(10), self.s.read_buf(&mut self.buf))
                .await
                .expect("an answer within 10 s");
            match n {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Reads CHALLENGE, answers AUTH with `proof` (`None`: the right proof for `secret`),
    /// returns the answer to AUTH.
    async fn auth(&mut self, secret: Option<&Secret>, proof: Option<Bytes>) -> Option<Frame> {
        let c = match self.recv().await {
            Some(Frame::Challenge(c)) => c,
            other => return other,
        };
        // The replica proves itself to the origin first.
        assert!(
            membership::verify(secret, Side::Replica, &self.hello, &c, b"", &c.proof),
            "the replica's proof"
        );
        let proof =
            proof.unwrap_or_else(|| membership::proof(secret, Side::Origin, &self.hello, &c, b""));
        self.send(&Frame::Auth { proof }).await;
        self.recv().await
    }

    /// After WELCOME: an empty catch-up and one PUB, which is acknowledged. The replica
    /// acknowledges CATCHUP_END (seq 0) first when it read it apart from the PUB (timing).
    async fn pub_is_acknowledged(&mut self) {
        self.send(&Frame::CatchupBegin { seq: 0 }).await;
        self.send(&Frame::CatchupEnd { seq: 0 }).await;
        self.send(&publish(1)).await;
        let mut ack = self.recv().await;
        if ack == Some(Frame::Ack { seq: 0 }) {
            ack = self.recv().await;
        }
        assert_eq!(ack, Some(Frame::Ack { seq: 1 }));
    }

    /// After a refusal: a PUB gets no ACK, the connection is closed.
    async fn pub_is_not_acknowledged(&mut self) {
        self.send(&Frame::CatchupBegin { seq: 0 }).await;
        self.send(&Frame::CatchupEnd { seq: 0 }).await;
        self.send(&publish(1)).await;
        assert_eq!(self.recv().await, None, "closed, nothing acknowledged");
    }
}

fn publish(seq: u64) -> Frame {
    Frame::Pub(Pub {
        seq,
        topic: "t".into(),
        defer_until: 0,
        channels: vec![],
        messages: vec![PubMessage {
            id: MessageId(*b"0123456789abcdef"),
            timestamp: 1,
            body: Bytes::from_static(b"sneaked in"),
        }],
    })
}

/// A whole HELLO frame of link version 1 (no nonce), as an older member or a stranger's
/// script (tests/python/replication_client.py, `stranger`) sends it.
fn v1_hello(node_id: u64) -> Vec<u8> {
    use bytes::BufMut;
    let mut p = Vec::new();
    p.put_u16(1);
    p.put_u64(node_id);
    p.put_u64(1);
    p.put_u8(0);
    p.put_u64(0);
    p.put_u64(0);
    p.put_u16(2);
    p.put_u32(16 << 20);
    p.put_u16(999);
    p.put_u8(12);
    p.put_slice(b"10.231.0.250");
    p.put_u16(4150);
    p.put_u16(4151);
    let mut f = Vec::new();
    f.put_u32(1 + p.len() as u32);
    f.put_u8(0x01);
    f.extend_from_slice(&p);
    f
}

/// Sends a version 1 HELLO from `from` and returns the first frame of the answer.
async fn v1_answer(to: SocketAddr, from: &str, node_id: u64) -> Option<Frame> {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    s.write_all(MAGIC_R1).await.unwrap();
    s.write_all(&v1_hello(node_id)).await.unwrap();
    let mut buf = BytesMut::new();
    loop {
        if let Some(f) = replication::decode(&mut buf, replication::MIN_MAX_FRAME).unwrap() {
            return Some(f);
        }
        if s.read_buf(&mut buf).await.unwrap() == 0 {
            return None;
        }
    }
}

fn not_in_group() -> Option<Frame> {
    Some(Frame::Error {
        code: LinkErrorCode::NotInGroup,
        text: "not in group".into(),
    })
}

/// A node that replicates nobody's publishes (`--replicas=1`) but serves links.
async fn replica(dir: &Path, extra: &[String]) -> NsqdHandle {
    common::start_replayed(common::options(dir, extra)).await
}

fn repl(h: &NsqdHandle) -> &nsqd::replication::Replication {
    h.nsqd.replication.as_ref().unwrap()
}

/// Nothing of a stranger is kept: no entry under `replica/`, no backlog, none in `/stats`.
async fn nothing_kept(h: &NsqdHandle, dir: &Path) {
    let kept: Vec<String> = std::fs::read_dir(dir.join("replica"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
    assert!(repl(h).backlogs().is_empty(), "{:?}", repl(h).backlogs());
    let st = request(
        h.http_addr().unwrap(),
        "GET",
        "/stats?format=json",
        &[],
        b"",
    )
    .await
    .json();
    assert_eq!(st["replication"]["backlogs"], serde_json::json!([]), "{st}");
}

fn random_node() -> u64 {
    rand::random::<u64>() | 1
}

/// Without a secret, membership is the peer list: a HELLO from an address no
/// `--replication-peer` resolves to, or with node ID 0, or with a proof (a member of a group
/// with a secret), is refused; from a peer's address it links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secret_only_the_peer_list_links() {
    let dir = TempDir::new().unwrap();
    let b = replica(dir.path(), &["--replication-peer=127.0.0.2:1".to_string()]).await;
    let to = b.tcp_addr();

    // Not a peer's address: refused before any handshake, whatever the HELLO's version.
    for node in [0, 0x5EED_5EED_5EED] {
        assert_eq!(v1_answer(to, "127.0.0.1", node).await, not_in_group());
    }
    assert_eq!(v1_answer(to, "127.0.0.2", 0).await, not_in_group());
    let mut l = Link::open(to, "127.0.0.1", random_node()).await;
    assert_eq!(l.recv().await, not_in_group());
    l.pub_is_not_acknowledged().await;
    // A peer's address, node ID 0.
    let mut l = Link::open(to, "127.0.0.2", 0).await;
    assert_eq!(l.recv().await, not_in_group());
    l.pub_is_not_acknowledged().await;
    // A peer's address with a proof of a secret this node does not have.
    let mut l = Link::open(to, "127.0.0.2", random_node()).await;
    let answer = l.auth(None, Some(Bytes::from(vec![1u8; 32]))).await;
    assert_eq!(answer, not_in_group());
    l.pub_is_not_acknowledged().await;
    nothing_kept(&b, dir.path()).await;

    // A member at a peer's address links and is acknowledged.
    let node = random_node();
    let mut l = Link::open(to, "127.0.0.2", node).await;
    let answer = l.auth(None, None).await;
    assert!(matches!(answer, Some(Frame::Welcome(_))), "{answer:?}");
    l.pub_is_acknowledged().await;
    assert_eq!(repl(&b).backlogs()[0].origin, node);
    b.shutdown().await;
}

/// With `--replication-secret-file`, only a proof of the secret links, from any address: no
/// proof, a proof of another secret, or node ID 0 are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_secret_only_a_proof_of_it_links() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "s3cret\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let b = replica(
        &data,
        &[
            "--replication-peer=127.0.0.1:1".to_string(),
            format!("--replication-secret-file={}", file.display()),
        ],
    )
    .await;
    let to = b.tcp_addr();
    let secret = Secret::new(b"s3cret");
    let other = Secret::new(b"guess");

    // No proof (a member of a group without a secret), from a listed address.
    let mut l = Link::open(to, "127.0.0.1", random_node()).await;
    assert_eq!(
        l.auth(Some(&secret), Some(Bytes::new())).await,
        not_in_group()
    );
    l.pub_is_not_acknowledged().await;
    // A proof of another secret.
    let mut l = Link::open(to, "127.0.0.1", random_node()).await;
    let c = match l.recv().await {
        Some(Frame::Challenge(c)) => c,
        other => panic!("{other:?}"),
    };
    let wrong = membership::proof(Some(&other), Side::Origin, &l.hello, &c, b"");
    l.send(&Frame::Auth { proof: wrong }).await;
    assert_eq!(l.recv().await, not_in_group());
    l.pub_is_not_acknowledged().await;
    // The replica's own proof sent back (a reflection) does not pass either.
    let mut l = Link::open(to, "127.0.0.1", random_node()).await;
    let c = match l.recv().await {
        Some(Frame::Challenge(c)) => c,
        other => panic!("{other:?}"),
    };
    l.send(&Frame::Auth { proof: c.proof }).await;
    assert_eq!(l.recv().await, not_in_group());
    l.pub_is_not_acknowledged().await;
    // Node ID 0, even with the secret.
    let mut l = Link::open(to, "127.0.0.1", 0).await;
    assert_eq!(l.recv().await, not_in_group());
    nothing_kept(&b, &data).await;

    // The secret's proof links, from an address that is no peer too.
    let mut l = Link::open(to, "127.0.0.2", random_node()).await;
    let answer = l.auth(Some(&secret), None).await;
    assert!(matches!(answer, Some(Frame::Welcome(_))), "{answer:?}");
    l.pub_is_acknowledged().await;
    b.shutdown().await;
}

/// A HELLO of link version 1 (no nonce) from a peer's address gets ERROR 6, `unsupported
/// version 1`.
#[tokio::test]
async fn a_hello_of_version_1_is_an_unsupported_version() {
    let dir = TempDir::new().unwrap();
    let b = replica(dir.path(), &["--replication-peer=127.0.0.1:1".to_string()]).await;
    let unsupported = Some(Frame::Error {
        code: LinkErrorCode::UnsupportedVersion,
        text: "unsupported version 1".into(),
    });
    assert_eq!(v1_answer(b.tcp_addr(), "127.0.0.1", 7).await, unsupported);
    // Truncated after its node ID: only the version and node ID are read.
    let mut c = FrameConn::connect(b.tcp_addr(), MAGIC_R1).await;
    c.send(&[0, 0, 0, 11, 0x01, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7])
        .await;
    let mut rest = BytesMut::from(&c.rest().await[..]);
    assert_eq!(
        replication::decode(&mut rest, replication::MIN_MAX_FRAME).unwrap(),
        unsupported
    );
    nothing_kept(&b, dir.path()).await;
    b.shutdown().await;
}

/// An unreadable or empty secret file stops the start (FATAL) before anything is written.
#[tokio::test]
async fn an_empty_or_missing_secret_file_is_fatal() {
    let dir = TempDir::new().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for (file, why) in [
        (empty.clone(), "the file is empty"),
        (dir.path().join("missing"), "cannot read it"),
    ] {
        let o = common::options(
            &data,
            &[
                "--replication-peer=127.0.0.1:1".to_string(),
                format!("--replication-secret-file={}", file.display()),
            ],
        );
        let e = nsqd::start(o).await.err().expect("refused").to_string();
        assert!(
            e.contains(&format!("--replication-secret-file {}", file.display())) && e.contains(why),
            "{e}"
        );
    }
    assert!(!data.join("replication.dat").exists());
}

fn secret_file(dir: &TempDir, name: &str, secret: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, secret).unwrap();
    format!("--replication-secret-file={}", p.display())
}

/// Two members with the same secret replicate as before; with different secrets (or one
/// without), neither accepts the other's link: publishes fail for want of a replica and
/// neither keeps a backlog of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_the_same_secret_replicate_and_different_secrets_refuse_each_other() {
    let secrets = TempDir::new().unwrap();
    let s1 = secret_file(&secrets, "s1", "one\n");
    let s1_again = secret_file(&secrets, "s1b", "one");
    let s2 = secret_file(&secrets, "s2", "two");

    let p = Pair::start_with(&[&s1], &[&s1_again, "--replicas=2"]).await;
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"hello")).await;
    assert_eq!(p.replicated(), 1);
    let mut c = FrameConn::connect(p.b().tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"hello")).await;
    p.shutdown().await;

    for (a, b) in [(Some(&s1), Some(&s2)), (Some(&s1), None), (None, Some(&s2))] {
        let mut a_args = vec!["--replication-ack-timeout=1s"];
        a_args.extend(a.map(String::as_str));
        let mut b_args = vec!["--replicas=2", "--replication-ack-timeout=1s"];
        b_args.extend(b.map(String::as_str));
        let p = Pair::start_with(&a_args, &b_args).await;
        for h in [&p.a, p.b()] {
            let mut c = FrameConn::connect(h.tcp_addr(), b"  V2").await;
            c.send(&sized("PUB t\n", b"hello")).await;
            c.expect_fatal(
                "E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 1s",
            )
            .await;
            assert!(repl(h).backlogs().is_empty(), "{a:?} {b:?}");
            assert!(!repl(h).peers()[0].connected);
        }
        for d in [&p.a_dir, &p.b_dir] {
            let replica = d.path().join("replica");
            assert!(
                std::fs::read_dir(&replica).map_or(true, |mut r| r.next().is_none()),
                "{a:?} {b:?}"
            );
        }
        p.shutdown().await;
    }
}

/// An origin streams nothing to a replica that does not prove membership: the fake replica
/// answers HELLO with a CHALLENGE whose proof is not of the secret (or, without a secret,
/// one with node ID 0); the origin answers ERROR `not in group` and closes — no AUTH, no
/// frame of its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_does_not_stream_to_an_impostor_replica() {
    let secrets = TempDir::new().unwrap();
    let s1 = secret_file(&secrets, "s1", "one");
    for (secret, node_id, proof) in [
        (Some(&s1), random_node(), vec![9u8; 32]),
        (Some(&s1), random_node(), vec![]),
        (None, 0, vec![]),
        (None, random_node(), vec![9u8; 32]),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dir = TempDir::new().unwrap();
        let mut args = vec![
            "--replicas=2".to_string(),
            format!("--replication-peer={}", l.local_addr().unwrap()),
        ];
        args.extend(secret.cloned());
        let a = common::start_replayed(common::options(dir.path(), &args)).await;
        let (mut s, _) = l.accept().await.unwrap();
        let mut magic = [0u8; 4];
        s.read_exact(&mut magic).await.unwrap();
        let mut buf = BytesMut::new();
        let mut read = async |s: &mut TcpStream| loop {
            if let Some(f) = replication::decode(&mut buf, replication::MIN_MAX_FRAME).unwrap() {
                return Some(f);
            }
            if s.read_buf(&mut buf).await.unwrap() == 0 {
                return None;
            }
        };
        assert!(matches!(read(&mut s).await, Some(Frame::Hello(_))));
        let mut out = BytesMut::new();
        replication::encode(
            &Frame::Challenge(replication::Challenge {
                node_id,
                nonce: [5; NONCE_LEN],
                broadcast_address: "impostor".into(),
                tcp_port: 1,
                proof: Bytes::from(proof),
            }),
            &mut out,
        );
        s.write_all(&out).await.unwrap();
        assert_eq!(read(&mut s).await, not_in_group(), "{secret:?} {node_id}");
        assert_eq!(read(&mut s).await, None);
        assert!(!repl(&a).peers()[0].connected);
        drop(l);
        a.shutdown().await;
    }
}

/// With `--tls-cert`, links are TLS: two members with certificates (and a secret, whose
/// proofs are then bound to the TLS session) replicate both ways; a HELLO in the clear gets
/// ERROR 4 `TLS required`; a member without a certificate, or one whose certificate the
/// origin's `--tls-root-ca-file` does not vouch for, does not link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_links_are_tls() {
    let pki = nsq_testkit::certs::Pki::new();
    let secrets = TempDir::new().unwrap();
    let s1 = secret_file(&secrets, "s1", "one");
    let cert = format!("--tls-cert={}", pki.server.cert_path());
    let key = format!("--tls-key={}", pki.server.key_path());
    let ca = format!("--tls-root-ca-file={}", pki.ca.cert_path());
    let tls = [cert.as_str(), key.as_str(), ca.as_str(), s1.as_str()];

    let mut b_args = tls.to_vec();
    b_args.push("--replicas=2");
    let p = Pair::start_with(&tls, &b_args).await;
    let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"hello")).await;
    assert_eq!(p.replicated(), 1);
    let mut c = FrameConn::connect(p.b().tcp_addr(), b"  V2").await;
    c.send_ok(&sized("PUB t\n", b"hello")).await;
    // A HELLO in the clear, from a peer's address.
    let mut l = Link::open(p.b().tcp_addr(), "127.0.0.1", random_node()).await;
    assert_eq!(
        l.recv().await,
        Some(Frame::Error {
            code: LinkErrorCode::NotInGroup,
            text: "TLS required".into()
        })
    );
    p.shutdown().await;

    // Only one side has a certificate (either way round), or B's is one no CA signed.
    let stranger_cert = format!("--tls-cert={}", pki.stranger.cert_path());
    let stranger_key = format!("--tls-key={}", pki.stranger.key_path());
    let cases: [(Vec<&str>, Vec<&str>); 3] = [
        (tls.to_vec(), vec![s1.as_str()]),
        (vec![s1.as_str()], tls.to_vec()),
        (
            tls.to_vec(),
            vec![stranger_cert.as_str(), stranger_key.as_str(), s1.as_str()],
        ),
    ];
    for (a, b) in cases {
        let mut a_args = vec!["--replication-ack-timeout=1s"];
        a_args.extend(&a);
        let mut b_args = vec!["--replication-ack-timeout=1s"];
        b_args.extend(&b);
        let p = Pair::start_with(&a_args, &b_args).await;
        let mut c = FrameConn::connect(p.a.tcp_addr(), b"  V2").await;
        c.send(&sized("PUB t\n", b"hello")).await;
        c.expect_fatal("E_PUB_FAILED PUB failed not enough replicas: 0 of 1 stored it within 1s")
            .await;
        assert!(repl(p.b()).backlogs().is_empty(), "{a:?} {b:?}");
        p.shutdown().await;
    }
}
