//! Encoding: [`encode`], [`try_encode`] and [`encode_payload`], and their field writers.

use bytes::BufMut;

use super::frames::{
    Settings, HELLO_PREVIOUS_UNCLEAN, HELLO_RESUME, HELLO_SYNC, ITEM_MESSAGE, ITEM_SETTINGS,
    ITEM_TOPIC, STATUS_COMPLETE,
};
use super::{AdminOp, Frame, FrameError, Item, MAX_PROOF_LEN};
use crate::message::MessageId;

/// Appends one whole frame (`[u32 size][u8 type][payload]`).
///
/// Panics if a name is longer than 255 bytes or an error text longer than 65535 (the caller
/// validates names as NSQ does, at most 64 bytes); use [`try_encode`] to get an error.
pub fn encode<B: BufMut + AsMut<[u8]>>(frame: &Frame, out: &mut B) {
    try_encode(frame, out).expect("replication frame fields within their length limits")
}

/// [`encode`], returning [`FrameError::StringTooLong`] instead of panicking. On error `out`
/// may hold a partial frame; the caller discards it.
pub fn try_encode<B: BufMut + AsMut<[u8]>>(frame: &Frame, out: &mut B) -> Result<(), FrameError> {
    let start = out.as_mut().len();
    out.put_u32(0);
    out.put_u8(frame.frame_type());
    encode_payload(frame, out)?;
    let size = (out.as_mut().len() - start - 4) as u32;
    out.as_mut()[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Appends the payload of `frame` (without size and type).
pub fn encode_payload(frame: &Frame, out: &mut impl BufMut) -> Result<(), FrameError> {
    match frame {
        Frame::Hello(h) => {
            out.put_u16(h.version);
            out.put_u64(h.node_id);
            out.put_u64(h.epoch);
            let mut flags = 0;
            if h.resume {
                flags |= HELLO_RESUME;
            }
            if h.sync {
                flags |= HELLO_SYNC;
            }
            if h.previous_unclean {
                flags |= HELLO_PREVIOUS_UNCLEAN;
            }
            out.put_u8(flags);
            out.put_u64(h.resume_seq);
            out.put_u64(h.previous_epoch);
            out.put_u16(h.replicas);
            out.put_u32(h.max_frame);
            out.put_u16(h.nsqd_node_id);
            put_str8(out, &h.broadcast_address)?;
            out.put_u16(h.tcp_port);
            out.put_u16(h.http_port);
            out.put_slice(&h.nonce);
        }
        Frame::Pub(p) => {
            out.put_u64(p.seq);
            put_str8(out, &p.topic)?;
            out.put_i64(p.defer_until);
            put_names(out, &p.channels)?;
            out.put_u32(p.messages.len() as u32);
            for m in &p.messages {
                out.put_slice(&m.id.0);
                out.put_i64(m.timestamp);
                put_bytes(out, &m.body);
            }
        }
        Frame::State(item) => put_item(out, item)?,
        Frame::Fin(f) => {
            out.put_u64(f.seq);
            put_str8(out, &f.topic)?;
            put_str8(out, &f.channel)?;
            put_ids(out, &f.ids);
        }
        Frame::Req(r) => {
            out.put_u64(r.seq);
            put_str8(out, &r.topic)?;
            put_str8(out, &r.channel)?;
            out.put_u32(r.entries.len() as u32);
            for e in &r.entries {
                out.put_slice(&e.id.0);
                out.put_i64(e.due);
                out.put_u16(e.attempts);
            }
        }
        Frame::Fanout(f) => {
            out.put_u64(f.seq);
            put_str8(out, &f.topic)?;
            out.put_u8(u8::from(f.more));
            put_names(out, &f.channels)?;
            put_ids(out, &f.ids);
        }
        Frame::Admin(a) => {
            out.put_u64(a.seq);
            out.put_u8(a.op as u8);
            put_str8(out, &a.topic)?;
            put_str8(out, &a.channel)?;
            if a.op == AdminOp::Settings {
                put_settings(out, &a.settings)?;
            }
        }
        Frame::CatchupBegin { seq }
        | Frame::CatchupEnd { seq }
        | Frame::Goodbye { seq }
        | Frame::Ack { seq } => out.put_u64(*seq),
        Frame::ManifestApplied { epoch }
        | Frame::ManifestEnd { epoch }
        | Frame::Standby { epoch } => out.put_u64(*epoch),
        Frame::Drop { epoch, taker } => {
            out.put_u64(*epoch);
            out.put_u64(*taker);
        }
        Frame::Ping { stamp } | Frame::Pong { stamp } => out.put_u64(*stamp),
        Frame::Handoff {
            origin,
            epoch,
            item,
        } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
            put_item(out, item)?;
        }
        Frame::HandoffEnd {
            origin,
            epoch,
            items,
        } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
            out.put_u64(*items);
        }
        Frame::Auth { proof } => put_proof(out, proof)?,
        Frame::Heartbeat => {}
        Frame::Status(entries) => {
            put_count16(out, entries.len())?;
            for e in entries {
                out.put_u64(e.origin);
                out.put_u64(e.epoch);
                out.put_u8(e.state as u8);
                out.put_u64(e.last_seq);
                out.put_u64(e.messages);
                out.put_u64(e.bytes);
                out.put_u8(if e.complete { STATUS_COMPLETE } else { 0 });
                out.put_u64(e.echo);
            }
        }
        Frame::Error { code, text } => {
            out.put_u16(*code as u16);
            if text.len() > u16::MAX as usize {
                return Err(FrameError::StringTooLong(text.len()));
            }
            out.put_u16(text.len() as u16);
            out.put_slice(text.as_bytes());
        }
        Frame::Welcome(w) => {
            out.put_u16(w.version);
            out.put_u64(w.node_id);
            out.put_u8(w.answer as u8);
            out.put_u64(w.last_seq);
            out.put_u32(w.max_frame);
        }
        Frame::TakenOver {
            epoch,
            by_node,
            entries,
            last_seq,
        } => {
            out.put_u64(*epoch);
            out.put_u64(*by_node);
            out.put_u64(*entries);
            out.put_u64(*last_seq);
        }
        Frame::Manifest(m) => {
            out.put_u64(m.epoch);
            put_str8(out, &m.topic)?;
            put_str8(out, &m.channel)?;
            put_ids(out, &m.ids);
        }
        Frame::HandoffDone { origin, epoch } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
        }
        Frame::Challenge(c) => {
            out.put_u64(c.node_id);
            out.put_slice(&c.nonce);
            put_str8(out, &c.broadcast_address)?;
            out.put_u16(c.tcp_port);
            put_proof(out, &c.proof)?;
        }
    }
    Ok(())
}

