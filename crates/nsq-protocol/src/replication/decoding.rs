//! Decoding: [`decode`] and [`decode_payload`], and the checked field [`Reader`].

use bytes::{Buf, Bytes, BytesMut};

use super::frame_type as ft;
use super::frames::{
    HELLO_PREVIOUS_UNCLEAN, HELLO_RESUME, HELLO_SYNC, ITEM_MESSAGE, ITEM_SETTINGS, ITEM_TOPIC,
    STATUS_COMPLETE,
};
use super::{
    Admin, AdminOp, BacklogState, Challenge, ChannelItem, Fanout, Fin, Frame, FrameError, Hello,
    Item, LinkErrorCode, Manifest, MessageItem, PendingChannel, Pub, PubMessage, Req, ReqEntry,
    Settings, StatusEntry, TopicItem, Welcome, WelcomeAnswer, LINK_VERSION, MAX_PROOF_LEN,
    NONCE_LEN,
};
use crate::message::MessageId;

/// Takes one whole frame off the front of `buf`; `Ok(None)` = need more bytes (nothing is
/// consumed). A frame whose size is above `max_frame` is refused as soon as its size field
/// has arrived. Bodies share `buf`'s allocation.
pub fn decode(buf: &mut BytesMut, max_frame: u32) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes"));
    if size == 0 {
        return Err(FrameError::EmptyFrame);
    }
    if size > max_frame {
        return Err(FrameError::Oversize {
            size: u64::from(size),
            max: u64::from(max_frame),
        });
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    buf.advance(4);
    let mut frame = buf.split_to(size as usize).freeze();
    let ty = frame.get_u8();
    decode_payload(ty, frame).map(Some)
}

