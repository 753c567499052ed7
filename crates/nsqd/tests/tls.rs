//! The TLS layer (`nsqd::tls`): building the server config from the options (startup errors,
//! `--tls-min-version`, the client-auth policies), the `/stats` names of a negotiated
//! connection, the client certificate's common name and the HTTPS listener. Certificates are
//! made at test time by `nsq_testkit::certs` (a CA, a server certificate for localhost/127.0.0.1 on a fixed
//! RSA key so TLS 1.2 can pick an `ECDHE_RSA` suite, CA-signed and self-signed client
//! certificates); handshakes run over real loopback sockets with tokio-rustls on both ends.
//! When `openssl` is installed, `s_client` checks the protocol versions from the outside.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nsq_testkit::certs::{CertFiles, Pki};
use nsqd::options::{NsqdOptions, TlsVersion};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A fixed 2048-bit RSA key for the server certificate (ring cannot generate RSA keys).
const SERVER_RSA_KEY: &str = r"-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDQKclos88Q4uEQ
lD6M+h6uQIdIdrZ4NPe61Cq6Ujk0Yk0M4jrPYL5knwEmagq7xsbIcn+U6+/6321n
QE7nWJwFtgiNGK4hVzfXYodRiSqpjCdM1Bz8wOD56OAKjFlpkyrROd6zOrFWKa4m
i6uSU1EjkUTcZkeu/yh4+Wb7Zm/muIhvwl7z3wXYbyjVCYtCwaxmXnjIbwGjaOhq
7OCEg9QNzLYMV2ZQtLSWs1hjL0/nI9fJp+AHmSGDws7yiEEU7RdVqpCYyDNtcWp3
4ExbhnKM/7+2P+ARm0NGZTA8Ml3HLpmItb0hsT2AaPtMEIALIN6PiFe7SNncR2Cj
n4Qo1TRPAgMBAAECggEADzJlxlOOM+TkWnIAKQmfkMgcOEGWa6suRMD1h5m2HGlq
x5yCf55H+A+VpWjLdM77tymIv+YDpJSIJ6gNup0A8vfJowdguwVjicFjMKQrbapS
Oi0oGpm4MvZ52LtLUcZRM2oepIYN6UTstlqvAWU8wLR7yv1akV+GZGKMzqC5XaYM
dswxZ+AHqkQHFJZORZSb5I8a8mCqGlD/CkQrTTu2LrhkwV2QSudTxa7y1TDczxIN
ZRJVyE5TfIVnpFbN08RYu9AEUW1ChPnqB52qIOhAIkFKtpMOY7eaaGLuiPVTTN4Q
OkuXnQvLGgWVpvbFHodwFcu21dkHot3QbOtPER/A7QKBgQDo0082Qnt4Nfa8GBVg
SkNOGfYuCuUfWm9sw8pehwhFXx/pjQfykLScTrA0ZX0OoT60J1L+7Pe5+85h/sLH
bpcExYa5+zD6ojl3Rf6HQyVpHhlgO2QCJubqN2h6LFaIVQ5XFXokxne+ppDB6G3v
X2Xt1KhegLZ3HfoEdH0ykMKI2wKBgQDk4g2KOx33ZoGprOh1IuB5JkjNpN3IVerv
4X+vXlrQ7TFcjHSvFwxkUBtMOFr1swBgK229nzZ7ypNiLzg1zNnwNB9xoDVV1cNH
kofCcV2+eIjz9271BE67q73tC5zKLCW2TGWhCy825Sa1VWE6zeQNvpqz72BOCsPc
SsHmxc2ynQKBgQDV77VNqnFB2HRMCeU6gYKu9XQcgq5ezP6t9oqxqWqUNABi3tB6
tzT+m9+VhdwP4WJ4r9m3nY9UOmk96paYIqpqHAbcRlCPPRmI26wyJiTuHlY68tfG
knCErz01ZiBtTZrLslR2DlhhuzQwuZ6q4gILM+kyTRtdARKHnXKdUB8xGQKBgQCT
zm9T/w1BAQ9m1WRgkJ9JXTHSq08V2nYXZxYf19zp4uLnk0Se9VFpTlnyhMootOnf
MOxzceerVYyL8VZpV9q9xcswg3ct8RdklvnY1YDmScyXUAh1bcyyYRwLgl5EKPJJ
oVhYAXMCDkVLANIDOYa2YYph/InCnC0Ti6tgLgjB+QKBgBdIj/Y7+VAXZdIPmB3L
rxnzxUXoIram0CBSmNOX5bceCP85BIUgTkjdFJzwmQrik06c1b9ZQ6xX3UzXwAeH
OocdMNKKAxlRLjbtfIa8PShYEf2te8dviSotEoSNt+W0zdkAWCFMMGugoR+Pt9bL
RKsLquraannEnfaKkuWpdxji
-----END PRIVATE KEY-----
";

