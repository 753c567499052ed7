//! The in-memory part of a topic's or channel's queue: NSQ's `memoryMsgChan`
//! (nsqd/topic.go and nsqd/channel.go, `make(chan *Message, MemQueueSize)`), a FIFO bounded by
//! `--mem-queue-size` whose overflow goes to the disk queue.
//!
//! A Go channel's buffer is allocated once at its full capacity; a `VecDeque` sized the same
//! way would reserve `mem-queue-size` entries for every channel up front, and one that grows on
//! demand doubles by reallocation: at millions of queued messages each doubling copies the whole
//! queue into freshly faulted pages while the queue's lock is held (the last profile of an
//! in-memory publish spent a quarter of nsqd's CPU there). This queue grows in fixed-size
//! chunks instead: an entry is written once and never moved, a drained chunk is freed (or kept
//! as the one spare, so a queue oscillating around a chunk boundary does not allocate per
//! message), and a queue that never holds more than a few messages stays one small
//! `VecDeque`.

use std::collections::VecDeque;

/// What an entry costs on disk if it has to be written out (see [`crate::reserve`]); 0 for an
/// entry that already has a copy on disk.
pub trait Weigh {
    fn weight(&self) -> u64;

    /// What the entry counts for a queue's `max_bytes` (crate::queue_settings): its message's
    /// record size, on disk or not. The weight by default.
    fn queued_bytes(&self) -> u64 {
        self.weight()
    }
}

/// Entries per chunk. 4096 × ~90 bytes (a channel's entry) ≈ 360 KiB: large enough that the
/// per-chunk work is noise, small enough that a drained queue returns its memory promptly.
const CHUNK: usize = 4096;

/// A FIFO of `T` stored in chunks of [`CHUNK`] entries (see the module docs).
pub struct MemQueue<T> {
    /// Front chunk first. Only the last one receives pushes; every chunk but the last is full
    /// when it stops receiving them and only shrinks from the front after that.
    chunks: VecDeque<VecDeque<T>>,
    /// One emptied full-size chunk kept for the next `push_back` that needs a chunk.
    spare: Option<VecDeque<T>>,
    len: usize,
    /// Sum of the entries' [`Weigh::weight`].
    bytes: u64,
    /// Sum of the entries' [`Weigh::queued_bytes`].
    queued: u64,
}

impl<T: Weigh> Default for MemQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Weigh> MemQueue<T> {
    /// An empty queue; allocates nothing until the first push.
    pub const fn new() -> Self {
        MemQueue {
            chunks: VecDeque::new(),
            spare: None,
            len: 0,
            bytes: 0,
            queued: 0,
        }
    }

