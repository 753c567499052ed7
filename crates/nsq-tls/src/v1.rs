//! What webpki will not do for an X.509 v1 certificate (it parses v3 only): the handshake
//! signature with the certificate's public key, and the certificate's own signature by a root
//! (Go's `crypto/x509` handles every version alike: crypto/x509/verify.go, `Verify`).

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct};
use webpki::RawPublicKeyEntity;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::{FromDer, X509Version};

use crate::spki_of;

fn bad_signature() -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::BadSignature)
}

fn is_v1(cert: &CertificateDer<'_>) -> bool {
    matches!(X509Certificate::from_der(cert), Ok((_, c)) if c.version() == X509Version::V1)
}

/// rustls' TLS 1.2 handshake-signature check, or the same with the public key of a v1
/// certificate: every algorithm the scheme maps to is tried (TLS 1.2 does not name the curve).
pub(crate) fn verify_tls12_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms);
    }
    let spki = spki_of(cert)?;
    let key = RawPublicKeyEntity::try_from(&spki).map_err(|_| bad_signature())?;
    let candidates = algorithms
        .mapping
        .iter()
        .filter(|(scheme, _)| *scheme == dss.scheme)
        .flat_map(|(_, algs)| algs.iter());
    for alg in candidates {
        if key.verify_signature(*alg, message, dss.signature()).is_ok() {
            return Ok(HandshakeSignatureValid::assertion());
        }
    }
    Err(bad_signature())
}

/// rustls' TLS 1.3 handshake-signature check, or the same with the public key of a v1
/// certificate.
pub(crate) fn verify_tls13_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms);
    }
    let spki = spki_of(cert)?;
    rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, algorithms)
}

/// Checks a v1 end-entity certificate (`cert`, parsed from `der`): within its validity period
/// at `now`, and signed by one of `roots` whose subject is its issuer.
pub(crate) fn verify_chain(
    cert: &X509Certificate<'_>,
    der: &[u8],
    roots: &[CertificateDer<'static>],
    now: UnixTime,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<(), rustls::Error> {
    let now = now.as_secs() as i64;
    let validity = cert.validity();
    if now < validity.not_before.timestamp() {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet,
        ));
    }
    if now > validity.not_after.timestamp() {
        return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
    }
    let signed = SignedParts::of(der).ok_or(rustls::Error::InvalidCertificate(
        CertificateError::BadEncoding,
    ))?;
    let mut issuer_found = false;
    for root in roots {
        let Ok((_, ca)) = X509Certificate::from_der(root) else {
            continue;
        };
        if ca.subject().as_raw() != cert.issuer().as_raw() {
            continue;
        }
        issuer_found = true;
        let spki = SubjectPublicKeyInfoDer::from(ca.tbs_certificate.subject_pki.raw);
        if signed.verified_by(&spki, algorithms) {
            return Ok(());
        }
    }
    Err(rustls::Error::InvalidCertificate(if issuer_found {
        CertificateError::BadSignature
    } else {
        CertificateError::UnknownIssuer
    }))
}

/// A certificate's signed bytes and signature (RFC 5280, 4.1: `Certificate ::= SEQUENCE {
/// tbsCertificate, signatureAlgorithm, signatureValue }`).
struct SignedParts<'a> {
    /// The whole DER `tbsCertificate`, the signed message.
    tbs: &'a [u8],
    /// The contents of the `signatureAlgorithm` SEQUENCE, as webpki's algorithm ids are.
    algorithm: &'a [u8],
    signature: &'a [u8],
}

impl<'a> SignedParts<'a> {
    fn of(der: &'a [u8]) -> Option<SignedParts<'a>> {
        let (0x30, body, _) = der_next(der)? else {
            return None;
        };
        let (0x30, _, rest) = der_next(body)? else {
            return None;
        };
        let tbs = &body[..body.len() - rest.len()];
        let (0x30, algorithm, rest) = der_next(rest)? else {
            return None;
        };
        let (0x03, bits, _) = der_next(rest)? else {
            return None;
        };
        // A BIT STRING's first byte counts the unused bits of the last one: none here.
        let (0, signature) = bits.split_first()? else {
            return None;
        };
        Some(SignedParts {
            tbs,
            algorithm,
            signature,
        })
    }

    /// Whether the public key `spki` signed this, with one of the algorithms that have this
    /// signature algorithm id (several do: the key's algorithm decides).
    fn verified_by(
        &self,
        spki: &SubjectPublicKeyInfoDer<'_>,
        algorithms: &WebPkiSupportedAlgorithms,
    ) -> bool {
        let Ok(key) = RawPublicKeyEntity::try_from(spki) else {
            return false;
        };
        algorithms
            .all
            .iter()
            .filter(|a| a.signature_alg_id().as_ref() == self.algorithm)
            .any(|a| key.verify_signature(*a, self.tbs, self.signature).is_ok())
    }
}

/// One DER element off the front of `b`: (tag, contents, what follows).
fn der_next(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let (len, rest) = b.split_at_checked(n)?;
        b = rest;
        len.iter().fold(0usize, |a, &x| (a << 8) | x as usize)
    };
    let (contents, rest) = b.split_at_checked(len)?;
    Some((tag, contents, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_elements() {
        assert_eq!(
            der_next(&[0x30, 0x02, 0x05, 0x00, 0xff]),
            Some((0x30, &[0x05, 0x00][..], &[0xff][..]))
        );
        let long = [&[0x04, 0x81, 0x80][..], &[7u8; 0x80]].concat();
        assert_eq!(der_next(&long), Some((0x04, &[7u8; 0x80][..], &[][..])));
        assert_eq!(der_next(&[0x30, 0x05, 0x00]), None, "short");
        assert_eq!(der_next(&[0x30, 0x80]), None, "indefinite length");
        assert_eq!(der_next(&[]), None);
    }
}