/// The test PKI of `nsq-testkit`, with an RSA server key (for the `TLS_ECDHE_RSA_*` names).
fn pki() -> Pki {
    Pki::with_server_key(SERVER_RSA_KEY)
}

/// A file that is not PEM.
fn garbage(pki: &Pki) -> PathBuf {
    pki.write("garbage.pem", "this is not a certificate\n")
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn opts(pki: &Pki) -> NsqdOptions {
    NsqdOptions {
        tls_cert: path(&pki.server.cert),
        tls_key: path(&pki.server.key),
        ..NsqdOptions::default()
    }
}

fn server_config(o: &NsqdOptions) -> Arc<ServerConfig> {
    nsqd::tls::server_config(o).unwrap().expect("TLS enabled")
}

/// The startup error for [`opts`] changed by `edit`, without the `failed to build TLS config - `
/// prefix every such error has.
fn config_error_with(pki: &Pki, edit: impl FnOnce(&mut NsqdOptions)) -> String {
    let mut o = opts(pki);
    edit(&mut o);
    let e = config_error(&o);
    e.strip_prefix("failed to build TLS config - ")
        .unwrap_or_else(|| panic!("no prefix: {e}"))
        .to_string()
}

fn config_error(o: &NsqdOptions) -> String {
    nsqd::tls::server_config(o)
        .expect_err("startup error")
        .to_string()
}

/// A client trusting the test CA, limited to `versions`, optionally to one cipher suite, and
/// presenting `cert` (chain, PEM key) when given.
fn client_config(
    pki: &Pki,
    versions: &[&'static SupportedProtocolVersion],
    suite: Option<rustls::SupportedCipherSuite>,
    cert: Option<&CertFiles>,
) -> Arc<ClientConfig> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(s) = suite {
        provider = CryptoProvider {
            cipher_suites: vec![s],
            ..provider
        };
    }
    let mut roots = RootCertStore::empty();
    roots.add(pki.ca.der.clone().into()).unwrap();
    let key_provider = provider.key_provider;
    let builder = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let config = match cert {
        // Not `with_client_auth_cert`: that refuses a key that does not match the
        // certificate, which one test needs.
        Some(c) => {
            let key = key_provider
                .load_private_key(PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap())
                .unwrap();
            let chain = vec![CertificateDer::from(c.der.clone())];
            builder.with_client_cert_resolver(Arc::new(ClientCert(Arc::new(CertifiedKey::new(
                chain, key,
            )))))
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// Presents one certificate whenever asked.
#[derive(Debug)]
struct ClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
const TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// What the server side saw of a successful handshake.
#[derive(Debug)]
struct Negotiated {
    version: &'static str,
    cipher: String,
    common_name: String,
}

/// [`connect`] with a client trusting the test CA, limited to `versions`, presenting `cert`.
async fn handshake(
    server: &Arc<ServerConfig>,
    pki: &Pki,
    versions: &[&'static SupportedProtocolVersion],
    cert: Option<&CertFiles>,
) -> Result<Negotiated, String> {
    connect(server.clone(), client_config(pki, versions, None, cert)).await
}

/// A handshake that must succeed: [`connect`] with a client trusting the test CA, limited to
/// `versions` and optionally to one cipher suite.
async fn negotiate(
    server: &Arc<ServerConfig>,
    pki: &Pki,
    versions: &[&'static SupportedProtocolVersion],
    suite: Option<rustls::SupportedCipherSuite>,
) -> Negotiated {
    connect(server.clone(), client_config(pki, versions, suite, None))
        .await
        .unwrap()
}

/// One connection over loopback: the server (driven by `TlsAcceptor`) handshakes, records the
/// negotiated parameters and writes `OK`; the client must read that `OK`. In TLS 1.3 the
/// client's side of the handshake completes before the server has judged its certificate,
/// so success is decided by both ends.
async fn connect(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
) -> Result<Negotiated, String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = TlsAcceptor::from(server)
            .accept(tcp)
            .await
            .map_err(|e| format!("server: {e}"))?;
        let conn = tls.get_ref().1;
        let n = Negotiated {
            version: nsqd::tls::version_name(conn.protocol_version().unwrap()),
            cipher: nsqd::tls::cipher_suite_name(conn.negotiated_cipher_suite().unwrap()),
            common_name: nsqd::tls::peer_common_name(conn),
        };
        tls.write_all(b"OK").await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
        let mut rest = Vec::new();
        let _ = tls.read_to_end(&mut rest).await;
        Ok::<_, String>(n)
    });

    let client_side = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = TlsConnector::from(client)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("client: {e}"))?;
        let mut buf = [0u8; 2];
        tls.read_exact(&mut buf)
            .await
            .map_err(|e| format!("client read: {e}"))?;
        let _ = tls.shutdown().await;
        Ok::<_, String>(buf)
    };
    let client_result = tokio::time::timeout(Duration::from_secs(10), client_side)
        .await
        .expect("client timed out");
    let server_result = tokio::time::timeout(Duration::from_secs(10), server_side)
        .await
        .expect("server timed out")
        .unwrap();
    let buf = client_result?;
    let n = server_result?;
    assert_eq!(&buf, b"OK");
    Ok(n)
}

// --- server_config: enabling and startup errors ---

#[test]
fn no_cert_and_key_means_no_tls() {
    assert!(nsqd::tls::server_config(&NsqdOptions::default())
        .unwrap()
        .is_none());
}

#[test]
fn missing_cert_file_fails_with_go_text() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_cert = "/nonexistent/cert.pem".to_string()),
        "open /nonexistent/cert.pem: no such file or directory"
    );
}

