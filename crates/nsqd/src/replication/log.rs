//! The origin's log (docs/replication.md, "Acknowledgement" and "Settlement streaming"): the
//! engine's [`Replicator`] gives every publish, settlement and administration a seq and queues
//! its encoded frame in the **outbox**, one buffer shared by every link; each link's writer
//! sends what was queued since it last looked, in one write. Frames are encoded once, under
//! the outbox lock only for their small head (a PUB's messages are encoded before any lock).
//!
//! The outbox keeps frames until every live link has had them acknowledged, and at most
//! [`OUTBOX_BYTES`]; a link that falls behind what it holds is caught up instead.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use nsq_core::{Channel, Message, Replicator};
use nsq_protocol::replication::{
    self, frame_type as ft, Admin, AdminOp, Fanout, Fin, Frame, Req, ReqEntry, Settings,
};
use nsq_protocol::MessageId;
use parking_lot::Mutex;
use tokio::sync::watch;

/// The outbox's bound (docs/replication.md, Flags: fixed constants).
pub const OUTBOX_BYTES: usize = 64 << 20;

/// One queued frame: a head and (PUB only) the pre-encoded messages that follow it.
#[derive(Clone, Debug)]
pub struct OutFrame {
    pub head: Bytes,
    pub tail: Bytes,
}

impl OutFrame {
    pub fn byte_len(&self) -> usize {
        self.head.len() + self.tail.len()
    }
}

struct Outbox {
    frames: VecDeque<OutFrame>,
    /// The seq of `frames[0]` (when there is one: `last_seq + 1` otherwise).
    front_seq: u64,
    last_seq: u64,
    bytes: usize,
}

/// What a link reads from the outbox.
pub enum Take {
    /// Frames from the seq asked for (possibly none: nothing new).
    Frames(Vec<OutFrame>),
    /// The frame asked for is no longer held: the link needs a catch-up.
    Gone,
}

/// The origin's log (see the module comment).
pub struct OriginLog {
    outbox: Mutex<Outbox>,
    /// The last seq queued: link writers wait on it.
    last: watch::Sender<u64>,
}

impl OriginLog {
    /// A log whose next frame is `start_seq + 1`.
    pub fn new(start_seq: u64) -> Arc<Self> {
        Arc::new(OriginLog {
            outbox: Mutex::new(Outbox {
                frames: VecDeque::new(),
                front_seq: start_seq + 1,
                last_seq: start_seq,
                bytes: 0,
            }),
            last: watch::channel(start_seq).0,
        })
    }

    /// The last seq queued.
    pub fn last_seq(&self) -> u64 {
        self.outbox.lock().last_seq
    }

    /// Waits on new frames.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.last.subscribe()
    }

    /// `(front, last)`: the oldest seq held and the last one queued.
    pub fn bounds(&self) -> (u64, u64) {
        let o = self.outbox.lock();
        (o.front_seq, o.last_seq)
    }

    /// Frames from seq `from` on, at most about `max_bytes` (at least one).
    pub fn take(&self, from: u64, max_bytes: usize) -> Take {
        let o = self.outbox.lock();
        if from < o.front_seq {
            return Take::Gone;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        let start = (from - o.front_seq) as usize;
        for f in o.frames.iter().skip(start) {
            if bytes >= max_bytes {
                break;
            }
            bytes += f.byte_len();
            out.push(f.clone());
        }
        Take::Frames(out)
    }

    /// Drops the frames up to `seq` (every live link acknowledged them).
    pub fn trim_to(&self, seq: u64) {
        let mut o = self.outbox.lock();
        while o.front_seq <= seq {
            let Some(f) = o.frames.pop_front() else { break };
            o.bytes -= f.byte_len();
            o.front_seq += 1;
        }
    }

    /// Queues one frame built by `head(seq)`; returns its seq.
    fn push(&self, head: impl FnOnce(u64, &mut BytesMut), tail: Bytes) -> u64 {
        let mut b = BytesMut::with_capacity(64);
        let seq = {
            let mut o = self.outbox.lock();
            let seq = o.last_seq + 1;
            head(seq, &mut b);
            let f = OutFrame {
                head: b.freeze(),
                tail,
            };
            o.bytes += f.byte_len();
            o.frames.push_back(f);
            o.last_seq = seq;
            while o.bytes > OUTBOX_BYTES && o.frames.len() > 1 {
                let f = o.frames.pop_front().expect("more than one");
                o.bytes -= f.byte_len();
                o.front_seq += 1;
            }
            seq
        };
        self.last.send_replace(seq);
        seq
    }

    fn push_frame(&self, frame: impl FnOnce(u64) -> Frame) -> u64 {
        self.push(
            |seq, b| {
                if let Err(e) = replication::try_encode(&frame(seq), b) {
                    // Names are validated by nsqd (at most 64 bytes), so this cannot happen.
                    tracing::error!("REPLICATION: failed to encode a frame - {e}");
                }
            },
            Bytes::new(),
        )
    }
}

fn put_str8(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(255)];
    b.put_u8(s.len() as u8);
    b.put_slice(s);
}

/// The names of the non-ephemeral channels among `chans`.
fn durable_names(chans: &[Arc<Channel>]) -> impl Iterator<Item = &str> + '_ {
    chans.iter().filter(|c| !c.is_ephemeral()).map(|c| c.name())
}

