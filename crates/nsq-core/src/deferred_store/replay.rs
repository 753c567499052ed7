//! Reading a deferred journal back (see the module comment of `deferred_store`): the live
//! entries, and the damaged spans skipped by resynchronising on the next valid record.

use std::ops::Range;

use nsq_protocol::MessageId;

use super::record::{is_torn_tail, parse_at, Record};
use super::Replayed;
use crate::message::Message;

/// Damaged spans named one by one in the error log; more are summarised.
pub(super) const SPANS_LOGGED: usize = 16;

/// `offsets a..b, c..d, …` for the log, the first [`SPANS_LOGGED`] spans.
pub(super) fn describe_spans(spans: &[Range<usize>]) -> String {
    let mut out: Vec<String> = spans
        .iter()
        .take(SPANS_LOGGED)
        .map(|s| format!("{}..{}", s.start, s.end))
        .collect();
    if spans.len() > SPANS_LOGGED {
        out.push(format!("and {} more spans", spans.len() - SPANS_LOGGED));
    }
    format!("offsets {}", out.join(", "))
}

/// What [`replay`] found.
#[derive(Debug)]
pub(super) struct Replay {
    /// The live entries, in order of their ADD.
    pub(super) entries: Vec<Replayed>,
    /// Valid records applied.
    pub(super) records: usize,
    /// Spans of damage skipped, in file order (the last may run to the end of the file).
    pub(super) damaged: Vec<Range<usize>>,
    /// Where a torn tail starts (the file's length if there is none).
    pub(super) torn_at: usize,
}

/// Replays `data`, resynchronising after damage.
///
/// Where no valid record starts, the scan tries every following offset until one does (see
/// [`parse_at`] for what "valid" takes). False resynchronisation — taking bytes that are not a
/// record for one — needs, at one offset, a length that fits its kind byte and the file, for an
/// ADD the same 16-byte ID twice, and a matching CRC-32. For random garbage that is well under
/// 2^-40 per offset (one in 2^32 for the checksum times the odds of the length and kind bytes),
/// so scanning even a megabyte of garbage has odds below 10^-6 of inventing a record. Inside
/// the intact body of a record whose header was destroyed the bytes are not random, but a false
/// match there still needs its own matching checksum: at most 2^-32 per offset, so about 10^-7
/// for scanning across a 500-byte record. The case it cannot tell apart is a message whose
/// payload itself holds a whole valid journal record (a journal file published as a message):
/// if damage destroys that message's own header, the record inside is replayed as if real.
pub(super) fn replay(data: &[u8]) -> Replay {
    use std::collections::HashMap;
    let mut live: HashMap<MessageId, (usize, i64, Message)> = HashMap::new();
    let mut pos = 0;
    let mut records = 0;
    let mut seq = 0;
    let mut damaged = Vec::new();
    let mut torn_at = data.len();
    while pos < data.len() {
        let (at, (record, size)) = match parse_at(data, pos) {
            Some(found) => (pos, found),
            None => match (pos + 1..data.len()).find_map(|p| parse_at(data, p).map(|f| (p, f))) {
                Some(found) => {
                    damaged.push(pos..found.0);
                    found
                }
                None => {
                    if is_torn_tail(&data[pos..]) {
                        torn_at = pos;
                    } else {
                        damaged.push(pos..data.len());
                    }
                    break;
                }
            },
        };
        match record {
            Record::Add(due, m) => {
                live.insert(m.id, (seq, due, m));
                seq += 1;
            }
            Record::Del(id) => {
                live.remove(&id);
            }
        }
        records += 1;
        pos = at + size;
    }
    let mut entries: Vec<_> = live.into_values().collect();
    entries.sort_by_key(|(seq, _, _)| *seq);
    Replay {
        entries: entries.into_iter().map(|(_, due, m)| (due, m)).collect(),
        records,
        damaged,
        torn_at,
    }
}