#[test]
fn key_without_cert_fails() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_cert = String::new()),
        "open : no such file or directory"
    );
}

#[test]
fn cert_file_without_pem_fails() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_cert = path(&garbage(&pki))),
        "tls: failed to find any PEM data in certificate input"
    );
}

#[test]
fn key_file_without_key_fails() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_key = path(&garbage(&pki))),
        "tls: failed to find any PEM data in key input"
    );
    assert_eq!(
        config_error_with(&pki, |o| o.tls_key = path(&pki.server.cert)),
        "tls: found a certificate rather than a key in the PEM \
         for the private key"
    );
}

#[test]
fn mismatched_key_fails() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_key = path(&pki.client.key)),
        "tls: private key does not match public key"
    );
}

#[test]
fn root_ca_file_errors() {
    let pki = pki();
    assert_eq!(
        config_error_with(&pki, |o| o.tls_root_ca_file = path(&garbage(&pki))),
        "failed to append certificate to pool"
    );
    assert_eq!(
        config_error_with(&pki, |o| o.tls_root_ca_file =
            "/nonexistent/ca.pem".to_string()),
        "open /nonexistent/ca.pem: no such file or directory"
    );
    let o = NsqdOptions {
        tls_root_ca_file: path(&pki.ca.cert),
        ..opts(&pki)
    };
    assert!(nsqd::tls::server_config(&o).unwrap().is_some());
}

