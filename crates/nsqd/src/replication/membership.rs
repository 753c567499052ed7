//! Who may link (docs/replication.md, "Membership"): the handshake's proofs and the checks
//! made before a link is accepted or used.
//!
//! With `--replication-secret-file` every member holds the group's shared secret and proves
//! it without sending it: HELLO carries the origin's random nonce, CHALLENGE the replica's
//! nonce and its proof, AUTH the origin's proof. A proof is HMAC-SHA256 keyed with the secret
//! over a label naming the side, the whole HELLO payload (so the origin's node ID, epoch,
//! flags, address and nonce) and the CHALLENGE payload without its proof (the replica's node
//! ID, nonce and address). Both nonces are fresh per
//! session, so a recorded proof is worth nothing in another one, and the two labels keep a
//! proof of one side from being reflected as the other's. Verification is constant-time
//! (`ring::hmac::verify`).
//!
//! Without a secret the proofs are empty and membership is the peer list: a HELLO must come
//! from an IP address one of the `--replication-peer` hosts, or of the members found through
//! nsqlookupd (`discover.rs`: listed once found), resolves to.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use nsq_protocol::replication::{
    self as replication, encode_payload, Challenge, Frame, Hello, LinkErrorCode, NONCE_LEN,
};
use tokio::io::AsyncWriteExt;

use super::link::{read_frame, LinkRead, LinkWrite};
use super::origin::End;
use super::Replication;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The text of the ERROR (code 4) a stranger gets.
pub const NOT_IN_GROUP: &str = "not in group";

/// The text of the ERROR (code 4) a link to oneself gets.
pub const SELF_LINK: &str = "a link to oneself";

/// The group's shared secret, as an HMAC key (never printed), and the group's name derived
/// from it ([`Secret::group`]).
#[derive(Clone)]
pub struct Secret(hmac::Key, String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(hmac::Key::new(hmac::HMAC_SHA256, bytes), group_of(bytes))
    }

    /// The group's name in nsqlookupd (docs/replication.md, "Membership"): 16 hex digits
    /// that members of one group share and other groups do not, from which the secret cannot
    /// be read back cheaply (nsqlookupd's `/nodes` shows it to anyone).
    pub fn group(&self) -> &str {
        &self.1
    }

    /// Reads `--replication-secret-file`: its content without trailing whitespace, which must
    /// not be empty.
    pub fn read(path: &Path) -> Result<Secret, String> {
        let data = std::fs::read(path).map_err(|e| {
            format!(
                "--replication-secret-file {}: cannot read it - {e}",
                path.display()
            )
        })?;
        let end = data
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        if end == 0 {
            return Err(format!(
                "--replication-secret-file {}: the file is empty",
                path.display()
            ));
        }
        Ok(Secret::new(&data[..end]))
    }
}

/// The salt and work of [`group_of`]: a slow derivation, so that guessing a weak secret
/// from the group name nsqlookupd shows costs what guessing a password hash does.
const GROUP_SALT: &[u8] = b"nsq-replication-group";
const GROUP_ROUNDS: u32 = 100_000;

/// The first 8 bytes of PBKDF2-HMAC-SHA256 of the secret, in hex.
fn group_of(secret: &[u8]) -> String {
    let mut out = [0u8; 8];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(GROUP_ROUNDS).expect("not zero"),
        GROUP_SALT,
        secret,
        &mut out,
    );
    out.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which side a proof is made by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The replica (CHALLENGE).
    Replica,
    /// The origin (AUTH).
    Origin,
}

/// What a proof covers (see the module comment); `challenge`'s own proof is left out.
/// `binding` is the TLS session's exported keying material (empty on plain TCP).
fn transcript(side: Side, hello: &Hello, challenge: &Challenge, binding: &[u8]) -> Vec<u8> {
    // Frames this node decoded or built always encode (their names were ≤ 255 bytes).
    let mut h = Vec::with_capacity(128);
    let _ = encode_payload(&Frame::Hello(hello.clone()), &mut h);
    let mut c = Vec::with_capacity(64);
    let unproven = Challenge {
        proof: Bytes::new(),
        ..challenge.clone()
    };
    let _ = encode_payload(&Frame::Challenge(unproven), &mut c);
    let mut t = Vec::with_capacity(h.len() + c.len() + 48);
    t.put_slice(match side {
        Side::Replica => b"nsq replication link v2: replica\0",
        Side::Origin => b"nsq replication link v2: origin\0\0",
    });
    t.put_u32(h.len() as u32);
    t.put_slice(&h);
    t.put_u32(c.len() as u32);
    t.put_slice(&c);
    t.put_u32(binding.len() as u32);
    t.put_slice(binding);
    t
}