    /// The entries' total weight.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The entries' total [`Weigh::queued_bytes`].
    pub fn queued_bytes(&self) -> u64 {
        self.queued
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_back(&mut self, v: T) {
        self.bytes += v.weight();
        self.queued += v.queued_bytes();
        match self.chunks.back_mut() {
            // The first chunk grows like a `VecDeque` (a queue that stays short stays small);
            // it and every later chunk stop at `CHUNK` entries, so no push ever moves entries.
            Some(last) if last.len() < CHUNK => last.push_back(v),
            _ => {
                let mut c = match self.spare.take() {
                    Some(c) => c,
                    None if self.chunks.is_empty() => VecDeque::new(),
                    None => VecDeque::with_capacity(CHUNK),
                };
                c.push_back(v);
                self.chunks.push_back(c);
            }
        }
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let front = self.chunks.front_mut()?;
        let v = front.pop_front()?;
        self.len -= 1;
        self.bytes -= v.weight();
        self.queued -= v.queued_bytes();
        if front.is_empty() && self.chunks.len() > 1 {
            let c = self.chunks.pop_front().expect("front chunk exists");
            if c.capacity() >= CHUNK && self.spare.is_none() {
                self.spare = Some(c);
            }
        }
        Some(v)
    }

    /// Removes up to `n` entries from the front into `out` (in order).
    pub fn pop_front_into(&mut self, n: usize, out: &mut Vec<T>) {
        let n = n.min(self.len);
        out.reserve(n);
        for _ in 0..n {
            match self.pop_front() {
                Some(v) => out.push(v),
                None => break,
            }
        }
    }

    /// Removes every entry, in order, and frees the chunks.
    pub fn take_all(&mut self) -> impl Iterator<Item = T> {
        self.len = 0;
        self.bytes = 0;
        self.queued = 0;
        self.spare = None;
        std::mem::take(&mut self.chunks).into_iter().flatten()
    }

    pub fn clear(&mut self) {
        drop(self.take_all());
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T: Weigh> Extend<T> for MemQueue<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for v in iter {
            self.push_back(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Test entries weigh their value.
    impl Weigh for usize {
        fn weight(&self) -> u64 {
            *self as u64
        }
    }

    impl Weigh for u32 {
        fn weight(&self) -> u64 {
            u64::from(*self)
        }
    }

    #[test]
    fn bytes_follow_the_entries() {
        let mut q = MemQueue::new();
        q.extend([3usize, 4, 5]);
        assert_eq!(q.bytes(), 12);
        q.pop_front();
        assert_eq!(q.bytes(), 9);
        q.clear();
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn fifo_across_chunks_and_memory_returned() {
        let mut q = MemQueue::new();
        q.extend(0..3 * CHUNK + 7);
        assert_eq!(q.len(), 3 * CHUNK + 7);
        assert_eq!(q.chunks.len(), 4);
        for i in 0..2 * CHUNK {
            assert_eq!(q.pop_front(), Some(i));
        }
        // Two drained chunks: one freed, one kept as the spare.
        assert_eq!(q.chunks.len(), 2);
        assert!(q.spare.is_some());
        let mut out = Vec::new();
        q.pop_front_into(10, &mut out);
        assert_eq!(out, (2 * CHUNK..2 * CHUNK + 10).collect::<Vec<_>>());
        let rest: Vec<usize> = q.take_all().collect();
        assert_eq!(rest, (2 * CHUNK + 10..3 * CHUNK + 7).collect::<Vec<_>>());
        assert!(q.is_empty());
        assert_eq!(q.pop_front(), None);
        assert!(q.chunks.is_empty() && q.spare.is_none());
    }

    #[test]
    fn entries_never_move_once_a_chunk_is_full() {
        let mut q = MemQueue::new();
        q.extend(0..CHUNK);
        let first = q.chunks[0].as_slices().0.as_ptr();
        q.extend(0..5 * CHUNK);
        assert_eq!(q.chunks[0].as_slices().0.as_ptr(), first);
        assert!(q.chunks.iter().all(|c| c.capacity() == CHUNK));
    }

    #[test]
    fn short_queue_stays_small() {
        let mut q = MemQueue::<u32>::new();
        for i in 0..10_000 {
            q.push_back(i);
            assert_eq!(q.pop_front(), Some(i));
        }
        assert_eq!(q.chunks.len(), 1);
        assert!(q.chunks[0].capacity() < 16);
    }

    proptest! {
        /// Any sequence of pushes and pops behaves like `VecDeque`.
        #[test]
        fn matches_vecdeque(ops in proptest::collection::vec((any::<bool>(), 1usize..3 * CHUNK), 1..12)) {
            let mut q = MemQueue::new();
            let mut model = VecDeque::new();
            let mut next = 0u32;
            for (push, n) in ops {
                if push {
                    for _ in 0..n {
                        q.push_back(next);
                        model.push_back(next);
                        next += 1;
                    }
                } else {
                    let mut out = Vec::new();
                    q.pop_front_into(n, &mut out);
                    let want: Vec<u32> = (0..n).map_while(|_| model.pop_front()).collect();
                    prop_assert_eq!(out, want);
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.bytes(), model.iter().map(|v| u64::from(*v)).sum::<u64>());
                prop_assert_eq!(q.queued_bytes(), q.bytes());
                prop_assert!(q.iter().eq(model.iter()));
            }
        }
    }
}
