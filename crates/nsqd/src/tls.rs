//! TLS for nsqd: the one `rustls::ServerConfig` built at startup from `--tls-cert`,
//! `--tls-key`, `--tls-root-ca-file`, `--tls-client-auth-policy` and `--tls-min-version`
//! (nsqd/nsqd.go, `buildTLSConfig`), shared by the TCP `tls_v1` upgrade (nsqd/protocol_v2.go, `IDENTIFY`) and the HTTPS
//! listener ([`serve_https`], nsqd/nsqd.go, `Main`); plus the names `/stats` prints for a negotiated
//! connection ([`version_name`], [`cipher_suite_name`]) and the client certificate's common name
//! handed to the auth server ([`peer_common_name`]).
//!
//! The reference is Go's `crypto/tls`; rustls differs in what it can offer, and every such
//! difference is written down on the item that makes it (TLS 1.0/1.1 in [`server_config`],
//! cipher preference in [`provider`], no system roots for `require-verify`).

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ProtocolVersion, RootCertStore, ServerConfig, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::options::{NsqdOptions, TlsVersion};

/// How long a client gets to finish the TLS handshake, on the TCP upgrade and on the
/// HTTPS listener alike.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`serve_https`] waits for in-flight requests after it is told to stop.
const HTTPS_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The server side of a TLS handshake on `io` (the TCP `tls_v1` upgrade), bounded by
/// [`HANDSHAKE_TIMEOUT`]; a slow client gets `TimedOut`.
pub async fn accept<IO>(
    config: Arc<ServerConfig>,
    io: IO,
) -> io::Result<tokio_rustls::server::TlsStream<IO>>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsAcceptor::from(config).accept(io)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "TLS handshake timed out",
        )),
    }
}

/// Builds the server TLS configuration once at startup; `Ok(None)` when neither `--tls-cert`
/// nor `--tls-key` is set (TLS disabled).
///
/// Errors are the full startup reason, ready for `failed to instantiate nsqd - <reason>`:
/// `failed to build TLS config - <err>` where `<err>` mimics Go's text (`open <path>: no such
/// file or directory`, `tls: failed to find any PEM data in certificate input`,
/// `tls: private key does not match public key`, `failed to append certificate to pool`, …).
/// As in the reference, setting only one of cert/key is an error (the other path is `""`),
/// and a root CA file is loaded and checked whatever the client-auth policy.
///
/// Deviations from the reference, forced by rustls:
/// * **TLS 1.0 and 1.1 are never offered.** `--tls-min-version` `tls1.0` (the default),
///   `tls1.1` and `tls1.2` all mean TLS 1.2 and 1.3; `tls1.3` means TLS 1.3 only (a TLS 1.2
///   client is refused). The option value itself is kept, so `/config/tls_min_version` still
///   shows the configured number.
/// * `--tls-client-auth-policy=require-verify` without `--tls-root-ca-file` fails startup
///   (the reference would verify against the system roots; none are bundled here).
pub fn server_config(opts: &NsqdOptions) -> Result<Option<Arc<ServerConfig>>, TlsConfigError> {
    if opts.tls_cert.is_empty() && opts.tls_key.is_empty() {
        return Ok(None);
    }
    build(opts)
        .map(|c| Some(Arc::new(c)))
        .map_err(TlsConfigError)
}

/// Startup failed building the TLS configuration: `failed to build TLS config - <why>`.
#[derive(Debug, thiserror::Error)]
#[error("failed to build TLS config - {0}")]
pub struct TlsConfigError(#[source] pub TlsError);

/// Why the TLS configuration could not be built, in Go's `crypto/tls` / `crypto/x509` words.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be opened or read: `open <path>: <errno text>` (Go's `*PathError`).
    #[error("{op} {path}: {reason}")]
    File {
        op: &'static str,
        path: String,
        /// Go's lower-case strerror text.
        reason: String,
    },
    #[error("tls: failed to find any PEM data in certificate input")]
    NoCertificate,
    #[error("tls: found a certificate rather than a key in the PEM for the private key")]
    CertificateForKey,
    #[error("tls: failed to find any PEM data in key input")]
    NoKey,
    #[error("tls: failed to parse private key")]
    BadKey,
    #[error("tls: private key does not match public key")]
    KeyMismatch,
    #[error("x509: malformed certificate")]
    MalformedCertificate,
    /// `--tls-root-ca-file` held no usable certificate (Go's `AppendCertsFromPEM` false).
    #[error("failed to append certificate to pool")]
    NoRoots,
    #[error(
        "--tls-client-auth-policy=require-verify needs --tls-root-ca-file \
         (system root certificates are not available)"
    )]
    RequireVerifyWithoutRoots,
    /// Anything else rustls refused, in its words.
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
    #[error(transparent)]
    ClientVerifier(#[from] rustls::server::VerifierBuilderError),
}