/// The proof `side` sends for this session: empty without a secret.
pub fn proof(
    secret: Option<&Secret>,
    side: Side,
    hello: &Hello,
    challenge: &Challenge,
    binding: &[u8],
) -> Bytes {
    match secret {
        None => Bytes::new(),
        Some(Secret(key, _)) => {
            let tag = hmac::sign(key, &transcript(side, hello, challenge, binding));
            Bytes::copy_from_slice(tag.as_ref())
        }
    }
}

/// Whether `got` is `side`'s proof for this session. Without a secret only an empty proof
/// is accepted (a member with a secret and one without refuse each other).
pub fn verify(
    secret: Option<&Secret>,
    side: Side,
    hello: &Hello,
    challenge: &Challenge,
    binding: &[u8],
    got: &[u8],
) -> bool {
    match secret {
        None => got.is_empty(),
        Some(Secret(key, _)) => {
            hmac::verify(key, &transcript(side, hello, challenge, binding), got).is_ok()
        }
    }
}

/// A fresh random nonce.
pub fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    if SystemRandom::new().fill(&mut n).is_err() {
        // The OS generator failed (it does not on Linux once booted): a thread-local CSPRNG.
        n = rand::random();
    }
    n
}

/// How long resolving the peer list may take when a HELLO arrives.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether `ip` is an address one of `peers` (`host:port`) resolves to now.
pub(crate) async fn listed_peer(peers: &[String], ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    for p in peers {
        let Ok(Ok(addrs)) = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(p)).await
        else {
            continue;
        };
        if addrs.into_iter().any(|a| a.ip().to_canonical() == ip) {
            return true;
        }
    }
    false
}

