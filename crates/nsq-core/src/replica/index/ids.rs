//! The messages of one topic whose IDs are the origin's GUIDs, by ID as a number: sorted
//! chunks of at most [`CHUNK`] `(id, state)` entries, 24 bytes each (16 for the due times of
//! deferred messages), with no per-entry allocation and no empty buckets.
//!
//! A topic's GUIDs only grow (`message.rs`, `GuidFactory`), so a replica gets them in order:
//! a publish is a push onto the last chunk, a fan-out or a FIN finds its chunk at the hint
//! left by the one before. A settled entry stays as a tombstone (state 0) until its chunk
//! empties, is compacted (full with a quarter or more tombstones) or merges with a neighbour
//! (below half full, and the two together at most three quarters of a chunk), so memory
//! follows what is held: about 24 bytes per message when messages settle roughly in the
//! order they came, and about three times that at worst when settlement leaves every chunk
//! just short of merging (a chunk under half full beside one that would overfill the pair).
//! An ID out of order (a taken-over message, a catch-up's STATE) is inserted in place,
//! splitting a full chunk.

use std::collections::VecDeque;

/// Entries per chunk: one allocation of 12 KiB for message states, 8 KiB for due times
/// (jemalloc size classes).
pub(super) const CHUNK: usize = 512;

/// A value of an [`IdMap`]: its default is a tombstone.
pub(super) trait Value: Copy + Default + std::fmt::Debug {
    fn live(&self) -> bool;
}

/// A due time (0: none).
impl Value for i64 {
    fn live(&self) -> bool {
        *self != 0
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry<V> {
    key: u64,
    val: V,
}

impl<V: Value> Entry<V> {
    fn live(&self) -> bool {
        self.val.live()
    }
}

/// Entries between two fence keys.
const STRIDE: usize = 64;

/// Entries in ascending key order, at least one of them live.
#[derive(Debug)]
struct Chunk<V> {
    /// The first entry's key.
    first: u64,
    live: u32,
    /// The keys of entries 0, [`STRIDE`], 2 × [`STRIDE`], …: a lookup reads them (in the
    /// cache line it reads `first` from) and searches one stretch of the entries, instead
    /// of a whole cold chunk one dependent load after another.
    fences: [u64; CHUNK / STRIDE],
    entries: Vec<Entry<V>>,
}

impl<V: Value> Clone for Chunk<V> {
    fn clone(&self) -> Self {
        let mut entries = Vec::with_capacity(CHUNK);
        entries.extend_from_slice(&self.entries);
        Chunk {
            first: self.first,
            live: self.live,
            fences: self.fences,
            entries,
        }
    }
}

impl<V: Value> Chunk<V> {
    fn new(e: Entry<V>) -> Self {
        Chunk::of(vec![e])
    }

    /// A chunk of `entries` (sorted, at most [`CHUNK`]), their live ones counted.
    fn of(list: Vec<Entry<V>>) -> Self {
        let mut entries = Vec::with_capacity(CHUNK);
        entries.extend_from_slice(&list);
        let mut c = Chunk {
            first: 0,
            live: entries.iter().filter(|e| e.live()).count() as u32,
            fences: [0; CHUNK / STRIDE],
            entries,
        };
        c.refence();
        c
    }

    /// Sets `first` and the fences after the entries moved.
    fn refence(&mut self) {
        if let Some(e) = self.entries.first() {
            self.first = e.key;
        }
        for (i, f) in self.fences.iter_mut().enumerate() {
            *f = self.entries.get(i * STRIDE).map_or(u64::MAX, |e| e.key);
        }
    }

    fn full(&self) -> bool {
        self.entries.len() >= CHUNK
    }

    fn position(&self, key: u64) -> Result<usize, usize> {
        let stretches = self.entries.len().div_ceil(STRIDE);
        let j = self.fences[..stretches].partition_point(|f| *f <= key);
        if j == 0 {
            return Err(0);
        }
        let lo = (j - 1) * STRIDE;
        let hi = (j * STRIDE).min(self.entries.len());
        match self.entries[lo..hi].binary_search_by_key(&key, |e| e.key) {
            Ok(i) => Ok(lo + i),
            Err(i) => Err(lo + i),
        }
    }

    /// Drops the tombstones.
    fn compact(&mut self) {
        self.entries.retain(Entry::live);
        self.refence();
    }
}

/// Sorted chunks of `u64 → V` (see the module comment). Only live entries are seen.
#[derive(Debug, Clone)]
pub(super) struct IdMap<V: Value> {
    chunks: VecDeque<Chunk<V>>,
    live: usize,
    /// The chunk of the last lookup.
    hint: usize,
}

impl<V: Value> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            chunks: VecDeque::new(),
            live: 0,
            hint: 0,
        }
    }
}

