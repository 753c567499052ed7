//! Test certificates, made with rcgen at test time and written to a temporary directory: a
//! CA, a server certificate for `localhost` and `127.0.0.1` signed by it, a client certificate
//! (CN `client-alice`) signed by it, and a self-signed "stranger" certificate no CA vouches
//! for. Every file is PEM; the paths go straight into `--tls-cert`, `--tls-root-ca-file`,
//! `--http-client-tls-*` and friends.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// A certificate with its key, as PEM files and PEM text.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
    /// The DER of the certificate.
    pub der: Vec<u8>,
}

impl CertFiles {
    /// `cert` as a `&str` path (for flags).
    pub fn cert_path(&self) -> &str {
        self.cert.to_str().expect("utf-8 temp path")
    }

    /// `key` as a `&str` path (for flags).
    pub fn key_path(&self) -> &str {
        self.key.to_str().expect("utf-8 temp path")
    }
}

/// A small PKI in a temporary directory (removed on drop).
pub struct Pki {
    dir: TempDir,
    /// The CA certificate (`ca.pem`) and key.
    pub ca: CertFiles,
    /// `server.pem`/`server.key`: SANs `localhost` and `127.0.0.1`, serverAuth, signed by
    /// the CA.
    pub server: CertFiles,
    /// `client.pem`/`client.key`: CN `client-alice`, clientAuth, signed by the CA.
    pub client: CertFiles,
    /// `stranger.pem`/`stranger.key`: self-signed, CN `stranger`.
    pub stranger: CertFiles,
}

impl Pki {
    /// Generates everything (ECDSA P-256 keys).
    pub fn new() -> Pki {
        Pki::build(None)
    }

    /// As [`Pki::new`], but the server certificate is for this PEM key (an RSA key, for
    /// tests of `TLS_ECDHE_RSA_*` cipher suites).
    pub fn with_server_key(pem: &str) -> Pki {
        Pki::build(Some(pem))
    }

    fn build(server_key_pem: Option<&str>) -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write PEM");
            p
        };

        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "nsq test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key).expect("CA cert");

        let files = |name: &str, cert: &rcgen::Certificate, key: &KeyPair| CertFiles {
            cert: write(&format!("{name}.pem"), &cert.pem()),
            key: write(&format!("{name}.key"), &key.serialize_pem()),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        };

        let server_key = match server_key_pem {
            Some(pem) => KeyPair::from_pem(pem).expect("server key PEM"),
            None => KeyPair::generate().expect("server key"),
        };
        let mut sp = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("server params");
        sp.distinguished_name.push(DnType::CommonName, "localhost");
        sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = sp
            .signed_by(&server_key, &ca, &ca_key)
            .expect("server cert");

        let client_key = KeyPair::generate().expect("client key");
        let mut cp = CertificateParams::new(Vec::<String>::new()).expect("client params");
        cp.distinguished_name.push(DnType::OrganizationName, "nsq");
        cp.distinguished_name
            .push(DnType::CommonName, "client-alice");
        cp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = cp
            .signed_by(&client_key, &ca, &ca_key)
            .expect("client cert");

        let stranger_key = KeyPair::generate().expect("stranger key");
        let mut xp = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("stranger params");
        xp.distinguished_name.push(DnType::CommonName, "stranger");
        let stranger = xp.self_signed(&stranger_key).expect("stranger cert");

        Pki {
            ca: files("ca", &ca, &ca_key),
            server: files("server", &server, &server_key),
            client: files("client", &client, &client_key),
            stranger: files("stranger", &stranger, &stranger_key),
            dir,
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `name` in [`Pki::dir`] (bad files for error tests).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    /// `ca.pem` as a `&str` path (for flags).
    pub fn ca_path(&self) -> &str {
        self.ca.cert_path()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}
