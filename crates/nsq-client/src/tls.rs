//! The rustls client configuration for `tls_v1` (go-nsq config.go, tlsConfig: a custom root CA,
//! a client certificate + key, and skip-verify). Without a CA file the system bundle is loaded
//! from the same well-known paths Go's crypto/x509 reads on Linux (root_linux.go).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;

use crate::config::TlsOptions;
use crate::error::Error;

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Tls(e.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds (or returns the given) client configuration.
pub(crate) fn client_config(opts: &TlsOptions) -> Result<Arc<ClientConfig>, Error> {
    if let Some(c) = &opts.client_config {
        return Ok(c.clone());
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?;
    let builder = if opts.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(nsq_tls::SkipServerVerify::new(&provider()))
    } else {
        let mut roots = RootCertStore::empty();
        let pem = match &opts.root_ca_file {
            Some(path) => std::fs::read(path).map_err(|e| {
                Error::Tls(format!(
                    "ERROR: failed to read custom Certificate Authority file {e}"
                ))
            })?,
            None => nsq_tls::system_roots_pem(),
        };
        let (added, _) = roots
            .add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).map_while(Result::ok));
        if added == 0 && opts.root_ca_file.is_some() {
            return Err(Error::Tls(
                "ERROR: failed to append certificates from Certificate Authority file".into(),
            ));
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&opts.cert_file, &opts.key_file) {
        (Some(cert), Some(key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(tls_err)?
                .collect::<Result<_, _>>()
                .map_err(tls_err)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(tls_err)?;
            builder.with_client_auth_cert(certs, key).map_err(tls_err)?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The name the server certificate is checked against: the host part of the address.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_string()).map_err(tls_err)
}
