//! Test certificates, made with rcgen at test time and written to a temporary directory: a
//! CA, a server certificate for `localhost` and `127.0.0.1` signed by it, a client certificate
//! (CN `client-alice`) signed by it, and a self-signed "stranger" certificate no CA vouches
//! for. Every file is PEM; the paths go straight into `--tls-cert`, `--tls-root-ca-file`,
//! `--http-client-tls-*` and friends. [`Pki::v1_client`] makes X.509 v1 client certificates
//! (rcgen writes only v3), as internal CAs still issue them.

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
    /// The CA's key (PKCS#8 DER), to sign [`Pki::v1_client`] certificates.
    ca_key_der: Vec<u8>,
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
            ca_key_der: ca_key.serialize_der(),
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

    /// An X.509 v1 client certificate (no version field, no extensions) with common name
    /// `cn` and the CA as issuer, valid from 2020 until `not_after` (UTCTime,
    /// `YYMMDDHHMMSSZ`), written as `<name>.pem`/`<name>.key`. Signed by the CA's key, or with
    /// `forged` by a key of its own (the issuer name is still the CA's).
    pub fn v1_client(&self, name: &str, cn: &str, not_after: &str, forged: bool) -> CertFiles {
        let key = KeyPair::generate().expect("v1 client key");
        let signer = if forged {
            KeyPair::generate().expect("forger key").serialize_der()
        } else {
            self.ca_key_der.clone()
        };
        let issuer = subject_of(&self.ca.der);
        let der = v1_cert(cn, issuer, not_after, &key.public_key_der(), &signer);
        let cert_pem = pem("CERTIFICATE", &der);
        let cert = self.write(&format!("{name}.pem"), &cert_pem);
        let key_pem = key.serialize_pem();
        CertFiles {
            cert,
            key: self.write(&format!("{name}.key"), &key_pem),
            cert_pem,
            key_pem,
            der,
        }
    }
}

/// ecdsa-with-SHA256, the AlgorithmIdentifier of every test signature (RFC 5758).
const ECDSA_SHA256: &[u8] = &[
    0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
];

/// A DER element: `tag`, length, `contents`.
fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = contents.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len = n.to_be_bytes();
        let skip = len.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (len.len() - skip) as u8);
        out.extend_from_slice(&len[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// One DER element off the front of `b`: (the whole element, what follows).
fn der_split(b: &[u8]) -> (&[u8], &[u8]) {
    let first = b[1] as usize;
    let (header, len) = if first < 0x80 {
        (2, first)
    } else {
        let n = first & 0x7f;
        (
            2 + n,
            b[2..2 + n].iter().fold(0, |a, &x| (a << 8) | x as usize),
        )
    };
    b.split_at(header + len)
}

/// The subject Name (whole DER) of certificate `cert`.
fn subject_of(cert: &[u8]) -> &[u8] {
    let body = |e: &[u8]| -> usize {
        if e[1] < 0x80 {
            2
        } else {
            2 + (e[1] & 0x7f) as usize
        }
    };
    let (c, _) = der_split(cert);
    let c = &c[body(c)..];
    let (tbs, _) = der_split(c);
    let mut rest = &tbs[body(tbs)..];
    if rest[0] == 0xa0 {
        rest = der_split(rest).1; // version
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        rest = der_split(rest).1;
    }
    der_split(rest).0
}

/// An X.509 v1 certificate (RFC 5280, 4.1, without the `[0] version` field) for `spki`,
/// signed with the P-256 PKCS#8 key `signer_pkcs8`.
fn v1_cert(cn: &str, issuer: &[u8], not_after: &str, spki: &[u8], signer_pkcs8: &[u8]) -> Vec<u8> {
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
    let cn_attr = [der(0x06, &[0x55, 0x04, 0x03]), der(0x0c, cn.as_bytes())].concat();
    let subject = der(0x30, &der(0x31, &der(0x30, &cn_attr)));
    let validity = der(
        0x30,
        &[der(0x17, b"200101000000Z"), der(0x17, not_after.as_bytes())].concat(),
    );
    let serial = der(0x02, &[0x01, 0x23, 0x45, 0x67]);
    let tbs = der(
        0x30,
        &[&serial[..], ECDSA_SHA256, issuer, &validity, &subject, spki].concat(),
    );
    let rng = SystemRandom::new();
    let signer = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, signer_pkcs8, &rng)
        .expect("P-256 signing key");
    let sig = signer.sign(&rng, &tbs).expect("sign");
    let bits = [&[0u8][..], sig.as_ref()].concat();
    der(0x30, &[&tbs[..], ECDSA_SHA256, &der(0x03, &bits)].concat())
}

/// PEM armour: base64 in 64-character lines.
fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |a, (i, &b)| a | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("ascii"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}
