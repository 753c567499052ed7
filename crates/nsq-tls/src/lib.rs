//! The rustls certificate verifiers Go's `crypto/tls` settings in NSQ need and rustls does not
//! ship: a client that accepts any server certificate (go-nsq config.go,
//! `tls_insecure_skip_verify` → Go's `InsecureSkipVerify`), a server that requires a client
//! certificate without checking it (nsqd/nsqd.go, `buildTLSConfig`,
//! `--tls-client-auth-policy=require` → Go's `tls.RequireAnyClientCert`), and a server that
//! verifies the client certificate against `--tls-root-ca-file` as Go's
//! `tls.RequireAndVerifyClientCert` does, X.509 v1 certificates included (`require-verify`;
//! webpki accepts only v3, see [`VerifyClientCert`]).
//!
//! All check the handshake signatures, so the peer proves it holds the key of the certificate
//! it sent. A crate of its own so that nsqd (a daemon) and nsq-client (a library
//! for applications) share this code without either depending on the other, and without
//! pulling the HTTP stack of `nsq-http` into the client.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::{FromDer, X509Version};

mod v1;

/// Where Go looks for the system CA bundle on Linux (crypto/x509, root_linux.go), in order.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The PEM text of the first system CA bundle that exists (empty if none does): the roots Go
/// verifies servers with when no CA is configured.
pub fn system_roots_pem() -> Vec<u8> {
    SYSTEM_BUNDLES
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .unwrap_or_default()
}

/// A client's verifier that accepts any server certificate (Go's `InsecureSkipVerify`).
#[derive(Debug)]
pub struct SkipServerVerify {
    algorithms: WebPkiSupportedAlgorithms,
}

impl SkipServerVerify {
    /// Checks handshake signatures with `provider`'s algorithms.
    pub fn new(provider: &CryptoProvider) -> Arc<SkipServerVerify> {
        Arc::new(SkipServerVerify {
            algorithms: provider.signature_verification_algorithms,
        })
    }
}

/// A server's verifier that requires a client certificate and accepts any
/// (Go's `tls.RequireAnyClientCert`).
#[derive(Debug)]
pub struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
    /// Subjects sent as acceptable CAs, as Go does with its `ClientCAs` (may be empty).
    hints: Vec<DistinguishedName>,
}

impl AnyClientCert {
    /// Checks handshake signatures with `provider`'s algorithms; `hints` are the subjects of
    /// the configured root CA file, if any.
    pub fn new(provider: &CryptoProvider, hints: Vec<DistinguishedName>) -> Arc<AnyClientCert> {
        Arc::new(AnyClientCert {
            algorithms: provider.signature_verification_algorithms,
            hints,
        })
    }
}

/// The handshake-signature half of every verifier: the provider's algorithms over the public
/// key of the certificate, which may be X.509 v1 (see [`v1::verify_tls12_signature`]).
macro_rules! check_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            v1::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            v1::verify_tls13_signature(message, cert, dss, &self.algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algorithms.supported_schemes()
        }
    };
}

impl ServerCertVerifier for SkipServerVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    check_signatures!();
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    check_signatures!();
}

/// A server's verifier that requires a client certificate chaining to the configured roots
/// (Go's `tls.RequireAndVerifyClientCert` with `ClientCAs` from `--tls-root-ca-file`).
///
/// X.509 v3 certificates go to rustls' webpki verifier. webpki refuses any other version
/// (`UnsupportedCertVersion`), while Go's `crypto/x509` accepts v1 certificates, which many
/// internal CAs still issue; a v1 end-entity certificate is checked here instead: its validity
/// period, and its signature by one of the roots whose subject is its issuer, with the
/// provider's signature algorithms (so, as in Go, no SHA-1). A v1 certificate has no
/// extensions, hence no key usage to check. Not supported: a v1 certificate issued by an
/// intermediate the client sends (it must be signed by a root directly).
#[derive(Debug)]
pub struct VerifyClientCert {
    webpki: Arc<dyn ClientCertVerifier>,
    /// The roots, parsed on use (v1 certificates only).
    roots: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl VerifyClientCert {
    /// Verifies against `roots` (the DER certificates of `--tls-root-ca-file`) with
    /// `provider`'s algorithms.
    pub fn new(
        provider: &Arc<CryptoProvider>,
        roots: Vec<CertificateDer<'static>>,
    ) -> Result<Arc<VerifyClientCert>, rustls::server::VerifierBuilderError> {
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(roots.iter().cloned());
        let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider.clone())
            .build()?;
        Ok(Arc::new(VerifyClientCert {
            webpki,
            roots,
            algorithms: provider.signature_verification_algorithms,
        }))
    }
}

impl ClientCertVerifier for VerifyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match X509Certificate::from_der(end_entity) {
            Ok((_, cert)) if cert.version() == X509Version::V1 => {
                v1::verify_chain(&cert, end_entity, &self.roots, now, &self.algorithms)?;
                Ok(ClientCertVerified::assertion())
            }
            _ => self
                .webpki
                .verify_client_cert(end_entity, intermediates, now),
        }
    }

    check_signatures!();
}

/// The subject public key of `cert`, whatever its version.
fn spki_of<'a>(cert: &'a CertificateDer<'_>) -> Result<SubjectPublicKeyInfoDer<'a>, rustls::Error> {
    let (_, c) = X509Certificate::from_der(cert)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    Ok(SubjectPublicKeyInfoDer::from(
        c.tbs_certificate.subject_pki.raw,
    ))
}
