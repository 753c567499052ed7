//! IDENTIFY upgrades and AUTH over a real connection to an in-process nsqd: the exact bytes
//! after switching to snappy and deflate, TLS (1.2 and 1.3, the TLS-required policy, /stats),
//! and AUTH against a small auth server.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use common::start_with;
use nsq_protocol::frame::{take_frame, Frame};
use nsq_testkit::sized;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

async fn read_frame<S: AsyncRead + Unpin>(s: &mut S, buf: &mut BytesMut) -> Frame {
    loop {
        if let Some(f) = take_frame(buf).unwrap() {
            if &f.data[..] != b"_heartbeat_" {
                return f;
            }
            continue;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed");
    }
}

async fn identify(s: &mut TcpStream, json: &str) -> serde_json::Value {
    s.write_all(b"  V2").await.unwrap();
    s.write_all(&sized("IDENTIFY\n", json.as_bytes()))
        .await
        .unwrap();
    // Read exactly the JSON frame: size first, then the rest, so no upgraded bytes are consumed.
    let mut size = [0u8; 4];
    s.read_exact(&mut size).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize];
    s.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest[..4], &[0, 0, 0, 0]);
    serde_json::from_slice(&rest[4..]).unwrap()
}

const OK_FRAME: &[u8] = b"\x00\x00\x00\x06\x00\x00\x00\x00OK";

#[tokio::test]
async fn snappy_upgrade_exact_bytes_then_pub() {
    let (h, _d) = common::start().await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    let resp = identify(&mut s, r#"{"feature_negotiation":true,"snappy":true}"#).await;
    assert_eq!(resp["snappy"], true);
    assert_eq!(resp["deflate"], false);
    let mut first = [0u8; 28];
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(
        &first[..],
        b"\xff\x06\x00\x00sNaPpY\x01\x0e\x00\x00\x26\x98\x2b\xcf\x00\x00\x00\x06\x00\x00\x00\x00OK"
    );
    // Client side: snappy-framed commands (the crate's own framed encoder).
    let mut enc = snap::write::FrameEncoder::new(Vec::new());
    enc.write_all(&sized("PUB t\n", b"compressed hello"))
        .unwrap();
    enc.flush().unwrap();
    s.write_all(&enc.into_inner().unwrap()).await.unwrap();
    // The answer is one more chunk; decode it after a stream identifier.
    let mut chunk = vec![0xff, 0x06, 0x00, 0x00, b's', b'N', b'a', b'P', b'p', b'Y'];
    let mut hdr = [0u8; 4];
    s.read_exact(&mut hdr).await.unwrap();
    let len = u32::from_le_bytes([hdr[1], hdr[2], hdr[3], 0]) as usize;
    let mut data = vec![0u8; len];
    s.read_exact(&mut data).await.unwrap();
    chunk.extend_from_slice(&hdr);
    chunk.extend_from_slice(&data);
    let mut out = Vec::new();
    snap::read::FrameDecoder::new(&chunk[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, OK_FRAME);
    assert_eq!(h.nsqd.engine.get_topic("t").unwrap().depth(), 1);
    let stats = h
        .nsqd
        .clients()
        .into_iter()
        .map(|c| c.stats())
        .collect::<Vec<_>>();
    assert!(stats.iter().any(|c| c.meta.snappy));
    h.shutdown().await;
}

/// One snappy chunk from the server, decoded (the stream identifier was read already).
async fn snappy_chunk(s: &mut TcpStream) -> Vec<u8> {
    let mut hdr = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut hdr))
        .await
        .expect("a chunk within 10 s")
        .unwrap();
    let len = u32::from_le_bytes([hdr[1], hdr[2], hdr[3], 0]) as usize;
    let mut chunk = vec![0xff, 0x06, 0x00, 0x00, b's', b'N', b'a', b'P', b'p', b'Y'];
    chunk.extend_from_slice(&hdr);
    chunk.resize(chunk.len() + len, 0);
    let start = chunk.len() - len;
    s.read_exact(&mut chunk[start..]).await.unwrap();
    let mut out = Vec::new();
    snap::read::FrameDecoder::new(&chunk[..])
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The upgrade hands the write side to a new writer task: heartbeats keep their schedule
/// through it, and a subscription on the upgraded connection gets its messages.
#[tokio::test]
async fn after_an_upgrade_heartbeats_and_messages_flow() {
    let (h, _d) = common::start().await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    let identified = std::time::Instant::now();
    identify(
        &mut s,
        r#"{"feature_negotiation":true,"snappy":true,"heartbeat_interval":1000}"#,
    )
    .await;
    let mut first = [0u8; 28];
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(&first[18..], OK_FRAME);
    let mut buf = BytesMut::from(&snappy_chunk(&mut s).await[..]);
    let hb = take_frame(&mut buf).unwrap().unwrap();
    assert_eq!(&hb.data[..], b"_heartbeat_");
    let waited = identified.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_millis(2500),
        "first heartbeat after {waited:?}"
    );

    let mut enc = snap::write::FrameEncoder::new(Vec::new());
    enc.write_all(b"NOP\nSUB t c\nRDY 1\n").unwrap();
    enc.flush().unwrap();
    s.write_all(&enc.into_inner().unwrap()).await.unwrap();
    let mut frames = Vec::new();
    while frames.len() < 2 {
        buf.extend_from_slice(&snappy_chunk(&mut s).await);
        while let Some(f) = take_frame(&mut buf).unwrap() {
            if &f.data[..] != b"_heartbeat_" {
                frames.push(f);
            }
        }
        if frames.len() == 1 {
            assert_eq!(&frames[0].data[..], b"OK", "SUB answered");
            h.nsqd
                .topic("t")
                .await
                .unwrap()
                .put(bytes::Bytes::from_static(b"after upgrade"), Duration::ZERO)
                .unwrap();
        }
    }
    let m = nsq_protocol::message::decode(frames[1].data.clone()).unwrap();
    assert_eq!(&m.body[..], b"after upgrade");
    h.shutdown().await;
}