/// The handshake after HELLO (docs/replication.md, Membership) of the session with peer `i`:
/// reads the replica's CHALLENGE, checks its proof and answers with AUTH. The replica's
/// CHALLENGE, or how the session ends.
pub(super) async fn handshake(
    repl: &Replication,
    i: usize,
    rd: &mut LinkRead,
    wr: &mut LinkWrite,
    buf: &mut BytesMut,
    hello: &Hello,
    binding: &[u8],
) -> Result<Challenge, End> {
    let c = match read_frame(rd, buf, repl.settings.max_frame).await {
        Ok(Frame::Challenge(c)) => c,
        Ok(Frame::Error {
            code: LinkErrorCode::NotInGroup,
            text,
        }) if text == SELF_LINK => {
            // A node refuses a link to itself with this code and text.
            return Err(End::SelfLink);
        }
        Ok(Frame::Error { code, text }) => {
            return Err(End::NotEstablished(format!("refused ({code:?}): {text}")))
        }
        Ok(other) => return Err(End::NotEstablished(format!("unexpected {other:?}"))),
        // E_BAD_PROTOCOL from a node with replication off is not a link frame.
        Err(e) => return Err(End::NotEstablished(e)),
    };
    if c.node_id == repl.identity.node_id {
        return Err(End::SelfLink);
    }
    let secret = repl.secret();
    let proven = c.node_id != 0 && verify(secret, Side::Replica, hello, &c, binding, &c.proof);
    if !proven {
        let mut b = BytesMut::new();
        replication::encode(
            &Frame::Error {
                code: LinkErrorCode::NotInGroup,
                text: NOT_IN_GROUP.into(),
            },
            &mut b,
        );
        let _ = wr.write_all(&b).await;
        let _ = wr.shutdown().await;
        return Err(End::NotEstablished(format!(
            "{:016x} is not in the group: {}",
            c.node_id,
            if c.node_id == 0 {
                "node ID 0"
            } else if secret.is_some() {
                "wrong proof (another secret, or none)"
            } else {
                "it sent a proof: it has a secret, this node has none"
            }
        )));
    }
    // A node another peer entry links to now (two spellings of one address): no AUTH, so
    // that its replica never supersedes that entry's session with this one (discover.rs).
    if let Some(other) = repl.claim(i, c.node_id) {
        return Err(End::Duplicate(other));
    }
    let auth = Frame::Auth {
        proof: proof(secret, Side::Origin, hello, &c, binding),
    };
    let mut b = BytesMut::new();
    replication::encode(&auth, &mut b);
    if let Err(e) = wr.write_all(&b).await {
        return Err(End::NotEstablished(e.to_string()));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        let mut h = Hello::other_version(nsq_protocol::replication::LINK_VERSION);
        h.node_id = 7;
        h.epoch = 3;
        h.broadcast_address = "h".into();
        h.nonce = [1; NONCE_LEN];
        h
    }

    fn challenge() -> Challenge {
        Challenge {
            node_id: 9,
            nonce: [2; NONCE_LEN],
            broadcast_address: "r".into(),
            tcp_port: 4150,
            proof: Bytes::new(),
        }
    }

    #[test]
    fn proofs_need_the_same_secret_side_and_session() {
        let (s, other) = (Secret::new(b"s3cret"), Secret::new(b"other"));
        let (h, c) = (hello(), challenge());
        let p = proof(Some(&s), Side::Replica, &h, &c, b"");
        assert_eq!(p.len(), 32);
        assert!(verify(Some(&s), Side::Replica, &h, &c, b"", &p));
        // The CHALLENGE's own proof field is not covered (it carries the proof).
        let carried = Challenge {
            proof: p.clone(),
            ..c.clone()
        };
        assert!(verify(Some(&s), Side::Replica, &h, &carried, b"", &p));
        // Another secret, the other side's label, another nonce, replica, address or HELLO:
        // refused.
        assert!(!verify(Some(&other), Side::Replica, &h, &c, b"", &p));
        assert!(!verify(Some(&s), Side::Origin, &h, &c, b"", &p));
        for changed in [
            Challenge {
                nonce: [3; NONCE_LEN],
                ..c.clone()
            },
            Challenge {
                node_id: 8,
                ..c.clone()
            },
            Challenge {
                tcp_port: 4151,
                ..c.clone()
            },
        ] {
            assert!(!verify(Some(&s), Side::Replica, &h, &changed, b"", &p));
        }
        let mut h2 = h.clone();
        h2.epoch = 4;
        assert!(!verify(Some(&s), Side::Replica, &h2, &c, b"", &p));
        // Another TLS session (its exported keying material).
        let bound = proof(Some(&s), Side::Replica, &h, &c, b"session one");
        assert!(verify(
            Some(&s),
            Side::Replica,
            &h,
            &c,
            b"session one",
            &bound
        ));
        assert!(!verify(
            Some(&s),
            Side::Replica,
            &h,
            &c,
            b"session two",
            &bound
        ));
        assert!(!verify(Some(&s), Side::Replica, &h, &c, b"", &bound));
        // No proof, or a proof where the group has no secret.
        assert!(!verify(Some(&s), Side::Replica, &h, &c, b"", b""));
        assert!(!verify(None, Side::Replica, &h, &c, b"", &p));
        assert!(verify(None, Side::Replica, &h, &c, b"", b""));
        assert!(proof(None, Side::Origin, &h, &c, b"").is_empty());
    }

    #[test]
    fn the_secret_file_is_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, b"s3cret \n\n").unwrap();
        let c = challenge();
        let from_file = proof(
            Some(&Secret::read(&a).unwrap()),
            Side::Origin,
            &hello(),
            &c,
            b"",
        );
        let direct = proof(
            Some(&Secret::new(b"s3cret")),
            Side::Origin,
            &hello(),
            &c,
            b"",
        );
        assert_eq!(from_file, direct);
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b" \n\t").unwrap();
        let e = Secret::read(&empty).unwrap_err();
        assert!(e.ends_with("the file is empty"), "{e}");
        let e = Secret::read(&dir.path().join("missing")).unwrap_err();
        assert!(e.contains("cannot read it"), "{e}");
    }

    #[test]
    fn the_group_is_16_hex_digits_of_the_trimmed_secret() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, b"s3cret \n").unwrap();
        let g = Secret::new(b"s3cret").group().to_string();
        assert_eq!(g.len(), 16);
        assert!(g
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(Secret::read(&a).unwrap().group(), g);
        assert_ne!(Secret::new(b"other").group(), g);
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce(), nonce());
    }
}