fn build(opts: &NsqdOptions) -> Result<ServerConfig, TlsError> {
    // Go's order: the key pair first, then the CA file.
    let certs = load_certs(&opts.tls_cert)?;
    let key = load_key(&opts.tls_key)?;
    let roots = if opts.tls_root_ca_file.is_empty() {
        None
    } else {
        Some(load_roots(&opts.tls_root_ca_file)?)
    };

    let provider = Arc::new(provider());
    let versions: &[&'static rustls::SupportedProtocolVersion] = match opts.tls_min_version {
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
        TlsVersion::Tls10 | TlsVersion::Tls11 | TlsVersion::Tls12 => {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        }
    };
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(versions)?;

    let builder = match opts.tls_client_auth_policy.as_str() {
        "require" => builder.with_client_cert_verifier(nsq_tls::AnyClientCert::new(
            &provider,
            roots
                .as_ref()
                .map(|(r, _)| r.subjects())
                .unwrap_or_default(),
        )),
        "require-verify" => {
            let (_, roots) = roots.ok_or(TlsError::RequireVerifyWithoutRoots)?;
            // webpki's verifier, plus X.509 v1 client certificates as Go accepts them.
            builder.with_client_cert_verifier(nsq_tls::VerifyClientCert::new(&provider, roots)?)
        }
        _ => builder.with_no_client_auth(),
    };

    let mut config = builder.with_single_cert(certs, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch,
        rustls::Error::InvalidCertificate(_) => TlsError::MalformedCertificate,
        rustls::Error::General(_) => TlsError::BadKey,
        other => TlsError::Rustls(other),
    })?;
    // Go picks the suite from its own preference list, not the client's (see `provider`).
    config.ignore_client_order = true;
    Ok(config)
}

/// The ring provider with its cipher suites in Go's server preference order: AES-128-GCM,
/// then AES-256-GCM, then ChaCha20-Poly1305 (ECDSA before RSA for TLS 1.2), chosen by the
/// server regardless of the client's order. So an OpenSSL client (which lists AES-256 first
/// for TLS 1.3) gets `TLS_AES_128_GCM_SHA256` as from the reference. Go's extra rule of
/// preferring ChaCha20 when the client puts it first is not reproduced. Key exchange groups
/// (X25519, P-256, P-384) and signature algorithms are the provider's defaults.
pub(crate) fn provider() -> CryptoProvider {
    use rustls::crypto::ring::cipher_suite as cs;
    CryptoProvider {
        cipher_suites: vec![
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::ring::default_provider()
    }
}

/// Reads a whole file, with Go's error texts (`open <path>: …`, `read <path>: …`).
fn read_file(path: &str) -> Result<Vec<u8>, TlsError> {
    let fail = |op: &'static str, e: io::Error| TlsError::File {
        op,
        path: path.to_string(),
        reason: go_errno_text(&e),
    };
    let mut f = File::open(path).map_err(|e| fail("open", e))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(|e| fail("read", e))?;
    Ok(buf)
}

/// An I/O error as Go prints a syscall error: lower-case strerror, no `(os error N)`.
fn go_errno_text(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => return "no such file or directory".to_string(),
        io::ErrorKind::PermissionDenied => return "permission denied".to_string(),
        _ => {}
    }
    let s = e.to_string();
    let s = match s.find(" (os error ") {
        Some(i) => &s[..i],
        None => &s[..],
    };
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The certificate chain of `--tls-cert`: every `CERTIFICATE` block, leaf first. Parsing
/// stops at the first malformed PEM block.
pub(crate) fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .map_while(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    Ok(certs)
}

/// The first private key (PKCS#1, PKCS#8 or SEC1) of `--tls-key`.
pub(crate) fn load_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            if CertificateDer::pem_slice_iter(&pem).any(|c| c.is_ok()) {
                TlsError::CertificateForKey
            } else {
                TlsError::NoKey
            }
        }
        _ => TlsError::BadKey,
    })
}