#[test]
fn require_verify_without_root_ca_fails() {
    let pki = pki();
    let o = NsqdOptions {
        tls_client_auth_policy: "require-verify".to_string(),
        ..opts(&pki)
    };
    let e = config_error(&o);
    assert!(e.starts_with("failed to build TLS config - "), "{e}");
    assert!(e.contains("--tls-root-ca-file"), "{e}");
}

// --- protocol versions ---

#[tokio::test]
async fn default_offers_tls12_and_tls13() {
    let pki = pki();
    let server = server_config(&opts(&pki));
    let n = negotiate(&server, &pki, TLS12, None).await;
    assert_eq!(n.version, "TLS1.2");
    let n = negotiate(&server, &pki, TLS13, None).await;
    assert_eq!(n.version, "TLS1.3");
    let n = negotiate(&server, &pki, BOTH, None).await;
    assert_eq!(n.version, "TLS1.3");
}

#[tokio::test]
async fn min_version_below_tls13_offers_tls12() {
    let pki = pki();
    for v in [TlsVersion::Tls10, TlsVersion::Tls11, TlsVersion::Tls12] {
        let server = server_config(&NsqdOptions {
            tls_min_version: v,
            ..opts(&pki)
        });
        let n = negotiate(&server, &pki, TLS12, None).await;
        assert_eq!(n.version, "TLS1.2");
    }
}

#[tokio::test]
async fn min_version_tls13_refuses_tls12() {
    let pki = pki();
    let server = server_config(&NsqdOptions {
        tls_min_version: TlsVersion::Tls13,
        ..opts(&pki)
    });
    assert!(handshake(&server, &pki, TLS12, None).await.is_err());
    let n = negotiate(&server, &pki, TLS13, None).await;
    assert_eq!(n.version, "TLS1.3");
}

// --- /stats names ---