/// A `u16` list count; a longer list is an error, not a wrapped count.
fn put_count16(out: &mut impl BufMut, n: usize) -> Result<(), FrameError> {
    let n = u16::try_from(n).map_err(|_| FrameError::ListTooLong(n))?;
    out.put_u16(n);
    Ok(())
}

fn put_proof(out: &mut impl BufMut, proof: &[u8]) -> Result<(), FrameError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(FrameError::ProofTooLong(proof.len()));
    }
    out.put_u8(proof.len() as u8);
    out.put_slice(proof);
    Ok(())
}

fn put_str8(out: &mut impl BufMut, s: &str) -> Result<(), FrameError> {
    if s.len() > u8::MAX as usize {
        return Err(FrameError::StringTooLong(s.len()));
    }
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
    Ok(())
}

/// A TOPIC item's or channel's flags (`1` paused, `2` settings follow), then the settings
/// when there are any: a queue without settings has the layout of link version 4.
fn put_flags(out: &mut impl BufMut, paused: bool, settings: &Settings) -> Result<(), FrameError> {
    let mut flags = u8::from(paused);
    if !settings.is_empty() {
        flags |= ITEM_SETTINGS;
    }
    out.put_u8(flags);
    if !settings.is_empty() {
        put_settings(out, settings)?;
    }
    Ok(())
}

/// `u8 count, (str8 key, str8 value)…`.
fn put_settings(out: &mut impl BufMut, settings: &Settings) -> Result<(), FrameError> {
    let n = u8::try_from(settings.len()).map_err(|_| FrameError::ListTooLong(settings.len()))?;
    out.put_u8(n);
    for (k, v) in settings {
        put_str8(out, k)?;
        put_str8(out, v)?;
    }
    Ok(())
}

fn put_names(out: &mut impl BufMut, names: &[String]) -> Result<(), FrameError> {
    put_count16(out, names.len())?;
    names.iter().try_for_each(|n| put_str8(out, n))
}

fn put_ids(out: &mut impl BufMut, ids: &[MessageId]) {
    out.put_u32(ids.len() as u32);
    for id in ids {
        out.put_slice(&id.0);
    }
}

fn put_bytes(out: &mut impl BufMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn put_item(out: &mut impl BufMut, item: &Item) -> Result<(), FrameError> {
    match item {
        Item::Topic(t) => {
            out.put_u8(ITEM_TOPIC);
            put_str8(out, &t.topic)?;
            put_flags(out, t.paused, &t.settings)?;
            put_count16(out, t.channels.len())?;
            for c in &t.channels {
                put_str8(out, &c.name)?;
                put_flags(out, c.paused, &c.settings)?;
            }
        }
        Item::Message(m) => {
            out.put_u8(ITEM_MESSAGE);
            put_str8(out, &m.topic)?;
            out.put_slice(&m.id.0);
            out.put_i64(m.timestamp);
            out.put_u8(u8::from(m.topic_pending));
            out.put_i64(m.topic_due);
            put_count16(out, m.channels.len())?;
            for c in &m.channels {
                put_str8(out, &c.name)?;
                out.put_i64(c.due);
                out.put_u16(c.attempts);
            }
            put_bytes(out, &m.body);
        }
    }
    Ok(())
}
