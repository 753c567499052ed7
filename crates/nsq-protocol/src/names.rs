//! Topic and channel name validation: 1..=64 bytes matching `^[.a-zA-Z0-9_-]+(#ephemeral)?$`.
//!
//! The same rule holds for topics and channels, in nsqd and nsqlookupd. A name ending in
//! `#ephemeral` is ephemeral (never persisted, deleted when unused).

/// Suffix marking an ephemeral topic or channel.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";

/// Maximum name length in bytes, suffix included.
pub const MAX_NAME_LEN: usize = 64;

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn is_valid_name(name: &[u8]) -> bool {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return false;
    }
    let base = name
        .strip_suffix(EPHEMERAL_SUFFIX.as_bytes())
        .unwrap_or(name);
    !base.is_empty() && base.iter().all(|&b| is_name_byte(b))
}

/// Whether `name` is a valid topic name.
pub fn is_valid_topic_name(name: impl AsRef<[u8]>) -> bool {
    is_valid_name(name.as_ref())
}

/// Whether `name` is a valid channel name (same rule as topics).
pub fn is_valid_channel_name(name: impl AsRef<[u8]>) -> bool {
    is_valid_name(name.as_ref())
}

/// Whether `name` denotes an ephemeral topic or channel (ends with `#ephemeral`).
pub fn is_ephemeral(name: impl AsRef<[u8]>) -> bool {
    name.as_ref().ends_with(EPHEMERAL_SUFFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for n in [
            "t",
            "a.b-c_D9",
            "t#ephemeral",
            ".",
            "-",
            "_",
            &"a".repeat(64),
        ] {
            assert!(is_valid_topic_name(n), "{n}");
            assert!(is_valid_channel_name(n.as_bytes()), "{n}");
        }
        let long_eph = format!("{}#ephemeral", "a".repeat(54));
        assert_eq!(long_eph.len(), 64);
        assert!(is_valid_topic_name(&long_eph));
    }

    #[test]
    fn invalid_names() {
        let too_long = "a".repeat(65);
        let too_long_eph = format!("{}#ephemeral", "a".repeat(55));
        for n in [
            "",
            "#ephemeral",
            "t#ephemeral#ephemeral",
            "a#b",
            "a b",
            "bad!name",
            "тест",
            "t#Ephemeral",
            "t#ephemera",
            too_long.as_str(),
            too_long_eph.as_str(),
        ] {
            assert!(!is_valid_topic_name(n), "{n}");
            assert!(!is_valid_channel_name(n), "{n}");
        }
        assert!(!is_valid_topic_name(b"a\xff"));
    }

    #[test]
    fn ephemeral() {
        assert!(is_ephemeral("t#ephemeral"));
        assert!(!is_ephemeral("t"));
        assert!(!is_ephemeral("t#ephemeralx"));
    }
}