impl<V: Value> IdMap<V> {
    /// Live entries.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The chunk whose key range holds `key`: the last one starting at or before it.
    fn chunk_of(&self, key: u64) -> Option<usize> {
        let n = self.chunks.len();
        if n == 0 || key < self.chunks[0].first {
            return None;
        }
        let holds = |i: usize| {
            i < n && self.chunks[i].first <= key && (i + 1 == n || key < self.chunks[i + 1].first)
        };
        [self.hint, self.hint + 1, n - 1]
            .into_iter()
            .find(|i| holds(*i))
            .or_else(|| Some(self.chunks.partition_point(|c| c.first <= key) - 1))
    }

    /// The live entry `key`, if any.
    pub(super) fn get(&self, key: u64) -> Option<&V> {
        let c = &self.chunks[self.chunk_of(key)?];
        let e = &c.entries[c.position(key).ok()?];
        e.live().then_some(&e.val)
    }

    /// Calls `f` with live entry `key`; a value it leaves dead (the default) settles it.
    pub(super) fn update<R>(&mut self, key: u64, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let ci = self.chunk_of(key)?;
        self.hint = ci;
        let c = &mut self.chunks[ci];
        let pos = c.position(key).ok()?;
        let val = &mut c.entries[pos].val;
        if !val.live() {
            return None;
        }
        let r = f(val);
        if !val.live() {
            self.died(ci);
        }
        Some(r)
    }

    /// Calls `f` with entry `key` and whether it is new (then `f` fills it in; it starts as
    /// the default). A new entry that `f` leaves dead is not kept.
    pub(super) fn upsert<R>(&mut self, key: u64, f: impl FnOnce(&mut V, bool) -> R) -> R {
        let (ci, pos) = match self.chunk_of(key) {
            Some(ci) => match self.chunks[ci].position(key) {
                Ok(pos) => (ci, pos),
                Err(pos) => self.insert_at(ci, pos, key),
            },
            None if self.chunks.is_empty() => {
                self.chunks.push_back(Chunk::new(Entry {
                    key,
                    val: V::default(),
                }));
                (0, 0)
            }
            None => self.insert_at(0, 0, key),
        };
        self.hint = ci;
        let c = &mut self.chunks[ci];
        let e = &mut c.entries[pos];
        let created = !e.live();
        if created {
            e.val = V::default();
        }
        let r = f(&mut e.val, created);
        match (created, e.live()) {
            (true, true) => {
                c.live += 1;
                self.live += 1;
            }
            (true, false) => {
                c.entries.remove(pos);
                if c.live == 0 {
                    self.chunks.remove(ci);
                } else {
                    c.refence();
                }
            }
            (false, false) => self.died(ci),
            (false, true) => {}
        }
        r
    }