fn ids(msgs: &[Message]) -> Vec<MessageId> {
    msgs.iter().map(|m| m.id).collect()
}

impl Replicator for OriginLog {
    fn encode_messages(&self, msgs: &[Message]) -> Bytes {
        let len: usize = msgs.iter().map(|m| 16 + 8 + 4 + m.body.len()).sum();
        let mut b = BytesMut::with_capacity(4 + len);
        b.put_u32(msgs.len() as u32);
        for m in msgs {
            b.put_slice(&m.id.0);
            b.put_i64(m.timestamp);
            b.put_u32(m.body.len() as u32);
            b.put_slice(&m.body);
        }
        b.freeze()
    }

    fn publish(
        &self,
        topic: &str,
        defer_until: i64,
        channels: Option<&[Arc<Channel>]>,
        messages: Bytes,
    ) -> u64 {
        let names: Vec<&str> = channels.map_or_else(Vec::new, |c| durable_names(c).collect());
        if channels.is_some() && names.is_empty() {
            // Handed only to ephemeral channels: nothing to replicate.
            return 0;
        }
        self.push(
            |seq, b| {
                // PUB: u64 seq, str8 topic, i64 defer_until, u16 + str8 channels, then the
                // messages (`tail`); the size counts the type byte.
                let head_len = 1
                    + 8
                    + 1
                    + topic.len()
                    + 8
                    + 2
                    + names.iter().map(|n| 1 + n.len()).sum::<usize>();
                b.put_u32((head_len + messages.len()) as u32);
                b.put_u8(ft::PUB);
                b.put_u64(seq);
                put_str8(b, topic);
                b.put_i64(defer_until);
                b.put_u16(names.len() as u16);
                for n in &names {
                    put_str8(b, n);
                }
            },
            messages.clone(),
        )
    }

    fn fanout(&self, topic: &str, channels: &[Arc<Channel>], msgs: &[Message]) {
        let channels: Vec<String> = durable_names(channels).map(str::to_string).collect();
        let ids = ids(msgs);
        self.push_frame(|seq| {
            Frame::Fanout(Fanout {
                seq,
                topic: topic.to_string(),
                more: false,
                channels,
                ids,
            })
        });
    }

    fn finish(&self, topic: &str, channel: &str, ids: &[MessageId]) {
        self.push_frame(|seq| {
            Frame::Fin(Fin {
                seq,
                topic: topic.to_string(),
                channel: channel.to_string(),
                ids: ids.to_vec(),
            })
        });
    }

    fn requeue(&self, topic: &str, channel: &str, entry: ReqEntry) {
        self.push_frame(|seq| {
            Frame::Req(Req {
                seq,
                topic: topic.to_string(),
                channel: channel.to_string(),
                entries: vec![entry],
            })
        });
    }

    fn admin(&self, op: AdminOp, topic: &str, channel: &str) {
        self.push_frame(|seq| {
            Frame::Admin(Admin {
                seq,
                op,
                topic: topic.to_string(),
                channel: channel.to_string(),
                settings: Vec::new(),
            })
        });
    }

    fn settings(&self, topic: &str, channel: &str, settings: Settings) {
        self.push_frame(|seq| {
            Frame::Admin(Admin {
                seq,
                op: AdminOp::Settings,
                topic: topic.to_string(),
                channel: channel.to_string(),
                settings,
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_protocol::replication::{Pub, PubMessage};

    fn decode_all(frames: &[OutFrame]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        for f in frames {
            buf.extend_from_slice(&f.head);
            buf.extend_from_slice(&f.tail);
        }
        let mut out = Vec::new();
        while let Some(f) = replication::decode(&mut buf, 1 << 24).unwrap() {
            out.push(f);
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn pub_frames_decode_with_the_codec() {
        let log = OriginLog::new(41);
        let msgs = vec![
            Message {
                id: MessageId(*b"0123456789abcdef"),
                timestamp: 7,
                attempts: 0,
                body: Bytes::from_static(b"hello"),
                defer_ms: 0,
            },
            Message {
                id: MessageId(*b"0123456789abcdeg"),
                timestamp: 7,
                attempts: 0,
                body: Bytes::new(),
                defer_ms: 0,
            },
        ];
        let enc = log.encode_messages(&msgs);
        assert_eq!(log.publish("t", 0, None, enc.clone()), 42);
        log.finish("t", "c", &[msgs[0].id]);
        assert_eq!(log.bounds(), (42, 43));
        let Take::Frames(frames) = log.take(42, usize::MAX) else {
            panic!("held")
        };
        let got = decode_all(&frames);
        assert_eq!(
            got[0],
            Frame::Pub(Pub {
                seq: 42,
                topic: "t".into(),
                defer_until: 0,
                channels: vec![],
                messages: msgs
                    .iter()
                    .map(|m| PubMessage {
                        id: m.id,
                        timestamp: m.timestamp,
                        body: m.body.clone(),
                    })
                    .collect(),
            })
        );
        assert_eq!(
            got[1],
            Frame::Fin(Fin {
                seq: 43,
                topic: "t".into(),
                channel: "c".into(),
                ids: vec![msgs[0].id],
            })
        );
        log.trim_to(42);
        assert!(matches!(log.take(42, 1), Take::Gone));
        assert!(matches!(log.take(43, 1), Take::Frames(f) if f.len() == 1));
        assert!(matches!(log.take(44, 1), Take::Frames(f) if f.is_empty()));
    }
}