#[tokio::test]
async fn stats_names_tls12_ecdhe_rsa_aes128_gcm() {
    let pki = pki();
    let server = server_config(&opts(&pki));
    let suite = rustls::crypto::ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256;
    let n = negotiate(&server, &pki, TLS12, Some(suite)).await;
    assert_eq!(n.version, "TLS1.2");
    assert_eq!(n.cipher, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
    assert_eq!(n.common_name, "");
}

#[tokio::test]
async fn stats_names_tls13_are_unknown_numbers() {
    let pki = pki();
    let server = server_config(&opts(&pki));
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let n = negotiate(&server, &pki, TLS13, Some(suite)).await;
    assert_eq!(n.version, "TLS1.3");
    assert_eq!(n.cipher, "Unknown 4865");
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384;
    let n = negotiate(&server, &pki, TLS13, Some(suite)).await;
    assert_eq!(n.cipher, "Unknown 4866");
}

#[tokio::test]
async fn server_prefers_aes128_like_go() {
    // rustls clients list AES-256 first; the reference's server still picks AES-128.
    let pki = pki();
    let server = server_config(&opts(&pki));
    let n = negotiate(&server, &pki, TLS13, None).await;
    assert_eq!(n.cipher, "Unknown 4865");
    let n = negotiate(&server, &pki, TLS12, None).await;
    assert_eq!(n.cipher, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
}

#[test]
fn version_names() {
    use rustls::ProtocolVersion as V;
    assert_eq!(nsqd::tls::version_name(V::TLSv1_0), "TLS1.0");
    assert_eq!(nsqd::tls::version_name(V::TLSv1_1), "TLS1.1");
    assert_eq!(nsqd::tls::version_name(V::TLSv1_2), "TLS1.2");
    assert_eq!(nsqd::tls::version_name(V::TLSv1_3), "TLS1.3");
}

// --- client certificates ---

#[tokio::test]
async fn no_policy_ignores_client_certs() {
    let pki = pki();
    let server = server_config(&opts(&pki));
    let n = handshake(&server, &pki, BOTH, Some(&pki.client))
        .await
        .unwrap();
    // Not requested, so not sent.
    assert_eq!(n.common_name, "");
}

#[tokio::test]
async fn require_needs_any_client_cert() {
    let pki = pki();
    let server = server_config(&NsqdOptions {
        tls_client_auth_policy: "require".to_string(),
        ..opts(&pki)
    });
    for versions in [TLS12, TLS13] {
        assert!(handshake(&server, &pki, versions, None).await.is_err());
        let n = handshake(&server, &pki, versions, Some(&pki.stranger))
            .await
            .unwrap();
        assert_eq!(n.common_name, "stranger");
        let n = handshake(&server, &pki, versions, Some(&pki.client))
            .await
            .unwrap();
        assert_eq!(n.common_name, "client-alice");
    }
}

#[tokio::test]
async fn require_still_checks_the_client_holds_the_key() {
    // The stranger's certificate with the CA-signed client's key: the CertificateVerify
    // signature does not match the certificate.
    let pki = pki();
    let server = server_config(&NsqdOptions {
        tls_client_auth_policy: "require".to_string(),
        ..opts(&pki)
    });
    let forged = CertFiles {
        key_pem: pki.client.key_pem.clone(),
        ..pki.stranger.clone()
    };
    for versions in [TLS12, TLS13] {
        assert!(handshake(&server, &pki, versions, Some(&forged))
            .await
            .is_err());
    }
}

#[tokio::test]
async fn require_verify_checks_against_root_ca() {
    let pki = pki();
    let server = server_config(&NsqdOptions {
        tls_client_auth_policy: "require-verify".to_string(),
        tls_root_ca_file: path(&pki.ca.cert),
        ..opts(&pki)
    });
    for versions in [TLS12, TLS13] {
        assert!(handshake(&server, &pki, versions, None).await.is_err());
        assert!(handshake(&server, &pki, versions, Some(&pki.stranger))
            .await
            .is_err());
        let n = handshake(&server, &pki, versions, Some(&pki.client))
            .await
            .unwrap();
        assert_eq!(n.common_name, "client-alice");
    }
}

/// An X.509 v1 client certificate signed by the root CA passes `require-verify`, as Go's
/// `RequireAndVerifyClientCert` lets it (webpki alone refuses it: `UnsupportedCertVersion`),
/// and `require`; a v1 certificate with a forged signature, an expired one, or one from
/// another CA is still refused.
#[tokio::test]
async fn require_verify_accepts_v1_client_certs_from_the_root_ca() {
    let pki = pki();
    let v1 = pki.v1_client("v1", "client-v1", "491231235959Z", false);
    let forged = pki.v1_client("forged", "client-v1", "491231235959Z", true);
    let expired = pki.v1_client("expired", "client-v1", "210101000000Z", false);
    let other_ca = Pki::new();
    let stranger = other_ca.v1_client("stranger", "client-v1", "491231235959Z", false);
    let verify = server_config(&NsqdOptions {
        tls_client_auth_policy: "require-verify".to_string(),
        tls_root_ca_file: path(&pki.ca.cert),
        ..opts(&pki)
    });
    let require = server_config(&NsqdOptions {
        tls_client_auth_policy: "require".to_string(),
        ..opts(&pki)
    });
    for versions in [TLS12, TLS13] {
        let n = handshake(&verify, &pki, versions, Some(&v1)).await.unwrap();
        assert_eq!(n.common_name, "client-v1");
        let n = handshake(&require, &pki, versions, Some(&v1))
            .await
            .unwrap();
        assert_eq!(n.common_name, "client-v1");
        for (what, bad) in [
            ("forged", &forged),
            ("expired", &expired),
            ("another CA's", &stranger),
        ] {
            let r = handshake(&verify, &pki, versions, Some(bad)).await;
            assert!(r.is_err(), "{what} v1 certificate accepted: {r:?}");
        }
        // v3 certificates still go through webpki.
        let n = handshake(&verify, &pki, versions, Some(&pki.client))
            .await
            .unwrap();
        assert_eq!(n.common_name, "client-alice");
    }
}

/// The same end to end: nsqd with `--tls-client-auth-policy=require-verify` takes a v1 client
/// certificate on the TCP `tls_v1` upgrade (then a PUB over TLS) and on the HTTPS listener.
#[tokio::test]
async fn v1_client_cert_on_the_tls_upgrade_and_https() {
    let pki = pki();
    let v1 = pki.v1_client("v1", "client-v1", "491231235959Z", false);
    let (h, _d) = common::start_with(&[
        format!("--tls-cert={}", pki.server.cert_path()),
        format!("--tls-key={}", pki.server.key_path()),
        format!("--tls-root-ca-file={}", pki.ca_path()),
        "--tls-client-auth-policy=require-verify".to_string(),
    ])
    .await;
    let name = || ServerName::try_from("localhost").unwrap();

    for versions in [TLS12, TLS13] {
        let mut tcp = TcpStream::connect(h.tcp_addr()).await.unwrap();
        let body = br#"{"feature_negotiation":true,"tls_v1":true}"#;
        let mut identify = b"  V2IDENTIFY\n".to_vec();
        identify.extend_from_slice(&(body.len() as u32).to_be_bytes());
        identify.extend_from_slice(body);
        tcp.write_all(&identify).await.unwrap();
        let mut size = [0u8; 4];
        tcp.read_exact(&mut size).await.unwrap();
        let mut resp = vec![0u8; u32::from_be_bytes(size) as usize];
        tcp.read_exact(&mut resp).await.unwrap();
        assert!(String::from_utf8_lossy(&resp).contains(r#""tls_v1":true"#));
        let mut tls = TlsConnector::from(client_config(&pki, versions, None, Some(&v1)))
            .connect(name(), tcp)
            .await
            .unwrap();
        let mut ok = [0u8; 10];
        tls.read_exact(&mut ok).await.unwrap();
        assert_eq!(&ok, b"\0\0\0\x06\0\0\0\0OK");
        tls.write_all(b"PUB t\n\0\0\0\x02v1").await.unwrap();
        tls.read_exact(&mut ok).await.unwrap();
        assert_eq!(&ok, b"\0\0\0\x06\0\0\0\0OK");
        let cn: Vec<String> = h
            .nsqd
            .clients()
            .into_iter()
            .map(|c| c.stats().meta.tls_common_name)
            .collect();
        assert!(cn.contains(&"client-v1".to_string()), "{cn:?}");

        let tcp = TcpStream::connect(h.nsqd.https_addr.unwrap())
            .await
            .unwrap();
        let mut tls = TlsConnector::from(client_config(&pki, versions, None, Some(&v1)))
            .connect(name(), tcp)
            .await
            .unwrap();
        tls.write_all(b"GET /ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
            .await
            .expect("HTTPS answer")
            .unwrap();
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nOK"), "{out}");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn accept_gives_up_after_five_seconds() {
    let pki = pki();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _silent = TcpStream::connect(addr).await.unwrap();
    let (tcp, _) = listener.accept().await.unwrap();
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let err = nsqd::tls::accept(server_config(&opts(&pki)), tcp)
        .await
        .expect_err("handshake cannot complete");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
}

#[tokio::test]
async fn accept_upgrades() {
    let pki = pki();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = client_config(&pki, BOTH, None, Some(&pki.client));
    let client = tokio::spawn(async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = TlsConnector::from(client)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let mut buf = [0u8; 2];
        tls.read_exact(&mut buf).await.unwrap();
        buf
    });
    let (tcp, _) = listener.accept().await.unwrap();
    let server = server_config(&NsqdOptions {
        tls_client_auth_policy: "require".to_string(),
        ..opts(&pki)
    });
    let mut tls = nsqd::tls::accept(server, tcp).await.unwrap();
    assert_eq!(nsqd::tls::peer_common_name(tls.get_ref().1), "client-alice");
    tls.write_all(b"OK").await.unwrap();
    tls.flush().await.unwrap();
    assert_eq!(&client.await.unwrap(), b"OK");
}

// --- HTTPS listener ---

async fn https_request(pki: &Pki, addr: std::net::SocketAddr, request: &str) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = TlsConnector::from(client_config(pki, BOTH, None, None))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .expect("response timed out")
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn serve_https_answers_and_stops() {
    let pki = pki();
    let config = server_config(&opts(&pki));
    let router = axum::Router::new().route("/ping", axum::routing::get(|| async { "OK" }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn(nsqd::tls::serve_https(
        listener,
        config,
        router,
        stop.clone(),
    ));

    // A plain-text client fails its handshake; the listener carries on.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut sink)).await;

    let resp = https_request(
        &pki,
        addr,
        "GET /ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(resp.ends_with("\r\n\r\nOK"), "{resp}");

    let resp = https_request(
        &pki,
        addr,
        "GET /nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 404 Not Found\r\n"), "{resp}");

    // An idle keep-alive connection does not hold up the stop.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut idle = TlsConnector::from(client_config(&pki, BOTH, None, None))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    idle.write_all(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));

    stop.notify_one();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("serve_https did not stop")
        .unwrap();
    // The idle connection was closed and the port no longer accepts.
    let n = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut buf))
        .await
        .expect("idle connection not closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn serve_https_stops_with_notify_waiters() {
    let pki = pki();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn(nsqd::tls::serve_https(
        listener,
        server_config(&opts(&pki)),
        axum::Router::new(),
        stop.clone(),
    ));
    // Let the task register before notifying (notify_waiters stores no permit).
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.notify_waiters();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("serve_https did not stop")
        .unwrap();
}

// --- the real OpenSSL client ---

/// Accepts TLS connections with `config` until dropped; each gets `OK` after the handshake.
async fn spawn_tls_server(
    config: Arc<ServerConfig>,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(config);
    let task = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"OK\n").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (addr, task)
}

/// `openssl s_client` with `flag` (`-tls1_2`/`-tls1_3`); `Some(protocol line)` on success.
async fn s_client(addr: std::net::SocketAddr, ca: &Path, flag: &str) -> Option<String> {
    let (ca, flag) = (ca.to_path_buf(), flag.to_string());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("openssl")
            .args(["s_client", "-connect", &addr.to_string(), &flag])
            .args([
                "-servername",
                "localhost",
                "-verify_return_error",
                "-CAfile",
            ])
            .arg(&ca)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || stdout.contains("Cipher is (NONE)") {
        return None;
    }
    stdout
        .lines()
        .find(|l| l.starts_with("New, "))
        .map(|l| l.to_string())
}

fn have_openssl() -> bool {
    std::process::Command::new("openssl")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test]
async fn openssl_s_client_versions() {
    if !have_openssl() {
        eprintln!("openssl not installed: skipping the s_client check");
        return;
    }
    let pki = pki();
    let (addr, task) = spawn_tls_server(server_config(&opts(&pki))).await;
    let l = s_client(addr, &pki.ca.cert, "-tls1_2")
        .await
        .expect("tls1_2 connects");
    assert!(
        l.contains("TLSv1.2") && l.contains("ECDHE-RSA-AES128-GCM-SHA256"),
        "{l}"
    );
    let l = s_client(addr, &pki.ca.cert, "-tls1_3")
        .await
        .expect("tls1_3 connects");
    assert!(
        l.contains("TLSv1.3") && l.contains("TLS_AES_128_GCM_SHA256"),
        "{l}"
    );
    assert!(s_client(addr, &pki.ca.cert, "-tls1_1").await.is_none());
    task.abort();

    let (addr, task) = spawn_tls_server(server_config(&NsqdOptions {
        tls_min_version: TlsVersion::Tls13,
        ..opts(&pki)
    }))
    .await;
    assert!(s_client(addr, &pki.ca.cert, "-tls1_2").await.is_none());
    assert!(s_client(addr, &pki.ca.cert, "-tls1_3").await.is_some());
    task.abort();
}
