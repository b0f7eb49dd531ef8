//! Chunk keys (addresses shifted right) to chunk numbers, for the address-ordered tables
//! of small blocks ([`crate::chunked_table`] and the report's small blocks).
//!
//! A direct-mapped cache of recently used chunks sits in front of the hash map: frees of
//! old blocks spread over a few dozen chunks, which a single last-used entry kept missing.

use rustc_hash::FxHashMap;

/// Entries of the cache.
const RECENT: usize = 64;
/// A cache entry that matches no chunk key.
const NO_KEY: u64 = u64::MAX;

#[derive(Debug)]
pub(crate) struct ChunkIndex {
    index: FxHashMap<u64, u32>,
    recent: Box<[(u64, u32); RECENT]>,
}

impl Default for ChunkIndex {
    fn default() -> Self {
        Self {
            index: FxHashMap::default(),
            recent: Box::new([(NO_KEY, 0); RECENT]),
        }
    }
}

impl ChunkIndex {
    /// The chunk of `key`, remembering it in the cache. Inlined into the hooks: once the
    /// free hook stopped looking its thread up, the call cost more than the registers it
    /// spares (memtape25 721.4 M -> 719.2 M instructions; section 29 measured the
    /// opposite before that).
    #[inline(always)]
    pub(crate) fn get(&mut self, key: u64) -> Option<u32> {
        let entry = &mut self.recent[key as usize % RECENT];
        if entry.0 == key {
            return Some(entry.1);
        }
        let i = *self.index.get(&key)?;
        *entry = (key, i);
        Some(i)
    }

    /// The chunk of `key` when the cache holds it; `None` says nothing of the hash map.
    #[inline(always)]
    pub(crate) fn cached(&self, key: u64) -> Option<u32> {
        match self.recent[key as usize % RECENT] {
            (k, i) if k == key => Some(i),
            _ => None,
        }
    }

    /// The chunk of `key`, leaving the cache as it is.
    #[inline]
    pub(crate) fn peek(&self, key: u64) -> Option<u32> {
        self.cached(key).or_else(|| self.index.get(&key).copied())
    }

    /// Names chunk `i` for `key`.
    pub(crate) fn insert(&mut self, key: u64, i: u32) {
        self.index.insert(key, i);
        self.recent[key as usize % RECENT] = (key, i);
    }

    /// Entries the hash map has room for.
    pub(crate) fn capacity(&self) -> usize {
        self.index.capacity()
    }
}
