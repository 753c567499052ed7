//! nsqadmin against an nsqd that only speaks HTTPS (`--tls-required=true`): nsqadmin asks the
//! plain `--nsqd-http-address`, gets the reference's `403 {"https_port":…}` and retries over
//! HTTPS (nsq's internal/http_api/api_request.go, `GETV1`), verifying nsqd's certificate with
//! `--http-client-tls-root-ca-file`, presenting `--http-client-tls-cert/-key` when nsqd
//! requires a client certificate, or skipping verification with
//! `--http-client-tls-insecure-skip-verify`. Both daemons run in-process; the certificates
//! come from the test kit's [`Pki`].

mod common;

use std::time::Duration;

use nsq_http::client::HttpClient;
use nsq_integration_tests::certs::Pki;
use nsqadmin::AdminHandle;
use nsqd::NsqdHandle;
use serde_json::Value;

async fn start_tls_nsqd(pki: &Pki, extra: &[String]) -> (NsqdHandle, tempfile::TempDir) {
    let mut args = vec![
        "--tls-required=true".to_string(),
        format!("--tls-cert={}", pki.server.cert_path()),
        format!("--tls-key={}", pki.server.key_path()),
    ];
    args.extend_from_slice(extra);
    let (h, dir) = common::start_nsqd(&args).await;
    h.nsqd.engine.get_or_create_topic("secure").unwrap();
    (h, dir)
}

async fn start_admin(nsqd: &NsqdHandle, extra: &[String]) -> AdminHandle {
    let mut args = vec![
        "--history-interval=0".to_string(),
        format!("--nsqd-http-address={}", nsqd.http_addr().unwrap()),
    ];
    args.extend_from_slice(extra);
    common::start_admin(&args).await
}

/// `GET /api/topics` of nsqadmin: status and JSON.
async fn api_topics(admin: &AdminHandle) -> (u16, Value) {
    let c = HttpClient::plain(Duration::from_secs(5), Duration::from_secs(20), "test");
    let r = c
        .request(
            "GET",
            &format!("http://{}/api/topics", admin.http_addr()),
            &[],
            b"",
        )
        .await
        .unwrap();
    (r.status, serde_json::from_slice(&r.body).unwrap())
}

#[tokio::test]
async fn verified_with_the_root_ca() {
    let pki = Pki::new();
    let (nsqd, _dir) = start_tls_nsqd(&pki, &[]).await;
    let admin = start_admin(
        &nsqd,
        &[format!("--http-client-tls-root-ca-file={}", pki.ca_path())],
    )
    .await;
    let (status, v) = api_topics(&admin).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["topics"], serde_json::json!(["secure"]), "{v}");

    // Without the CA nsqd's certificate is refused, and the answer says why in Go's words.
    let blind = start_admin(&nsqd, &[]).await;
    let (status, v) = api_topics(&blind).await;
    assert_eq!(status, 502, "{v}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("x509: certificate signed by unknown authority"),
        "{msg}"
    );

    // Or verification is skipped altogether.
    let trusting = start_admin(
        &nsqd,
        &["--http-client-tls-insecure-skip-verify".to_string()],
    )
    .await;
    let (status, v) = api_topics(&trusting).await;
    assert_eq!(status, 200, "{v}");
    for h in [admin, blind, trusting] {
        h.shutdown().await;
    }
    nsqd.shutdown().await;
}

#[tokio::test]
async fn client_certificate_when_nsqd_requires_one() {
    let pki = Pki::new();
    let (nsqd, _dir) = start_tls_nsqd(
        &pki,
        &[
            "--tls-client-auth-policy=require-verify".to_string(),
            format!("--tls-root-ca-file={}", pki.ca_path()),
        ],
    )
    .await;
    let with_cert = start_admin(
        &nsqd,
        &[
            format!("--http-client-tls-root-ca-file={}", pki.ca_path()),
            format!("--http-client-tls-cert={}", pki.client.cert_path()),
            format!("--http-client-tls-key={}", pki.client.key_path()),
        ],
    )
    .await;
    let (status, v) = api_topics(&with_cert).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["topics"], serde_json::json!(["secure"]), "{v}");

    let without_cert = start_admin(
        &nsqd,
        &[format!("--http-client-tls-root-ca-file={}", pki.ca_path())],
    )
    .await;
    let (status, v) = api_topics(&without_cert).await;
    assert_eq!(status, 502, "{v}");
    for h in [with_cert, without_cert] {
        h.shutdown().await;
    }
    nsqd.shutdown().await;
}