    /// Makes room for `key` at `pos` of chunk `ci` (its place in key order) and puts a
    /// tombstone there; returns where it is.
    fn insert_at(&mut self, ci: usize, pos: usize, key: u64) -> (usize, usize) {
        let e = Entry {
            key,
            val: V::default(),
        };
        let c = &mut self.chunks[ci];
        if c.full() && c.live as usize * 4 <= c.entries.len() * 3 {
            c.compact();
            let pos = c.position(key).expect_err("a new key");
            return self.put(ci, pos, e);
        }
        if !c.full() {
            return self.put(ci, pos, e);
        }
        if pos == c.entries.len() {
            // After the last key of a full chunk: the next chunk's front, or a chunk of its own.
            if self.chunks.get(ci + 1).is_some_and(|n| !n.full()) {
                return self.put(ci + 1, 0, e);
            }
            self.chunks.insert(ci + 1, Chunk::new(e));
            return (ci + 1, 0);
        }
        if pos == 0 {
            // Before every key (`chunk_of` finds no chunk for it).
            self.chunks.insert(ci, Chunk::new(e));
            return (ci, 0);
        }
        let right = Chunk::of(c.entries.split_off(CHUNK / 2));
        c.live -= right.live;
        c.refence();
        self.chunks.insert(ci + 1, right);
        if pos < CHUNK / 2 {
            self.put(ci, pos, e)
        } else {
            self.put(ci + 1, pos - CHUNK / 2, e)
        }
    }

    fn put(&mut self, ci: usize, pos: usize, e: Entry<V>) -> (usize, usize) {
        let c = &mut self.chunks[ci];
        c.entries.insert(pos, e);
        if pos + 1 < c.entries.len() || pos.is_multiple_of(STRIDE) {
            c.refence();
        }
        (ci, pos)
    }

    /// A live entry of chunk `ci` was settled.
    fn died(&mut self, ci: usize) {
        self.live -= 1;
        let c = &mut self.chunks[ci];
        c.live -= 1;
        if c.live == 0 {
            self.chunks.remove(ci);
            // The chunk list of a backlog that held many messages once goes with them.
            if self.chunks.capacity() > 64 && self.chunks.len() < self.chunks.capacity() / 4 {
                self.chunks.shrink_to(self.chunks.len() * 2);
            }
            return;
        }
        let live = c.live as usize;
        if live >= CHUNK / 2 {
            return;
        }
        // Merge with the emptier neighbour when the two fit in three quarters of a chunk
        // (room left, so that an insert does not split them again at once).
        let fits = |i: usize| {
            self.chunks
                .get(i)
                .map(|n| n.live as usize)
                .filter(|n| live + n <= CHUNK * 3 / 4)
        };
        let left = ci.checked_sub(1).and_then(|i| fits(i).map(|n| (n, i)));
        let right = fits(ci + 1).map(|n| (n, ci));
        let Some((_, at)) = [left, right].into_iter().flatten().min() else {
            return;
        };
        let next = self.chunks.remove(at + 1).expect("a neighbour");
        let c = &mut self.chunks[at];
        c.compact();
        c.entries
            .extend(next.entries.into_iter().filter(Entry::live));
        c.live += next.live;
        c.refence();
    }

    /// Calls `f` with every live entry; those it leaves dead are settled. Compacts every
    /// chunk and merges neighbours that fit in one.
    pub(super) fn for_each_mut(&mut self, mut f: impl FnMut(u64, &mut V)) {
        let mut kept: VecDeque<Chunk<V>> = VecDeque::with_capacity(self.chunks.len());
        self.live = 0;
        for mut c in self.chunks.drain(..) {
            for e in c.entries.iter_mut().filter(|e| e.live()) {
                f(e.key, &mut e.val);
            }
            c.compact();
            c.live = c.entries.len() as u32;
            self.live += c.entries.len();
            if c.entries.is_empty() {
                continue;
            }
            match kept.back_mut() {
                Some(last) if last.entries.len() + c.entries.len() <= CHUNK => {
                    last.entries.append(&mut c.entries);
                    last.live = last.entries.len() as u32;
                    last.refence();
                }
                _ => kept.push_back(c),
            }
        }
        self.chunks = kept;
        self.hint = 0;
    }