#[tokio::test]
async fn deflate_upgrade_then_pub() {
    let (h, _d) = common::start().await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    let resp = identify(
        &mut s,
        r#"{"feature_negotiation":true,"deflate":true,"deflate_level":9}"#,
    )
    .await;
    assert_eq!(
        (resp["deflate"].as_bool(), resp["deflate_level"].as_i64()),
        (Some(true), Some(6))
    );
    // The first bytes are exactly the reference's (nsqd/client_v2.go, `UpgradeDeflate`, level 6).
    let mut first = [0u8; 21];
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(
        first,
        [
            0x00, 0x00, 0x00, 0xff, 0xff, 0x62, 0x60, 0x60, 0x60, 0x63, 0x60, 0x60, 0x60, 0xf0,
            0xf7, 0x06, 0x00, 0x00, 0x00, 0xff, 0xff
        ]
    );
    let mut inflate = flate2::Decompress::new(false);
    let mut raw = BytesMut::from(&first[..]);
    let mut plain: Vec<u8> = Vec::new();
    let mut read_plain = |raw: &mut BytesMut, plain: &mut Vec<u8>| {
        let mut out = vec![0u8; 4096];
        let before = inflate.total_in();
        let before_out = inflate.total_out();
        inflate
            .decompress(raw, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        let used = (inflate.total_in() - before) as usize;
        let _ = raw.split_to(used);
        plain.extend_from_slice(&out[..(inflate.total_out() - before_out) as usize]);
    };
    read_plain(&mut raw, &mut plain);
    while plain.len() < 10 {
        let n = s.read_buf(&mut raw).await.unwrap();
        assert!(n > 0);
        read_plain(&mut raw, &mut plain);
    }
    assert_eq!(&plain[..], OK_FRAME);
    plain.clear();
    let mut c = flate2::Compress::new(flate2::Compression::new(1), false);
    let cmd = sized("PUB t\n", b"deflated hello");
    let mut out = vec![0u8; 1024];
    c.compress(&cmd, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    s.write_all(&out[..c.total_out() as usize]).await.unwrap();
    while plain.len() < 10 {
        let n = s.read_buf(&mut raw).await.unwrap();
        assert!(n > 0);
        read_plain(&mut raw, &mut plain);
    }
    assert_eq!(&plain[..], OK_FRAME);
    h.shutdown().await;
}

#[tokio::test]
async fn both_compressions_is_an_error() {
    let (h, _d) = common::start().await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    s.write_all(b"  V2").await.unwrap();
    s.write_all(&sized(
        "IDENTIFY\n",
        br#"{"feature_negotiation":true,"deflate":true,"snappy":true}"#,
    ))
    .await
    .unwrap();
    let mut buf = BytesMut::new();
    let f = read_frame(&mut s, &mut buf).await;
    assert_eq!(
        (f.frame_type, &f.data[..]),
        (
            1,
            &b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"[..]
        )
    );
    h.shutdown().await;
}

/// A self-signed certificate for 127.0.0.1 in PEM files, and a client config trusting it.
/// A client config trusting the test CA of `pki`, limited to `versions`.
fn tls_client(
    pki: &nsq_testkit::certs::Pki,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.der.clone().into()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

async fn tls_round(
    versions: &[&'static rustls::SupportedProtocolVersion],
    min: &str,
) -> Result<String, String> {
    let pki = nsq_testkit::certs::Pki::new();
    let client_cfg = tls_client(&pki, versions);
    let (h, _d) = start_with(&[
        format!("--tls-cert={}", pki.server.cert_path()),
        format!("--tls-key={}", pki.server.key_path()),
        format!("--tls-min-version={min}"),
        "--tls-required=true".to_string(),
    ])
    .await;
    // Before the upgrade nothing but IDENTIFY is accepted.
    let mut plain = TcpStream::connect(h.tcp_addr()).await.unwrap();
    plain.write_all(b"  V2NOP\n").await.unwrap();
    let mut buf = BytesMut::new();
    let f = read_frame(&mut plain, &mut buf).await;
    assert_eq!(
        &f.data[..],
        b"E_INVALID cannot NOP in current state (TLS required)"
    );

    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    let resp = identify(&mut s, r#"{"feature_negotiation":true,"tls_v1":true}"#).await;
    assert_eq!(resp["tls_v1"], true);
    let connector = tokio_rustls::TlsConnector::from(client_cfg);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let result = match connector.connect(name, s).await {
        Err(e) => Err(e.to_string()),
        Ok(mut tls) => {
            let mut buf = BytesMut::new();
            match tokio::time::timeout(
                Duration::from_secs(5),
                read_frame_checked(&mut tls, &mut buf),
            )
            .await
            {
                Ok(Some(f)) if &f.data[..] == b"OK" => {
                    tls.write_all(&sized("PUB t\n", b"over tls")).await.unwrap();
                    let f = read_frame(&mut tls, &mut buf).await;
                    assert_eq!(&f.data[..], b"OK");
                    let c = h
                        .nsqd
                        .clients()
                        .into_iter()
                        .map(|c| c.stats())
                        .find(|c| c.meta.tls)
                        .unwrap();
                    Ok(c.meta.tls_version)
                }
                other => Err(format!("no OK after handshake: {other:?}")),
            }
        }
    };
    h.shutdown().await;
    result
}

async fn read_frame_checked<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    buf: &mut BytesMut,
) -> Option<Frame> {
    loop {
        if let Some(f) = take_frame(buf).ok()? {
            return Some(f);
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

#[tokio::test]
async fn tls_upgrade_12_and_13_and_min_version() {
    assert_eq!(
        tls_round(&[&rustls::version::TLS12], "tls1.0")
            .await
            .unwrap(),
        "TLS1.2"
    );
    assert_eq!(
        tls_round(&[&rustls::version::TLS13], "tls1.2")
            .await
            .unwrap(),
        "TLS1.3"
    );
    assert!(
        tls_round(&[&rustls::version::TLS12], "tls1.3")
            .await
            .is_err(),
        "TLS 1.2 must be refused with --tls-min-version=tls1.3"
    );
}

/// An auth server answering every request with `body`.
async fn auth_server(body: &'static str) -> String {
    nsq_testkit::FakeHttp::start(200, body).await.addr
}

#[tokio::test]
async fn auth_flow() {
    let auth = auth_server(r#"{"ttl":3600,"identity":"bob","identity_url":"http://x/bob","authorizations":[{"topic":"^allowed$","channels":[".*"],"permissions":["publish","subscribe"]}]}"#).await;
    let (h, _d) = start_with(&[format!("--auth-http-address={auth}")]).await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    let resp = identify(&mut s, r#"{"feature_negotiation":true}"#).await;
    assert_eq!(resp["auth_required"], true);
    let mut buf = BytesMut::new();
    s.write_all(&sized("PUB allowed\n", b"x")).await.unwrap();
    assert_eq!(
        &read_frame(&mut s, &mut buf).await.data[..],
        b"E_AUTH_FIRST AUTH required before PUB"
    );

    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    s.write_all(b"  V2").await.unwrap();
    s.write_all(&sized("AUTH\n", b"secret")).await.unwrap();
    let mut buf = BytesMut::new();
    assert_eq!(
        &read_frame(&mut s, &mut buf).await.data[..],
        br#"{"identity":"bob","identity_url":"http://x/bob","permission_count":1}"#
    );
    s.write_all(&sized("PUB allowed\n", b"x")).await.unwrap();
    assert_eq!(&read_frame(&mut s, &mut buf).await.data[..], b"OK");
    s.write_all(&sized("AUTH\n", b"again")).await.unwrap();
    assert_eq!(
        &read_frame(&mut s, &mut buf).await.data[..],
        b"E_INVALID AUTH already set"
    );

    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    s.write_all(b"  V2").await.unwrap();
    s.write_all(&sized("AUTH\n", b"secret")).await.unwrap();
    let mut buf = BytesMut::new();
    read_frame(&mut s, &mut buf).await;
    s.write_all(&sized("PUB other\n", b"x")).await.unwrap();
    assert_eq!(
        &read_frame(&mut s, &mut buf).await.data[..],
        b"E_UNAUTHORIZED AUTH failed for PUB on \"other\" \"\""
    );
    let c = h
        .nsqd
        .clients()
        .into_iter()
        .map(|c| c.stats())
        .find(|c| c.meta.authed);
    assert!(c.is_some() || h.nsqd.clients().is_empty());
    h.shutdown().await;
}

#[tokio::test]
async fn auth_server_down_is_auth_failed() {
    let (h, _d) = start_with(&["--auth-http-address=127.0.0.1:1".to_string()]).await;
    let mut s = TcpStream::connect(h.tcp_addr()).await.unwrap();
    s.write_all(b"  V2").await.unwrap();
    s.write_all(&sized("AUTH\n", b"secret")).await.unwrap();
    let mut buf = BytesMut::new();
    assert_eq!(
        &read_frame(&mut s, &mut buf).await.data[..],
        b"E_AUTH_FAILED AUTH failed"
    );
    h.shutdown().await;
}