/// Decodes the payload of a frame of type `frame_type` (everything after the type byte).
pub fn decode_payload(frame_type: u8, payload: Bytes) -> Result<Frame, FrameError> {
    let mut r = Reader {
        ty: frame_type,
        buf: payload,
    };
    let frame = match frame_type {
        ft::HELLO => {
            let version = r.u16()?;
            if version != LINK_VERSION {
                // Another version's layout: only its version and node ID are read.
                let mut h = Hello::other_version(version);
                if r.buf.len() >= 8 {
                    h.node_id = r.u64()?;
                }
                return Ok(Frame::Hello(h));
            }
            let node_id = r.u64()?;
            let epoch = r.u64()?;
            let flags = r.u8()?;
            if flags & !(HELLO_RESUME | HELLO_SYNC | HELLO_PREVIOUS_UNCLEAN) != 0 {
                return Err(r.bad("HELLO flags", flags.into()));
            }
            Frame::Hello(Hello {
                version,
                node_id,
                epoch,
                resume: flags & HELLO_RESUME != 0,
                sync: flags & HELLO_SYNC != 0,
                previous_unclean: flags & HELLO_PREVIOUS_UNCLEAN != 0,
                resume_seq: r.u64()?,
                previous_epoch: r.u64()?,
                replicas: r.u16()?,
                max_frame: r.u32()?,
                nsqd_node_id: r.u16()?,
                broadcast_address: r.str8()?,
                tcp_port: r.u16()?,
                http_port: r.u16()?,
                nonce: r.nonce()?,
            })
        }
        ft::PUB => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let defer_until = r.i64()?;
            let channels = r.names()?;
            let n = r.count32(16 + 8 + 4)?;
            let mut messages = Vec::with_capacity(n);
            for _ in 0..n {
                messages.push(PubMessage {
                    id: r.id()?,
                    timestamp: r.i64()?,
                    body: r.bytes()?,
                });
            }
            Frame::Pub(Pub {
                seq,
                topic,
                defer_until,
                channels,
                messages,
            })
        }
        ft::STATE => Frame::State(r.item()?),
        ft::FIN => Frame::Fin(Fin {
            seq: r.u64()?,
            topic: r.str8()?,
            channel: r.str8()?,
            ids: r.ids()?,
        }),
        ft::REQ => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let channel = r.str8()?;
            let n = r.count32(16 + 8 + 2)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(ReqEntry {
                    id: r.id()?,
                    due: r.i64()?,
                    attempts: r.u16()?,
                });
            }
            Frame::Req(Req {
                seq,
                topic,
                channel,
                entries,
            })
        }
        ft::FANOUT => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let more = r.flag("FANOUT flags")?;
            Frame::Fanout(Fanout {
                seq,
                topic,
                more,
                channels: r.names()?,
                ids: r.ids()?,
            })
        }
        ft::ADMIN => {
            let seq = r.u64()?;
            let op = match r.u8()? {
                1 => AdminOp::Create,
                2 => AdminOp::Delete,
                3 => AdminOp::Empty,
                4 => AdminOp::Pause,
                5 => AdminOp::Unpause,
                6 => AdminOp::Settings,
                v => return Err(r.bad("ADMIN op", v.into())),
            };
            let topic = r.str8()?;
            let channel = r.str8()?;
            let settings = if op == AdminOp::Settings {
                r.settings()?
            } else {
                Vec::new()
            };
            Frame::Admin(Admin {
                seq,
                op,
                topic,
                channel,
                settings,
            })
        }
        ft::CATCHUP_BEGIN => Frame::CatchupBegin { seq: r.u64()? },
        ft::CATCHUP_END => Frame::CatchupEnd { seq: r.u64()? },
        ft::GOODBYE => Frame::Goodbye { seq: r.u64()? },
        ft::DROP => Frame::Drop {
            epoch: r.u64()?,
            taker: r.u64()?,
        },
        ft::PING => Frame::Ping { stamp: r.u64()? },
        ft::PONG => Frame::Pong { stamp: r.u64()? },
        ft::MANIFEST_APPLIED => Frame::ManifestApplied { epoch: r.u64()? },
        ft::STANDBY => Frame::Standby { epoch: r.u64()? },
        ft::HANDOFF => Frame::Handoff {
            origin: r.u64()?,
            epoch: r.u64()?,
            item: r.item()?,
        },
        ft::HANDOFF_END => Frame::HandoffEnd {
            origin: r.u64()?,
            epoch: r.u64()?,
            items: r.u64()?,
        },
        ft::AUTH => Frame::Auth { proof: r.proof()? },
        ft::HEARTBEAT => Frame::Heartbeat,
        ft::STATUS => {
            let n = r.count16(8 + 8 + 1 + 8 + 8 + 8 + 1 + 8)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let origin = r.u64()?;
                let epoch = r.u64()?;
                let state = match r.u8()? {
                    1 => BacklogState::Replicating,
                    2 => BacklogState::Detached,
                    3 => BacklogState::TakingOver,
                    4 => BacklogState::TakenOver,
                    5 => BacklogState::Gone,
                    v => return Err(r.bad("STATUS state", v.into())),
                };
                let (last_seq, messages, bytes) = (r.u64()?, r.u64()?, r.u64()?);
                let flags = r.u8()?;
                entries.push(StatusEntry {
                    origin,
                    epoch,
                    state,
                    last_seq,
                    messages,
                    bytes,
                    complete: flags & STATUS_COMPLETE != 0,
                    echo: r.u64()?,
                });
            }
            Frame::Status(entries)
        }
        ft::ERROR => {
            let code = match r.u16()? {
                1 => LinkErrorCode::BadFrame,
                2 => LinkErrorCode::Full,
                3 => LinkErrorCode::OutOfSequence,
                4 => LinkErrorCode::NotInGroup,
                5 => LinkErrorCode::Internal,
                6 => LinkErrorCode::UnsupportedVersion,
                v => return Err(r.bad("ERROR code", v.into())),
            };
            let len = r.u16()? as usize;
            let text = r.utf8(len)?;
            Frame::Error { code, text }
        }
        ft::WELCOME => {
            let version = r.u16()?;
            let node_id = r.u64()?;
            let answer = match r.u8()? {
                1 => WelcomeAnswer::Resume,
                2 => WelcomeAnswer::Catchup,
                v => return Err(r.bad("WELCOME answer", v.into())),
            };
            Frame::Welcome(Welcome {
                version,
                node_id,
                answer,
                last_seq: r.u64()?,
                max_frame: r.u32()?,
            })
        }
        ft::ACK => Frame::Ack { seq: r.u64()? },
        ft::TAKEN_OVER => Frame::TakenOver {
            epoch: r.u64()?,
            by_node: r.u64()?,
            entries: r.u64()?,
            last_seq: r.u64()?,
        },
        ft::MANIFEST => Frame::Manifest(Manifest {
            epoch: r.u64()?,
            topic: r.str8()?,
            channel: r.str8()?,
            ids: r.ids()?,
        }),
        ft::MANIFEST_END => Frame::ManifestEnd { epoch: r.u64()? },
        ft::HANDOFF_DONE => Frame::HandoffDone {
            origin: r.u64()?,
            epoch: r.u64()?,
        },
        ft::CHALLENGE => Frame::Challenge(Challenge {
            node_id: r.u64()?,
            nonce: r.nonce()?,
            broadcast_address: r.str8()?,
            tcp_port: r.u16()?,
            proof: r.proof()?,
        }),
        other => return Err(FrameError::UnknownType(other)),
    };
    if !r.buf.is_empty() {
        return Err(FrameError::TrailingBytes {
            frame_type,
            extra: r.buf.len(),
        });
    }
    Ok(frame)
}

/// Reads fields off a payload, every read checked.
struct Reader {
    ty: u8,
    buf: Bytes,
}

impl Reader {
    fn need(&self, n: usize) -> Result<(), FrameError> {
        if self.buf.len() < n {
            Err(FrameError::Truncated {
                frame_type: self.ty,
            })
        } else {
            Ok(())
        }
    }

