//! A mirror of a caching allocator's buffer cache, for allocators that can be watched
//! (every malloc and free) but not asked which blocks they evict.
//!
//! MLX's CPU allocator keeps freed buffers in an LRU cache and evicts only by bytes:
//! `clear_cache` empties it, `set_cache_limit` frees the least recently cached buffers
//! until enough bytes are gone (or everything, past 90 % of the cache). Neither passes
//! through the allocator's interface, so evictions are found afterwards: the cache holds
//! fewer bytes than the mirror, and the oldest buffers of the mirror are the ones that
//! went. Bytes cached before the mirror started (whose buffers are unknown) are older
//! than anything it saw, so they are counted as evicted first.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

/// One cached buffer as the mirror knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedBuffer {
    /// Its address.
    pub addr: u64,
    /// Its size as the allocator counts it.
    pub size: u64,
    /// Whether the buffer was recorded (allocated while watched), so that its eviction
    /// is an event.
    pub recorded: bool,
}

/// The buffers of a cache, least recently cached first.
#[derive(Debug, Default, Clone)]
pub struct CacheMirror {
    by_age: BTreeMap<u64, CachedBuffer>,
    age_of: FxHashMap<u64, u64>,
    next_age: u64,
    bytes: u64,
    /// Bytes cached before watching started, or by paths the mirror does not see.
    unknown_bytes: u64,
}

impl CacheMirror {
    /// A mirror of a cache holding `unknown_bytes` in buffers it never saw.
    pub fn new(unknown_bytes: u64) -> Self {
        Self {
            unknown_bytes,
            ..Self::default()
        }
    }

    /// Bytes the cache holds, as far as the mirror knows.
    pub fn bytes(&self) -> u64 {
        self.bytes + self.unknown_bytes
    }

    /// A buffer went into the cache.
    pub fn cached(&mut self, buffer: CachedBuffer) {
        let age = self.next_age;
        self.next_age += 1;
        if let Some(old) = self.age_of.insert(buffer.addr, age) {
            // The allocator never caches one address twice; keep the mirror consistent.
            if let Some(b) = self.by_age.remove(&old) {
                self.bytes -= b.size;
            }
        }
        self.by_age.insert(age, buffer);
        self.bytes += buffer.size;
    }

    /// The cache handed `addr` out again: the buffer if the mirror had it cached.
    pub fn reused(&mut self, addr: u64) -> Option<CachedBuffer> {
        let age = self.age_of.remove(&addr)?;
        let b = self.by_age.remove(&age)?;
        self.bytes -= b.size;
        Some(b)
    }

    /// A buffer of `size` bytes the mirror did not know left the cache.
    pub fn unknown_reused(&mut self, size: u64) {
        self.unknown_bytes = self.unknown_bytes.saturating_sub(size);
    }

    /// The cache now holds `actual` bytes: the buffers evicted since the mirror last
    /// matched it, oldest first (an eviction frees the least recently cached buffers
    /// until enough bytes are gone). A cache larger than the mirror grew through a path
    /// the mirror does not see: the excess is counted as unknown.
    pub fn settle(&mut self, actual: u64) -> Vec<CachedBuffer> {
        let held = self.bytes();
        if actual >= held {
            self.unknown_bytes += actual - held;
            return Vec::new();
        }
        let mut gone = held - actual;
        let from_unknown = gone.min(self.unknown_bytes);
        self.unknown_bytes -= from_unknown;
        gone -= from_unknown;
        let mut evicted = Vec::new();
        while gone > 0 {
            let Some((_, b)) = self.by_age.pop_first() else {
                break;
            };
            self.age_of.remove(&b.addr);
            self.bytes -= b.size;
            gone = gone.saturating_sub(b.size);
            evicted.push(b);
        }
        evicted
    }

    /// Forgets every buffer.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(addr: u64, size: u64) -> CachedBuffer {
        CachedBuffer {
            addr,
            size,
            recorded: true,
        }
    }

    #[test]
    fn evictions_take_the_oldest_buffers() {
        let mut m = CacheMirror::new(0);
        m.cached(buf(1, 100));
        m.cached(buf(2, 200));
        m.cached(buf(3, 300));
        assert_eq!(m.bytes(), 600);
        assert_eq!(m.reused(2), Some(buf(2, 200)));
        assert_eq!(m.reused(2), None);
        m.cached(buf(4, 50));
        // A cache limit of 350: the oldest go until 100 + 300 + 50 - 350 = 100 bytes are freed.
        assert_eq!(m.settle(350), vec![buf(1, 100)]);
        assert_eq!(m.settle(350), vec![]);
        // clear_cache: everything.
        assert_eq!(m.settle(0), vec![buf(3, 300), buf(4, 50)]);
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn unknown_bytes_are_the_oldest() {
        let mut m = CacheMirror::new(500);
        m.cached(buf(1, 100));
        assert_eq!(m.settle(400), vec![]);
        assert_eq!(m.bytes(), 400);
        m.unknown_reused(300);
        assert_eq!(m.bytes(), 100);
        assert_eq!(m.settle(0), vec![buf(1, 100)]);
        // The cache grew behind the mirror's back.
        assert_eq!(m.settle(64), vec![]);
        assert_eq!(m.bytes(), 64);
    }
}
