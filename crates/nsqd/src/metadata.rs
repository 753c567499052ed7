//! `nsqd.dat`: the topic/channel set and pause flags, in the reference's JSON shape, written
//! atomically (temp file, fsync, rename) and loaded at startup.

use std::io::Write;
use std::path::{Path, PathBuf};

use nsq_core::queue_settings::{QueueSettings, Scope};
use nsq_core::Engine;
use nsq_protocol::names::{is_ephemeral, is_valid_channel_name, is_valid_topic_name};
use serde::{Deserialize, Serialize};

use crate::queue_settings::SettingsMeta;

/// The file's top-level object; key order is the reference's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// `null` when there are no topics.
    pub topics: Option<Vec<TopicMeta>>,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
    /// `null` (not `[]`) when the topic has no channels.
    #[serde(default)]
    pub channels: Option<Vec<ChannelMeta>>,
    /// Ours: the topic's queue settings (crate::queue_settings); absent when none is set, so
    /// the file is NSQ's byte for byte, and ignored by NSQ v1.3 when present.
    #[serde(default, skip_serializing_if = "SettingsMeta::is_empty")]
    pub settings: SettingsMeta,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelMeta {
    pub name: String,
    #[serde(default)]
    pub paused: bool,
    /// Ours, as [`TopicMeta::settings`].
    #[serde(default, skip_serializing_if = "SettingsMeta::is_empty")]
    pub settings: SettingsMeta,
}

/// `<data-path>/nsqd.dat`.
pub fn path(data_path: &Path) -> PathBuf {
    data_path.join("nsqd.dat")
}

/// Why the metadata file could not be loaded (nsqd/nsqd.go, LoadMetadata).
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("failed to read metadata from {} - {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse metadata in {} - {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads the metadata file; `Ok(None)` when it does not exist.
pub fn load(data_path: &Path) -> Result<Option<Metadata>, MetadataError> {
    let p = path(data_path);
    let data = match std::fs::read(&p) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MetadataError::Read { path: p, source }),
    };
    serde_json::from_slice(&data)
        .map(Some)
        .map_err(|source| MetadataError::Parse { path: p, source })
}

/// Re-creates every listed topic and channel with its pause flag (invalid names skipped).
pub fn apply(engine: &Engine, md: &Metadata) {
    for t in md.topics.iter().flatten() {
        if !is_valid_topic_name(&t.name) {
            tracing::warn!("skipping creation of invalid topic {}", t.name);
            continue;
        }
        let topic = match engine.get_or_create_topic(&t.name) {
            Ok((topic, _)) => topic,
            Err(e) => {
                tracing::error!("failed to create topic {} - {e}", t.name);
                continue;
            }
        };
        if t.paused {
            topic.pause();
        }
        topic.set_settings(settings_of(&t.settings, Scope::Topic, &t.name));
        for c in t.channels.iter().flatten() {
            if !is_valid_channel_name(&c.name) {
                tracing::warn!("skipping creation of invalid channel {}", c.name);
                continue;
            }
            match topic.get_or_create_channel(&c.name) {
                Ok((ch, _)) => {
                    if c.paused {
                        ch.pause();
                    }
                    let at = format!("{}:{}", t.name, c.name);
                    ch.set_settings(settings_of(&c.settings, Scope::Channel, &at));
                }
                Err(e) => tracing::error!("failed to create channel {}:{} - {e}", t.name, c.name),
            }
        }
        topic.refresh_settings();
    }
}

/// The settings a file holds for `what`; values that cannot be taken are skipped, with a
/// warning naming them.
fn settings_of(meta: &SettingsMeta, scope: Scope, what: &str) -> QueueSettings {
    let (s, bad) = meta.to_settings(scope);
    for key in bad {
        tracing::warn!("skipping setting {key} of {what} in metadata: not a valid value");
    }
    s
}

/// The current metadata of an engine (ephemeral topics and channels excluded).
pub fn snapshot(engine: &Engine) -> Metadata {
    let topics: Vec<TopicMeta> = engine
        .topics()
        .into_iter()
        .filter(|t| !t.is_ephemeral())
        .map(|t| {
            let channels: Vec<ChannelMeta> = t
                .channels()
                .into_iter()
                .filter(|c| !is_ephemeral(c.name()))
                .map(|c| ChannelMeta {
                    name: c.name().to_string(),
                    paused: c.is_paused(),
                    settings: SettingsMeta::from_settings(&c.settings()),
                })
                .collect();
            TopicMeta {
                name: t.name().to_string(),
                paused: t.is_paused(),
                channels: (!channels.is_empty()).then_some(channels),
                settings: SettingsMeta::from_settings(&t.settings()),
            }
        })
        .collect();
    Metadata {
        topics: (!topics.is_empty()).then_some(topics),
        version: nsq_protocol::VERSION.to_string(),
    }
}

/// Writes `md` atomically: `nsqd.dat.<rand>.tmp` (0600), fsync, rename.
pub fn write(data_path: &Path, md: &Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let target = path(data_path);
    let tmp = data_path.join(format!("nsqd.dat.{}.tmp", rand::random::<u32>()));
    let data = serde_json::to_vec(md).expect("metadata serializes");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_shape_round_trips() {
        let s = r#"{"topics":[{"name":"lt2","paused":false,"channels":[{"name":"pre1","paused":false},{"name":"e","paused":false}]},{"name":"t_crlf","paused":false,"channels":null}],"version":"1.3.0"}"#;
        let md: Metadata = serde_json::from_str(s).unwrap();
        assert_eq!(serde_json::to_string(&md).unwrap(), s);
        let empty = r#"{"topics":null,"version":"1.3.0"}"#;
        let md: Metadata = serde_json::from_str(empty).unwrap();
        assert_eq!(serde_json::to_string(&md).unwrap(), empty);
    }

    #[test]
    fn unknown_keys_ignored() {
        let md: Metadata =
            serde_json::from_str(r#"{"topics":[{"name":"a","x":1}],"version":"0.3","y":2}"#)
                .unwrap();
        assert_eq!(md.topics.unwrap()[0].name, "a");
    }
}