    fn bad(&self, what: &'static str, value: u64) -> FrameError {
        FrameError::BadValue {
            frame_type: self.ty,
            what,
            value,
        }
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    /// A TOPIC item's or channel's flags (`1` paused, `2` settings follow) and settings.
    fn queue_flags(&mut self, what: &'static str) -> Result<(bool, Settings), FrameError> {
        let flags = self.u8()?;
        if flags & !(1 | ITEM_SETTINGS) != 0 {
            return Err(self.bad(what, flags.into()));
        }
        let settings = if flags & ITEM_SETTINGS != 0 {
            self.settings()?
        } else {
            Vec::new()
        };
        Ok((flags & 1 != 0, settings))
    }

    /// `u8 count, (str8 key, str8 value)…`.
    fn settings(&mut self) -> Result<Settings, FrameError> {
        let n = self.u8()? as usize;
        (0..n).map(|_| Ok((self.str8()?, self.str8()?))).collect()
    }

    fn flag(&mut self, what: &'static str) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(what, v.into())),
        }
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        self.need(2)?;
        Ok(self.buf.get_u16())
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        self.need(4)?;
        Ok(self.buf.get_u32())
    }

    fn u64(&mut self) -> Result<u64, FrameError> {
        self.need(8)?;
        Ok(self.buf.get_u64())
    }

    fn i64(&mut self) -> Result<i64, FrameError> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    fn id(&mut self) -> Result<MessageId, FrameError> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.buf.copy_to_slice(&mut id);
        Ok(MessageId(id))
    }

    fn utf8(&mut self, len: usize) -> Result<String, FrameError> {
        self.need(len)?;
        let raw = self.buf.split_to(len);
        String::from_utf8(raw.to_vec()).map_err(|_| FrameError::BadUtf8 {
            frame_type: self.ty,
        })
    }

    fn str8(&mut self) -> Result<String, FrameError> {
        let len = self.u8()? as usize;
        self.utf8(len)
    }

    fn nonce(&mut self) -> Result<[u8; NONCE_LEN], FrameError> {
        self.need(NONCE_LEN)?;
        let mut n = [0u8; NONCE_LEN];
        self.buf.copy_to_slice(&mut n);
        Ok(n)
    }

    /// `u8` length + bytes, at most [`MAX_PROOF_LEN`].
    fn proof(&mut self) -> Result<Bytes, FrameError> {
        let len = self.u8()? as usize;
        if len > MAX_PROOF_LEN {
            return Err(self.bad("proof length", len as u64));
        }
        self.need(len)?;
        Ok(self.buf.split_to(len))
    }

    fn bytes(&mut self) -> Result<Bytes, FrameError> {
        let len = self.u32()? as usize;
        self.need(len)?;
        Ok(self.buf.split_to(len))
    }

    /// A count of items of at least `min` bytes each, checked against what is left.
    fn check_count(&self, count: u64, min: usize) -> Result<usize, FrameError> {
        if count.saturating_mul(min as u64) > self.buf.len() as u64 {
            return Err(FrameError::BadCount {
                frame_type: self.ty,
                count,
            });
        }
        Ok(count as usize)
    }

    fn count16(&mut self, min: usize) -> Result<usize, FrameError> {
        let n = self.u16()?;
        self.check_count(n.into(), min)
    }

    fn count32(&mut self, min: usize) -> Result<usize, FrameError> {
        let n = self.u32()?;
        self.check_count(n.into(), min)
    }

    fn names(&mut self) -> Result<Vec<String>, FrameError> {
        let n = self.count16(1)?;
        (0..n).map(|_| self.str8()).collect()
    }

    fn ids(&mut self) -> Result<Vec<MessageId>, FrameError> {
        let n = self.count32(16)?;
        (0..n).map(|_| self.id()).collect()
    }

    fn item(&mut self) -> Result<Item, FrameError> {
        match self.u8()? {
            ITEM_TOPIC => {
                let topic = self.str8()?;
                let (paused, settings) = self.queue_flags("TOPIC flags")?;
                let n = self.count16(2)?;
                let mut channels = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = self.str8()?;
                    let (paused, settings) = self.queue_flags("channel flags")?;
                    channels.push(ChannelItem {
                        name,
                        paused,
                        settings,
                    });
                }
                Ok(Item::Topic(TopicItem {
                    topic,
                    paused,
                    settings,
                    channels,
                }))
            }
            ITEM_MESSAGE => {
                let topic = self.str8()?;
                let id = self.id()?;
                let timestamp = self.i64()?;
                let topic_pending = self.flag("MESSAGE flags")?;
                let topic_due = self.i64()?;
                let n = self.count16(1 + 8 + 2)?;
                let mut channels = Vec::with_capacity(n);
                for _ in 0..n {
                    channels.push(PendingChannel {
                        name: self.str8()?,
                        due: self.i64()?,
                        attempts: self.u16()?,
                    });
                }
                Ok(Item::Message(MessageItem {
                    topic,
                    id,
                    timestamp,
                    topic_pending,
                    topic_due,
                    channels,
                    body: self.bytes()?,
                }))
            }
            v => Err(self.bad("item kind", v.into())),
        }
    }
}
