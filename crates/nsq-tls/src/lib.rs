//! The two rustls certificate verifiers Go's `crypto/tls` settings in NSQ need and rustls does
//! not ship: a client that accepts any server certificate (go-nsq config.go,
//! `tls_insecure_skip_verify` → Go's `InsecureSkipVerify`), and a server that requires a client
//! certificate without checking it (nsqd/nsqd.go, `buildTLSConfig`,
//! `--tls-client-auth-policy=require` → Go's `tls.RequireAnyClientCert`).
//!
//! Both still check the handshake signatures, so the peer proves it holds the key of the
//! certificate it sent. A crate of its own so that nsqd (a daemon) and nsq-client (a library
//! for applications) share this code without either depending on the other, and without
//! pulling the HTTP stack of `nsq-http` into the client.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

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

/// The handshake-signature half of both verifiers: the provider's real checks.
macro_rules! check_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
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