/// `--tls-root-ca-file` as a trust store, and its certificates (for [`nsq_tls::VerifyClientCert`]):
/// like Go's `AppendCertsFromPEM`, certificates that do not parse are skipped, and a file
/// without a single usable one is an error.
pub(crate) fn load_roots(
    path: &str,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), TlsError> {
    let pem = read_file(path)?;
    let ders: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .map_while(Result::ok)
        .collect();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(ders.iter().cloned());
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    Ok((roots, ders))
}

/// `tls_version` in `/stats`: `TLS1.2`, `TLS1.3` (and `TLS1.0`/`TLS1.1`/`SSL30` as the
/// reference names them, though rustls never negotiates those). Anything else is `Unknown`
/// (the reference appends the number; unreachable here).
pub fn version_name(v: ProtocolVersion) -> &'static str {
    match v {
        ProtocolVersion::SSLv3 => "SSL30",
        ProtocolVersion::TLSv1_0 => "TLS1.0",
        ProtocolVersion::TLSv1_1 => "TLS1.1",
        ProtocolVersion::TLSv1_2 => "TLS1.2",
        ProtocolVersion::TLSv1_3 => "TLS1.3",
        _ => "Unknown",
    }
}

/// `tls_cipher_suite` in `/stats`: the IANA name of a TLS 1.2 suite
/// (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), and `Unknown <decimal id>` for every TLS 1.3
/// suite (`Unknown 4865` for `TLS_AES_128_GCM_SHA256`), the reference's quirk (nsqd/stats.go, `ClientStats`).
pub fn cipher_suite_name(cs: SupportedCipherSuite) -> String {
    let suite = cs.suite();
    match (cs, suite.as_str()) {
        (SupportedCipherSuite::Tls12(_), Some(name)) => name.to_string(),
        _ => format!("Unknown {}", u16::from(suite)),
    }
}

/// The subject common name of the client's leaf certificate (what Go's
/// `PeerCertificates[0].Subject.CommonName` gives, sent to the auth server as `common_name`);
/// `""` without a client certificate or when it has no readable CN.
pub fn peer_common_name(conn: &rustls::ServerConnection) -> String {
    conn.peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|leaf| subject_common_name(leaf.as_ref()))
        .unwrap_or_default()
}

/// The last common name of the subject (Go keeps the last one it sees), read with
/// x509-parser.
fn subject_common_name(cert: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let cn = cert.subject().iter_common_name().last()?;
    cn.as_str().ok().map(str::to_string)
}

/// Serves `router` over TLS on `listener` until `stop` is notified (either `notify_one` or
/// `notify_waiters`; give this listener its own `Notify`). Then it stops accepting, lets
/// in-flight requests finish (idle keep-alive connections close at once) for at most 5 s, and
/// drops whatever is left. Each connection gets [`HANDSHAKE_TIMEOUT`] to complete the
/// handshake; a failed or slow handshake just drops that connection. HTTP/1.1 only and no
/// ALPN, like the reference's HTTPS listener.
pub async fn serve_https(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    router: axum::Router,
    stop: Arc<Notify>,
) {
    let acceptor = TlsAcceptor::from(config);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut conns = JoinSet::new();

    let stopped = stop.notified();
    tokio::pin!(stopped);
    // Registered before the first await, so a `notify_waiters` from now on is not missed.
    stopped.as_mut().enable();

    loop {
        tokio::select! {
            _ = stopped.as_mut() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    conns.spawn(serve_connection(
                        acceptor.clone(),
                        stream,
                        router.clone(),
                        shutdown_rx.clone(),
                    ));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::error!("HTTPS accept error - {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }

    drop(listener);
    let _ = shutdown_tx.send(true);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(HTTPS_DRAIN_TIMEOUT, drain)
        .await
        .is_err()
    {
        conns.abort_all();
    }
}

/// One HTTPS connection: handshake (bounded), then HTTP/1.1 until the client leaves or the
/// listener stops (then the request in progress is finished and the connection closed).
async fn serve_connection(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    router: axum::Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
    let tls = tokio::select! {
        r = handshake => match r {
            Ok(Ok(tls)) => tls,
            _ => return,
        },
        _ = stopping(&mut shutdown) => return,
    };

    // hyper set up as Go's server: head limits, Go's 400/431 bytes (nsq_http::serve).
    nsq_http::serve::serve_connection(tls, router, shutdown).await;
}

/// Resolves once the listener is stopping (or gone).
async fn stopping(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}