    /// The live entries in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.chunks.iter().flat_map(|c| {
            c.entries
                .iter()
                .filter(|e| e.live())
                .map(|e| (e.key, &e.val))
        })
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut prev: Option<u64> = None;
        let mut live = 0;
        for c in &self.chunks {
            assert!(!c.entries.is_empty() && c.entries.len() <= CHUNK);
            assert_eq!(c.first, c.entries[0].key);
            for (i, f) in c.fences.iter().enumerate() {
                assert_eq!(*f, c.entries.get(i * STRIDE).map_or(u64::MAX, |e| e.key));
            }
            let n = c.entries.iter().filter(|e| e.live()).count();
            assert_eq!(n, c.live as usize);
            assert!(n > 0, "a chunk without a live entry");
            for e in &c.entries {
                assert!(prev.is_none_or(|p| p < e.key), "keys out of order");
                prev = Some(e.key);
            }
            live += n;
        }
        assert_eq!(live, self.live);
    }

    /// Chunks (tests).
    #[cfg(test)]
    pub(super) fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// Sets `key` to `v` (0 settles it) in both.
    fn set(m: &mut IdMap<i64>, model: &mut BTreeMap<u64, i64>, key: u64, v: i64) {
        if v == 0 {
            m.update(key, |x| *x = 0);
            model.remove(&key);
        } else {
            m.upsert(key, |x, created| {
                assert_eq!(created, !model.contains_key(&key));
                *x = v;
            });
            model.insert(key, v);
        }
    }

    #[test]
    fn in_order_fills_whole_chunks_and_frees_them() {
        let mut m = IdMap::default();
        let mut model = BTreeMap::new();
        for k in 0..10 * CHUNK as u64 {
            set(&mut m, &mut model, k * 3, 1);
        }
        m.check();
        assert_eq!(m.chunks(), 10);
        for k in 0..5 * CHUNK as u64 {
            set(&mut m, &mut model, k * 3, 0);
        }
        m.check();
        assert_eq!(m.chunks(), 5);
        assert_eq!(m.len(), 5 * CHUNK);
        assert!(m.iter().map(|(k, _)| k).eq(model.keys().copied()));
    }

    #[test]
    fn a_new_entry_left_settled_is_not_kept() {
        let mut m = IdMap::default();
        m.upsert(5, |v: &mut i64, created| {
            assert!(created);
            *v = 0;
        });
        assert_eq!((m.len(), m.chunks()), (0, 0));
        m.upsert(5, |v, _| *v = 2);
        m.upsert(9, |_, _| {});
        m.check();
        assert_eq!(m.len(), 1);
        assert!(m.get(9).is_none());
    }

    #[test]
    fn scattered_settlement_merges_chunks() {
        let mut m = IdMap::default();
        let mut model = BTreeMap::new();
        let n = 20 * CHUNK as u64;
        for k in 0..n {
            set(&mut m, &mut model, k, 1);
        }
        // Keep one in eight: sparse chunks merge into ones at least a third full.
        for k in (0..n).filter(|k| k % 8 != 0) {
            set(&mut m, &mut model, k, 0);
        }
        m.check();
        assert!(m.chunks() <= 20 * 3 / 8 + 2, "{} chunks", m.chunks());
        m.for_each_mut(|_, _| {});
        m.check();
        assert_eq!(m.chunks(), 3, "1,280 entries in whole chunks");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Against a BTreeMap: mostly ascending keys with some out of order, settlements
        /// anywhere, and bulk updates.
        #[test]
        fn matches_a_btreemap(
            ops in proptest::collection::vec((0..10u8, 0..3000u64, 0..4i64), 1..3000),
        ) {
            let mut m = IdMap::default();
            let mut model = BTreeMap::new();
            let mut next = 0u64;
            for (op, k, bits) in ops {
                match op {
                    0..=4 => {
                        next += 1 + k % 3;
                        set(&mut m, &mut model, next, bits.max(1));
                    }
                    5 => set(&mut m, &mut model, k, bits),
                    6..=8 => set(&mut m, &mut model, k.min(next), 0),
                    _ if k % 50 == 0 => {
                        m.for_each_mut(|key, v| *v = if key % 3 == 0 { 0 } else { *v });
                        model.retain(|key, _| key % 3 != 0);
                    }
                    _ => {}
                }
                prop_assert_eq!(m.len(), model.len());
            }
            m.check();
            let got: Vec<(u64, i64)> = m.iter().map(|(k, v)| (k, *v)).collect();
            let want: Vec<(u64, i64)> = model.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
